"""Issue 54, item 8: a full disk is an answer, not a loop (docs/design.md §9).

The data directory is a small tmpfs, filled by a file beside the store as
another program would fill the disk. A batch running then keeps the answers
it cannot write and writes them once there is room: the device never runs a
request twice (it re-ran each every second, none stored). An upload is a 507
that says the disk is full, and a DELETE still works: the way out."""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.server.batch_helpers import chat_line, upload, wait_batch
from tests.server.helpers import Gateway, serve, sim_settings
from tests.server.mounts import tmpfs

REQUESTS = 20


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", size="6m") as mounted:
        yield mounted


@contextlib.contextmanager
def filled(directory: Path) -> Iterator[None]:
    """The disk under ``directory`` full (a filler file), emptied after."""
    filler = directory / "filler"
    with contextlib.suppress(OSError), open(filler, "wb") as file:
        while True:
            file.write(bytes(64 << 10))
            file.flush()
    try:
        yield
    finally:
        filler.unlink()


def device_runs(gw: Gateway) -> float:
    return gw.metric("tierlm_jobs_total", class_="nataraj", outcome="completed")


def test_a_batch_on_a_full_disk_holds_its_answers_and_runs_each_once(disk: Path) -> None:
    raw = {
        "backend": {"token_interval": 0.01},
        "batches": {"data_dir": str(disk), "in_flight": 2},
    }
    with serve(sim_settings(raw)) as gw:
        client = gw.openai()
        items = [chat_line(i, max_tokens=20) for i in range(REQUESTS)]
        batch = client.batches.create(
            input_file_id=upload(client, items),
            endpoint="/v1/chat/completions",
            completion_window="24h",
        )
        wait_batch(client, batch.id, lambda b: b.request_counts.completed >= 2)  # type: ignore[union-attr]
        with filled(disk):
            time.sleep(1.0)  # the answers in flight end and cannot be stored
            before = device_runs(gw)
            time.sleep(3.0)
            # Nothing new was fed, nothing ran again.
            assert device_runs(gw) - before <= 2
            assert client.batches.retrieve(batch.id).status == "in_progress"
        done = wait_batch(client, batch.id)
        assert done.status == "completed"
        assert done.request_counts is not None
        assert (done.request_counts.completed, done.request_counts.failed) == (REQUESTS, 0)
        assert device_runs(gw) == REQUESTS  # each request ran once


def test_an_upload_on_a_full_disk_is_a_507_and_delete_still_works(disk: Path) -> None:
    with serve(sim_settings({"batches": {"data_dir": str(disk)}})) as gw:
        client = gw.openai()
        big = client.files.create(
            file=("big.jsonl", io.BytesIO(b"{}\n" * 300_000)), purpose="batch"
        )
        with filled(disk):
            with pytest.raises(openai.APIStatusError) as info:
                client.files.create(
                    file=("more.jsonl", io.BytesIO(b"{}\n" * 100_000)), purpose="batch"
                )
            assert info.value.status_code == 507
            assert info.value.response.headers.get("retry-after")
            assert "disk is full" in str(info.value)
            assert "DELETE" in str(info.value)
            # Reads and the way out work.
            assert [f.id for f in client.files.list()] == [big.id]
            assert client.files.delete(big.id).deleted
            assert not list(client.files.list())
