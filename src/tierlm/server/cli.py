"""``tierlm serve``: run the gateway (flags and/or a TOML file; see docs/gateway.md).

With no flags it serves the simulated backend on 127.0.0.1:8000: the whole API,
the scheduling and the dashboard, with no model at all.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from tierlm.server.app import create_app
from tierlm.server.config import (
    BACKENDS,
    EMBED_BACKENDS,
    ConfigError,
    ServerSettings,
    load_settings,
)
from tierlm.server.embedders import check_available
from tierlm.server.gateway import Gateway

__all__ = ["add_arguments", "run", "settings_from_args"]

# Environment variable holding an admin key (a key on the command line shows in `ps`).
API_KEY_ENV = "TIERLM_API_KEY"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="TOML settings file (docs/gateway.md)")
    parser.add_argument("--host", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default 8000)")
    parser.add_argument("--backend", choices=BACKENDS, help="what runs the models (default sim)")
    parser.add_argument(
        "--model",
        action="append",
        metavar="ID[=PATH|NAME]",
        help="a model to serve (repeatable; replaces the file's models): llama-cpp "
        "ID=file.gguf (or just the path); openai/ollama ID=upstream-name or the name; sim ID",
    )
    parser.add_argument("--url", help="openai/ollama: the upstream server's URL")
    parser.add_argument(
        "--api-key",
        action="append",
        metavar="KEY",
        help=f"an admin key allowed every class (repeatable; also ${API_KEY_ENV}). "
        "With keys, every request needs one; without, only 127.0.0.1 may be bound",
    )
    parser.add_argument("--token-interval", type=float, metavar="S", help="sim: seconds per token")
    parser.add_argument("--swap-seconds", type=float, metavar="S", help="sim: seconds per swap")
    parser.add_argument("--max-body-bytes", type=int, metavar="N")
    parser.add_argument("--max-tokens-limit", type=int, metavar="N")
    parser.add_argument("--queue-limit", type=int, metavar="N", help="queued jobs per class")
    parser.add_argument(
        "--embed-backend",
        choices=EMBED_BACKENDS,
        help="what serves /v1/embeddings (default: sim with the sim backend, else none)",
    )
    parser.add_argument(
        "--embed-model", metavar="NAME", help="the name /v1/embeddings serves the embedder as"
    )
    parser.add_argument(
        "--embed-path",
        metavar="PATH",
        help="llama-cpp: the GGUF file; minilm: a model directory (default: the packaged one)",
    )
    parser.add_argument(
        "--embed-concurrency", type=int, metavar="N", help="embedding batches at once"
    )
    parser.add_argument("--embed-max-batch", type=int, metavar="N", help="texts per batch")
    parser.add_argument(
        "--embed-max-wait-ms", type=float, metavar="MS", help="wait this long to fill a batch"
    )
    parser.add_argument(
        "--embed-max-queue", type=int, metavar="N", help="texts queued; beyond it 429"
    )
    parser.add_argument(
        "--log-level", choices=("critical", "error", "warning", "info", "debug", "trace")
    )
    parser.add_argument(
        "--check", action="store_true", help="validate the settings, print a summary, exit"
    )


# flag attribute -> settings path
_FLAGS = {
    "host": "server.host",
    "port": "server.port",
    "log_level": "server.log_level",
    "backend": "backend.kind",
    "url": "backend.url",
    "token_interval": "backend.token_interval",
    "swap_seconds": "backend.swap_seconds",
    "max_body_bytes": "limits.max_body_bytes",
    "max_tokens_limit": "limits.max_tokens_limit",
    "queue_limit": "limits.queue_limit",
    "embed_backend": "embeddings.backend",
    "embed_model": "embeddings.model",
    "embed_path": "embeddings.path",
    "embed_concurrency": "embeddings.concurrency",
    "embed_max_batch": "embeddings.max_batch",
    "embed_max_wait_ms": "embeddings.max_wait_ms",
    "embed_max_queue": "embeddings.max_queue",
}


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    overrides: dict[str, Any] = {}
    flags: dict[str, str] = {}
    for attr, path in _FLAGS.items():
        value = getattr(args, attr, None)
        if value is not None:
            overrides[path] = value
            flags[path] = "--" + attr.replace("_", "-")
    if args.model:
        models: dict[str, str | None] = {}
        for item in args.model:
            model_id, sep, target = item.partition("=")
            if not sep and (args.backend == "llama-cpp" or item.endswith(".gguf")):
                model_id, target = Path(item).stem, item
            models[model_id] = target or None
        overrides["backend.models"] = models
        flags["backend.models"] = "--model"
    keys = list(args.api_key or [])
    if os.environ.get(API_KEY_ENV):
        keys.append(os.environ[API_KEY_ENV])
    if keys:
        overrides["keys"] = [
            {"key": key, "name": f"admin{i}", "admin": True} for i, key in enumerate(keys)
        ]
    return load_settings(args.config, overrides, flags)


def describe(settings: ServerSettings) -> str:
    backend = settings.backend
    lines = [
        f"listen   http://{settings.host}:{settings.port}",
        f"backend  {backend.kind}" + (f" ({backend.url})" if backend.url else ""),
        "models   " + (", ".join(m.id for m in backend.models) or "(any, passed upstream)"),
        "classes  "
        + ", ".join(
            f"{c.name} T{c.tier} queue<={settings.queue_limit(c.name)}"
            for c in settings.classes.values()
        ),
        "keys     "
        + (
            ", ".join(
                f"{k.name} [{', '.join(sorted(k.classes))}]{' admin' if k.admin else ''}"
                for k in settings.keys
            )
            or "none (loopback only, every class allowed)"
        ),
        f"limits   body<={settings.limits.max_body_bytes} B, "
        f"max_tokens<={settings.limits.max_tokens_limit} "
        f"(default {settings.limits.default_max_tokens})",
    ]
    kind = settings.embedding_backend()
    if kind == "none":
        lines.append("embed    off")
    else:
        e = settings.embeddings
        lines.append(
            f"embed    {kind} as {e.served_model(kind)!r}"
            + (f" ({e.path})" if e.path else "")
            + f", batch<={e.max_batch} within {e.max_wait_ms:g} ms, "
            f"queue<={e.max_queue}, concurrency {e.concurrency or 'default'}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
        check_available(
            settings,
            "--embed-backend (embeddings.backend)"
            if getattr(args, "embed_backend", None)
            else "embeddings.backend",
        )
    except ConfigError as exc:
        print(f"tierlm serve: {exc}", file=sys.stderr)
        return 2
    if args.check:
        print(describe(settings))
        return 0
    logging.basicConfig(
        level=settings.log_level.upper() if settings.log_level != "trace" else "DEBUG",
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    app = create_app(settings)
    gateway: Gateway = app.state.gateway
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        # A cancelled job stops within cancel_grace; twice that, then tasks are cancelled.
        timeout_graceful_shutdown=int(2 * settings.scheduler.cancel_grace) or 1,
    )
    server = _Server(config, gateway)
    base = f"http://{settings.host}:{settings.port}"
    print(
        f"tierlm gateway ({settings.backend.kind}): OpenAI base URL {base}/v1, "
        f"dashboard {base}/dashboard, metrics {base}/metrics",
        file=sys.stderr,
    )
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the Ctrl-C it handled
        server.run()
    return 0 if server.started or not server.should_exit else 1


class _Server(uvicorn.Server):
    """uvicorn's server, plus: on a stop signal, end the jobs first, so open
    streams finish at once instead of holding the shutdown."""

    def __init__(self, config: uvicorn.Config, gateway: Gateway) -> None:
        super().__init__(config)
        self.gateway = gateway

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.gateway.shutdown_soon()
        super().handle_exit(sig, frame)
