"""A request id on every response (``X-Request-Id``) and on every log line of
its request.

The id is the request's own ``X-Request-Id`` when it is a sane value (a proxy
or a client tracing its calls sent it: the same id then names the call on
both sides), else a new one. It lives in a context variable for the request's
task (and the tasks it starts), so any logger can show it: ``RequestIdFilter``
puts it on every log record (``record.request_id``, ``-`` outside a request).
uvicorn's access log line is written while the response starts, inside the
request's context, so it carries the id too.
"""

from __future__ import annotations

import contextvars
import logging
import re
import secrets

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["HEADER", "RequestIdFilter", "RequestIdMiddleware", "current_request_id"]

HEADER = "X-Request-Id"
# What an id taken from a request may look like: what proxies and tracing
# libraries send (UUIDs, hex, base64url, "svc:123"), and nothing that could
# break a log line or a header (no spaces, quotes, control characters).
_SANE = re.compile(r"[A-Za-z0-9._:@+=/-]{1,128}")
# 64 random bits, as hex: unique among any gateway's requests, short in a log line.
_ID_BYTES = 8
NO_REQUEST = "-"

_request_id: contextvars.ContextVar[str] = contextvars.ContextVar(
    "tierlm_request_id", default=NO_REQUEST
)


def current_request_id() -> str:
    """The id of the request being handled, ``-`` outside one."""
    return _request_id.get()


def request_id_of(scope: Scope) -> str:
    """The request's own id when sane, else a new one."""
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            text: str = value.decode("latin-1")
            if _SANE.fullmatch(text):
                return text
            break
    return secrets.token_hex(_ID_BYTES)


class RequestIdMiddleware:
    """Gives each request its id: in the context (for logs), in
    ``scope["state"]["request_id"]`` (``request.state.request_id``) and in the
    response's ``X-Request-Id`` header. Outermost, so every answer has it,
    the edge's refusals included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        token = _request_id.set(request_id)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = request_id
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _request_id.reset(token)


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` to every record; on a handler, so records of every
    logger (tierlm's, uvicorn's error and access logs) get it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = _request_id.get()
        return True
