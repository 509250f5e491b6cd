"""The models' endpoints: what is served and in what state, and loading and
unloading by hand.

``GET /v1/models`` and ``GET /v1/models/{id}`` answer OpenAI's model objects,
with a ``tierlm`` object beside (which OpenAI's clients keep in
``model_extra``): the model's ``state`` (``loaded``; ``on disk`` for a GGUF
not loaded; ``upstream`` for a model another server runs; ``not loaded`` for
a simulated one), its ``keep_alive`` and the seconds until it ``expires``, and
for llama-cpp its load options (and, loaded, what llama.cpp applied).

``POST /v1/models/{id}/load`` and ``/unload`` (admin) go through the
scheduler: they wait until no job runs and no job starts meanwhile
(``Scheduler.load_model``, ``unload_model``), like llama-swap's ``/unload``
and Ollama's ``keep_alive: 0``.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tierlm.runners.protocol import DescribesModels, Unloadable
from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.gateway import Gateway
from tierlm.server.gateway.keep_alive import KeepAlive

__all__ = ["routes"]


def _gateway(request: Request, *, admin: bool = False) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    gateway.keys.authenticate(request, admin=admin)
    return gateway


def _keep_alive(request: Request) -> KeepAlive | None:
    keep_alive: KeepAlive | None = getattr(request.app.state, "keep_alive", None)
    return keep_alive


def _state(gateway: Gateway, model: str) -> str:
    if gateway.settings.backend.capabilities.upstream:
        return "upstream"
    if gateway.scheduler.loaded_model == model:
        return "loaded"
    return "on disk" if isinstance(gateway.runner, DescribesModels) else "not loaded"


def card(request: Request, gateway: Gateway, model: str, admin: bool = True) -> dict[str, Any]:
    """OpenAI's model object, and tierlm's view of it: the GGUF's absolute path
    only to an ``admin`` key (any other sees its file name: where the
    operator's files are is not a client's business)."""
    info: dict[str, Any]
    if model == gateway.embedding_model and model not in gateway.model_ids:
        info = {"state": "loaded", "serves": "embeddings"}
    else:
        info = {"state": _state(gateway, model), "backend": gateway.settings.backend.kind}
        keep_alive = _keep_alive(request)
        if keep_alive is not None and model in keep_alive.ttls:
            info["keep_alive"] = keep_alive.ttls[model]
            info["expires_in"] = keep_alive.expires_in(model)
        runner = gateway.runner
        if isinstance(runner, DescribesModels) and model in gateway.model_ids:
            options = dict(runner.describe(model))
            path = options.get("path")
            if not admin and isinstance(path, str):
                options["path"] = PurePath(path).name
            info["load_options"] = options
    return {
        "id": model,
        "object": "model",
        "created": int(gateway.started_at),
        "owned_by": "tierlm",
        "tierlm": info,
    }


async def list_models(request: Request) -> Response:
    """The models served, each with its state."""
    gateway = _gateway(request)
    admin = gateway.keys.authenticate(request).admin
    # The embedding model too: tools discover what to embed with here.
    models = list(gateway.model_ids)
    if gateway.embedding_model is not None and gateway.embedding_model not in models:
        models.append(gateway.embedding_model)
    data = [card(request, gateway, m, admin) for m in models]
    return JSONResponse({"object": "list", "data": data})


async def get_model(request: Request) -> Response:
    """One model, with its state."""
    gateway = _gateway(request)
    admin = gateway.keys.authenticate(request).admin
    model = request.path_params["model"]
    if model != gateway.embedding_model:
        gateway.check_model(model)
    return JSONResponse(card(request, gateway, model, admin))


async def load_model(request: Request) -> Response:
    """Load the model now (admin), once no job runs."""
    gateway = _gateway(request, admin=True)
    model = request.path_params["model"]
    gateway.check_model(model)
    seconds = await gateway.load_model(model)  # a RunnerError is answered by its hint
    _touched(request)
    body = card(request, gateway, model)
    body["tierlm"]["load_seconds"] = round(seconds, 3)
    return JSONResponse(body)


async def unload_model(request: Request) -> Response:
    """Unload the model (admin), once no job runs; nothing if it is not loaded."""
    gateway = _gateway(request, admin=True)
    model = request.path_params["model"]
    gateway.check_model(model)
    if not isinstance(gateway.runner, Unloadable):
        kind = gateway.settings.backend.kind
        raise APIError(
            400,
            f"the {kind} backend cannot unload models: its server holds them",
            param="model",
            code="unsupported",
            reason="unsupported",
        )
    unloaded = await gateway.scheduler.unload_model(model)
    _touched(request)
    body = card(request, gateway, model)
    body["tierlm"]["unloaded"] = unloaded == model
    return JSONResponse(body)


def _touched(request: Request) -> None:
    keep_alive = _keep_alive(request)
    if keep_alive is not None:
        keep_alive.touch()


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}/load", load_model, methods=["POST"]),
        Route("/v1/models/{model:path}/unload", unload_model, methods=["POST"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
    ]
