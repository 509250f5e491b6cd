"""A batch survives the gateway: ``tierlm serve`` killed (SIGKILL) or stopped
(SIGTERM) in the middle of a 500-request batch, then started again on the same
data directory, answers every request exactly once. Real processes, real
signals, the official openai client, the simulated device."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

import httpx
import openai
import pytest

from tests.server.batch_helpers import chat_line, lines_of, start, wait_batch
from tests.server.helpers import WAIT
from tests.server.serve_process import tierlm_serve

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
