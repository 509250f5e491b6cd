"""Ollama's model management (pull, push, create, copy, delete) on a gateway
whose models are the operator's configuration (``[backend.models]``).

Apps written for Ollama pull their model when they start, and some create
it (``ollama.create(model=...)``) to be sure it is there. For a model that
is served, that has nothing to do: a pull (or a create naming only the
model, or ``from`` that same model) answers ``success`` at once, streamed
as Ollama streams its progress (``{"status": "success"}``, NDJSON) or not.
Anything that would change the models (pull another, create one with its own
system prompt or parameters, push, copy, delete) is a 404 saying that the
models are the configuration's: a clear error rather than a pretended
success the app would then rely on.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tierlm.server.edge.body import read_json
from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.model_names import resolve
from tierlm.server.ollama.streaming import NDJSON
from tierlm.server.openai.pipeline import gateway_of

__all__ = ["routes"]

# create's fields that only name the model (the rest would change it).
_NAMING = frozenset({"model", "name", "from", "stream", "quantize", "insecure"})


def _not_served(what: str, detail: str = "") -> APIError:
    return APIError(
        404,
        f"/api/{what}: not served by tierlm{detail}: the models are the gateway's "
        "configuration ([backend.models], docs/gateway.md); /api/tags lists them",
        code="unsupported",
        reason="unsupported",
    )


async def _served_model(request: Request) -> tuple[str | None, dict[str, Any]]:
    """The served model a pull or create names (None if it names none), and its body."""
    gateway = gateway_of(request)
    principal = gateway.keys.authenticate(request)
    body = await read_json(request, gateway.settings.limits.max_body_bytes)
    if not isinstance(body, dict):
        raise APIError(400, "request body: must be a JSON object", param=None)
    name = body.get("model") or body.get("name")
    if not isinstance(name, str) or not name:
        raise APIError(400, "model: must be a non-empty string naming a model", param="model")
    model, _ = resolve(gateway, principal, request.headers, name)
    served = model in gateway.model_ids or model == gateway.embedding_model
    return (model if served else None), body


def _success(body: dict[str, Any]) -> Response:
    if body.get("stream", True) is False:
        return JSONResponse({"status": "success"})
    return Response(json.dumps({"status": "success"}) + "\n", media_type=NDJSON)


async def pull(request: Request) -> Response:
    model, body = await _served_model(request)
    if model is None:
        name = body.get("model") or body.get("name")
        raise _not_served("pull", f" for {name!r}, which is not served")
    return _success(body)


async def create(request: Request) -> Response:
    model, body = await _served_model(request)
    name = body.get("model") or body.get("name")
    if model is None:
        raise _not_served("create", f" for {name!r}, which is not served")
    changes = sorted(k for k in body if k not in _NAMING and body[k] not in (None, "", [], {}))
    base = body.get("from")
    if base is not None:
        gateway = gateway_of(request)
        principal = gateway.keys.authenticate(request)
        if (
            not isinstance(base, str)
            or resolve(gateway, principal, request.headers, base)[0] != model
        ):
            changes.insert(0, "from")
    if changes:
        raise _not_served(
            "create",
            f" with {', '.join(changes)} (model {name!r} is served as configured; a "
            "system prompt is [backend.models.ID] system_prompt)",
        )
    return _success(body)


async def not_served(request: Request) -> Response:
    raise _not_served(request.url.path.rsplit("/", 1)[-1])


def routes() -> list[BaseRoute]:
    return [
        Route("/api/pull", pull, methods=["POST"]),
        Route("/api/create", create, methods=["POST"]),
        *(
            Route(f"/api/{name}", not_served, methods=[method])
            for name, method in {"push": "POST", "copy": "POST", "delete": "DELETE"}.items()
        ),
    ]
