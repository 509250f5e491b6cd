"""The steps every generation endpoint takes before its job is queued: its
request parsed into ``Params`` (and refused when the backend cannot honour a
field: ``compat.py``), its prompt counted, its producer and metadata. Shared by
chat completions, completions (``routes``) and the Responses API
(``responses``).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from starlette.requests import Request

from tierlm.runners.errors import InvalidRequest, RunnerError
from tierlm.runners.protocol import PromptCounter, abilities_of
from tierlm.runners.requests import GenerationRequest
from tierlm.server.gateway.auth import Principal
from tierlm.server.gateway.gateway import Gateway, GatewayJob
from tierlm.server.gateway.metadata import PRODUCER_HEADER, JobMeta
from tierlm.server.openai import compat
from tierlm.server.openai.answers import Endpoint, Params
from tierlm.server.openai.requests import ChatRequest, CompletionRequest, GenerationFields, parse
from tierlm.server.settings.sections import LimitSettings

__all__ = [
    "counted",
    "gateway_of",
    "parse_chat",
    "parse_completion",
    "submit_all",
    "with_user",
]

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
    return Params(
        endpoint,
        fields.model,
        request,
        bool(fields.stream),
        fields.include_usage,
        user=fields.user,
        metadata=fields.metadata,
        default_max_tokens=max_tokens is None,
        n=fields.n or 1,
    )


async def counted(
    gateway: Gateway, request: GenerationRequest, default_max_tokens: bool = False
) -> GenerationRequest:
    """``request`` with its exact prompt size, when the runner can count it; with
    ``default_max_tokens`` (the client set none), its ``max_tokens`` what the
    model's context leaves (``limits.context_max_tokens``)."""
    runner = gateway.runner
    if not isinstance(runner, PromptCounter):
        return request
    try:
        tokens = await runner.count_prompt_tokens(request)
    except InvalidRequest:
        raise  # the request's fault: answered by its hints (400, edge/errors.py)
    except RunnerError as exc:
        # Not the request's fault (a worker restarting): it is queued all the
        # same, with the estimate; the generation meets the error if it lasts.
        logger.warning("counting the prompt of a request failed: %s", exc)
        return request
    request = replace(request, prompt_tokens=tokens)
    limits = gateway.settings.limits
    context = abilities_of(runner).context(request.model_id)
    if default_max_tokens and limits.context_max_tokens and context is not None:
        room = max(1, min(limits.max_tokens_limit, context - tokens))
        request = replace(request, max_tokens=room)
    elif context is not None and 0 < context - tokens < request.max_tokens:
        # Cut where the context ends: the answer then ends with "length", not
        # "stop" (an agent must not take a truncated JSON for a whole one).
        request = replace(request, max_tokens=context - tokens)
    return request


def with_user(meta: JobMeta, request: Request, principal: Principal, params: Params) -> JobMeta:
    """``user`` is the producer (and the person's name, ``Principal.person``)
    when no header names one; ``metadata`` is logged."""
    if params.metadata:
        logger.info("request metadata: %s", params.metadata)
    if params.user is None or request.headers.get(PRODUCER_HEADER) is not None:
        return meta
    return replace(
        meta, producer=principal.producer_path(params.user), person=principal.person(params.user)
    )


def gateway_of(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


async def submit_all(gateway: Gateway, meta: JobMeta, params: Params) -> list[GatewayJob]:
    """The request's jobs: one per choice (``n``). If one is refused (a full
    queue), those already queued are cancelled."""
    jobs: list[GatewayJob] = []
    try:
        for _ in range(params.n):
            jobs.append(await gateway.submit(meta, params.request))
    except BaseException:
        for job in jobs:
            job.disconnect()
        raise
    return jobs
