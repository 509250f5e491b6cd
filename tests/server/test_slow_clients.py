"""Slow and partial requests, sent over raw sockets to a real gateway on
127.0.0.1: slowloris clients are cut off, a half-sent body times out with an
answer in OpenAI's format, a stop signal does not wait for a half-sent upload,
and idle connections take no place under the cap on requests in flight.

No test asserts how long anything took: each waits (bounded by ``WAIT``) for
the server to act, with timeouts set short in the settings, or far beyond the
test's bound where only another path may end the wait.
"""

from __future__ import annotations

import json
import signal
import socket
import time

import httpx
import pytest

from tests.payloads import chat_body
from tests.server.helpers import WAIT, Gateway, module_gateway, serve, sim_settings
from tests.server.serve_process import tierlm_serve

gw = module_gateway(
    {"limits": {"header_timeout": 1.0, "body_timeout": 1.0, "max_connections": 300}}
)


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=WAIT)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (bounded by WAIT)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def response_of(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, body


def test_slowloris_clients_are_cut_off_and_others_are_served(gw: Gateway) -> None:
    # 200 clients each sending a request head a byte at a time, never finishing it.
    socks = [connect(gw.url) for _ in range(200)]
    head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
    for sock in socks:
        sock.sendall(head)
        sock.setblocking(False)
    open_socks = set(socks)
    answers: list[bytes] = []
    deadline = time.monotonic() + WAIT
    while open_socks and time.monotonic() < deadline:
        for sock in list(open_socks):
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                try:
                    sock.send(b"a")  # one more byte: it never ends the head
                except OSError:
                    open_socks.discard(sock)
                continue
            except OSError:
                data = b""
            answers.append(data)
            open_socks.discard(sock)
        # Meanwhile a normal client is served.
        assert httpx.get(f"{gw.url}/health", timeout=WAIT).status_code == 200
        time.sleep(0.1)
    assert not open_socks, f"{len(open_socks)} slowloris connections still open"
    # Each was told why, in OpenAI's error format.
    told = [response_of(a) for a in answers if a]
    assert len(told) == len(answers) == 200
    for status, headers, body in told:
        assert status == 408 and headers["connection"] == "close"
        assert json.loads(body)["error"]["code"] == "request_timeout"
    for sock in socks:
        sock.close()


def test_an_idle_connection_is_closed(gw: Gateway) -> None:
    with connect(gw.url) as sock:
        assert read_all(sock) == b""  # closed without a word: nothing was asked


def test_a_half_sent_body_times_out_with_408(gw: Gateway) -> None:
    with connect(gw.url) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
            b'{"model": '
        )
        status, headers, body = response_of(read_all(sock))
    assert status == 408
    assert headers["connection"] == "close"
    assert "x-request-id" in headers
    error = json.loads(body)["error"]
    assert error["code"] == "request_timeout"
    assert error["message"] == "request body: not received in time (limits.body_timeout)"
    assert gw.metric("tierlm_rejected_requests_total", reason="request_timeout") >= 1


def test_a_body_the_endpoint_does_not_read_cannot_hold_the_connection(gw: Gateway) -> None:
    # pause ignores its body: it answers at once, then the unread rest is bounded too.
    with connect(gw.url) as sock:
        sock.sendall(
            b"POST /v1/scheduler/resume HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
        )
        raw = read_all(sock)
    assert raw.startswith(b"HTTP/1.1 200")


def test_idle_connections_take_no_place_under_the_cap(gw: Gateway) -> None:
    # The cap counts requests in flight (test_connection_limit.py has it full):
    # five sockets that asked nothing leave a gateway capped at 5 serving.
    settings = sim_settings({"limits": {"max_connections": 5}})
    with serve(settings) as capped:
        held = [connect(capped.url) for _ in range(5)]
        try:
            for _ in range(5):
                response = httpx.post(
                    f"{capped.url}/v1/chat/completions", json=chat_body(max_tokens=2), timeout=WAIT
                )
                assert response.status_code == 200, response.text
        finally:
            for sock in held:
                sock.close()


def test_an_oversized_request_head_is_refused(gw: Gateway) -> None:
    # Whole in one read (h11 checks only an incomplete head): 431 from the gateway.
    response = httpx.get(f"{gw.url}/health", headers={"X-Big": "x" * 20_000}, timeout=WAIT)
    assert response.status_code == 431
    assert response.json()["error"]["code"] == "headers_too_large"
    # Trickled in: h11 refuses it once its buffer passes the limit.
    with connect(gw.url) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
        for _ in range(17):  # just past 16 KiB, then no more (a send after the close resets)
            sock.sendall(b"x" * 1000)
        assert read_all(sock).startswith(b"HTTP/1.1 400")
    assert httpx.get(f"{gw.url}/health", timeout=WAIT).status_code == 200


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_does_not_wait_for_a_half_sent_upload(sig: signal.Signals) -> None:
    # The body timeout is far beyond the test's bound: only the shutdown may end the read.
    argv = ("--body-timeout", "3600", "--log-level", "info", "--backend", "sim")
    with tierlm_serve(*argv) as (url, process):
        with connect(url) as sock:
            sock.sendall(
                b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                b'{"model": "sim-embed", "input": "'
            )
            # The server reads connections in turn on one loop: once a request sent
            # later is answered, this head has been read and its body is awaited.
            assert httpx.get(f"{url}/health", timeout=WAIT).status_code == 200
            process.send_signal(sig)
            status, headers, body = response_of(read_all(sock))
        process.wait(WAIT)
        output = process.stdout.read()  # type: ignore[union-attr]
    assert status == 503, body
    assert headers["content-type"] == "application/json"
    assert json.loads(body)["error"]["code"] == "shutting_down"
    assert "Traceback" not in output
    assert "Cancel" not in output  # uvicorn never had to cancel a task
