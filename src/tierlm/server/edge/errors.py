"""Errors in OpenAI's format, so every OpenAI client shows them as it shows OpenAI's.

OpenAI's error body is ``{"error": {"message", "type", "param", "code"}}``;
the official clients raise ``BadRequestError`` (400), ``AuthenticationError``
(401), ``PermissionDeniedError`` (403), ``NotFoundError`` (404),
``RateLimitError`` (429)... from the status and show ``message``. ``param``
names the offending field, as OpenAI does (``"messages[0].content"``, or a
header name for the scheduling headers).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tierlm.errors import TierlmError
from tierlm.runners.errors import RunnerError
from tierlm.server.edge.rejections import rejections_of
from tierlm.server.edge.request_id import current_request_id

__all__ = [
    "APIError",
    "ErrorBoundary",
    "api_error",
    "error_body",
    "error_response",
    "exception_handlers",
    "internal_error",
    "send_error",
]

logger = logging.getLogger("tierlm.server")

# OpenAI's error types by status (what api.openai.com answers).
_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    421: "invalid_request_error",
    431: "invalid_request_error",
    429: "rate_limit_error",
}


class APIError(TierlmError):
    """An answer the gateway composed itself: a status, a message and OpenAI's
    error fields (``TierlmError``'s hints, set per instance).

    Every other ``TierlmError`` a route lets through is answered by its own
    hints (``api_error``); an ``APIError`` is for what only the gateway knows
    (an unknown model id, a header out of range, an auth failure). ``reason``
    labels the ``tierlm_rejected_requests_total`` metric (one of
    ``metrics.REJECT_REASONS``).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str | None = None,
        reason: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_hint = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or _TYPES.get(
            status, "server_error" if status >= 500 else "invalid_request_error"
        )
        self.reason = reason or "invalid_request"
        self.headers = dict(headers or {})

    @property
    def status(self) -> int:
        return self.status_hint

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)

    def response(self) -> Response:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def api_error(exc: TierlmError, public: Callable[[str], str] | None = None) -> APIError:
    """The answer to ``exc``, from its own hints (tierlm.errors): the one place a
    library error becomes HTTP. A client's fault (4xx) shows its message; a
    server-side one (5xx) shows it through ``public`` (the backend's filter of
    what only the operator may see: an upstream's address), prefixed
    ``backend:`` when a runner raised it."""
    if isinstance(exc, APIError):
        return exc
    status = exc.status_hint
    headers = {} if exc.retry_after is None else {"Retry-After": str(exc.retry_after)}
    reason = exc.reason or exc.code
    if status < 500:
        return APIError(
            status, str(exc), param=exc.param, code=exc.code, reason=reason, headers=headers
        )
    message = f"backend: {exc}" if isinstance(exc, RunnerError) else str(exc)
    return APIError(
        status,
        public(message) if public is not None else message,
        param=exc.param,
        code=exc.code,
        type="server_error",
        reason=reason,
        headers=headers,
    )


def error_body(
    message: str, type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


OLLAMA_PREFIX = "/api/"
"""Where Ollama's native API lives (``server/ollama``): its errors are Ollama's shape."""


def error_response(path: str, error: APIError) -> Response:
    """``error`` as the clients of ``path``'s API read it: Ollama's
    ``{"error": "..."}`` under ``/api/``, OpenAI's error object elsewhere."""
    if path.startswith(OLLAMA_PREFIX):
        return JSONResponse(
            {"error": error.message}, status_code=error.status, headers=error.headers
        )
    return error.response()


async def _api_error(request: Request, exc: Exception) -> Response:
    # Every TierlmError a route lets through ends here (docs/design.md §1: the
    # gateway maps an error to a response by its hint). The app puts the
    # backend's filter of operator-only text on its state (``public_text``).
    assert isinstance(exc, TierlmError)
    error = api_error(exc, getattr(request.app.state, "public_text", None))
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        metrics.rejected(error.reason)
    rejections_of(request.app.state).record(request.method, request.url.path, error)
    return error_response(request.url.path, error)


async def _http_error(request: Request, exc: Exception) -> Response:
    # Starlette's own 404 (no route) and 405 (wrong method), in the API's format,
    # counted and listed as every rejection is: a client calling an endpoint
    # the gateway does not serve (an Ollama app's /api/pull) is seen, not lost.
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"{request.method} {request.url.path}: no such endpoint"
        code: str | None = "unknown_url"
    elif exc.status_code == 405:
        message = f"{request.method} {request.url.path}: method not allowed"
        code = "method_not_allowed"
    else:
        message, code = str(exc.detail), None
    error = APIError(exc.status_code, message, code=code, headers=exc.headers, reason=code)
    if code is not None:
        return await _api_error(request, error)
    return error_response(request.url.path, error)


exception_handlers: dict[Any, Any] = {
    TierlmError: _api_error,
    HTTPException: _http_error,
}


async def send_error(error: APIError, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer with ``error`` from a middleware, counted as the handlers count it."""
    state = getattr(scope.get("app"), "state", None)
    metrics = getattr(state, "metrics", None)
    if metrics is not None:
        metrics.rejected(error.reason)
    if state is not None:
        rejections_of(state).record(scope.get("method", ""), scope.get("path", ""), error)
    await error_response(scope.get("path", ""), error)(scope, receive, send)


def internal_error() -> APIError:
    """A 500 that tells nothing of the exception (its text may hold paths, URLs
    or a key); the log has it, under the request id given here."""
    return APIError(
        500,
        f"internal error; the gateway's log has the details (request id {current_request_id()})",
        code="internal_error",
    )


class ErrorBoundary:
    """Where an exception no handler answered ends: logged once, with its
    traceback, and answered with ``internal_error`` (if the response has not
    started). Never re-raised: uvicorn would log it a second time and close a
    kept-alive connection. A client that went away while sending its body
    (``ClientDisconnect``) is one line at info: nothing failed but the client.

    Inside Starlette's ``ServerErrorMiddleware`` (which re-raises everything
    it answers), so that one never sees an exception."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except ClientDisconnect:
            logger.info(
                "%s %s: the client disconnected before sending the whole request body",
                scope["method"],
                scope["path"],
            )
        except Exception:
            logger.exception("%s %s failed", scope["method"], scope["path"])
            if not started:
                await internal_error().response()(scope, receive, send)
