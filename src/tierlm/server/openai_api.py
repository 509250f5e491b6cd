"""OpenAI-compatible endpoints: chat completions, completions.

Requests are validated by their pydantic models (``requests``); an invalid one
gets 400 in OpenAI's error format with ``param`` naming the field. Fields the
configured backend cannot honour (``compat.py``'s table) and unknown fields
are rejected rather than silently ignored. A runner that can count a prompt
exactly (``PromptCounter``) counts it before the request is queued: the
answer's ``usage.prompt_tokens``, and a request its model cannot serve (a
chat its template refuses, a schema its grammar cannot express) is a 400 at
once rather than a failure after its wait. The answers' shapes are
``answers.py``'s; the models' endpoints ``models_api.py``'s.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from tierlm.runners.protocol import (
    GenerationRequest,
    InvalidRequest,
    PromptCounter,
    RunnerError,
)
from tierlm.server import compat, models_api
from tierlm.server.answers import Answer, Endpoint, Params
from tierlm.server.body import read_json
from tierlm.server.errors import APIError
from tierlm.server.gateway import Gateway
from tierlm.server.job_errors import job_error
from tierlm.server.metadata import job_meta
from tierlm.server.requests import ChatRequest, CompletionRequest, GenerationFields, parse
from tierlm.server.settings import LimitSettings
from tierlm.server.streaming import JobResult, JobStream

__all__ = ["parse_chat", "parse_completion", "routes"]

logger = logging.getLogger("tierlm.server")


def parse_chat(body: Any, limits: LimitSettings, backend: str | None = None) -> Params:
    """A chat request's parameters; ``backend`` (its kind) refuses what it cannot do."""
    chat = parse(ChatRequest, body, {"max_tokens_limit": limits.max_tokens_limit})
    messages = [m.as_runner_message() for m in chat.messages]
    return _params("chat", chat, limits, backend, messages=messages)


def parse_completion(body: Any, limits: LimitSettings, backend: str | None = None) -> Params:
    completion = parse(CompletionRequest, body, {"max_tokens_limit": limits.max_tokens_limit})
    return _params("completions", completion, limits, backend, prompt=completion.prompt)


def _params(
    endpoint: Endpoint,
    fields: GenerationFields,
    limits: LimitSettings,
    backend: str | None,
    **text: Any,
) -> Params:
    _, max_tokens = fields.max_tokens_field()
    request = GenerationRequest(
        model_id=fields.model,
        max_tokens=limits.default_max_tokens if max_tokens is None else max_tokens,
        temperature=fields.temperature,
        stop=tuple(fields.stop or ()),
        extra=fields.extras(),
        **text,
    )
    if backend is not None:
        compat.check(request, backend)
    return Params(endpoint, fields.model, request, bool(fields.stream), fields.include_usage)


async def counted(gateway: Gateway, request: GenerationRequest) -> GenerationRequest:
    """``request`` with its exact prompt size, when the runner can count it."""
    runner = gateway.runner
    if not isinstance(runner, PromptCounter):
        return request
    try:
        tokens = await runner.count_prompt_tokens(request)
    except InvalidRequest as exc:
        raise APIError(400, str(exc), param=exc.param, code="invalid_request") from None
    except RunnerError as exc:
        # Not the request's fault (a worker restarting): it is queued all the
        # same, with the estimate; the generation meets the error if it lasts.
        logger.warning("counting the prompt of a request failed: %s", exc)
        return request
    return replace(request, prompt_tokens=tokens)


# -- answers ------------------------------------------------------------------


def gateway_of(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


async def _generate(request: Request, endpoint: Endpoint) -> Response:
    gateway = gateway_of(request)
    principal = gateway.keys.authenticate(request)
    settings = gateway.settings
    body = await read_json(request, settings.limits.max_body_bytes)
    parse = parse_chat if endpoint == "chat" else parse_completion
    params = parse(body, settings.limits, settings.backend.kind)
    gateway.check_model(params.model)
    meta = job_meta(request.headers, principal, settings.classes)
    params = replace(params, request=await counted(gateway, params.request))
    room = await settings.backend.context_room(gateway.runner, params.request)
    if room is not None and 0 < room < params.request.max_tokens:
        # Cut where the context ends: the answer then ends with "length".
        params = replace(params, request=replace(params.request, max_tokens=room))
    job = await gateway.submit(meta, params.request)
    answer = Answer(params)
    if params.stream:
        return JobStream(job, answer, job_error, settings.server.sse_heartbeat)
    return JobResult(job, answer.render, job_error)


async def chat_completions(request: Request) -> Response:
    return await _generate(request, "chat")


async def completions(request: Request) -> Response:
    return await _generate(request, "completions")


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        *models_api.routes(),
    ]
