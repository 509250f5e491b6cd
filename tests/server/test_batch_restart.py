"""A batch survives the gateway: ``tierlm serve`` killed (SIGKILL) or stopped
(SIGTERM) in the middle of a 500-request batch, then started again on the same
data directory, answers every request exactly once. Real processes, real
signals, the official openai client, the simulated device. A stop between two
statuses (a cancel or an expiry half done), which no signal can be timed to
hit, is written to the store by the real ``SqliteStore`` before the start."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.server.batch_helpers import chat_line, lines_of, start, wait_batch
from tests.server.helpers import WAIT, serve, sim_settings
from tests.server.serve_process import tierlm_serve
from tierlm.server.openai.batch.lines import output_line
from tierlm.server.openai.batch.sqlite_store import SqliteStore
from tierlm.server.openai.batch.store import (
    BatchRecord,
    BatchStatus,
    PendingRequest,
    RequestResult,
)

REQUESTS = 500


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=WAIT)


def serve_args(data_dir: Path) -> tuple[str, ...]:
    return (
        "--backend",
        "sim",
        "--token-interval",
        "0.002",
        "--data-dir",
        str(data_dir),
        "--log-level",
        "warning",
    )


def answered_rows(data_dir: Path, batch_id: str) -> dict[str, str]:
    """What the store holds as answered (custom_id -> output line), read from the
    SQLite file the user backs up, while the gateway is down."""
    with sqlite3.connect(data_dir / "batches.sqlite3") as db:
        rows = db.execute(
            "SELECT custom_id, output FROM requests WHERE batch_id = ? AND done = 1", (batch_id,)
        ).fetchall()
    return dict(rows)


def completed_metric(url: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=WAIT).text.splitlines():
        if line.startswith('tierlm_batch_requests_total{outcome="completed"}'):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_batch_resumes_after_the_gateway_stops(tmp_path: Path, sig: signal.Signals) -> None:
    items = [chat_line(i, max_tokens=4) for i in range(REQUESTS)]
    with tierlm_serve(*serve_args(tmp_path)) as (url, process):
        api = client(url)
        batch = start(api, items)
        assert batch.request_counts is not None and batch.request_counts.total == REQUESTS
        wait_batch(
            api,
            batch.id,
            lambda b: b.request_counts is not None and b.request_counts.completed >= 100,
            timeout=60,
        )
        process.send_signal(sig)
        process.wait(WAIT)
        if sig == signal.SIGTERM:
            assert process.returncode == 0  # a drain, not a crash
    before = answered_rows(tmp_path, batch.id)
    assert 100 <= len(before) < REQUESTS, "stopped in the middle of the batch"

    with tierlm_serve(*serve_args(tmp_path)) as (url, _):
        api = client(url)
        done = wait_batch(api, batch.id, timeout=60)
        assert done.status == "completed"
        assert done.request_counts is not None
        assert (done.request_counts.completed, done.request_counts.failed) == (REQUESTS, 0)
        output = lines_of(api, done.output_file_id)
        # Only what was left ran again.
        assert completed_metric(url) == REQUESTS - len(before)
    ids = [line["custom_id"] for line in output]
    assert sorted(ids) == sorted(item["custom_id"] for item in items)  # all, each once
    by_id = {line["custom_id"]: line for line in output}
    for custom_id, row in before.items():
        assert by_id[custom_id] == json.loads(row), "an answer from before the stop changed"
    for line in output:
        assert line["response"]["status_code"] == 200


def stored_batch(store: SqliteStore, batch_id: str, status: BatchStatus, **times: int) -> None:
    """A batch as a gateway stopped in ``status`` left it in the store: three
    requests, the first answered."""
    now = int(time.time())
    record = BatchRecord(
        id=batch_id,
        owner="",
        input_file_id="file-x",
        endpoint="/v1/chat/completions",
        completion_window="24h",
        created_at=now,
        expires_at=now + 86400,
        status=status,
        class_name="nataraj",
        producer=f"batches/{batch_id}",
        deadline=None,
        total=3,
        times=times,
    )
    pending = [PendingRequest(n, f"note-{n}", chat_line(n)["body"]) for n in (1, 2, 3)]
    store.add_requests(batch_id, pending, [])
    store.add_batch(record, 100)
    answer = output_line("note-1", 200, {"answered": "before the stop"}, "req_1")
    assert store.finish_request(batch_id, RequestResult(1, "note-1", answer, False))


def test_a_cancel_or_expiry_begun_before_a_stop_ends_after_the_restart(tmp_path: Path) -> None:
    """The gateway stopped while a batch was cancelling, and while another was
    finalizing its expiry: the restarted gateway ends each as it had begun,
    the answer from before the stop kept, the rest in the error file."""
    store = SqliteStore(tmp_path / "batches.sqlite3")
    stored_batch(store, "batch_cancelling", "cancelling", cancelling_at=1)
    stored_batch(store, "batch_expiring", "finalizing", expired_at=1)
    store.close()
    with serve(sim_settings({"batches": {"data_dir": str(tmp_path)}})) as gw:
        api = gw.openai()
        for batch_id, status, code in (
            ("batch_cancelling", "cancelled", "batch_cancelled"),
            ("batch_expiring", "expired", "batch_expired"),
        ):
            done = wait_batch(api, batch_id)
            assert done.status == status
            assert [line["custom_id"] for line in lines_of(api, done.output_file_id)] == ["note-1"]
            errors = lines_of(api, done.error_file_id)
            assert [(e["custom_id"], e["error"]["code"]) for e in errors] == [
                ("note-2", code),
                ("note-3", code),
            ]
            assert done.request_counts is not None
            assert (done.request_counts.completed, done.request_counts.failed) == (1, 2)
