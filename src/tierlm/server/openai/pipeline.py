"""OpenAI's wire format into an admission (``gateway/intake``): a request
parsed into ``Params`` (and refused when the backend cannot honour a field:
``compat.py``), and what it asks of the device (``ask_of``). Shared by chat
completions, completions (``routes``), the Responses API (``responses``), a
Batch API line and the Ray ingress.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request

from tierlm.runners.requests import GenerationRequest
from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.gateway import Gateway
from tierlm.server.gateway.intake import Ask
from tierlm.server.openai import compat
from tierlm.server.openai.answers import Endpoint, Params
from tierlm.server.openai.requests import ChatRequest, CompletionRequest, GenerationFields, parse
from tierlm.server.settings.sections import LimitSettings

__all__ = [
    "ask_of",
    "completion_params",
    "completion_request",
    "gateway_of",
    "parse_chat",
    "parse_completion",
]

logger = logging.getLogger("tierlm.server")


def parse_chat(body: Any, limits: LimitSettings, backend: str | None = None) -> Params:
    """A chat request's parameters; ``backend`` (its kind) refuses what it cannot do."""
    chat = parse(ChatRequest, body, {"max_tokens_limit": limits.max_tokens_limit})
    messages = [m.as_runner_message() for m in chat.messages]
    return _params("chat", chat, limits, backend, messages=messages)


def completion_request(body: Any, limits: LimitSettings) -> CompletionRequest:
    """A completion request, validated (its prompts text or token ids)."""
    return parse(CompletionRequest, body, {"max_tokens_limit": limits.max_tokens_limit})


def completion_params(
    completion: CompletionRequest,
    texts: Sequence[str],
    limits: LimitSettings,
    backend: str | None = None,
) -> list[Params]:
    """One ``Params`` per prompt of ``completion``, ``texts`` its prompts as
    text (token ids decoded: ``routes.prompt_texts``)."""
    return [
        _params("completions", completion, limits, backend, prompt=text, echo=bool(completion.echo))
        for text in texts
    ]


def parse_completion(body: Any, limits: LimitSettings, backend: str | None = None) -> Params:
    """A completion of one text prompt (Ollama's generate, a Batch API line,
    the Ray ingress): an array of prompts or token ids is a 400 saying where
    they are taken."""
    completion = completion_request(body, limits)
    prompts = completion.prompts
    if len(prompts) > 1 or not isinstance(prompts[0], str):
        kind = "token ids" if not isinstance(prompts[0], str) else "several prompts"
        raise APIError(
            400,
            f"prompt: {kind} are taken by POST /v1/completions only; send one text prompt here",
            param="prompt",
            code="unsupported",
            reason="unsupported",
        )
    return completion_params(completion, [prompts[0]], limits, backend)[0]


def _params(
    endpoint: Endpoint,
    fields: GenerationFields,
    limits: LimitSettings,
    backend: str | None,
    echo: bool = False,
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
        echo=echo,
    )


def ask_of(params: Params) -> Ask:
    """What the request asks of the device (``intake.Ask``); its
    ``metadata`` is logged."""
    if params.metadata:
        logger.info("request metadata: %s", params.metadata)
    return Ask(params.request, params.n, params.default_max_tokens, params.user)


def gateway_of(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway
