"""Bounds on reading a request body, for every endpoint: its size
(``limits.max_body_bytes``, 413) and its time (``limits.body_timeout`` from the
request head to the body's end, 408), and a prompt end at shutdown (503).

uvicorn has no body timeout: a client that announces 1 000 bytes and sends 10
holds its request (and, at shutdown, the server, until uvicorn's graceful
timeout cancels it with a plain-text 500). ``BodyLimits`` wraps the ASGI
``receive`` channel until the body is complete; the endpoint reading the body
gets an ``APIError`` from it, answered in OpenAI's format with
``Connection: close`` (the rest of the body will not be read, so the
connection cannot carry another request). After the body, ``receive`` is left
alone: it then waits for the client's disconnect (``disconnect.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tierlm.server.edge.body import SETTING, body_too_large
from tierlm.server.edge.errors import APIError, send_error

__all__ = ["BodyLimits", "BodyReads"]

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class BodyReads:
    """The request bodies being read, so that a shutdown can end them at once
    (``http_server.EdgeProtocol.shutdown`` calls ``interrupt``)."""

    def __init__(self) -> None:
        self.interrupted = False
        self._reading: set[asyncio.Timeout] = set()

    def interrupt(self) -> None:
        """End every body read now (503), and any started later."""
        self.interrupted = True
        for timeout in list(self._reading):
            timeout.reschedule(-1.0)  # in the past: fires on the loop's next turn

    async def receive(self, receive: Receive, deadline: float) -> Message:
        if self.interrupted:
            raise _shutting_down()
        try:
            async with asyncio.timeout_at(deadline) as timeout:
                self._reading.add(timeout)
                try:
                    return await receive()
                finally:
                    self._reading.discard(timeout)
        except TimeoutError:
            raise _shutting_down() if self.interrupted else _timed_out() from None


def _timed_out() -> APIError:
    return APIError(
        408,
        "request body: not received in time (limits.body_timeout)",
        code="request_timeout",
        reason="request_timeout",
        headers={"Connection": "close"},
    )


def _shutting_down() -> APIError:
    return APIError(
        503,
        "the gateway is shutting down; the request body was not read",
        code="shutting_down",
        reason="shutting_down",
        headers={"Connection": "close"},
    )


class BodyLimits:
    """The size and time bounds of a request body (module docstring). ``larger``
    gives a path its own size bound and the setting that sets it (a file
    upload: ``batches.max_file_bytes``)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int,
        timeout: float,
        reads: BodyReads | None = None,
        larger: Mapping[str, tuple[int, str]] | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.larger = dict(larger or {})
        self.timeout = timeout
        self.reads = reads or BodyReads()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        max_bytes, setting = self.larger.get(scope["path"], (self.max_bytes, SETTING))
        length = Headers(scope=scope).get("content-length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            too_large = body_too_large(max_bytes, int(length), setting)
            await send_error(too_large, scope, receive, send)
            return
        deadline = asyncio.get_running_loop().time() + self.timeout
        received = 0
        done = False

        async def limited() -> Message:
            nonlocal received, done
            if done:
                return await receive()
            message = await self.reads.receive(receive, deadline)
            if message["type"] != "http.request":
                done = True
                return message
            received += len(message.get("body", b""))
            if received > max_bytes:
                done = True
                raise body_too_large(max_bytes, setting=setting)
            done = not message.get("more_body", False)
            return message

        await self.app(scope, limited, send)
