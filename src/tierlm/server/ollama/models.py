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

Names carry Ollama's tag (``smollm2-135m:latest``; an id with a tag of its
own, ``qwen2.5:0.5b``, as it is): apps match the names they list against the
names they send. ``/api/tags`` also lists each chat model as
``model@background:latest`` (``gateway/model_names``), so an app's model
picker offers it for its background work. Where the operator's files are is
no client's business: ``/api/show`` names the model file's full path only to
an admin key (``/v1/models`` too).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
from pathlib import PurePath
from typing import Any

from starlette.requests import Request

from tierlm.runners.errors import RunnerError
from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.auth import Principal
from tierlm.server.gateway.gateway import Gateway
from tierlm.server.gateway.keep_alive import KeepAlive
from tierlm.server.gateway.model_names import BACKGROUND, LATEST
from tierlm.server.gateway.resources import context_of, model_file, model_options, resources
from tierlm.server.ollama.answers import Kind, created_at
from tierlm.server.openai.compat import BACKENDS, ROWS, Support
from tierlm.server.settings.duration import parse_duration

__all__ = [
    "details",
    "keep_alive_of",
    "load_or_unload",
    "ollama_name",
    "ps_entry",
    "show",
    "tags_entry",
]

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


def ollama_name(model: str) -> str:
    """``model`` as Ollama names it: with a tag (``:latest`` if it has none)."""
    return model if ":" in model.rsplit("/", 1)[-1] else model + LATEST


def tags_entry(gateway: Gateway, model: str, *, background: bool = False) -> dict[str, Any]:
    """``model`` as ``/api/tags`` lists it; ``background``: its class alias."""
    path, stat = model_file(model_options(gateway, model))
    modified = (
        dt.datetime.fromtimestamp(stat.st_mtime, dt.UTC)
        if stat is not None
        else dt.datetime.fromtimestamp(gateway.started_at, dt.UTC)
    )
    identity = f"{model}:{path}:{stat.st_size if stat else 0}:{stat.st_mtime if stat else 0}"
    name = ollama_name(f"{model}@{BACKGROUND}" if background else model)
    return {
        "name": name,
        "model": name,
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
    """What ``model`` does here, in Ollama's words: ``completion``, ``tools``
    where the backend honours them (``compat.py``'s table), and ``insert``
    (``suffix``, fill in the middle) for a llama.cpp model with FIM tokens:
    editor plugins ask for it before they send a suffix."""
    if model == gateway.embedding_model and model not in gateway.model_ids:
        return ["embedding"]
    kind = gateway.settings.backend.kind
    found = ["completion"]
    tools = next((row for row in ROWS if row.key == "tools"), None)
    if tools is not None and kind in BACKENDS and tools.of(kind) is not Support.REJECTED:
        found.append("tools")
    path, stat = model_file(model_options(gateway, model))
    if (
        kind == "llama-cpp"
        and path is not None
        and stat is not None
        and _fills_in_the_middle(path, stat.st_mtime)
    ):
        found.append("insert")
    return found


@functools.lru_cache(maxsize=32)
def _fills_in_the_middle(path: str, mtime: float) -> bool:
    from tierlm.runners.llama_cpp.model.gguf_header import GgufError, fills_in_the_middle

    try:
        return fills_in_the_middle(path)
    except (OSError, GgufError):
        return False


def show(gateway: Gateway, model: str, *, admin: bool = True) -> dict[str, Any]:
    """``/api/show``'s answer: what tierlm knows of the model; the file's full
    path only to an ``admin`` key (any other sees its name, as on ``/v1/models``)."""
    options = model_options(gateway, model)
    path, _ = model_file(options)
    if path is not None and not admin:
        path = PurePath(path).name
        options = {**options, "path": path}
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
    request: Request,
    gateway: Gateway,
    model: str,
    raw_keep_alive: float | str | None,
    kind: Kind,
    principal: Principal,
) -> dict[str, Any]:
    """An empty generate or chat request: load ``model`` (its ``keep_alive``
    then set), or unload it with ``keep_alive: 0``, through the scheduler
    (``Scheduler.load_model``, ``unload_model``: once no job runs), as
    ``/v1/models/{id}/load`` does for an admin key. Apps send one when they
    start (to warm the model up), with a keep-alive: for any other key it is
    answered ``load`` and changes nothing (the scheduler loads a model when
    its work is next, docs/design.md §4.8); unloading needs an admin key."""
    seconds = None if raw_keep_alive is None else keep_alive_seconds(raw_keep_alive)
    unload = raw_keep_alive is not None and seconds == 0
    if unload:
        gateway.keys.authenticate(request, admin=True)
    elif not principal.admin:
        return _done(model, "load", kind)
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
    return _done(model, "unload" if unload else "load", kind)


def _done(model: str, reason: str, kind: Kind) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "created_at": created_at()}
    if kind == "generate":
        body["response"] = ""
    else:
        body["message"] = {"role": "assistant", "content": ""}
    body.update({"done": True, "done_reason": reason})
    return body
