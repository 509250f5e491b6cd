"""OpenAI-compatible endpoints: chat completions, completions, models, health.

Requests are validated by their pydantic models (``requests``); an invalid one
gets 400 in OpenAI's error format with ``param`` naming the field. Fields the
gateway cannot honour (``n`` other than 1, tools, log-probabilities...) and
unknown fields are rejected rather than silently ignored. ``usage.prompt_tokens``
is an estimate (~4 characters a token): runners report generated tokens, not
prompt tokens.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tierlm.runners.protocol import Cancelled, CancelReason, GenerationRequest, RunnerError
from tierlm.server.body import read_json
from tierlm.server.errors import APIError, internal_error
from tierlm.server.gateway import Gateway, GatewayJob
from tierlm.server.metadata import job_meta
from tierlm.server.requests import ChatRequest, CompletionRequest, GenerationFields, parse
from tierlm.server.settings import LimitSettings
from tierlm.server.streaming import JobResult, JobStream

__all__ = ["Params", "parse_chat", "parse_completion", "routes"]

Endpoint = Literal["chat", "completions"]


@dataclass(frozen=True, slots=True)
class Params:
    """A validated request."""

    endpoint: Endpoint
    model: str
    request: GenerationRequest
    stream: bool
    include_usage: bool


def parse_chat(body: Any, limits: LimitSettings) -> Params:
    chat = parse(ChatRequest, body, {"max_tokens_limit": limits.max_tokens_limit})
    return _params("chat", chat, limits, messages=[m.as_runner_message() for m in chat.messages])


def parse_completion(body: Any, limits: LimitSettings) -> Params:
    completion = parse(CompletionRequest, body, {"max_tokens_limit": limits.max_tokens_limit})
    return _params("completions", completion, limits, prompt=completion.prompt)


def _params(
    endpoint: Endpoint, fields: GenerationFields, limits: LimitSettings, **text: Any
) -> Params:
    _, max_tokens = fields.max_tokens_field()
    request = GenerationRequest(
        model_id=fields.model,
        max_tokens=limits.default_max_tokens if max_tokens is None else max_tokens,
        temperature=fields.temperature,
        stop=tuple(fields.stop or ()),
        extra=fields.sampling(),
        **text,
    )
    return Params(endpoint, fields.model, request, bool(fields.stream), fields.include_usage)


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
        # Its text may hold paths or URLs: logged, not answered.
        logging.getLogger("tierlm.server").error("job %d failed", job.id, exc_info=exc)
        return internal_error()
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
