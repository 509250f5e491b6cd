"""Ollama's requests as the gateway's own: each becomes the OpenAI request it
means and is parsed by ``/v1``'s pipeline (``pipeline.parse_chat``,
``parse_completion``): the same validation, the same table of what the
configured backend honours (``compat.py``), the same ``Params``. So
``/api/chat`` and ``/v1/chat/completions`` cannot drift apart, and an error
names the field as the Ollama client sent it (``options.num_predict``, not
``max_tokens``).

``/api/generate`` without ``raw`` is the model's chat template applied to
``system`` and ``prompt`` (what Ollama does): a chat of one user turn. With
``raw`` it is the prompt as it is: a completion. With ``suffix`` it is
fill-in-the-middle, ``/v1/completions``' ``suffix``: ``prompt`` the text
before the gap, ``suffix`` the text after it, laid out with the model's FIM
tokens (Ollama's *insert*; a model or backend without it is a 400 naming
``suffix``).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from tierlm.server.edge.errors import APIError
from tierlm.server.ollama.schemas import (
    OllamaChatRequest,
    OllamaGenerateRequest,
    OllamaGeneration,
    OllamaMessage,
)
from tierlm.server.openai.answers import Params
from tierlm.server.openai.pipeline import parse_chat, parse_completion
from tierlm.server.settings.sections import LimitSettings

__all__ = ["chat_params", "generate_params", "openai_messages"]

logger = logging.getLogger("tierlm.server")

# Ollama's option -> the OpenAI request field that does the same.
_OPTIONS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "seed": "seed",
    "stop": "stop",
    "repeat_penalty": "repeat_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "mirostat": "mirostat_mode",
    "mirostat_tau": "mirostat_tau",
    "mirostat_eta": "mirostat_eta",
    "num_predict": "max_tokens",
}
# An OpenAI field named in an error -> the Ollama field it came from.
_NAMES = {openai: f"options.{ollama}" for ollama, openai in _OPTIONS.items()}
_NAMES["response_format"] = "format"
_NAMES["messages"] = "messages"
_NAMES["prompt"] = "prompt"
_NAMES["tools"] = "tools"


def _renamed(exc: APIError) -> APIError:
    """``exc`` (about the OpenAI request) naming the Ollama field instead."""
    param = exc.param
    if param is None:
        return exc
    head = param.split(".")[0].split("[")[0]
    ollama = _NAMES.get(head)
    if ollama is None or ollama == head:
        return exc
    new = ollama if head == "response_format" else ollama + param[len(head) :]
    message = exc.message.replace(param, new, 1)
    return APIError(
        exc.status, message, param=new, code=exc.code, reason=exc.reason, headers=exc.headers
    )


def _sampling(req: OllamaGeneration) -> dict[str, Any]:
    body: dict[str, Any] = {}
    options = req.options
    if options is not None:
        ignored = options.ignored()
        if ignored:
            # As Ollama does: "invalid option provided" in its log, and served.
            logger.info("options ignored (not used by tierlm): %s", ", ".join(ignored))
        for ollama, openai in _OPTIONS.items():
            value = getattr(options, ollama)
            if value is not None:
                body[openai] = value
        if body.get("max_tokens") in (-1, -2):
            # Endless, or fill the context: what the context leaves.
            del body["max_tokens"]
    if req.format == "json":
        body["response_format"] = {"type": "json_object"}
    elif isinstance(req.format, dict):
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "format", "schema": req.format},
        }
    return body


def openai_messages(messages: list[OllamaMessage]) -> list[dict[str, Any]]:
    """Ollama's messages as OpenAI's: a call's arguments as JSON text with an
    id, and a tool result answering the oldest open call of its ``tool_name``
    (Ollama's messages carry no ids)."""
    out: list[dict[str, Any]] = []
    open_calls: list[tuple[str, str]] = []  # (id, name), oldest first
    count = 0
    for message in messages:
        if message.role == "assistant" and message.tool_calls:
            calls = []
            for call in message.tool_calls:
                count += 1
                call_id = call.id or f"call_{count}"
                open_calls.append((call_id, call.function.name))
                arguments = json.dumps(call.function.arguments, ensure_ascii=False)
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.function.name, "arguments": arguments},
                    }
                )
            out.append(
                {"role": "assistant", "content": message.content or None, "tool_calls": calls}
            )
        elif message.role == "tool":
            match = next(
                (c for c in open_calls if message.tool_name in (None, c[1])),
                None,
            )
            if match is not None:
                open_calls.remove(match)
                call_id = match[0]
            else:
                count += 1
                call_id = f"call_{count}"
            out.append({"role": "tool", "content": message.content, "tool_call_id": call_id})
        else:
            out.append({"role": message.role, "content": message.content})
    return out


def chat_params(req: OllamaChatRequest, limits: LimitSettings, backend: str) -> Params:
    body: dict[str, Any] = {
        "model": req.model,
        "messages": openai_messages(req.messages),
        "stream": req.stream,
        **_sampling(req),
    }
    if req.tools:
        body["tools"] = req.tools
    try:
        return parse_chat(body, limits, backend)
    except APIError as exc:
        raise _renamed(exc) from None


def _insert(req: OllamaGenerateRequest, sampling: dict[str, Any]) -> dict[str, Any]:
    """``/v1/completions``' body for a generate with ``suffix`` (Ollama's
    insert): a completion of the text before the gap, whatever ``raw`` says
    (FIM is the prompt's layout, not a chat template)."""
    for field, value, why in (
        ("system", req.system, "no template applies it"),
        ("format", sampling.get("response_format"), "the middle is free text"),
    ):
        if value is not None:
            raise APIError(
                400,
                f"{field}: not supported with suffix (fill-in-the-middle: {why}); drop one",
                param=field,
                code="unsupported",
                reason="unsupported",
            )
    body = {"model": req.model, "prompt": req.prompt, "suffix": req.suffix, **sampling}
    return {**body, "stream": req.stream}


def _no_insert(exc: APIError, model: str) -> APIError:
    """The backend's refusal of ``suffix`` in Ollama's words (``does not
    support insert``), still naming ``suffix``."""
    if exc.param != "suffix":
        return exc
    _, _, why = exc.message.partition(": ")
    return APIError(
        exc.status,
        f"suffix: model {model!r} does not support insert (fill-in-the-middle) here: {why}",
        param="suffix",
        code=exc.code,
        reason=exc.reason,
        headers=exc.headers,
    )


def generate_params(req: OllamaGenerateRequest, limits: LimitSettings, backend: str) -> Params:
    sampling = _sampling(req)
    try:
        if req.suffix:
            try:
                return parse_completion(_insert(req, sampling), limits, backend)
            except APIError as exc:
                raise _no_insert(exc, req.model) from None
        if not req.raw:
            messages = [{"role": "user", "content": req.prompt}]
            if req.system is not None:
                messages.insert(0, {"role": "system", "content": req.system})
            body = {"model": req.model, "messages": messages, "stream": req.stream, **sampling}
            return parse_chat(body, limits, backend)
        if req.system is not None:
            raise APIError(
                400,
                "system: has no effect with raw: true (no template applies it); "
                "write it into the prompt",
                param="system",
            )
        if "response_format" in sampling:
            raise APIError(
                400,
                "format: not supported with raw: true; drop raw to have the model's "
                "template applied",
                param="format",
                code="unsupported",
                reason="unsupported",
            )
        body = {"model": req.model, "prompt": req.prompt, "stream": req.stream, **sampling}
        return parse_completion(body, limits, backend)
    except APIError as exc:
        raise _renamed(exc) from None
