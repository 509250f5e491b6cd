"""The Starlette app: ``create_app(settings)``.

The app's lifespan owns the gateway: it loads the first model, starts the
Scheduler, and on shutdown ends every job and frees the runner. Routes come
from the modules, one list each; a component that lives beside the scheduler
mounts the same way: its routes go in ``_routes``, its start/stop in
``lifespan`` (an ``AsyncExitStack``), its metrics in ``gateway.metrics.registry``
and its state in ``gateway.extensions`` (shown by the state API and the
dashboard). The embedding lane (``embedding_service.py``, ``embeddings.py``) is one.

Every request passes the edge first (``_middleware``, outermost first): its
request id (``request_id.py``), the error boundary (``errors.ErrorBoundary``),
the cap on requests in flight (``in_flight.py``), CORS where a path takes
origins (``cors.py``, ``origins.py``: ``server.cors_origins``, and Ollama's
defaults on its API), the Host, Origin and Content-Type checks
(``guards.py``), and the body's size and time limits (``limits.py``).
uvicorn's own limits (head timeout, head size) are set by
``http_server.uvicorn_config``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from tierlm.embedding import Embedder
from tierlm.runners.protocol import Runner
from tierlm.server.edge.cors import PathCors
from tierlm.server.edge.errors import ErrorBoundary, exception_handlers
from tierlm.server.edge.guards import RequestGuard
from tierlm.server.edge.in_flight import InFlightLimit
from tierlm.server.edge.limits import BodyLimits, BodyReads
from tierlm.server.edge.origins import OriginPolicy
from tierlm.server.edge.request_id import HEADER as REQUEST_ID_HEADER
from tierlm.server.edge.request_id import RequestIdMiddleware
from tierlm.server.gateway.embedding_lane import EmbeddingService
from tierlm.server.gateway.gateway import Gateway
from tierlm.server.gateway.keep_alive import KeepAlive, keep_alive_seconds
from tierlm.server.gateway.loop_lag import LoopLagProbe
from tierlm.server.gateway.resources import device_figures
from tierlm.server.ollama import routes as ollama
from tierlm.server.openai import embeddings, llama_server, routes
from tierlm.server.openai.batch import routes as batch_routes
from tierlm.server.openai.batch.files import MULTIPART_OVERHEAD
from tierlm.server.openai.batch.service import BatchService
from tierlm.server.ops import dashboard, health, openapi, routing, scheduler_api
from tierlm.server.settings.embedders import off_summary
from tierlm.server.settings.sources import ServerSettings

__all__ = ["create_app"]

logger = logging.getLogger("tierlm.server")

FILES_PATH = "/v1/files"  # a file upload: multipart, up to batches.max_file_bytes
METRICS_PATH = "/metrics"
# What a supervisor, a scraper and an operator call: answered on a full gateway
# too (edge/in_flight.py); each is cheap and generates nothing.
_UNCAPPED = (health.HEALTH_PATH, METRICS_PATH, *scheduler_api.OPERATOR_PATHS)
# What a page allowed by CORS may read of an answer, beside the body.
_EXPOSED = (REQUEST_ID_HEADER, "X-Tierlm-Job-Id", "X-Tierlm-Class", "X-Tierlm-Served-As")


async def metrics_endpoint(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    if not gateway.settings.metrics.public:  # [metrics] public: a scraper without a key
        gateway.keys.authenticate(request, admin=True)
    from prometheus_client import CONTENT_TYPE_LATEST

    return Response(gateway.metrics.render(), media_type=CONTENT_TYPE_LATEST)


def _routes() -> list[BaseRoute]:
    return [
        *routes.routes(),
        *llama_server.routes(),
        *health.routes(),
        *embeddings.routes(),
        *ollama.routes(),
        *scheduler_api.routes(),
        Route(METRICS_PATH, metrics_endpoint, methods=["GET"]),
        *dashboard.routes(),
        *openapi.routes(),
        # The Batch API (/v1/files, /v1/batches): docs/gateway.md "Batches".
        *batch_routes.routes(),
    ]


def _middleware(settings: ServerSettings, body_reads: BodyReads) -> list[Middleware]:
    server, limits = settings.server, settings.limits
    upload_bytes = settings.batches.max_file_bytes + MULTIPART_OVERHEAD
    stack = [
        Middleware(RequestIdMiddleware),
        Middleware(ErrorBoundary),
        # Before any other work: a request beyond the cap costs nothing more.
        Middleware(InFlightLimit, limit=limits.max_connections, exempt=_UNCAPPED),
    ]
    origins = OriginPolicy(server.cors_origins, server.ollama_origins)
    stack += [
        Middleware(PathCors, policy=origins, expose=_EXPOSED),
        Middleware(
            RequestGuard,
            hosts=server.accepted_hosts(),
            origins=origins,
            form_paths=[dashboard.LOGIN_PATH],
            multipart_paths=[FILES_PATH],
            max_head_bytes=limits.max_header_bytes,
        ),
        Middleware(
            BodyLimits,
            max_bytes=limits.max_body_bytes,
            timeout=limits.body_timeout,
            reads=body_reads,
            larger={FILES_PATH: (upload_bytes, "batches.max_file_bytes")},
        ),
    ]
    return stack


def create_app(
    settings: ServerSettings | None = None,
    *,
    runner: Runner | None = None,
    embedder: Embedder | None = None,
) -> Starlette:
    """The gateway as an ASGI app. ``runner`` replaces the one ``settings.backend``
    describes, ``embedder`` the one ``settings.embeddings`` describes (tests, or a
    program with its own); the app then does not close them. An ``embedder``
    serves /v1/embeddings even when the settings turn embeddings off.

    Raises ``ConfigError`` when the settings cannot be served here (an embedder
    whose packages are missing); ``ServerSettings`` refuses the rest (a public
    address without keys) when it is made."""
    settings = settings or ServerSettings()
    service = EmbeddingService.from_settings(settings, embedder)
    gateway = Gateway(settings, runner)
    routing.mount(gateway)  # the routing stats, and the series routers read on /metrics
    vllm_compat = settings.metrics.vllm_compat
    gateway.metrics.serve_device(lambda: device_figures(gateway), vllm_compat=vllm_compat)
    if service is not None:
        service.mount(gateway)
    batches = BatchService(settings.batches, gateway)
    batches.embeddings = service

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        async with contextlib.AsyncExitStack() as stack:
            await gateway.start()
            stack.push_async_callback(gateway.aclose)
            loop_lag = LoopLagProbe(gateway.metrics.registry)
            loop_lag.start()
            stack.push_async_callback(loop_lag.aclose)
            keep_alive = KeepAlive(gateway.scheduler, keep_alive_seconds(settings.backend.models))
            keep_alive.start()
            app.state.keep_alive = keep_alive
            stack.push_async_callback(keep_alive.aclose)
            if service is not None:
                await service.start()
                stack.push_async_callback(service.aclose)
            # After the lanes: a resumed batch's requests need them.
            await batches.start()
            stack.push_async_callback(batches.aclose)
            logger.info(
                "tierlm gateway: backend %s, models %s, embeddings %s, %s",
                settings.backend.kind,
                ", ".join(gateway.model_ids) or "(any, passed upstream)",
                off_summary() if service is None else f"{service.model} ({service.kind})",
                f"{len(settings.keys)} API keys"
                if settings.keys
                else "no API keys (loopback only)",
            )
            yield {}

    body_reads = BodyReads()
    app = Starlette(
        routes=_routes(),
        middleware=_middleware(settings, body_reads),
        exception_handlers=exception_handlers,
        lifespan=lifespan,
    )
    app.state.gateway = gateway
    app.state.body_reads = body_reads
    app.state.metrics = gateway.metrics
    app.state.public_text = settings.backend.public  # what a 5xx may show (edge/errors.py)
    app.state.embeddings = service
    app.state.batches = batches
    return app
