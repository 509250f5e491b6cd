"""llama-server's own endpoints beside ``/v1``, for tools written for
llama.cpp's server (docs/gateway.md "llama-server's endpoints"):

- ``GET /props``: the server's settings as llama-server answers them:
  ``total_slots`` (the device's slots), ``default_generation_settings``
  (``n_ctx``, the default ``n_predict``), ``model_path`` (the model file's
  full path to an admin key only, its name to any other, as ``/v1/models``),
  ``modalities``, ``build_info``;
- ``GET /slots``: one entry per slot of the device, ``is_processing`` and
  ``id_task`` (the job holding it), and tierlm's ``class`` and ``producer``.
  It tells who uses the device, so it needs an admin key (llama-server's
  needs ``--slots``);
- ``POST /infill``, ``/tokenize``, ``/detokenize``: not served (no served
  model runs fill-in-the-middle here, and the gateway has no tokenizer
  endpoint yet): 404 ``unsupported`` saying what to do instead, never a
  silent unknown path.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

import tierlm
from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.resources import context_of, model_file, model_options
from tierlm.server.openai.pipeline import gateway_of

__all__ = ["routes"]


async def props(request: Request) -> Response:
    gateway = gateway_of(request)
    admin = gateway.keys.authenticate(request).admin
    scheduler = gateway.scheduler
    model = scheduler.loaded_model or (gateway.model_ids[0] if gateway.model_ids else None)
    options = model_options(gateway, model) if model is not None else {}
    path, _ = model_file(options)
    if path is not None and not admin:
        path = PurePath(path).name
    limits = gateway.settings.limits
    return JSONResponse(
        {
            "default_generation_settings": {
                "n_ctx": context_of(options) or 0,
                "params": {"n_predict": limits.default_max_tokens},
            },
            "total_slots": scheduler.slots,
            "model_path": path or model or "",
            "chat_template": "",
            "modalities": {"vision": False, "audio": False},
            "build_info": f"tierlm {tierlm.__version__}",
        }
    )


async def slots(request: Request) -> Response:
    gateway = gateway_of(request)
    gateway.keys.authenticate(request, admin=True)
    snap = gateway.scheduler.snapshot()
    context = context_of(model_options(gateway, snap.loaded_model)) if snap.loaded_model else None
    lanes = {run["job"]: run["lane"] for run in gateway.timeline.open_runs.values()}
    held: dict[int, dict[str, Any]] = {}
    for info in snap.running_jobs:
        lane = lanes.get(info.id)
        if lane is None or lane in held:
            lane = next(i for i in range(snap.slots + len(held) + 1) if i not in held)
        job = gateway.live.get(info.id)
        held[lane] = {
            "id_task": info.id,
            "class": info.class_name,
            "producer": info.producer,
            "model": info.model_id,
            "n_decoded": len(job.produced) if job is not None else 0,
        }
    entries = []
    for slot in range(snap.slots):
        holder = held.get(slot)
        entries.append(
            {
                "id": slot,
                "n_ctx": context or 0,
                "is_processing": holder is not None,
                "id_task": -1 if holder is None else holder["id_task"],
                "next_token": {"n_decoded": 0 if holder is None else holder["n_decoded"]},
                "tierlm": holder,
            }
        )
    return JSONResponse(entries)


_INSTEAD = {
    "infill": "fill-in-the-middle is not run by tierlm (no served model is used with "
    "FIM tokens); send the text before the gap as /v1/completions' prompt",
    "tokenize": "a request's usage.prompt_tokens counts its prompt exactly (llama-cpp)",
    "detokenize": "send text, not token ids",
}


async def not_served(request: Request) -> Response:
    name = request.url.path.strip("/")
    raise APIError(
        404,
        f"/{name}: not served by tierlm: {_INSTEAD[name]}",
        code="unsupported",
        reason="unsupported",
    )


def routes() -> list[BaseRoute]:
    return [
        Route("/props", props, methods=["GET"]),
        Route("/slots", slots, methods=["GET"]),
        *(Route(f"/{name}", not_served, methods=["POST"]) for name in _INSTEAD),
    ]
