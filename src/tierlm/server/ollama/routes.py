"""Ollama's native API beside ``/v1`` (docs/gateway.md "Ollama apps").

An app written for Ollama (its official clients, LangChain's ``ChatOllama``,
Open WebUI...) shares the device through tierlm unchanged: its requests are
the gateway's requests. ``/api/chat`` and ``/api/generate`` become the OpenAI
request they mean (``translate``), then take ``/v1``'s path exactly: the
same admission (``gateway/intake.admit``: API keys, classes and producers
from the ``X-Tierlm-*`` headers or the key's defaults, the prompt count, the
queue limits), the same scheduler. A chat through ``/api/chat``
is the same job as one through ``/v1`` and preempts background work the same
way (docs/design.md §4). Only the answer's shape differs (``answers``,
``streaming``: NDJSON, streamed by default), and errors are Ollama's
``{"error": "..."}`` (``edge.errors.error_response``).

Ollama's model management (pull, push, create, copy, delete) is not served:
the models are the operator's configuration. Those endpoints answer 404
saying so (a client's request is never a 5xx), counted and listed with the
other rejections.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

import tierlm
from tierlm.server.edge.body import read_json
from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.auth import Principal
from tierlm.server.gateway.gateway import Gateway
from tierlm.server.gateway.intake import admit
from tierlm.server.ollama import models
from tierlm.server.ollama.answers import Kind, OllamaAnswer
from tierlm.server.ollama.schemas import (
    OllamaChatRequest,
    OllamaEmbeddingsRequest,
    OllamaEmbedRequest,
    OllamaGenerateRequest,
    OllamaGeneration,
    OllamaShowRequest,
)
from tierlm.server.ollama.streaming import NdjsonStream, ollama_error
from tierlm.server.ollama.translate import chat_params, generate_params
from tierlm.server.openai.answers import Params
from tierlm.server.openai.embeddings import CHARS_PER_TOKEN, Embedded, embed_body, shorten
from tierlm.server.openai.pipeline import ask_of, gateway_of
from tierlm.server.openai.requests import parse
from tierlm.server.openai.streaming import JobResult

__all__ = ["OLLAMA_VERSION", "routes"]

OLLAMA_VERSION = "0.12.0"
"""The Ollama release whose docs/api.md these endpoints follow (``/api/version``)."""

RUNNING = "Ollama is running"
"""What ``GET /`` answers: apps probe for it before they talk to the server."""


async def root(request: Request) -> Response:
    return PlainTextResponse(RUNNING)


async def version(request: Request) -> Response:
    return JSONResponse({"version": OLLAMA_VERSION, "tierlm": tierlm.__version__})


def _served(gateway: Gateway) -> list[str]:
    served = list(gateway.model_ids)
    if gateway.embedding_model is not None and gateway.embedding_model not in served:
        served.append(gateway.embedding_model)
    return served


async def tags(request: Request) -> Response:
    gateway = gateway_of(request)
    gateway.keys.authenticate(request)
    entries = [models.tags_entry(gateway, model) for model in _served(gateway)]
    return JSONResponse({"models": entries})


async def ps(request: Request) -> Response:
    gateway = gateway_of(request)
    gateway.keys.authenticate(request)
    loaded = gateway.scheduler.loaded_model
    keep_alive = models.keep_alive_of(request)
    entries = [] if loaded is None else [models.ps_entry(gateway, loaded, keep_alive)]
    return JSONResponse({"models": entries})


async def show(request: Request) -> Response:
    gateway = gateway_of(request)
    gateway.keys.authenticate(request)
    body = await read_json(request, gateway.settings.limits.max_body_bytes)
    model = parse(OllamaShowRequest, body).model_name
    if model != gateway.embedding_model:
        gateway.check_model(model)
    return JSONResponse(models.show(gateway, model))


def _keep_alive(principal: Principal, req: OllamaGeneration) -> float | None:
    """A generation's ``keep_alive`` in seconds (None: until a swap): how long
    its model stays loaded once idle. One model serves every producer, so
    only an admin key (or no keys: loopback) may change it; 403 otherwise."""
    if not principal.admin:
        raise APIError(
            403,
            f"keep_alive: API key {principal.name!r} may not change how long models stay "
            "loaded (an admin key's setting); leave keep_alive out",
            param="keep_alive",
            code="admin_required",
            reason="admin_required",
        )
    return models.keep_alive_seconds(req.keep_alive)


async def _run(
    request: Request, principal: Principal, req: OllamaGeneration, params: Params, kind: Kind
) -> Response:
    """Queue the job as ``/v1`` does (``openai.routes._generate``); its answer."""
    gateway = gateway_of(request)
    seconds = None if req.keep_alive is None else _keep_alive(principal, req)
    [job] = await admit(gateway, principal, request.headers, ask_of(params))
    params = replace(params, request=job.request)
    keep_alive = models.keep_alive_of(request)
    if req.keep_alive is not None and keep_alive is not None and keep_alive.can_unload:
        # Set once the job is accepted (a refused request changes nothing):
        # from its end on, idle time counts against the model (KeepAlive.set_ttl).
        keep_alive.set_ttl(req.model, seconds)
    answer = OllamaAnswer(params, kind)
    if req.stream:
        return NdjsonStream(job, answer)
    return JobResult(job, answer.render, ollama_error)


async def _request(request: Request) -> tuple[Gateway, Principal, Any]:
    gateway = gateway_of(request)
    principal = gateway.keys.authenticate(request)
    body = await read_json(request, gateway.settings.limits.max_body_bytes)
    return gateway, principal, body


async def chat(request: Request) -> Response:
    gateway, principal, body = await _request(request)
    req = parse(OllamaChatRequest, body)
    gateway.check_model(req.model)
    if not req.messages:
        loaded = await models.load_or_unload(request, gateway, req.model, req.keep_alive, "chat")
        return JSONResponse(loaded)
    settings = gateway.settings
    params = chat_params(req, settings.limits, settings.backend.kind)
    return await _run(request, principal, req, params, "chat")


async def generate(request: Request) -> Response:
    gateway, principal, body = await _request(request)
    req = parse(OllamaGenerateRequest, body)
    gateway.check_model(req.model)
    if not req.prompt and not req.suffix:
        loaded = await models.load_or_unload(
            request, gateway, req.model, req.keep_alive, "generate"
        )
        return JSONResponse(loaded)
    settings = gateway.settings
    params = generate_params(req, settings.limits, settings.backend.kind)
    return await _run(request, principal, req, params, "generate")


async def _embed(
    request: Request, model: str, texts: str | list[str], **more: Any
) -> tuple[Embedded | None, float]:
    """``/v1/embeddings``' work on the texts (``embed_body``), and its seconds."""
    gateway = gateway_of(request)
    started = gateway.scheduler.now()
    done = await embed_body(request, {"model": model, "input": texts, **more})
    return done, gateway.scheduler.now() - started


async def embed(request: Request) -> Response:
    _, _, body = await _request(request)
    req = parse(OllamaEmbedRequest, body)
    more = {} if req.dimensions is None else {"dimensions": req.dimensions}
    done, seconds = await _embed(request, req.model, req.input, **more)
    if done is None:
        return Response(status_code=499)  # nobody reads it: the client is gone
    vectors = [
        shorten(v, req.dimensions) if req.dimensions and req.dimensions < len(v) else list(v)
        for v in done.vectors
    ]
    tokens = sum(
        min(done.max_tokens, max(1, -(-len(t) // CHARS_PER_TOKEN))) for t in done.params.texts
    )
    return JSONResponse(
        {
            "model": done.model,
            "embeddings": vectors,
            "total_duration": round(seconds * 1e9),
            "load_duration": 0,
            "prompt_eval_count": tokens,
        }
    )


async def embeddings(request: Request) -> Response:
    _, _, body = await _request(request)
    req = parse(OllamaEmbeddingsRequest, body)
    done, _ = await _embed(request, req.model, req.prompt)
    if done is None:
        return Response(status_code=499)
    return JSONResponse({"embedding": list(done.vectors[0])})


async def not_served(request: Request) -> Response:
    name = request.url.path.rsplit("/", 1)[-1]
    raise APIError(
        404,
        f"/api/{name}: not served by tierlm: the models are the gateway's configuration "
        "([backend.models], docs/gateway.md); /api/tags lists them",
        code="unsupported",
        reason="unsupported",
    )


def routes() -> list[BaseRoute]:
    managed = {"pull": "POST", "push": "POST", "create": "POST", "copy": "POST", "delete": "DELETE"}
    return [
        Route("/", root, methods=["GET", "HEAD"]),
        Route("/api/version", version, methods=["GET"]),
        Route("/api/tags", tags, methods=["GET"]),
        Route("/api/ps", ps, methods=["GET"]),
        Route("/api/show", show, methods=["POST"]),
        Route("/api/chat", chat, methods=["POST"]),
        Route("/api/generate", generate, methods=["POST"]),
        Route("/api/embed", embed, methods=["POST"]),
        Route("/api/embeddings", embeddings, methods=["POST"]),
        *(Route(f"/api/{name}", not_served, methods=[method]) for name, method in managed.items()),
    ]
