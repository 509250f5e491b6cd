"""``tierlm serve``'s logs, read from a real process: one JSON object per line
with ``--log-format json`` (uvicorn's access log included), each line of a
request with its ``X-Request-Id``; the admin key never in them (the dashboard
login is a form post); a client leaving mid-upload is one line at info, no
traceback."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
from typing import Any

import httpx
import pytest

from tests.payloads import MESSAGES
from tests.server.helpers import WAIT
from tests.server.serve_process import tierlm_serve
from tierlm.server.settings.sources import ConfigError, load_settings

ADMIN_KEY = "sk-admin-3c9f0e7d"


def stop(process: subprocess.Popen[str]) -> list[str]:
    process.send_signal(signal.SIGINT)
    process.wait(WAIT)
    output: str = process.stdout.read()  # type: ignore[union-attr]
    return output.splitlines()


def test_json_logs_with_request_ids_and_no_secrets(monkeypatch: Any) -> None:
    monkeypatch.setenv("TIERLM_API_KEY", ADMIN_KEY)
    with tierlm_serve("--log-format", "json", "--token-interval", "0.005") as (url, process):
        auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
        traced = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "sim-a", "messages": MESSAGES, "max_tokens": 2},
            headers={**auth, "X-Request-Id": "trace-42"},
        )
        assert traced.status_code == 200 and traced.headers["x-request-id"] == "trace-42"
        bad = httpx.post(f"{url}/v1/chat/completions", content=b"{", headers=auth)
        generated = bad.headers["x-request-id"]
        with httpx.Client(base_url=url) as browser:
            login = browser.post("/dashboard/login", data={"key": ADMIN_KEY})
            assert login.status_code == 303
            assert browser.get("/dashboard").status_code == 200
        # A client that leaves halfway through its upload.
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=WAIT) as sock:
            sock.sendall(
                b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Authorization: Bearer " + ADMIN_KEY.encode() + b"\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
            )
            # Once a later request is answered, the server has read this one's head.
            assert httpx.get(f"{url}/health").status_code == 200
        assert httpx.get(f"{url}/health").status_code == 200
        lines = stop(process)

    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"time", "level", "logger", "message", "request_id"} <= r.keys() for r in records)
    assert not any(ADMIN_KEY in line for line in lines)
    access = [r for r in records if r["logger"] == "uvicorn.access"]
    chat = [r for r in access if r["path"] == "/v1/chat/completions"]
    assert [(r["request_id"], r["status"], r["method"]) for r in chat] == [
        ("trace-42", 200, "POST"),
        (generated, 400, "POST"),
    ]
    assert any(r["path"] == "/dashboard/login" and r["status"] == 303 for r in access)
    # The lines of a request carry its id (here: the startup line has none).
    assert records[0]["request_id"] == "-" and "OpenAI base URL" in records[0]["message"]
    # The client that left: one line at info, no traceback.
    left = [r for r in records if "disconnected before sending the whole request" in r["message"]]
    assert len(left) == 1 and left[0]["level"] == "info", left
    assert left[0]["request_id"] != "-"
    assert not any("exception" in r or "Traceback" in r["message"] for r in records)


def test_text_logs_carry_the_request_id() -> None:
    with tierlm_serve("--token-interval", "0.005") as (url, process):
        response = httpx.get(f"{url}/health", headers={"X-Request-Id": "abc-123"})
        assert response.headers["x-request-id"] == "abc-123"
        lines = stop(process)
    assert any("uvicorn.access [abc-123]" in line and "GET /health" in line for line in lines)
    # uvicorn's start-up lines (its "uvicorn.error" logger) do not read as errors.
    assert any("INFO uvicorn [-]: Application startup complete" in line for line in lines), lines
    assert not any("uvicorn.error" in line for line in lines)


def test_the_log_format_from_the_environment(monkeypatch: Any) -> None:
    monkeypatch.setenv("TIERLM_SERVER__LOG_FORMAT", "json")
    assert load_settings().server.log_format == "json"
    monkeypatch.setenv("TIERLM_SERVER__LOG_FORMAT", "xml")
    message = "TIERLM_SERVER__LOG_FORMAT (server.log_format): must be one of text, json"
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings()
