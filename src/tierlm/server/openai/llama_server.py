"""llama-server's own endpoints beside ``/v1``, for tools written for
llama.cpp's server (docs/gateway.md "llama-server's endpoints"):

- ``GET /props``: the server's settings as llama-server answers them:
  ``total_slots`` (the device's slots), ``default_generation_settings``
  (``n_ctx``, the default ``n_predict``), ``model_path`` (the model file's
  full path to an admin key only, its name to any other, as ``/v1/models``),
  ``modalities``, ``build_info``;
- ``GET /slots``: one entry per slot of the device, ``is_processing`` and
  ``id_task`` (the job holding it), and tierlm's ``class`` and ``producer``.
  It tells who uses the device, so it needs an admin key (llama-server's
  needs ``--slots``);
- ``POST /tokenize`` (``content``, ``add_special``, ``parse_special``,
  ``with_pieces``) and ``POST /detokenize`` (``tokens``), with the served
  model's own tokenizer (``Tokenizer``: the llama-cpp backend), beside any
  generation and without waiting for the device; ``model`` names the model
  (default: the loaded one, else the first served). A backend without a
  tokenizer answers 400 naming ``content`` / ``tokens``;
- ``POST /infill``: fill-in-the-middle (``input_prefix``, ``input_suffix``,
  ``input_extra``, ``prompt`` after FIM_MID, and ``/completion``'s sampling
  options), queued and scheduled as a completion is, answered in
  ``/completion``'s shape (``content``, ``stop``, ``tokens_predicted``...),
  streamed or not. A model without FIM tokens, or a backend that cannot
  run it, answers 400 naming ``input_suffix``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import PurePath
from typing import Annotated, Any

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

import tierlm
from tierlm.runners.endings import Finish
from tierlm.runners.errors import InvalidRequest
from tierlm.runners.protocol import Tokenizer
from tierlm.runners.requests import FIM_FILES, FIM_MIDDLE, FIM_SUFFIX
from tierlm.server.edge.body import read_json
from tierlm.server.edge.errors import APIError, api_error
from tierlm.server.gateway.intake import admit
from tierlm.server.gateway.jobs import AnsweredJob
from tierlm.server.gateway.model_names import resolve
from tierlm.server.gateway.resources import context_of, model_file, model_options
from tierlm.server.openai import compat
from tierlm.server.openai.job_errors import job_error
from tierlm.server.openai.pipeline import ask_of, gateway_of, parse_completion
from tierlm.server.openai.requests import parse
from tierlm.server.openai.streaming import JobResult, JobStream
from tierlm.server.settings.schema import Schema

__all__ = ["routes"]


async def props(request: Request) -> Response:
    gateway = gateway_of(request)
    admin = gateway.keys.authenticate(request).admin
    scheduler = gateway.scheduler
    model = scheduler.loaded_model or (gateway.model_ids[0] if gateway.model_ids else None)
    options = model_options(gateway, model) if model is not None else {}
    path, _ = model_file(options)
    if path is not None and not admin:
        path = PurePath(path).name
    limits = gateway.settings.limits
    return JSONResponse(
        {
            "default_generation_settings": {
                "n_ctx": context_of(options) or 0,
                "params": {"n_predict": limits.default_max_tokens},
            },
            "total_slots": scheduler.slots,
            "model_path": path or model or "",
            "chat_template": "",
            "modalities": {"vision": False, "audio": False},
            "build_info": f"tierlm {tierlm.__version__}",
        }
    )


async def slots(request: Request) -> Response:
    gateway = gateway_of(request)
    gateway.keys.authenticate(request, admin=True)
    snap = gateway.scheduler.snapshot()
    context = context_of(model_options(gateway, snap.loaded_model)) if snap.loaded_model else None
    lanes = {run["job"]: run["lane"] for run in gateway.timeline.open_runs.values()}
    held: dict[int, dict[str, Any]] = {}
    for info in snap.running_jobs:
        lane = lanes.get(info.id)
        if lane is None or lane in held:
            lane = next(i for i in range(snap.slots + len(held) + 1) if i not in held)
        job = gateway.live.get(info.id)
        held[lane] = {
            "id_task": info.id,
            "class": info.class_name,
            "producer": info.producer,
            "model": info.model_id,
            "n_decoded": len(job.produced) if job is not None else 0,
        }
    entries = []
    for slot in range(snap.slots):
        holder = held.get(slot)
        entries.append(
            {
                "id": slot,
                "n_ctx": context or 0,
                "is_processing": holder is not None,
                "id_task": -1 if holder is None else holder["id_task"],
                "next_token": {"n_decoded": 0 if holder is None else holder["n_decoded"]},
                "tierlm": holder,
            }
        )
    return JSONResponse(entries)


# -- /tokenize, /detokenize ---------------------------------------------------------


class TokenizeRequest(Schema):
    content: str
    add_special: bool = False
    """Add what the model adds to a prompt (its BOS)."""
    parse_special: bool = True
    """Read special tokens' texts (``<|im_start|>``) as those tokens."""
    with_pieces: bool = False
    """Each token as ``{"id", "piece"}``: the piece a string if it is UTF-8,
    else its bytes."""
    model: str | None = None


class DetokenizeRequest(Schema):
    tokens: list[Annotated[int, Field(ge=0)]]
    model: str | None = None


def _tokenizer(request: Request, model: str | None, field: str) -> tuple[Tokenizer, str]:
    """The runner's tokenizer and the model it reads for (``model``, else the
    loaded one, else the first served); 400 naming ``field`` without one."""
    gateway = gateway_of(request)
    gateway.keys.authenticate(request)
    if model is None:
        model = gateway.scheduler.loaded_model or (gateway.model_ids or [""])[0]
    gateway.check_model(model)
    runner = gateway.runner
    if not isinstance(runner, Tokenizer):
        kind = gateway.settings.backend.kind
        raise APIError(
            400,
            f"{field}: the {kind} backend has no tokenizer here (only llama-cpp's models "
            "are tokenized by tierlm); a completion's usage.prompt_tokens counts its prompt, "
            "and prompts are taken as text",
            param=field,
            code="unsupported",
            reason="unsupported",
        )
    return runner, model


async def tokenize(request: Request) -> Response:
    gateway = gateway_of(request)
    body = parse(TokenizeRequest, await read_json(request, gateway.settings.limits.max_body_bytes))
    runner, model = _tokenizer(request, body.model, "content")
    tokens = await runner.tokenize(
        model, body.content, add_special=body.add_special, parse_special=body.parse_special
    )
    if not body.with_pieces:
        return JSONResponse({"tokens": [token for token, _ in tokens]})
    return JSONResponse({"tokens": [{"id": t, "piece": _piece(piece)} for t, piece in tokens]})


def _piece(piece: bytes) -> str | list[int]:
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return list(piece)  # part of a character: its bytes, as llama-server


async def detokenize(request: Request) -> Response:
    gateway = gateway_of(request)
    limit = gateway.settings.limits.max_body_bytes
    body = parse(DetokenizeRequest, await read_json(request, limit))
    runner, model = _tokenizer(request, body.model, "tokens")
    return JSONResponse({"content": await runner.detokenize(model, body.tokens)})


# -- /infill -------------------------------------------------------------------------


class InfillFile(Schema):
    filename: str = ""
    text: str


class InfillRequest(Schema):
    """llama-server's ``/infill``: its FIM fields and ``/completion``'s
    options tierlm honours; the ``IGNORED`` ones (a server's tuning) are
    accepted and change nothing, any other field is a 400."""

    input_prefix: str = ""
    input_suffix: str = ""
    input_extra: list[InfillFile] = Field(default_factory=list)
    prompt: str = ""
    """Written after FIM_MID: the start of the middle."""
    model: str | None = None
    n_predict: int | None = None
    """Tokens at most; -1 (llama-server's "no limit"): the default."""
    max_tokens: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    seed: int | None = None
    """-1 (llama-server's "random"): none."""
    repeat_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stop: list[str] | None = None
    stream: bool = False


IGNORED = frozenset(
    {
        "cache_prompt", "n_indent", "t_max_prompt_ms", "t_max_predict_ms", "samplers",
        "response_fields", "id_slot", "n_keep", "timings_per_token", "return_tokens",
    }
)  # fmt: skip
"""/infill fields of llama-server's that are its own tuning (prompt caching,
time limits, the sampler order, which fields to answer): accepted, no effect."""
_NAMES = {"prompt": "input_prefix", "suffix": "input_suffix", "max_tokens": "n_predict"}
"""The OpenAI completion's field -> /infill's, for the errors."""


async def infill(request: Request) -> Response:
    gateway = gateway_of(request)
    principal = gateway.keys.authenticate(request)
    settings = gateway.settings
    raw = await read_json(request, settings.limits.max_body_bytes)
    if isinstance(raw, dict):
        raw = {k: v for k, v in raw.items() if k not in IGNORED}
    body = parse(InfillRequest, raw)
    headers = request.headers
    model = body.model or gateway.scheduler.loaded_model or (gateway.model_ids or [""])[0]
    model, headers = resolve(gateway, principal, headers, model)
    kind = settings.backend.kind
    if kind in compat.BACKENDS and compat.support(FIM_SUFFIX, kind) is not compat.Support.HONOURED:
        raise APIError(
            400,
            f"input_suffix: fill-in-the-middle is not run by the {kind} "
            "backend (llama-cpp's models with FIM tokens, or the ollama backend's with insert); "
            "send the text before the gap "
            "to /v1/completions as its prompt",
            param="input_suffix",
            code="unsupported",
            reason="unsupported",
        )
    n_predict = body.max_tokens if body.n_predict is None else body.n_predict
    completion = {
        "model": model,
        "prompt": body.input_prefix,
        "max_tokens": None if n_predict is None or n_predict < 0 else n_predict,
        "temperature": body.temperature,
        "top_k": body.top_k,
        "top_p": body.top_p,
        "min_p": body.min_p,
        "seed": None if body.seed is None or body.seed < 0 else body.seed,
        "repeat_penalty": body.repeat_penalty,
        "presence_penalty": body.presence_penalty,
        "frequency_penalty": body.frequency_penalty,
        "stop": body.stop or None,
        "stream": body.stream,
    }
    try:
        params = parse_completion(
            {k: v for k, v in completion.items() if v is not None}, settings.limits
        )
    except APIError as exc:
        raise _renamed(exc) from None
    extra = {
        **params.request.extra,
        FIM_SUFFIX: body.input_suffix,
        FIM_FILES: [file.model_dump() for file in body.input_extra],
        FIM_MIDDLE: body.prompt,
    }
    params = replace(params, request=replace(params.request, extra=extra))
    try:
        jobs = await admit(gateway, principal, headers, ask_of(params))
    except InvalidRequest as exc:
        raise _renamed(api_error(exc)) from None
    job = jobs[0]
    fmt = InfillAnswer(model, job.request.approx_prompt_tokens())
    if body.stream:
        return JobStream(job, fmt, job_error, settings.server.sse_heartbeat)
    return JobResult(job, fmt.render, job_error)


def _renamed(exc: APIError) -> APIError:
    """``exc`` (about the OpenAI completion made of the request) naming
    ``/infill``'s field."""
    param = exc.param or ""
    head = param.split(".")[0].split("[")[0]
    name = _NAMES.get(head)
    if name is None:
        return exc
    new = name + param[len(head) :]
    message = exc.message.replace(param, new, 1)
    return APIError(
        exc.status, message, param=new, code=exc.code, reason=exc.reason, headers=exc.headers
    )


class InfillAnswer:
    """``/infill``'s answer as llama-server's ``/completion`` gives it: one
    object, or streamed ``{"content", "stop": false}`` events and a last one
    with ``stop: true`` and the figures."""

    def __init__(self, model: str, prompt_tokens: int) -> None:
        self.model = model
        self.prompt_tokens = prompt_tokens
        """As counted at admission (exact with the llama-cpp backend)."""

    def render(self, job: AnsweredJob) -> dict[str, Any]:
        return {"content": "".join(job.produced), **self._figures(job)}

    def _figures(self, job: AnsweredJob) -> dict[str, Any]:
        ending = job.ending
        finish = ending.finish if ending is not None else Finish.STOP
        stop_type = {Finish.LENGTH: "limit", Finish.CONTEXT: "limit"}.get(finish, "eos")
        return {
            "stop": True,
            "model": self.model,
            "tokens_predicted": len(job.produced),
            "tokens_evaluated": self.prompt_tokens,
            "tokens_cached": 0,
            "stop_type": stop_type,
            "stopping_word": "",
            "truncated": finish is Finish.CONTEXT,
            "tierlm": {"job_id": job.id, "class": job.meta.class_name, "producer": job.producer},
        }

    def start(self) -> list[Mapping[str, Any]]:
        return []

    def piece(self, text: str) -> list[Mapping[str, Any]]:
        return [{"content": str(text), "stop": False}]

    def end(self, job: AnsweredJob) -> list[Mapping[str, Any]]:
        return [{"content": "", **self._figures(job)}]


def routes() -> list[BaseRoute]:
    return [
        Route("/props", props, methods=["GET"]),
        Route("/slots", slots, methods=["GET"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
        Route("/infill", infill, methods=["POST"]),
    ]
