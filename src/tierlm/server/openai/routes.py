"""OpenAI-compatible endpoints: chat completions, completions.

Requests are validated by their pydantic models (``requests``); an invalid one
gets 400 in OpenAI's error format with ``param`` naming the field. Fields the
configured backend cannot honour (``compat.py``'s table) and unknown fields
are rejected rather than silently ignored. A model named with a class
(``smollm2-135m@gana``, ``gateway/model_names``) is that model in that class,
as if ``X-Tierlm-Class`` were sent. A runner that can count a prompt
exactly (``PromptCounter``) counts it before the request is queued: the
answer's ``usage.prompt_tokens``, and a request its model cannot serve (a
chat its template refuses, a schema its grammar cannot express) is a 400 at
once rather than a failure after its wait. The answers' shapes are
``answers.py``'s; the steps before the queue ``pipeline.py``'s; the models'
endpoints ``models.py``'s, the Responses API ``responses.py``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from tierlm.server.edge.body import read_json
from tierlm.server.gateway.gateway import GatewayJob
from tierlm.server.gateway.intake import admit
from tierlm.server.gateway.model_names import resolve
from tierlm.server.openai import models, responses
from tierlm.server.openai.answers import Answer, Endpoint, Params, merged, total_usage
from tierlm.server.openai.job_errors import job_error
from tierlm.server.openai.pipeline import ask_of, gateway_of, parse_chat, parse_completion
from tierlm.server.openai.streaming import JobResult, JobStream

__all__ = ["routes"]


async def _generate(request: Request, endpoint: Endpoint) -> Response:
    gateway = gateway_of(request)
    principal = gateway.keys.authenticate(request)
    settings = gateway.settings
    body = await read_json(request, settings.limits.max_body_bytes)
    headers = request.headers
    if isinstance(body, dict) and isinstance(body.get("model"), str):
        # "model@gana": the class an app can name without headers (model_names).
        model, headers = resolve(gateway, principal, headers, body["model"])
        body = {**body, "model": model}
    parse = parse_chat if endpoint == "chat" else parse_completion
    params = parse(body, settings.limits, settings.backend.kind)
    jobs = await admit(gateway, principal, headers, ask_of(params))
    params = replace(params, request=jobs[0].request)  # as counted (intake.counted)
    return respond(params, jobs, settings.server.sse_heartbeat)


def respond(params: Params, jobs: list[GatewayJob], heartbeat: float) -> Response:
    """The answer of ``jobs`` (one per choice), streamed or not."""
    answers = [Answer(params, index=i) for i in range(len(jobs))]
    for answer in answers[1:]:
        answer.id = answers[0].id  # one completion, n choices
    if params.stream:
        finale: Callable[[], list[Mapping[str, Any]]] | None = None
        if len(jobs) > 1:
            for answer in answers:
                answer.usage_chunk = False
            if params.include_usage:
                finale = lambda: [answers[0].usage_only(total_usage(answers, jobs))]  # noqa: E731
        more = list(zip(jobs[1:], answers[1:], strict=True))
        return JobStream(jobs[0], answers[0], job_error, heartbeat, more, finale)
    if len(jobs) == 1:
        return JobResult(jobs[0], answers[0].render, job_error)
    return JobResult(jobs[0], lambda _: merged(answers, jobs), job_error, jobs[1:])


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
