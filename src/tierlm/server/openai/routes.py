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

A completion's prompt may be an array (a request per prompt, each queued
with its ``n`` choices, answered as one completion numbered prompt by
prompt) or token ids, decoded first with the served model's tokenizer
(``Tokenizer``; 400 naming ``prompt`` on a backend without one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from tierlm.runners.errors import InvalidRequest
from tierlm.runners.protocol import Tokenizer
from tierlm.server.edge.body import read_json
from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.gateway import Gateway, GatewayJob
from tierlm.server.gateway.intake import admit_prompts
from tierlm.server.gateway.model_names import resolve
from tierlm.server.openai import models, responses
from tierlm.server.openai.answers import Answer, Endpoint, Params, merged, total_usage
from tierlm.server.openai.job_errors import job_error
from tierlm.server.openai.pipeline import (
    ask_of,
    completion_params,
    completion_request,
    gateway_of,
    parse_chat,
)
from tierlm.server.openai.requests import TextOrIds
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
    if endpoint == "completions":
        completion = completion_request(body, settings.limits)
        gateway.check_model(completion.model)
        texts = await prompt_texts(gateway, completion.model, completion.prompts)
        prompts = completion_params(completion, texts, settings.limits, settings.backend.kind)
    else:
        prompts = [parse_chat(body, settings.limits, settings.backend.kind)]
    # One request, one verdict; each prompt with its n choices, all or none.
    queued = await admit_prompts(gateway, principal, headers, [ask_of(p) for p in prompts])
    groups = [
        (replace(params, request=jobs[0].request), jobs)  # as counted
        for params, jobs in zip(prompts, queued, strict=True)
    ]
    return respond(groups, settings.server.sse_heartbeat)


async def prompt_texts(gateway: Gateway, model: str, prompts: Sequence[TextOrIds]) -> list[str]:
    """Each prompt as text: token ids are read in ``model``'s own vocabulary,
    decoded with its tokenizer (``Tokenizer``); a runner without one (``sim``,
    an upstream server) answers 400 naming ``prompt``."""
    if all(isinstance(p, str) for p in prompts):
        return [p for p in prompts if isinstance(p, str)]
    runner = gateway.runner
    if not isinstance(runner, Tokenizer):
        raise APIError(
            400,
            f"prompt: token ids need the served model's tokenizer, and the "
            f"{gateway.settings.backend.kind} backend has none here; send the prompt as text",
            param="prompt",
            code="unsupported",
            reason="unsupported",
        )
    texts = []
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, str):
            texts.append(prompt)
            continue
        try:
            texts.append(await runner.detokenize(model, prompt))
        except InvalidRequest as exc:
            # "tokens[j]: ..." as this request names it
            where = f"prompt[{i}]" if len(prompts) > 1 else "prompt"
            message = str(exc).replace("tokens[", f"{where}[", 1)
            raise InvalidRequest(
                message, param=(exc.param or "").replace("tokens", where, 1) or where
            ) from None
    return texts


def respond(groups: Sequence[tuple[Params, list[GatewayJob]]], heartbeat: float) -> Response:
    """The answer of each prompt's jobs (one per choice), streamed or not:
    one completion whose choices are numbered prompt by prompt, ``n`` each
    (OpenAI's order)."""
    params = groups[0][0]
    answers: list[Answer] = []
    jobs: list[GatewayJob] = []
    for group_params, group_jobs in groups:
        answers += [Answer(group_params, index=len(answers) + i) for i in range(len(group_jobs))]
        jobs += group_jobs
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
