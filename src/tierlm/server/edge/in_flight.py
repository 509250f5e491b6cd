"""The cap on requests in flight (``limits.max_connections``): the request
beyond it is refused with 503 + ``Retry-After``, and only that one.

uvicorn's own cap (``limit_concurrency``) compares every open connection with
the limit when a request arrives: idle kept-alive connections and clients
still sending a head (slowloris) count, and once the connections outnumber the
limit, every request that arrives is refused, the ones already connected
included (51 clients at a limit of 50: 51 answers of 503). Here a request
counts from its head to the end of its response (a stream: to its last
chunk), so ``max_connections`` clients are all served and the next one is
refused (docs/design.md §1, the edge). Sockets that have not sent a whole
head are bounded by ``limits.header_timeout`` (``http_server.EdgeProtocol``)
instead, so they cannot take a place.

The app exempts ``/health``, ``/metrics`` and the scheduler API (neither
counted nor refused): a supervisor must see a full gateway as alive, and an
operator must be able to look at it and pause it.
"""

from __future__ import annotations

from collections.abc import Collection

from starlette.types import ASGIApp, Receive, Scope, Send

from tierlm.server.edge.errors import APIError, send_error

__all__ = ["RETRY_AFTER", "InFlightLimit"]

RETRY_AFTER = 1
"""Seconds a refused client is told to wait: a place frees as soon as any
request in flight ends, which under load (streams of seconds, many of them)
is within a second; the gateway does not know which ends first."""


class InFlightLimit:
    """At most ``limit`` requests in flight; ``exempt`` paths pass uncounted."""

    def __init__(self, app: ASGIApp, *, limit: int, exempt: Collection[str] = ()) -> None:
        self.app = app
        self.limit = limit
        self.exempt = frozenset(exempt)
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            await send_error(self._refusal(), scope, receive, send)
            return
        self.in_flight += 1
        try:
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
