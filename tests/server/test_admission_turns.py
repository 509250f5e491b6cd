"""A burst of requests is admitted one a turn of the event loop
(``edge/in_flight.Turns``): 500 streams released at once had their admissions
(body, validation, the scheduler's decision, the response head) run back to
back in one turn, which held the loop for a second or more, every stream's
tokens and ``/health`` waiting behind it. So are the waiting streams woken to
hear their new place (``gateway/changes.WAKE_BATCH`` a turn).

Counted, not timed: a callback that re-arms itself with ``call_soon`` runs
once every turn of the gateway's loop and numbers the turns; each admission
(``Gateway.submit``) notes the turn it ran in.
"""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from typing import Any

import httpx

from tests.server.helpers import WAIT, serve, sim_settings
from tests.server.test_connection_limit import chat_request
from tierlm.server.gateway.changes import WAKE_BATCH, Changes

BURST = 200


class TurnCounter:
    def __init__(self) -> None:
        self.turn = 0
        self.running = False
        self.admitted: Counter[int] = Counter()

    def start(self) -> None:
        self.running = True
        asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        self.turn += 1
        if self.running:
            asyncio.get_running_loop().call_soon(self._tick)


def test_a_burst_is_admitted_one_request_a_loop_turn() -> None:
    settings = sim_settings({"limits": {"queue_limit": 5000}})
    with serve(settings) as gw:
        turns = TurnCounter()
        submit = gw.core.submit

        async def counted(*args: Any, **kwargs: Any) -> Any:
            if not turns.running:
                turns.start()
            turns.admitted[turns.turn] += 1
            return await submit(*args, **kwargs)

        gw.core.submit = counted  # type: ignore[method-assign]
        assert gw.http.post("/v1/scheduler/pause").json()["paused"] is True
        port = int(gw.url.rsplit(":", 1)[1])
        # Every client connected first, then every request sent at once.
        socks = [socket.create_connection(("127.0.0.1", port), timeout=WAIT) for _ in range(BURST)]
        try:
            request = chat_request(port)
            for sock in socks:
                sock.sendall(request)
            gw.wait(lambda s: s["queue_depth"] >= BURST, f"{BURST} queued")
            turns.running = False
            # Most turns see one admission; none sees a crowd (150 of 200 did in
            # one turn before). A few may meet: one that waited for its body.
            assert sum(turns.admitted.values()) == BURST
            assert max(turns.admitted.values()) <= 3, turns.admitted.most_common(3)
            assert gw.http.post("/v1/scheduler/resume").json()["paused"] is False
            for sock in socks:
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
                assert answer.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in answer
        finally:
            for sock in socks:
                sock.close()
        assert httpx.get(f"{gw.url}/health", timeout=WAIT).status_code == 200


def test_waiting_streams_are_woken_a_batch_a_loop_turn() -> None:
    # Every waiting stream is told its new place after events; 500 woken in one
    # turn each wrote its comment back to back.
    async def woken_by_turn() -> list[int]:
        changes = Changes()
        changes.start()
        wakes = [asyncio.Event() for _ in range(500)]
        for wake in wakes:
            changes.watch(wake)
        changes._wake_watchers()
        counts = []
        while len(counts) < 20:
            counts.append(sum(wake.is_set() for wake in wakes))
            await asyncio.sleep(0)  # one turn
        return counts

    counts = asyncio.run(woken_by_turn())
    steps = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    assert counts[-1] == 500
    assert max(steps) <= WAKE_BATCH
