"""The scheduler API: foreground, state, pause and resume.

With keys configured these need an admin key: they change what everyone's
requests wait for. Without keys (loopback only) anyone local may call them.

- ``PUT /v1/scheduler/foreground`` with ``{"class": "nataraj", "subject": "42"}``
  (subject optional), or ``null`` / ``{"class": null}`` to clear;
- ``GET /v1/scheduler/state``: the scheduler snapshot as JSON, plus the gateway's
  view (models, queue limits, recently finished jobs and why they ended);
- ``GET /v1/scheduler/routing``: the routing stats a router places requests
  by (``routing.py``);
- ``POST /v1/scheduler/pause`` (``?wait=true`` returns once the device is idle)
  and ``POST /v1/scheduler/resume``.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo, model_validator
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tierlm.server.edge.body import read_json
from tierlm.server.edge.rejections import rejections_of
from tierlm.server.gateway.gateway import Gateway
from tierlm.server.openai.requests import parse
from tierlm.server.ops import routing
from tierlm.server.settings.schema import Expect, FieldError, Schema
from tierlm.server.settings.validation import json_type

__all__ = ["OPERATOR_PATHS", "routes"]

FOREGROUND_PATH = "/v1/scheduler/foreground"
STATE_PATH = "/v1/scheduler/state"
PAUSE_PATH = "/v1/scheduler/pause"
RESUME_PATH = "/v1/scheduler/resume"
OPERATOR_PATHS = (FOREGROUND_PATH, STATE_PATH, PAUSE_PATH, RESUME_PATH)
"""Exempt from the cap on requests in flight (``edge/in_flight.py``): an
operator must be able to pause or look at a gateway that is full."""

# Pause tasks started without ?wait: referenced until done (asyncio keeps only weak ones).
_pausing: set[asyncio.Task[None]] = set()


def _subject(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, str | int | None):
        raise FieldError(f"must be a string, an integer or null, got {json_type(value)}")
    return value


class ForegroundRequest(Schema):
    """``PUT /v1/scheduler/foreground``: the class (and subject) a person looks
    at; ``null`` or ``{"class": null}`` clears it. Validated against the
    gateway's classes (``context={"classes": ...}``)."""

    class_name: Annotated[str | None, Field(alias="class"), Expect("a string or null")] = None
    subject: Annotated[str | int | None, BeforeValidator(_subject)] = None
    """Jobs' subjects come from a header, always text: a number matches its digits."""

    @model_validator(mode="after")
    def _known(self, info: ValidationInfo) -> ForegroundRequest:
        classes = (info.context or {}).get("classes", ())
        if self.class_name is not None and self.class_name not in classes:
            raise FieldError(
                f"unknown task class {self.class_name!r} (classes: {', '.join(sorted(classes))})",
                "class",
                reason="unknown_class",
            )
        if self.subject is not None and self.class_name is None:
            raise FieldError("needs a class", "subject")
        return self


def _admin(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    gateway.keys.authenticate(request, admin=True)
    return gateway


def _foreground_json(gateway: Gateway) -> dict[str, Any]:
    fg = gateway.scheduler.snapshot().foreground
    if fg is None:
        return {"foreground": None}
    return {"foreground": {"class": fg.class_name, "subject": fg.subject}}


async def put_foreground(request: Request) -> Response:
    gateway = _admin(request)
    body = await read_json(request, gateway.settings.limits.max_body_bytes)
    class_name, subject = None, None
    if body is not None:  # null clears
        fg = parse(ForegroundRequest, body, {"classes": gateway.settings.classes})
        class_name = fg.class_name
        subject = None if fg.subject is None else str(fg.subject)
    gateway.scheduler.set_foreground(class_name, subject)
    return JSONResponse(_foreground_json(gateway))


async def get_state(request: Request) -> Response:
    gateway = _admin(request)
    # The recently rejected requests beside the recently finished jobs.
    return JSONResponse({**gateway.state(), "rejected": list(rejections_of(request.app.state))})


async def pause(request: Request) -> Response:
    gateway = _admin(request)
    wait = request.query_params.get("wait", "false").lower() in ("1", "true", "yes")
    task = asyncio.ensure_future(gateway.scheduler.pause())
    if wait:
        await task
    else:
        _pausing.add(task)
        task.add_done_callback(_pausing.discard)
        await asyncio.sleep(0)  # let pause() set the flag and preempt before we answer
    snap = gateway.scheduler.snapshot()
    return JSONResponse({"paused": snap.paused, "idle": snap.running is None})


async def resume(request: Request) -> Response:
    gateway = _admin(request)
    gateway.scheduler.resume()
    return JSONResponse({"paused": gateway.scheduler.paused})


def routes() -> list[BaseRoute]:
    return [
        Route(FOREGROUND_PATH, put_foreground, methods=["PUT"]),
        Route(STATE_PATH, get_state, methods=["GET"]),
        Route(PAUSE_PATH, pause, methods=["POST"]),
        Route(RESUME_PATH, resume, methods=["POST"]),
        *routing.routes(),
    ]
