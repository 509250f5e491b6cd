"""ASGI responses that wait for a job while watching for the client to leave.

A client that disconnects, queued or running, has its job cancelled at once: no
orphan generation keeps the device busy. Starlette's ``StreamingResponse``
notices a disconnect only when a write fails, which for a queued job that
writes nothing may be never; so these responses turn the disconnect into a
token (``disconnect.client_gone``) and race their waits against it
(``cancelled_by``, docs/design.md §2.9), cancelling the job then.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from tierlm.runners.cancel_scope import cancelled_by
from tierlm.server.edge.disconnect import client_gone
from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.jobs import AnsweredJob
from tierlm.server.gateway.metadata import answer_headers

__all__ = ["EventStream", "JobResult", "JobStream", "SSEFormat", "sse_comment", "sse_data"]


J = TypeVar("J", bound=AnsweredJob)
J_contra = TypeVar("J_contra", bound=AnsweredJob, contravariant=True)


def sse_data(payload: Mapping[str, Any] | str) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


def sse_comment(text: str) -> bytes:
    # A line starting with ':' is a comment: SSE clients (and OpenAI's) skip it.
    return f": {text}\n\n".encode()


class JobResult(Response, Generic[J]):
    """A non-streamed answer: wait for the job (and the ``more`` jobs of the same
    request: ``n`` > 1), then send ``render(job)`` as JSON, or the first error
    (``error(job)``) in OpenAI's format."""

    def __init__(
        self,
        job: J,
        render: Callable[[J], Mapping[str, Any]],
        error: Callable[[J], APIError | None],
        more: Sequence[J] = (),
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.job = job
        self.jobs = [job, *more]
        self.extra_headers = dict(headers or {})
        """Sent besides the job's own (the Ray ingress: the replica it ran on)."""
        self.render_body = render
        self.error = error
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        job = self.job
        try:
            async with client_gone(receive) as gone:
                with cancelled_by(gone):
                    for each in self.jobs:
                        await _until_done(each)
                if not all(each.done for each in self.jobs):  # the client went away first
                    return
                failed = [f for f in map(self.error, self.jobs) if f is not None]
                failure = failed[0] if failed else None
                if failure is not None:
                    failure.headers.update(
                        {**answer_headers(job.id, job.meta), **self.extra_headers}
                    )
                    response = failure.response()
                else:
                    body = json.dumps(self.render_body(job), separators=(",", ":")).encode()
                    response = Response(
                        body,
                        media_type="application/json",
                        headers={**answer_headers(job.id, job.meta), **self.extra_headers},
                    )
                await response(scope, receive, send)
        finally:
            # The client left, or our task was cancelled (server shutdown): so is the job.
            for each in self.jobs:
                if not each.done:
                    each.disconnect()


async def _until_done(job: AnsweredJob) -> None:
    while not job.done:
        job.wake.clear()
        await job.wake.wait()


class SSEFormat(Protocol[J_contra]):
    """What a streamed endpoint sends; the transport is ``JobStream``'s."""

    def start(self) -> list[Mapping[str, Any]]: ...

    def piece(self, text: str) -> Sequence[Mapping[str, Any]]:
        """The chunks of one piece: none while it is held back (a tool call's
        tail), several when it completes what was."""

    def end(self, job: J_contra) -> list[Mapping[str, Any]]: ...


class JobStream(Response, Generic[J]):
    """A streamed answer (SSE): comment lines while the job waits (its queue
    position and tier, so a UI can show "waiting behind 3 jobs"), then one
    ``data:`` event per generated piece, then ``data: [DONE]``."""

    media_type = "text/event-stream"

    def __init__(
        self,
        job: J,
        fmt: SSEFormat[J],
        error: Callable[[J], APIError | None],
        heartbeat: float,
        more: Sequence[tuple[J, SSEFormat[J]]] = (),
        finale: Callable[[], list[Mapping[str, Any]]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.job = job
        self.fmt = fmt
        self.error = error
        self.heartbeat = heartbeat
        self.more = list(more)
        """The other jobs of the request (``n`` > 1), streamed one after the other
        (they run together: each one's pieces wait in ``produced``)."""
        self.finale = finale
        """Chunks after the last job's (the usage of all of them)."""
        self.extra_headers = dict(headers or {})
        """Sent besides the job's own (the Ray ingress: the replica it runs on)."""
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        job = self.job
        headers = {
            "Cache-Control": "no-cache",
            # nginx and others buffer responses unless told not to: tokens would arrive in bursts.
            "X-Accel-Buffering": "no",
            **answer_headers(job.id, job.meta),
            **self.extra_headers,
        }
        try:
            async with client_gone(receive) as gone:
                await send(
                    {
                        "type": "http.response.start",
                        "status": 200,
                        "headers": [
                            (b"content-type", b"text/event-stream; charset=utf-8"),
                            *((k.lower().encode(), v.encode()) for k, v in headers.items()),
                        ],
                    }
                )
                with cancelled_by(gone):
                    await self._body(send)
        finally:
            # The client left, or our task was cancelled (server shutdown): so is the job.
            for each, _ in [(job, self.fmt), *self.more]:
                if not each.done:
                    each.disconnect()

    async def _body(self, send: Send) -> None:
        streams = [(self.job, self.fmt), *self.more]
        for i, (job, fmt) in enumerate(streams):
            # Woken after scheduler events too (throttled), to tell its position.
            changes = job.changes
            changes.watch(job.wake)
            try:
                if not await self._send_all(send, job, fmt, last=i == len(streams) - 1):
                    return
            finally:
                changes.unwatch(job.wake)

    async def _send_all(self, send: Send, job: J, fmt: SSEFormat[J], last: bool) -> bool:
        """Stream ``job``; False if it failed (the stream is then over)."""
        sent = 0
        last_note: str | None = None
        started = False
        while True:
            # Cleared before looking, so a wake-up during a send is not lost.
            job.wake.clear()
            out = bytearray()
            if sent < len(job.produced):
                if not started:
                    out += b"".join(sse_data(chunk) for chunk in fmt.start())
                    started = True
                for piece in job.produced[sent:]:
                    out += b"".join(sse_data(chunk) for chunk in fmt.piece(piece))
                sent = len(job.produced)
            if job.done:
                failure = self.error(job)
                if failure is not None:
                    # OpenAI's clients raise APIError on a data event with "error".
                    out += sse_data(failure.body())
                else:
                    if not started:
                        out += b"".join(sse_data(chunk) for chunk in fmt.start())
                    out += b"".join(sse_data(chunk) for chunk in fmt.end(job))
                    if last:
                        finale = self.finale() if self.finale is not None else []
                        out += b"".join(sse_data(chunk) for chunk in finale)
                        out += sse_data("[DONE]")
                more = failure is None and not last
                await send({"type": "http.response.body", "body": bytes(out), "more_body": more})
                return more
            note = job.note()
            if note is not None and note != last_note:
                out += sse_comment(note)
                last_note = note
            if out:
                await send({"type": "http.response.body", "body": bytes(out), "more_body": True})
            with anyio.move_on_after(self.heartbeat) as quiet:
                await job.wake.wait()
            if quiet.cancelled_caught:
                # Keeps proxies from closing a quiet stream (a long wait in the queue).
                await send(
                    {
                        "type": "http.response.body",
                        "body": sse_comment(note or "tierlm keep-alive"),
                        "more_body": True,
                    }
                )


class EventStream(Response):
    """A server-sent event stream of ``events()``'s chunks, ended (and the
    generator closed) the moment the client disconnects, even while the
    generator waits for something to send."""

    def __init__(self, events: Callable[[], AsyncGenerator[bytes, None]]) -> None:
        self.events = events
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )
        async with client_gone(receive) as gone, contextlib.aclosing(self.events()) as events:
            with cancelled_by(gone):
                async for chunk in events:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
