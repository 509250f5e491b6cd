"""A replica's operations endpoints, answered in-process for the ingress.

Behind Ray the ingress is the only HTTP server, so a replica's own endpoints
(``/metrics``, ``/health``, ``/ready``, the scheduler API, the models' admin
API, the dashboard) are answered by the gateway's own routes, mounted on the
replica's running ``Gateway`` (``ops_app``), and called without a socket
(``call``): the ingress forwards the request with its headers (the keys are
checked here, by the gateway's code) and streams the answer back, an SSE
stream (the dashboard's events) as it comes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.routing import BaseRoute, Route

from tierlm.server.edge.errors import ErrorBoundary, exception_handlers
from tierlm.server.gateway.gateway import Gateway
from tierlm.server.openai import models
from tierlm.server.ops import dashboard, health, routing, scheduler_api

__all__ = ["OPS_PREFIXES", "call", "is_ops_path", "ops_app"]

# The paths a replica answers for the ingress: exact, or under a prefix.
OPS_PREFIXES = ("/v1/scheduler/", "/dashboard")
OPS_EXACT = ("/metrics", "/health", "/ready")


def is_ops_path(method: str, path: str) -> bool:
    """A path the ingress forwards to replicas (``/v1/models/{id}`` and its
    ``load``/``unload`` too; the list ``/v1/models`` is the ingress's own)."""
    if path in OPS_EXACT or path.startswith(OPS_PREFIXES):
        return True
    return path.startswith("/v1/models/") and (
        method == "GET" or path.endswith(("/load", "/unload"))
    )


def ops_app(gateway: Gateway) -> Starlette:
    """The gateway's operations routes over the replica's own gateway."""
    from tierlm.server.app import metrics_endpoint  # the gateway's /metrics, as served

    routes: list[BaseRoute] = [
        *health.routes(),
        *scheduler_api.routes(),
        *routing.routes(),
        *models.routes(),
        *dashboard.routes(),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
    ]
    app = Starlette(routes=routes, exception_handlers=exception_handlers)
    app.add_middleware(ErrorBoundary)
    app.state.gateway = gateway
    app.state.metrics = gateway.metrics
    return app


async def call(
    app: Starlette,
    method: str,
    path: str,
    query: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
) -> AsyncIterator[dict[str, Any]]:
    """Run one request through ``app``: ``{"status", "headers"}``, then
    ``{"body": bytes}`` pieces as the app sends them. Closing the iterator is
    the client going away (the app sees ``http.disconnect``)."""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers],
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 80),
    }
    out: asyncio.Queue[Mapping[str, Any] | None] = asyncio.Queue()
    gone = asyncio.Event()
    sent_body = False

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Mapping[str, Any]) -> None:
        await out.put(message)

    async def run() -> None:
        try:
            await app(scope, receive, send)
        finally:
            await out.put(None)

    task = asyncio.ensure_future(run())
    try:
        while (message := await out.get()) is not None:
            if message["type"] == "http.response.start":
                raw = message.get("headers", [])
                yield {
                    "status": int(message["status"]),
                    "headers": [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw],
                }
            elif message["type"] == "http.response.body":
                chunk = bytes(message.get("body", b""))
                if chunk:
                    yield {"body": chunk}
                if not message.get("more_body", False):
                    break
    finally:
        gone.set()
        if not task.done():
            task.cancel()
        with contextlib.suppress(BaseException):
            await task
