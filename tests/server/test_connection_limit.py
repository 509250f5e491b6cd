"""The cap on requests in flight (``limits.max_connections``,
``edge/in_flight.py``) and the sockets that must not take its places, against
``tierlm serve --backend sim`` as a real process on 127.0.0.1 with raw socket
clients: every client connects first, then all send (what a burst of clients
does), so the server sees every connection before any request.

- ``limit`` clients are all served and the one beyond is refused (503 +
  Retry-After), not everyone.
- 1 000 slowloris sockets (a head a byte a second, reopened when cut) leave a
  normal client served.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import httpx

from tests.helpers import wait_until
from tests.payloads import HI, chat_body
from tests.server.helpers import WAIT
from tests.server.serve_process import tierlm_serve

# Warnings only: nobody reads the server's output pipe until the end, and a
# thousand access-log lines would fill it and block the server.
SIM = ("--backend", "sim", "--token-interval", "0.001", "--queue-limit", "5000")
SIM += ("--log-level", "warning")


def chat_request(port: int, max_tokens: int = 2) -> bytes:
    body = json.dumps(chat_body(max_tokens=max_tokens, messages=HI, stream=True)).encode()
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


async def connected(
    port: int, count: int
) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    return list(
        await asyncio.gather(*(asyncio.open_connection("127.0.0.1", port) for _ in range(count)))
    )


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and body of a ``Connection: close`` answer."""
    raw = await reader.read()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


async def burst(url: str, clients: int) -> list[tuple[int, dict[str, str], bytes]]:
    """``clients`` connections opened, then a streaming chat sent on each while
    the scheduler is paused (every stream stays in flight), ``/health`` asked
    meanwhile, then the scheduler resumed; every answer, in order."""
    port = int(url.rsplit(":", 1)[1])
    async with httpx.AsyncClient(base_url=url, timeout=WAIT) as http:
        assert (await http.post("/v1/scheduler/pause")).json()["paused"] is True
        pairs = await connected(port, clients)
        request = chat_request(port)
        for _, writer in pairs:
            writer.write(request)
        await asyncio.gather(*(writer.drain() for _, writer in pairs))
        answers = [asyncio.create_task(answer(reader)) for reader, _ in pairs]
        # Every request is in the gateway (queued, or refused) before the resume.

        async def arrived() -> tuple[int, int]:
            health = await http.get("/health")
            assert health.status_code == 200  # a full gateway is alive
            return health.json()["queue_depth"], sum(task.done() for task in answers)

        await wait_until(
            arrived,
            f"{clients} requests queued or refused",
            until=lambda counts: sum(counts) >= clients,
            timeout=WAIT,
            every=0.1,
        )
        assert (await http.post("/v1/scheduler/resume")).json()["paused"] is False
        results = await asyncio.wait_for(asyncio.gather(*answers), WAIT * 4)
    for _, writer in pairs:
        writer.close()
    return results


def served_and_refused(results: list[tuple[int, dict[str, str], bytes]]) -> tuple[int, int]:
    served = sum(status == 200 and b"data: [DONE]" in body for status, _, body in results)
    refused = [(status, headers, body) for status, headers, body in results if status == 503]
    for _, headers, body in refused:
        assert headers["retry-after"] == "1"
        assert json.loads(body)["error"]["code"] == "too_many_connections"
    return served, len(refused)


def test_one_client_over_the_limit_is_refused_and_the_rest_served() -> None:
    with tierlm_serve(*SIM, "--max-connections", "50") as (url, _):
        results = asyncio.run(burst(url, 51))
    assert served_and_refused(results) == (50, 1)


def test_a_thousand_clients_at_the_default_limit_are_all_served() -> None:
    # The default limit: 1 000; the 1 001st client is refused, the others served.
    with tierlm_serve(*SIM) as (url, _):
        results = asyncio.run(burst(url, 1001))
    assert served_and_refused(results) == (1000, 1)


SLOWLORIS = 1000
SLOW_HEAD = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


async def slowloris(port: int, stop: asyncio.Event, cut: list[int]) -> None:
    """A socket sending a request head a byte a second, never ending it;
    reopened when the gateway cuts it."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(1)
            continue
        try:
            writer.write(SLOW_HEAD)
            while not stop.is_set() and not reader.at_eof():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(reader.read(65536), 1.0)
                writer.write(b"a")
                await writer.drain()
        except OSError:  # reset by the gateway
            cut[0] += 1
        else:
            cut[0] += reader.at_eof()
        writer.close()


async def beside_slowloris(url: str) -> tuple[list[int], int]:
    """A normal client's 10 requests, a second apart, while ``SLOWLORIS``
    slowloris sockets are open; its statuses, and how many sockets were cut."""
    port = int(url.rsplit(":", 1)[1])
    stop, cut = asyncio.Event(), [0]
    attackers = [asyncio.create_task(slowloris(port, stop, cut)) for _ in range(SLOWLORIS)]
    statuses = []
    try:
        await asyncio.sleep(2)  # every socket open and trickling
        async with httpx.AsyncClient(base_url=url, timeout=WAIT) as http:
            for _ in range(10):
                body = chat_body(max_tokens=2, messages=HI)
                response = await http.post("/v1/chat/completions", json=body)
                statuses.append(response.status_code)
                await asyncio.sleep(1)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*attackers, return_exceptions=True), WAIT)
    return statuses, cut[0]


def test_a_normal_client_is_served_beside_a_thousand_slowloris_sockets() -> None:
    # A 2 s head timeout: each socket is cut and reopened several times meanwhile.
    with tierlm_serve(*SIM, "--header-timeout", "2") as (url, _):
        statuses, cut = asyncio.run(beside_slowloris(url))
    assert statuses == [200] * 10
    assert cut >= SLOWLORIS  # the gateway cut them (each at least once) and they came back
