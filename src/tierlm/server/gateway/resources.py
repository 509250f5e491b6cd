"""What the device holds: the loaded model's file, its context and the KV cache
of its slots (allocated, and in use by the jobs running now), the tokens it
generates a second, and when its keep-alive unloads it. For the dashboard's
resources panel and Ollama's ``/api/ps``.

The KV a token takes is the model's (its GGUF header: layers x 2 x the KV
heads' width, f16: ``gguf_header.kv_shape``), or what a simulated runner says
it takes (``kv_bytes_per_token``); unknown for a model another server runs.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

from tierlm.runners.protocol import DescribesModels
from tierlm.shell.handles import JobState

if TYPE_CHECKING:
    from tierlm.server.gateway.gateway import Gateway
    from tierlm.server.gateway.keep_alive import KeepAlive

__all__ = [
    "context_of",
    "device_figures",
    "kv_bytes_per_token",
    "model_file",
    "model_options",
    "resources",
]


def model_options(gateway: Gateway, model: str) -> dict[str, Any]:
    """The runner's description of ``model`` (path, n_ctx...); {} if it has none."""
    runner = gateway.runner
    if isinstance(runner, DescribesModels) and model in gateway.model_ids:
        try:
            return dict(runner.describe(model))
        except Exception:  # a model the runner cannot describe: nothing known
            return {}
    return {}


def model_file(options: dict[str, Any]) -> tuple[str | None, os.stat_result | None]:
    """The model's file and its stat (None where there is none, or it is gone)."""
    path = options.get("path")
    if not isinstance(path, str):
        return None, None
    try:
        return path, os.stat(path)
    except OSError:
        return path, None


def context_of(options: dict[str, Any]) -> int | None:
    """The context llama.cpp applied when it loaded the model, else the configured one."""
    applied = options.get("applied")
    n_ctx = applied.get("n_ctx") if isinstance(applied, dict) else options.get("n_ctx")
    return n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None


@functools.lru_cache(maxsize=32)
def _header_kv(path: str, mtime: float) -> int | None:
    from tierlm.runners.llama_cpp.model.gguf_header import GgufError, kv_shape

    try:
        return kv_shape(path).bytes_per_token
    except (OSError, GgufError):
        return None


def kv_bytes_per_token(gateway: Gateway, path: str | None) -> int | None:
    if path is not None:
        try:
            return _header_kv(path, os.stat(path).st_mtime)
        except OSError:
            return None
    simulated = getattr(gateway.runner, "kv_bytes_per_token", None)
    return simulated if isinstance(simulated, int) else None


def device_figures(gateway: Gateway) -> dict[str, Any]:
    """What ``/metrics`` reads of the device at each scrape, cheaply (no
    snapshot: a router may scrape every 50 ms): the loaded model, its
    tokens a second over the last 10 s (``throughput``, as the dashboard),
    the KV cache allocated for its slots and in use by the running jobs, and
    their ratio (vLLM's ``kv_cache_usage_perc``: 1 is full). The ratio is in
    tokens (the running jobs' prompts and answers over context x slots), so
    it is known wherever the context is, bytes or not."""
    scheduler = gateway.scheduler
    model = scheduler.loaded_model
    slots = scheduler.slots
    options = model_options(gateway, model) if model is not None else {}
    path, _ = model_file(options)
    context = context_of(options)
    per_token = kv_bytes_per_token(gateway, path) if model is not None else None
    running = [job for job in gateway.live.values() if job.state is JobState.RUNNING]
    in_context = sum(job.request.approx_prompt_tokens() + len(job.produced) for job in running)
    return {
        "model": model,
        "slots": slots,
        "context": context,
        "tokens_in_context": in_context,
        "kv_bytes_per_token": per_token,
        "kv_allocated_bytes": (
            None if per_token is None or context is None else per_token * context * slots
        ),
        "kv_in_use_bytes": None if per_token is None else per_token * in_context,
        "kv_usage": None if not context else min(1.0, in_context / (context * slots)),
        "tokens_per_s": gateway.throughput.rate(scheduler.now()),
    }


def resources(gateway: Gateway, keep_alive: KeepAlive | None) -> dict[str, Any]:
    """The device's resources now (module docstring); None where unknown."""
    figures = device_figures(gateway)
    model = figures["model"]
    options = model_options(gateway, model) if model is not None else {}
    _, stat = model_file(options)
    expires = None if keep_alive is None or model is None else keep_alive.expires_in(model)
    return {
        "model": model,
        "model_bytes": None if stat is None else stat.st_size,
        "context": figures["context"],
        "slots": figures["slots"],
        "kv_bytes_per_token": figures["kv_bytes_per_token"],
        "kv_allocated_bytes": figures["kv_allocated_bytes"],
        "kv_in_use_bytes": figures["kv_in_use_bytes"],
        "kv_usage": figures["kv_usage"],
        "tokens_in_context": figures["tokens_in_context"],
        "tokens_per_s": figures["tokens_per_s"],
        "keep_alive": None if keep_alive is None or model is None else keep_alive.ttls.get(model),
        "expires_in": expires,
    }
