"""Ollama's model endpoints: what is served (``/api/tags``), what is loaded
and until when (``/api/ps``), one model's details (``/api/show``), and the
load and unload an empty generate or chat request asks for.

Sizes are what tierlm knows: a GGUF's file size, and for a loaded model its
file plus the KV cache of its slots (slots x context x the model's KV bytes a
token, from its header: ``gguf_header``), in CPU memory (``size_vram``: 0).
A model another server runs (``openai``, ``ollama`` backends) or a simulated
one has size 0. The ``digest`` identifies the served file (its path, size and
modification time), not its contents: hashing a GGUF takes seconds.

``expires_at`` is the model's keep-alive: when it is unloaded if nothing
happens (``KeepAlive.expires_in``); a model without one is kept until a swap,
shown as Ollama shows ``keep_alive: -1``, ~292 years from now.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

from starlette.requests import Request

from tierlm.runners.errors import RunnerError
from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.gateway import Gateway
from tierlm.server.gateway.keep_alive import KeepAlive
from tierlm.server.gateway.resources import context_of, model_file, model_options, resources
from tierlm.server.ollama.answers import Kind, created_at
from tierlm.server.openai.compat import BACKENDS, ROWS, Support
from tierlm.server.settings.duration import parse_duration

__all__ = ["details", "keep_alive_of", "load_or_unload", "ps_entry", "show", "tags_entry"]

# Go's longest duration, what Ollama's expires_at is for keep_alive: -1.
FOREVER = dt.timedelta(microseconds=(2**63 - 1) // 1000)


def keep_alive_of(request: Request) -> KeepAlive | None:
    keep_alive: KeepAlive | None = getattr(request.app.state, "keep_alive", None)
    return keep_alive


def details(gateway: Gateway, model: str) -> dict[str, Any]:
    path, _ = model_file(model_options(gateway, model))
    kind = gateway.settings.backend.kind
    return {
        "parent_model": "",
        "format": "gguf" if path is not None else kind,
        "family": "",
        "families": None,
        "parameter_size": "",
        "quantization_level": "",
    }


def tags_entry(gateway: Gateway, model: str) -> dict[str, Any]:
    path, stat = model_file(model_options(gateway, model))
    modified = (
        dt.datetime.fromtimestamp(stat.st_mtime, dt.UTC)
        if stat is not None
        else dt.datetime.fromtimestamp(gateway.started_at, dt.UTC)
    )
    identity = f"{model}:{path}:{stat.st_size if stat else 0}:{stat.st_mtime if stat else 0}"
    return {
        "name": model,
        "model": model,
        "modified_at": created_at(modified),
        "size": stat.st_size if stat is not None else 0,
        "digest": hashlib.sha256(identity.encode()).hexdigest(),
        "details": details(gateway, model),
    }


def ps_entry(gateway: Gateway, model: str, keep_alive: KeepAlive | None) -> dict[str, Any]:
    """The loaded ``model`` as ``/api/ps`` shows it (module docstring)."""
    entry = tags_entry(gateway, model)
    held = resources(gateway, keep_alive)
    entry.pop("modified_at")
    entry["size"] += held["kv_allocated_bytes"] or 0
    context = held["context"]
    expires = held["expires_in"]
    now = dt.datetime.now(dt.UTC)
    # A keep-alive past Go's longest duration is forever too (and no overflow).
    left = FOREVER if expires is None else min(FOREVER, dt.timedelta(seconds=min(expires, 1e10)))
    entry["expires_at"] = created_at(now + left)
    entry["size_vram"] = 0
    entry["context_length"] = context or 0
    return entry


def capabilities(gateway: Gateway, model: str) -> list[str]:
    """What ``model`` does here, in Ollama's words: ``completion``, and
    ``tools`` where the backend honours them (``compat.py``'s table)."""
    if model == gateway.embedding_model and model not in gateway.model_ids:
        return ["embedding"]
    kind = gateway.settings.backend.kind
    found = ["completion"]
    tools = next((row for row in ROWS if row.key == "tools"), None)
    if tools is not None and kind in BACKENDS and tools.of(kind) is not Support.REJECTED:
        found.append("tools")
    return found


def show(gateway: Gateway, model: str) -> dict[str, Any]:
    """``/api/show``'s answer: what tierlm knows of the model."""
    options = model_options(gateway, model)
    path, _ = model_file(options)
    context = context_of(options)
    info: dict[str, Any] = {"general.architecture": ""}
    if context is not None:
        info["context_length"] = context
    parameters = f"num_ctx {context}" if context is not None else ""
    return {
        "license": "",
        "modelfile": f"# served by tierlm ({gateway.settings.backend.kind} backend)\n"
        f"FROM {path or model}\n",
        "parameters": parameters,
        "template": "",
        "details": details(gateway, model),
        "model_info": info,
        "capabilities": capabilities(gateway, model),
        "modified_at": tags_entry(gateway, model)["modified_at"],
        "tierlm": {"backend": gateway.settings.backend.kind, "load_options": options},
    }


def keep_alive_seconds(raw: float | str | None) -> float | None:
    """A request's ``keep_alive`` in seconds (None: forever); 400 naming it if invalid."""
    try:
        return parse_duration(raw)
    except ValueError as exc:
        raise APIError(400, f"keep_alive: {exc}", param="keep_alive") from None


async def load_or_unload(
    request: Request, gateway: Gateway, model: str, raw_keep_alive: float | str | None, kind: Kind
) -> dict[str, Any]:
    """An empty generate or chat request: load ``model`` (its ``keep_alive``
    then set), or unload it with ``keep_alive: 0``, through the scheduler
    (``Scheduler.load_model``, ``unload_model``: once no job runs). Admin, as
    ``/v1/models/{id}/load``; asking to load the model already loaded, with
    no keep-alive, changes nothing and needs no admin key."""
    seconds = None if raw_keep_alive is None else keep_alive_seconds(raw_keep_alive)
    unload = raw_keep_alive is not None and seconds == 0
    loaded = gateway.scheduler.loaded_model == model
    if unload or raw_keep_alive is not None or not loaded:
        gateway.keys.authenticate(request, admin=True)
    keep_alive = keep_alive_of(request)
    try:
        if unload:
            if keep_alive is None or not keep_alive.can_unload:
                raise APIError(
                    400,
                    f"keep_alive: the {gateway.settings.backend.kind} backend cannot unload "
                    "models (its server holds them)",
                    param="keep_alive",
                    code="unsupported",
                    reason="unsupported",
                )
            await gateway.scheduler.unload_model(model)
        else:
            await gateway.scheduler.load_model(model)
            if keep_alive is not None and raw_keep_alive is not None:
                keep_alive.set_ttl(model, seconds)
    except RunnerError as exc:
        raise APIError(500, f"backend: {exc}", code="backend_error", type="server_error") from None
    if keep_alive is not None:
        keep_alive.touch()
    reason = "unload" if unload else "load"
    body: dict[str, Any] = {"model": model, "created_at": created_at()}
    if kind == "generate":
        body["response"] = ""
    else:
        body["message"] = {"role": "assistant", "content": ""}
    body.update({"done": True, "done_reason": reason})
    return body
