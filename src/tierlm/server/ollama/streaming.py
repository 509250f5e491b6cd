"""Ollama's transport: NDJSON streams, one JSON object a line, and its errors.

A streamed answer (``NdjsonStream``) starts when there is something to send:
its first piece, or its end. A job that fails before it produced anything is
then answered with the error's HTTP status and ``{"error": "..."}``, as
Ollama answers a request it could not start; one that fails later ends its
stream with a line ``{"error": "..."}`` (what Ollama's clients raise on).
Nothing is written while the job waits in the queue: an NDJSON reader takes
every line for an object, so there is no comment line to tell the queue
position with (``/v1``'s SSE streams have them).

As on ``/v1`` (``openai.streaming``), a client that disconnects, queued or
running, has its job cancelled at once (docs/design.md §2.9).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from tierlm.runners.cancel_scope import cancelled_by
from tierlm.server.edge.disconnect import client_gone
from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.jobs import GatewayJob
from tierlm.server.gateway.metadata import answer_headers
from tierlm.server.ollama.answers import OllamaAnswer
from tierlm.server.openai.job_errors import job_error

__all__ = ["NDJSON", "NdjsonStream", "OllamaError", "ollama_error", "one_line"]

NDJSON = "application/x-ndjson"


class OllamaError(APIError):
    """An ``APIError`` in Ollama's shape: ``{"error": "..."}``."""

    def body(self) -> dict[str, Any]:
        return {"error": self.message}

    @classmethod
    def of(cls, error: APIError) -> OllamaError:
        return cls(
            error.status,
            error.message,
            param=error.param,
            code=error.code,
            type=error.type,
            reason=error.reason,
            headers=error.headers,
        )


def ollama_error(job: GatewayJob) -> APIError | None:
    """Why an ended job has no answer (``/v1``'s ``job_error``), in Ollama's shape."""
    error = job_error(job)
    return None if error is None else OllamaError.of(error)


def one_line(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


class NdjsonStream(Response):
    """A streamed Ollama answer (module docstring)."""

    media_type = NDJSON

    def __init__(
        self,
        job: GatewayJob,
        answer: OllamaAnswer,
        error: Callable[[GatewayJob], APIError | None] = ollama_error,
    ) -> None:
        self.job = job
        self.answer = answer
        self.error = error
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        job = self.job
        try:
            async with client_gone(receive) as gone:
                with cancelled_by(gone):
                    await self._body(scope, receive, send)
        finally:
            # The client left, or our task was cancelled (server shutdown): so is the job.
            if not job.done:
                job.disconnect()

    async def _start(self, send: Send) -> None:
        headers = {
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
            **answer_headers(self.job.id, self.job.meta),
        }
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", NDJSON.encode()),
                    *((k.lower().encode(), v.encode()) for k, v in headers.items()),
                ],
            }
        )

    async def _body(self, scope: Scope, receive: Receive, send: Send) -> None:
        job, answer = self.job, self.answer
        sent = 0
        started = False
        while True:
            # Cleared before looking, so a wake-up during a send is not lost.
            job.wake.clear()
            out = bytearray()
            if sent < len(job.produced):
                for piece in job.produced[sent:]:
                    out += b"".join(one_line(line) for line in answer.piece(piece))
                sent = len(job.produced)
            if job.done:
                failure = self.error(job)
                if failure is not None and not started and not out:
                    failure.headers.update(answer_headers(job.id, job.meta))
                    await failure.response()(scope, receive, send)
                    return
                if failure is not None:
                    out += one_line(failure.body())
                else:
                    out += b"".join(one_line(line) for line in answer.end(job))
                if not started:
                    await self._start(send)
                await send({"type": "http.response.body", "body": bytes(out), "more_body": False})
                return
            if out:
                if not started:
                    await self._start(send)
                    started = True
                await send({"type": "http.response.body", "body": bytes(out), "more_body": True})
            await job.wake.wait()


def json_answer(payload: Mapping[str, Any], status: int = 200) -> Response:
    """One object, as Ollama answers a request with ``stream: false`` (or a load)."""
    return JSONResponse(payload, status_code=status)
