"""``/health`` (liveness) and ``/ready`` (readiness), without a key: what a
supervisor or a load balancer polls.

- ``GET /health``: 200 while the process serves requests at all, with a summary
  (backend, loaded model, queue depth). A supervisor restarts the process when
  this fails; a model that failed to load is no reason to (restarting would not
  load it either), so that is ``/ready``'s to say. Its ``status`` is ``ok``, or
  ``degraded`` with ``worker_problem`` while the llama.cpp worker is silent or
  restarting: the gateway heals that itself (its watchdog), so it is no reason
  to restart the process either.
- ``GET /ready``: 200 when a request can be served now: a model is loaded (or,
  with ``preload = false``, none is due yet), or the upstream answers; 503 with
  ``reason`` otherwise, and while the gateway shuts down. A load balancer sends
  traffic only to a ready gateway. The reason never shows an upstream's address.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tierlm.server.gateway.gateway import Gateway

__all__ = ["HEALTH_PATH", "routes"]

HEALTH_PATH = "/health"
"""Exempt from the cap on requests in flight (``edge/in_flight.py``): a full
gateway is alive. ``/ready`` is counted: a full one is not ready for more."""


def _gateway(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


def _summary(gateway: Gateway) -> dict[str, Any]:
    """From counters, never the snapshot: a supervisor polls this, and the
    snapshot replays the dispatch order of the whole queue, so ``/health``
    took 19 ms at 1 000 idle queued streams against 1.8 ms at none (docs/measurements.md §1.11;
    docs/design.md §1.11). The queue depth and running jobs are the
    admission's book of the scheduler's events (``QueueBook``)."""
    scheduler = gateway.scheduler
    book = gateway.admission.book
    return {
        "backend": gateway.settings.backend.kind,
        "loaded_model": scheduler.loaded_model,
        "paused": scheduler.paused,
        "running": bool(book.running),
        "queue_depth": len(book.queued),
        **gateway.runner_state(),
    }


async def health(request: Request) -> Response:
    gateway = _gateway(request)
    summary = _summary(gateway)
    status = "degraded" if summary.get("worker_problem") else "ok"
    return JSONResponse({"status": status, **summary})


async def ready(request: Request) -> Response:
    gateway = _gateway(request)
    reason = await gateway.not_ready()
    if reason is not None:
        return JSONResponse({"status": "unavailable", "reason": reason}, status_code=503)
    return JSONResponse({"status": "ready", **_summary(gateway)})


def routes() -> list[BaseRoute]:
    return [
        Route(HEALTH_PATH, health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
    ]
