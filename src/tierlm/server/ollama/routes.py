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

A model's name is read as Ollama apps write it (``gateway/model_names``):
``model:latest`` is the model, and ``model@gana`` (``@background``) names
the class as ``X-Tierlm-Class`` would, for an app that can change nothing
but the model's name.

Ollama's model management (pull, push, create, copy, delete) is not served:
the models are the operator's configuration. A pull or create of a model
that is served succeeds at once (apps pull their model when they start);
anything else answers 404 saying so (a client's request is never a 5xx),
counted and listed with the other rejections.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

import tierlm
from tierlm.server.edge.body import read_json
from tierlm.server.gateway.auth import Principal
from tierlm.server.gateway.gateway import Gateway
from tierlm.server.gateway.intake import admit
from tierlm.server.gateway.model_names import resolve, served_names
from tierlm.server.ollama import managed, models
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

logger = logging.getLogger("tierlm.server")

OLLAMA_VERSION = "0.12.0"
"""The Ollama release whose docs/api.md these endpoints follow (``/api/version``)."""

RUNNING = "Ollama is running"
"""What ``GET /`` answers: apps probe for it before they talk to the server."""


async def root(request: Request) -> Response:
    return PlainTextResponse(RUNNING)


async def version(request: Request) -> Response:
    return JSONResponse({"version": OLLAMA_VERSION, "tierlm": tierlm.__version__})


async def tags(request: Request) -> Response:
    gateway = gateway_of(request)
    gateway.keys.authenticate(request)
    entries = [models.tags_entry(gateway, model) for model in served_names(gateway)]
    # What an app's model picker offers for its background work (Open WebUI's
    # task model): each chat model under the class alias (model_names).
    entries += [models.tags_entry(gateway, m, background=True) for m in gateway.model_ids]
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
    principal = gateway.keys.authenticate(request)
    body = await read_json(request, gateway.settings.limits.max_body_bytes)
    model, _ = resolve(
        gateway, principal, request.headers, parse(OllamaShowRequest, body).model_name
    )
    if model != gateway.embedding_model:
        gateway.check_model(model)
    return JSONResponse(models.show(gateway, model, admin=principal.admin))


def _keep_alive(principal: Principal, req: OllamaGeneration) -> float | None:
    """A generation's ``keep_alive`` in seconds (None: until a swap): how long
    its model stays loaded once idle. One model serves every producer, so
    only an admin key (or no keys: loopback) changes it; another key's is
    ignored (and logged): many apps send one with every request, and the
    request is served all the same."""
    seconds = models.keep_alive_seconds(req.keep_alive)  # a 400 if it is not a duration
    if not principal.admin:
        logger.info(
            "keep_alive %r of API key %r ignored: how long models stay loaded is an "
            "admin key's setting",
            req.keep_alive,
            principal.name,
        )
        raise _Ignored
    return seconds


class _Ignored(Exception):
    """A non-admin key's keep_alive: served without it."""


async def _run(
    request: Request,
    principal: Principal,
    headers: Headers,
    req: OllamaGeneration,
    params: Params,
    kind: Kind,
) -> Response:
    """Queue the job as ``/v1`` does (``openai.routes._generate``); its answer."""
    gateway = gateway_of(request)
    apply = req.keep_alive is not None
    seconds = None
    if apply:
        try:
            seconds = _keep_alive(principal, req)
        except _Ignored:
            apply = False
    [job] = await admit(gateway, principal, headers, ask_of(params))
    params = replace(params, request=job.request)
    keep_alive = models.keep_alive_of(request)
    if apply and keep_alive is not None and keep_alive.can_unload:
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
    model, headers = resolve(gateway, principal, request.headers, req.model)
    gateway.check_model(model)
    if not req.messages:
        loaded = await models.load_or_unload(
            request, gateway, model, req.keep_alive, "chat", principal
        )
        return JSONResponse({**loaded, "model": req.model})
    settings = gateway.settings
    params = chat_params(
        req.model_copy(update={"model": model}), settings.limits, settings.backend.kind
    )
    return await _run(request, principal, headers, req, replace(params, model=req.model), "chat")


async def generate(request: Request) -> Response:
    gateway, principal, body = await _request(request)
    req = parse(OllamaGenerateRequest, body)
    model, headers = resolve(gateway, principal, request.headers, req.model)
    gateway.check_model(model)
    if not req.prompt and not req.suffix:
        loaded = await models.load_or_unload(
            request, gateway, model, req.keep_alive, "generate", principal
        )
        return JSONResponse({**loaded, "model": req.model})
    settings = gateway.settings
    params = generate_params(
        req.model_copy(update={"model": model}), settings.limits, settings.backend.kind
    )
    params = replace(params, model=req.model)
    return await _run(request, principal, headers, req, params, "generate")


async def _embed(
    request: Request, model: str, texts: str | list[str], **more: Any
) -> tuple[Embedded | None, float]:
    """``/v1/embeddings``' work on the texts (``embed_body``), and its seconds."""
    gateway = gateway_of(request)
    started = gateway.scheduler.now()
    done = await embed_body(request, {"model": model, "input": texts, **more})
    return done, gateway.scheduler.now() - started


async def embed(request: Request) -> Response:
    gateway, principal, body = await _request(request)
    req = parse(OllamaEmbedRequest, body)
    more = {} if req.dimensions is None else {"dimensions": req.dimensions}
    model, _ = resolve(gateway, principal, request.headers, req.model)
    done, seconds = await _embed(request, model, req.input, **more)
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
    gateway, principal, body = await _request(request)
    req = parse(OllamaEmbeddingsRequest, body)
    model, _ = resolve(gateway, principal, request.headers, req.model)
    done, _ = await _embed(request, model, req.prompt)
    if done is None:
        return Response(status_code=499)
    return JSONResponse({"embedding": list(done.vectors[0])})


def routes() -> list[BaseRoute]:
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
        *managed.routes(),
    ]
