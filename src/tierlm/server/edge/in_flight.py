"""The cap on requests in flight (``limits.max_connections``): the request
beyond it is refused with 503 + ``Retry-After``, and only that one.

uvicorn's own cap (``limit_concurrency``) compares every open connection with
the limit when a request arrives: idle kept-alive connections and clients
still sending a head (slowloris) count, and once the connections outnumber the
limit, every request that arrives is refused, the ones already connected
included (51 clients at a limit of 50: 51 answers of 503). Here a request
counts from its head to the end of its response (a stream: to its last
chunk), so ``max_connections`` clients are all served and the next one is
refused (docs/design.md §1.11). Sockets that have not sent a whole
head are bounded by ``limits.header_timeout`` (``http_server.EdgeProtocol``)
instead, so they cannot take a place.

The app exempts ``/health``, ``/metrics`` and the scheduler API (neither
counted nor refused, nor paced): a supervisor must see a full gateway as
alive, and an operator must be able to look at it and pause it.

**One admission a loop turn** (``Turns``). A burst of clients (500 streams
released at once) has all its heads read in one turn of the event loop, and
each request's task then runs its whole admission (body, JSON, validation,
the scheduler's decision, the response's head) before it first waits: 500 of
them in the next turn held the loop for 1-1.5 s under the gateway benchmark,
and every stream's tokens, every timer and ``/health`` waited behind them.
Each counted request now waits for its turn: one starts a loop turn, and the
tokens, timers and health checks due run between two admissions, whose cost
(a few ms) is the longest any of them waits (docs/design.md §1.11).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Collection

from starlette.types import ASGIApp, Receive, Scope, Send

from tierlm.server.edge.errors import APIError, send_error

__all__ = ["RETRY_AFTER", "InFlightLimit", "Turns"]

RETRY_AFTER = 1
"""Seconds a refused client is told to wait: a place frees as soon as any
request in flight ends, which under load (streams of seconds, many of them)
is within a second; the gateway does not know which ends first."""


class Turns:
    """Lets one waiter go a loop turn, in arrival order (module docstring)."""

    def __init__(self) -> None:
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._taken = False  # a request started in this turn
        self._next_turn: asyncio.Handle | None = None
        self.waited = 0
        """Requests that waited for a turn (tests read it)."""

    async def take(self) -> None:
        if not self._taken and not self._waiting:
            self._taken = True
            self._schedule()
            return
        turn = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        self.waited += 1
        self._schedule()
        await turn  # a cancelled waiter is skipped (``_turn``)

    def _schedule(self) -> None:
        if self._next_turn is None:
            # call_soon runs in the loop's next turn: after the I/O and timers due.
            self._next_turn = asyncio.get_running_loop().call_soon(self._turn)

    def _turn(self) -> None:
        self._next_turn = None
        self._taken = False
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                self._taken = True
                self._schedule()
                return


class InFlightLimit:
    """At most ``limit`` requests in flight, one starting a loop turn;
    ``exempt`` paths pass uncounted and at once."""

    def __init__(self, app: ASGIApp, *, limit: int, exempt: Collection[str] = ()) -> None:
        self.app = app
        self.limit = limit
        self.exempt = frozenset(exempt)
        self.in_flight = 0
        self.turns = Turns()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            await send_error(self._refusal(), scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.turns.take()
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1

    def _refusal(self) -> APIError:
        return APIError(
            503,
            f"the gateway is serving {self.limit} requests, its limit "
            f"(limits.max_connections); retry in {RETRY_AFTER} s",
            code="too_many_connections",
            reason="too_many_connections",
            # Closed: a client that waits should not hold a socket meanwhile.
            headers={"Retry-After": str(RETRY_AFTER), "Connection": "close"},
        )
