"""OpenAI-compatible endpoints: chat completions, completions, models, health.

Requests are validated field by field; an invalid one gets 400 in OpenAI's error
format with ``param`` naming the field. Fields the gateway cannot honour (``n``
other than 1, tools, log-probabilities...) are rejected rather than silently
ignored; unknown fields are ignored, as OpenAI's API ignores what its clients
add. ``usage.prompt_tokens`` is an estimate (~4 characters a token): runners
report generated tokens, not prompt tokens.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tierlm.runners.protocol import Cancelled, CancelReason, GenerationRequest, RunnerError
from tierlm.server.body import json_type, read_json
from tierlm.server.errors import APIError
from tierlm.server.gateway import Gateway, GatewayJob
from tierlm.server.metadata import job_meta
from tierlm.server.settings import LimitSettings
from tierlm.server.streaming import JobResult, JobStream

__all__ = ["Params", "parse_chat", "parse_completion", "routes"]

Endpoint = Literal["chat", "completions"]
# Chat roles a plain text chat template knows; OpenAI's "developer" is a system message.
ROLES = ("system", "developer", "user", "assistant")
# OpenAI's own limit on stop sequences.
MAX_STOP = 4
# Sampling options passed to the runner (GenerationRequest.extra), with bounds
# (OpenAI's where OpenAI has the field; llama.cpp's names otherwise).
_EXTRA: dict[str, tuple[float, float]] = {
    "top_p": (0.0, 1.0),
    "presence_penalty": (-2.0, 2.0),
    "frequency_penalty": (-2.0, 2.0),
    "top_k": (0, math.inf),
    "min_p": (0.0, 1.0),
    "repeat_penalty": (0.0, math.inf),
}


@dataclass(frozen=True, slots=True)
class Params:
    """A validated request."""

    endpoint: Endpoint
    model: str
    request: GenerationRequest
    stream: bool
    include_usage: bool


def _bad(param: str, message: str, reason: str = "invalid_request") -> APIError:
    return APIError(400, f"{param}: {message}", param=param, reason=reason)


def _unsupported(param: str, message: str) -> APIError:
    return APIError(
        400, f"{param}: {message}", param=param, code="unsupported", reason="unsupported"
    )


def _number(body: Mapping[str, Any], name: str, lo: float, hi: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _bad(name, f"must be a number, got {json_type(value)}")
    if not lo <= value <= hi:
        raise _bad(name, f"must be between {lo:g} and {hi:g}, got {value}")
    return float(value)


def _int(body: Mapping[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(name, f"must be an integer, got {json_type(value)}")
    return value


def _bool(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _bad(name, f"must be a boolean, got {json_type(value)}")
    return value


def _common(body: Any, endpoint: Endpoint, limits: LimitSettings) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise APIError(
            400, f"request body: must be a JSON object, got {json_type(body)}", param=None
        )
    model = body.get("model")
    if not isinstance(model, str) or not model:
        got = "nothing" if model is None else json_type(model)
        raise _bad("model", f"must be a non-empty string naming a model, got {got}")
    name = "max_tokens"
    max_tokens = _int(body, "max_tokens")
    if endpoint == "chat" and body.get("max_completion_tokens") is not None:
        name = "max_completion_tokens"
        max_tokens = _int(body, name)
    if max_tokens is None:
        max_tokens = limits.default_max_tokens
    elif not 1 <= max_tokens <= limits.max_tokens_limit:
        raise _bad(
            name,
            f"must be between 1 and {limits.max_tokens_limit} (limits.max_tokens_limit), "
            f"got {max_tokens}",
            reason="max_tokens",
        )
    n = _int(body, "n")
    if n is not None and n != 1:
        raise _unsupported("n", f"only 1 choice per request is supported, got {n}")
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif (
        isinstance(stop, list)
        and len(stop) <= MAX_STOP
        and all(isinstance(s, str) and s for s in stop)
    ):
        stops = tuple(stop)
    else:
        raise _bad("stop", f"must be a string or an array of up to {MAX_STOP} non-empty strings")
    stream = _bool(body, "stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise _bad("stream_options", f"must be an object, got {json_type(options)}")
        usage = options.get("include_usage", False)
        if not isinstance(usage, bool):
            raise _bad("stream_options.include_usage", f"must be a boolean, got {json_type(usage)}")
        include_usage = usage
    extra: dict[str, Any] = {}
    for key, (lo, hi) in _EXTRA.items():
        value = _number(body, key, lo, hi)
        if value is not None:
            extra[key] = int(value) if key == "top_k" else value
    seed = _int(body, "seed")
    if seed is not None:
        extra["seed"] = seed
    if body.get("logprobs") not in (None, False, 0):
        raise _unsupported("logprobs", "log-probabilities are not supported by this gateway")
    return {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": _number(body, "temperature", 0.0, 2.0),
        "stop": stops,
        "extra": extra,
        "stream": stream,
        "include_usage": include_usage,
    }


def parse_chat(body: Any, limits: LimitSettings) -> Params:
    common = _common(body, "chat", limits)
    for field in ("tools", "functions"):
        if body.get(field):
            raise _unsupported(field, "tool calling is not supported by this gateway")
    response_format = body.get("response_format")
    if response_format is not None and (
        not isinstance(response_format, dict) or response_format.get("type") != "text"
    ):
        raise _unsupported("response_format", 'only {"type": "text"} is supported')
    messages = _messages(body.get("messages"))
    request = GenerationRequest(
        model_id=common["model"],
        messages=messages,
        max_tokens=common["max_tokens"],
        temperature=common["temperature"],
        stop=common["stop"],
        extra=common["extra"],
    )
    return Params("chat", common["model"], request, common["stream"], common["include_usage"])


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        got = "nothing" if value is None else json_type(value)
        raise _bad("messages", f"must be a non-empty array of messages, got {got}")
    messages = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _bad(where, f"must be an object with role and content, got {json_type(message)}")
        role = message.get("role")
        if role == "tool":
            raise _unsupported(f"{where}.role", "tool messages are not supported by this gateway")
        if role not in ROLES:
            shown = repr(role) if isinstance(role, str) else json_type(role)
            raise _bad(f"{where}.role", f"must be one of {', '.join(ROLES)}, got {shown}")
        content = message.get("content")
        if content is None and role == "assistant":
            text = ""
        elif isinstance(content, str):
            text = content
        elif isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "text":
                    kind = part.get("type") if isinstance(part, dict) else json_type(part)
                    raise _unsupported(
                        f"{where}.content[{j}]", f"only text parts are supported, got {kind!r}"
                    )
                if not isinstance(part.get("text"), str):
                    raise _bad(f"{where}.content[{j}].text", "must be a string")
                parts.append(part["text"])
            text = "".join(parts)
        else:
            raise _bad(
                f"{where}.content",
                f"must be a string or an array of text parts, got {json_type(content)}",
            )
        messages.append({"role": "system" if role == "developer" else role, "content": text})
    return messages


def parse_completion(body: Any, limits: LimitSettings) -> Params:
    common = _common(body, "completions", limits)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        raise _unsupported("prompt", "one prompt per request; send a request per prompt")
    if not isinstance(prompt, str):
        got = "nothing" if prompt is None else json_type(prompt)
        raise _bad("prompt", f"must be a string, got {got}")
    for field in ("echo", "suffix"):
        if body.get(field):
            raise _unsupported(field, "not supported by this gateway")
    best_of = _int(body, "best_of")
    if best_of is not None and best_of != 1:
        raise _unsupported("best_of", f"only 1 is supported, got {best_of}")
    request = GenerationRequest(
        model_id=common["model"],
        prompt=prompt,
        max_tokens=common["max_tokens"],
        temperature=common["temperature"],
        stop=common["stop"],
        extra=common["extra"],
    )
    return Params(
        "completions", common["model"], request, common["stream"], common["include_usage"]
    )


# -- answers ------------------------------------------------------------------


def job_error(job: GatewayJob) -> APIError | None:
    """The error to answer for an ended job, None if it completed."""
    try:
        job.handle.result()
    except Cancelled as exc:
        if exc.reason is CancelReason.SHUTDOWN:
            return APIError(
                503, "the gateway is shutting down; the job was cancelled", code="shutting_down"
            )
        if exc.reason is CancelReason.PREEMPTED:
            retry = job.gateway.retry_after(job.meta.class_name)
            return APIError(
                503,
                f"job {job.id} ({job.meta.class_name}) was preempted by higher-tier work and "
                "its class is not re-queued (requeue = false); retry",
                code="preempted",
                headers={"Retry-After": str(retry)},
            )
        return APIError(409, f"job {job.id} was cancelled", code="cancelled")
    except RunnerError as exc:
        upstream = job.gateway.settings.backend.capabilities.upstream
        return APIError(
            502 if upstream else 500, f"backend: {exc}", code="backend_error", type="server_error"
        )
    except Exception as exc:
        return APIError(500, f"job {job.id} failed: {type(exc).__name__}: {exc}")
    return None


class _Answer:
    """Renders one request's answer, streamed and not, in OpenAI's shapes."""

    def __init__(self, params: Params) -> None:
        self.params = params
        prefix = "chatcmpl" if params.endpoint == "chat" else "cmpl"
        self.id = f"{prefix}-{secrets.token_hex(12)}"
        self.created = int(time.time())
        self.object = "chat.completion" if params.endpoint == "chat" else "text_completion"

    def usage(self, job: GatewayJob) -> dict[str, int]:
        prompt = self.params.request.approx_prompt_tokens()
        completion = len(job.produced)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def finish_reason(self, job: GatewayJob) -> str:
        # Runners yield one piece per token: as many pieces as max_tokens = cut short.
        return "length" if len(job.produced) >= self.params.request.max_tokens else "stop"

    def _base(self, obj: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.params.model,
            "system_fingerprint": None,
        }

    def render(self, job: GatewayJob) -> dict[str, Any]:
        text = "".join(job.produced)
        reason = self.finish_reason(job)
        if self.params.endpoint == "chat":
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": reason,
                "logprobs": None,
            }
        else:
            choice = {"index": 0, "text": text, "finish_reason": reason, "logprobs": None}
        snap = job.handle.job
        return {
            **self._base(self.object),
            "choices": [choice],
            "usage": self.usage(job),
            # Ignored by OpenAI clients; useful to a caller that wants to know.
            "tierlm": {
                "job_id": job.id,
                "class": job.meta.class_name,
                "producer": snap.producer,
                "time_to_first_token": (
                    None if job.first_token_at is None else job.first_token_at - snap.submitted_at
                ),
            },
        }

    # SSEFormat
    def _chunk(self, delta: dict[str, Any] | str, finish: str | None) -> dict[str, Any]:
        if self.params.endpoint == "chat":
            choice: dict[str, Any] = {
                "index": 0,
                "delta": delta,
                "finish_reason": finish,
                "logprobs": None,
            }
            return {**self._base("chat.completion.chunk"), "choices": [choice]}
        choice = {"index": 0, "text": delta, "finish_reason": finish, "logprobs": None}
        return {**self._base("text_completion"), "choices": [choice]}

    def start(self) -> list[Mapping[str, Any]]:
        if self.params.endpoint == "chat":
            return [self._chunk({"role": "assistant", "content": ""}, None)]
        return []

    def piece(self, text: str) -> Mapping[str, Any]:
        return self._chunk({"content": text} if self.params.endpoint == "chat" else text, None)

    def end(self, job: GatewayJob) -> list[Mapping[str, Any]]:
        empty: dict[str, Any] | str = {} if self.params.endpoint == "chat" else ""
        chunks: list[Mapping[str, Any]] = [self._chunk(empty, self.finish_reason(job))]
        if self.params.include_usage:
            obj = "chat.completion.chunk" if self.params.endpoint == "chat" else "text_completion"
            chunks.append({**self._base(obj), "choices": [], "usage": self.usage(job)})
        return chunks


def gateway_of(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


async def _generate(request: Request, endpoint: Endpoint) -> Response:
    gateway = gateway_of(request)
    principal = gateway.keys.authenticate(request)
    settings = gateway.settings
    body = await read_json(request, settings.limits.max_body_bytes)
    parse = parse_chat if endpoint == "chat" else parse_completion
    params = parse(body, settings.limits)
    gateway.check_model(params.model)
    meta = job_meta(request.headers, principal, settings.classes)
    job = gateway.submit(meta, params.request)
    answer = _Answer(params)
    if params.stream:
        return JobStream(job, answer, job_error, settings.server.sse_heartbeat)
    return JobResult(job, answer.render, job_error)


async def chat_completions(request: Request) -> Response:
    return await _generate(request, "chat")


async def completions(request: Request) -> Response:
    return await _generate(request, "completions")


def _model_card(gateway: Gateway, model: str) -> dict[str, Any]:
    return {
        "id": model,
        "object": "model",
        "created": int(gateway.started_at),
        "owned_by": "tierlm",
    }


async def list_models(request: Request) -> Response:
    gateway = gateway_of(request)
    gateway.keys.authenticate(request)
    # The embedding model too: tools discover what to embed with here.
    models = list(gateway.model_ids)
    if gateway.embedding_model is not None and gateway.embedding_model not in models:
        models.append(gateway.embedding_model)
    data = [_model_card(gateway, m) for m in models]
    return JSONResponse({"object": "list", "data": data})


async def get_model(request: Request) -> Response:
    gateway = gateway_of(request)
    gateway.keys.authenticate(request)
    model = request.path_params["model"]
    if model != gateway.embedding_model:
        gateway.check_model(model)
    return JSONResponse(_model_card(gateway, model))


async def health(request: Request) -> Response:
    """Liveness, without a key: what a supervisor or a load balancer polls."""
    gateway = gateway_of(request)
    snap = gateway.scheduler.snapshot()
    return JSONResponse(
        {
            "status": "ok",
            "backend": gateway.settings.backend.kind,
            "loaded_model": snap.loaded_model,
            "paused": snap.paused,
            "running": snap.running is not None,
            "queue_depth": snap.queue_depth,
        }
    )


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ]
