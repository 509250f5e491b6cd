"""``/v1/batches``: OpenAI's Batch API (docs/gateway.md "Batches").

- ``POST /v1/batches``: ``input_file_id``, ``endpoint``, ``completion_window``,
  ``metadata`` (``create.py``); stored before the answer, then run in the
  background (``run.py``);
- ``GET /v1/batches/{id}``: its status and live ``request_counts``;
- ``GET /v1/batches`` (``after``, ``limit``): newest first;
- ``POST /v1/batches/{id}/cancel``: ``cancelling``, then ``cancelled`` once
  the requests in flight have stopped (the finished ones are in the output);
- ``GET /v1/scheduler/batches`` (admin): every running batch's progress and
  the last finished ones, for the dashboard (``BatchService.state``).

Also the ``/v1/files`` routes (``files.py``).
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tierlm.server.edge.body import read_json
from tierlm.server.edge.errors import APIError
from tierlm.server.openai.batch import files
from tierlm.server.openai.batch.create import create_batch
from tierlm.server.openai.batch.files import listing, not_found, owner_of, page, service_of
from tierlm.server.openai.batch.service import BatchService
from tierlm.server.openai.batch.store import BatchRecord

__all__ = ["batch_object", "routes"]

_TIMES = (
    "in_progress_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
)


def batch_object(record: BatchRecord) -> dict[str, Any]:
    """OpenAI's ``Batch``, plus a ``tierlm`` section (how it is scheduled)."""
    return {
        "id": record.id,
        "object": "batch",
        "endpoint": record.endpoint,
        "model": record.model,
        "errors": None if not record.errors else {"object": "list", "data": record.errors},
        "input_file_id": record.input_file_id,
        "completion_window": record.completion_window,
        "status": record.status,
        "output_file_id": record.output_file_id,
        "error_file_id": record.error_file_id,
        "created_at": record.created_at,
        "expires_at": record.expires_at,
        **{name: record.times.get(name) for name in _TIMES},
        "request_counts": {
            "total": record.total,
            "completed": record.completed,
            "failed": record.failed,
        },
        "metadata": record.metadata,
        "tierlm": {
            "class": record.class_name,
            "producer": record.producer,
            "overdue_from": record.deadline,
        },
    }


async def create(request: Request) -> Response:
    service: BatchService = request.app.state.batches
    principal = service.gateway.keys.authenticate(request)
    if service.gateway.shutdown.draining:
        raise APIError(
            503,
            "the gateway is shutting down; create the batch again later",
            code="shutting_down",
            reason="shutting_down",
        )
    body = await read_json(request, service.gateway.settings.limits.max_body_bytes)
    record = await create_batch(service, request, principal, owner_of(principal.name), body)
    service.launch(record)
    return JSONResponse(batch_object(record))


async def _batch(request: Request) -> tuple[BatchService, BatchRecord]:
    service, owner = service_of(request)
    batch_id = request.path_params["batch_id"]
    store = await service.store()
    record = await service.call(store.get_batch, batch_id, owner)
    if record is None:
        raise not_found("batch", batch_id, "batch_id")
    return service, service.live(record)


async def retrieve(request: Request) -> Response:
    _, record = await _batch(request)
    return JSONResponse(batch_object(record))


async def list_batches(request: Request) -> Response:
    service, owner = service_of(request)
    after, limit = page(request, 20, 100)
    store = await service.store()
    found = await service.call(store.list_batches, owner, after, limit + 1)
    return JSONResponse(listing([batch_object(service.live(r)) for r in found], limit))


async def cancel(request: Request) -> Response:
    service, record = await _batch(request)
    if record.status in ("cancelling", "cancelled"):
        return JSONResponse(batch_object(record))
    if record.status not in ("validating", "in_progress"):
        raise APIError(
            409,
            f"batch_id: batch {record.id!r} is {record.status}; only a batch validating or "
            "in progress can be cancelled",
            param="batch_id",
            code="batch_not_cancellable",
        )
    store = await service.store()
    now = _now()
    await service.call(store.set_status, record.id, "cancelling", now)
    record.status = "cancelling"
    record.times["cancelling_at"] = now
    run = service.runs.get(record.id)
    if run is not None:
        run.cancel()
    elif not service.gateway.shutdown.draining:
        service.launch(record)  # its run stopped on an error: this one ends it
    return JSONResponse(batch_object(record))


def _now() -> int:
    return int(time.time())


async def scheduler_batches(request: Request) -> Response:
    service: BatchService = request.app.state.batches
    service.gateway.keys.authenticate(request, admin=True)
    return JSONResponse(service.state())


def routes() -> list[BaseRoute]:
    return [
        *files.routes(),
        Route("/v1/batches", create, methods=["POST"]),
        Route("/v1/batches", list_batches, methods=["GET"]),
        Route("/v1/batches/{batch_id}", retrieve, methods=["GET"]),
        Route("/v1/batches/{batch_id}/cancel", cancel, methods=["POST"]),
        Route("/v1/scheduler/batches", scheduler_batches, methods=["GET"]),
    ]
