"""uvicorn, as the gateway runs it: ``uvicorn_config(app, settings)``.

uvicorn bounds an idle kept-alive connection (``timeout_keep_alive``) and the
size of a request head (h11's ``max_incomplete_event_size``). Its
``limit_concurrency`` is not used: it counts every open connection, so one
client over it made every request 503; ``in_flight.InFlightLimit`` caps the
requests in flight instead (docs/design.md §1.11).
It has no timeout for a client that sends a request head slowly (slowloris:
any byte re-arms nothing, and a new connection has no timer at all), nor for a
request body (``body.BodyLimits`` has that one). ``EdgeProtocol`` is uvicorn's
h11 protocol with the missing one:

- **head timeout**: from a connection's start, or the end of its previous
  response, the client has ``limits.header_timeout`` seconds to send a whole
  request head; else the connection is closed (with a 408 if it had sent part
  of one). A client that never finishes sending a body the app did not read
  is cut by the same timer.
- **shutdown**: a request still sending its body when the server stops has
  that read ended at once (503 ``shutting_down``, ``body.BodyReads``) instead
  of holding the shutdown until uvicorn's graceful timeout cancels it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from tierlm.server.edge.errors import error_body
from tierlm.server.edge.limits import BodyReads
from tierlm.server.settings.sections import ServerSettings

__all__ = ["EdgeProtocol", "uvicorn_config"]

_TIMEOUT_BODY = json.dumps(
    error_body(
        "request head not received in time (limits.header_timeout)",
        "invalid_request_error",
        code="request_timeout",
    )
).encode()
# Written straight to the socket: no request was parsed, so h11 cannot answer one.
_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: " + str(len(_TIMEOUT_BODY)).encode() + b"\r\n\r\n"
) + _TIMEOUT_BODY


class EdgeProtocol(H11Protocol):
    """uvicorn's h11 protocol with a head timeout and a prompt shutdown of body
    reads (module docstring). Configured by subclassing (``uvicorn_config``)."""

    header_timeout: ClassVar[float] = 10.0
    body_reads: ClassVar[BodyReads | None] = None

    _head_timer: asyncio.TimerHandle | None = None
    _head_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        self._head_bytes += len(data)
        super().data_received(data)

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # a new request's head arrived
            self._disarm()

    def on_response_complete(self) -> None:
        # Armed first: the parent may start a pipelined request (which disarms it).
        self._arm()
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        if self.body_reads is not None:
            self.body_reads.interrupt()
        super().shutdown()

    def _arm(self) -> None:
        self._disarm()
        self._head_bytes = 0
        self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            return  # a request is being answered: the body timeout governs it
        if self._head_bytes and self.conn.their_state is h11.IDLE:
            # Part of a head came: say why before closing.
            self.transport.write(_TIMEOUT_RESPONSE)
        self.transport.close()


def _protocol(header_timeout: float, body_reads: BodyReads | None) -> type[EdgeProtocol]:
    return type(
        "EdgeProtocol",
        (EdgeProtocol,),
        {"header_timeout": header_timeout, "body_reads": body_reads},
    )


def uvicorn_config(app: Any, settings: ServerSettings, **overrides: Any) -> uvicorn.Config:
    """uvicorn's config for ``app`` (``create_app(settings)``) with the
    settings' limits; ``overrides`` are more of ``uvicorn.Config``'s arguments."""
    limits = settings.limits
    options: dict[str, Any] = {
        "host": settings.server.host,
        "port": settings.server.port,
        "log_level": settings.server.log_level,
        # tierlm serve configures logging itself (logs.py): uvicorn's records
        # go to the root logger's handler, with request ids, as text or JSON.
        "log_config": None,
        # h11 always (never httptools, were it installed): EdgeProtocol extends it.
        "http": _protocol(limits.header_timeout, getattr(app.state, "body_reads", None)),
        "timeout_keep_alive": limits.keep_alive_timeout,
        "h11_max_incomplete_event_size": limits.max_header_bytes,
        # No "server: uvicorn" header: nothing says what to attack.
        "server_header": False,
        **overrides,
    }
    return uvicorn.Config(app, **options)
