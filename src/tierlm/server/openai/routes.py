"""OpenAI-compatible endpoints: chat completions, completions.

Requests are validated by their pydantic models (``requests``); an invalid one
gets 400 in OpenAI's error format with ``param`` naming the field. Fields the
configured backend cannot honour (``compat.py``'s table) and unknown fields
are rejected rather than silently ignored. A runner that can count a prompt
exactly (``PromptCounter``) counts it before the request is queued: the
answer's ``usage.prompt_tokens``, and a request its model cannot serve (a
chat its template refuses, a schema its grammar cannot express) is a 400 at
once rather than a failure after its wait. The answers' shapes are
``answers.py``'s; the steps before the queue ``pipeline.py``'s; the models'
endpoints ``models.py``'s, the Responses API ``responses.py``'s.
"""

from __future__ import annotations

from dataclasses import replace

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from tierlm.server.edge.body import read_json
from tierlm.server.gateway.metadata import job_meta
from tierlm.server.openai import models, responses
from tierlm.server.openai.answers import Answer, Endpoint
from tierlm.server.openai.job_errors import job_error
from tierlm.server.openai.pipeline import (
    counted,
    gateway_of,
    parse_chat,
    parse_completion,
    with_user,
)
from tierlm.server.openai.streaming import JobResult, JobStream

__all__ = ["routes"]


async def _generate(request: Request, endpoint: Endpoint) -> Response:
    gateway = gateway_of(request)
    principal = gateway.keys.authenticate(request)
    settings = gateway.settings
    body = await read_json(request, settings.limits.max_body_bytes)
    parse = parse_chat if endpoint == "chat" else parse_completion
    params = parse(body, settings.limits, settings.backend.kind)
    gateway.check_model(params.model)
    meta = job_meta(request.headers, principal, settings.classes)
    meta = with_user(meta, request, principal, params)
    params = replace(
        params, request=await counted(gateway, params.request, params.default_max_tokens)
    )
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
        *responses.routes(),
        *models.routes(),
    ]
