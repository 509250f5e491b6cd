"""A stop signal drains ``tierlm serve``: it stops accepting, the accepted
requests (running, and queued with their stream open) finish within
``shutdown_grace``, what is left then ends with ``shutting_down``, and the
process exits 0. Real processes, real signals, the official client; asserted
in tokens, never in wall-clock time."""

from __future__ import annotations

import json
import signal
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests.helpers import wait_until_blocking
from tests.payloads import MESSAGES, chat_body
from tests.server.helpers import WAIT, read_into, serve, sse
from tests.server.serve_process import tierlm_serve

QUIET = ("--log-level", "warning")


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=WAIT)


def read_raw_stream(url: str, max_tokens: int) -> tuple[list[str], list[str]]:
    """A streamed chat read with httpx: its comment lines and its text pieces."""
    comments: list[str] = []
    pieces: list[str] = []
    body = {**chat_body(max_tokens=max_tokens), "stream": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=WAIT) as response:
        for line in response.iter_lines():
            if line.startswith(":"):
                comments.append(line)
            elif line.startswith("data: ") and line != "data: [DONE]":
                for choice in json.loads(line[6:]).get("choices", []):
                    pieces.append(choice["delta"].get("content") or "")
            elif line == "data: [DONE]":
                pieces.append("[DONE]")
    return comments, pieces


def wait_refused(url: str) -> None:
    """Poll until a new connection is refused: the listening socket is closed.
    A connection the kernel accepted into the socket's backlog just before it
    closed is reset instead of refused: the same answer, never served."""

    def refused() -> bool:
        try:
            httpx.get(f"{url}/health", timeout=WAIT)
        except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
            return True
        return False

    wait_until_blocking(refused, "new connections to be refused", timeout=WAIT, every=0.02)


def test_sigterm_lets_running_and_queued_streams_finish() -> None:
    with (
        tierlm_serve("--token-interval", "0.01", *QUIET) as (url, process),
        ThreadPoolExecutor(2) as pool,
    ):
        running = client(url).chat.completions.create(
            model="sim-a", messages=MESSAGES, max_tokens=200, stream=True
        )
        chunks = iter(running)
        next(chunks)  # the role chunk: the job runs
        # A second chat waits behind it (chats are first come, first served).
        queued = pool.submit(read_raw_stream, url, 50)
        wait_until_blocking(
            lambda: httpx.get(f"{url}/v1/scheduler/state").json()["queued"]["0"],
            "the second chat queued",
            timeout=WAIT,
        )
        process.send_signal(signal.SIGTERM)
        wait_refused(url)  # stops accepting...
        # ... and both accepted streams finish, every token.
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text.endswith("w199 ")
        comments, pieces = queued.result(WAIT)
        assert comments and comments[0].startswith(": tierlm queued")
        assert "".join(pieces) == "".join(f"w{i} " for i in range(50)) + "[DONE]"
        assert process.wait(WAIT) == 0
        assert "Traceback" not in process.stdout.read()  # type: ignore[union-attr]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_what_outlasts_the_grace_ends_with_shutting_down(sig: signal.Signals) -> None:
    # 4000 tokens at 5 ms: 20 s, far beyond a 0.5 s grace.
    argv = ("--token-interval", "0.005", "--shutdown-grace", "0.5", *QUIET)
    with tierlm_serve(*argv) as (url, process):
        stream = client(url).chat.completions.create(
            model="sim-a", messages=MESSAGES, max_tokens=4000, stream=True
        )
        chunks = iter(stream)
        next(chunks)
        process.send_signal(sig)
        received: list[str] = []
        with pytest.raises(openai.APIError, match="the gateway is shutting down"):
            read_into(chunks, received)
        assert len(received) < 4000
        assert process.wait(WAIT) == 0
        assert "Traceback" not in process.stdout.read()  # type: ignore[union-attr]


def test_a_second_signal_ends_every_job_at_once() -> None:
    # A 20 s stream, a 60 s grace: only the second signal can cut it short.
    argv = ("--token-interval", "0.005", "--shutdown-grace", "60", *QUIET)
    with tierlm_serve(*argv) as (url, process):
        stream = client(url).chat.completions.create(
            model="sim-a", messages=MESSAGES, max_tokens=4000, stream=True
        )
        chunks = iter(stream)
        next(chunks)
        process.send_signal(signal.SIGTERM)
        wait_refused(url)
        process.send_signal(signal.SIGTERM)
        received: list[str] = []
        with pytest.raises(openai.APIError, match="the gateway is shutting down"):
            read_into(chunks, received)
        assert len(received) < 4000
        assert process.wait(WAIT) == 0


def test_a_draining_gateway_refuses_new_requests_and_is_not_ready() -> None:
    with serve() as gw:
        assert gw.http.get("/ready").json()["status"] == "ready"
        with sse(gw, chat_body(max_tokens=4000)) as blocker:
            gw.wait_running("chat")
            gw.core.shutdown_soon(drain=True)
            gw.wait(lambda s: s["gateway"]["draining"], "the drain to begin")
            # Accepted work goes on; new work is refused, on an open connection too.
            assert '"role":"assistant"' in blocker.next_data()
            response = gw.http.post("/v1/chat/completions", json=chat_body())
            assert response.status_code == 503
            assert response.json()["error"]["code"] == "shutting_down"
            assert gw.metric("tierlm_rejected_requests_total", reason="shutting_down") == 1
            ready = gw.http.get("/ready")
            assert ready.status_code == 503
            assert ready.json()["reason"] == "the gateway is shutting down"
            assert gw.http.get("/health").json()["status"] == "ok"  # alive, still
