"""Gateway settings, declared once: pydantic models of the TOML file's sections.

The TOML file, ``TIERLM_*`` environment variables and ``tierlm serve``'s flags
all feed this one model (``config.load_settings``); every default lives here, on its
field, with where its value comes from; the flags are derived from the fields'
``Flag`` markers, and docs/gateway.md's reference is generated from the models
(``config_reference``). Every error names the field (``backend.models.qwen.path``);
an unknown field is an error too, with a suggestion.

``ServerSettings()`` is ``tierlm serve``'s default. The file, all sections optional::

    [server]        host, port, ollama_port, log_level, log_format, default_class, sse_heartbeat,
                    dashboard_window, allowed_hosts, cors_origins, ollama_origins,
                    shutdown_grace
    [limits]        max_body_bytes, default_max_tokens, max_tokens_limit, queue_limit,
                    key_queue_limit, max_connections, header_timeout, body_timeout,
                    keep_alive_timeout, max_header_bytes
    [backend]       kind = "sim" | "llama-cpp" | "openai" | "ollama", models, ... (backends/)
    [scheduler]     max_affinity_wait, chat_grace, chat_idle, grace_factor, lost_bets, deadlines,
                    slice, pool_floor, idle_reset, cancel_grace, weights, class_weights,
                    journal_bytes_per_job, journal_bytes_total, default_classes
    [classes.NAME]  tier, fair, requeue, budget = {share, window} | false, queue_limit
    [[keys]]        key | key_env, name, classes, default_class, admin, producer,
                    queue_limit, allow_deadline
    [metrics]       public, vllm_compat
    [embeddings]    backend = "minilm" | "llama-cpp" | "sim" | "none", model, ... (embedders.py)
    [batches]       data_dir, max_file_bytes, max_requests, max_batches_per_key, in_flight,
                    max_completion_window, promote_fraction (batches.py)
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, PrivateAttr, model_validator

from tierlm.core.classes import TaskClass
from tierlm.core.config import SchedulerConfig
from tierlm.server.settings.access import (
    ApiKey,
    ClassSettings,
    KeySettings,
    resolve_classes,
    resolve_keys,
)
from tierlm.server.settings.backends import DEFAULT_BACKEND, AnyBackend, backend_class
from tierlm.server.settings.batches import BatchSettings
from tierlm.server.settings.embedders import (
    AnyEmbeddings,
    SimEmbeddings,
    default_embedder,
    with_backend,
)
from tierlm.server.settings.people import PeopleSettings, program_class_of
from tierlm.server.settings.scheduler import SchedulerSettings
from tierlm.server.settings.schema import Expect, FieldError, Flag, Schema

__all__ = [
    "OLLAMA_DEFAULT_ORIGINS",
    "ConfigError",
    "LimitSettings",
    "MetricsSettings",
    "SchedulerSettings",
    "ServerSection",
    "ServerSettings",
    "is_loopback",
]

# 127.0.0.1: nothing but this machine can reach an unkeyed gateway.
DEFAULT_HOST = "127.0.0.1"
# 8000: uvicorn's and vLLM's default, the usual local OpenAI-compatible port; it
# leaves llama.cpp's server (8080) and Ollama (11434), likely upstreams, free.
DEFAULT_PORT = 8000
# For a request without max_tokens: bounded, so a request that forgets it
# cannot hold the device for minutes (OpenAI's "up to the context" would).
DEFAULT_MAX_TOKENS = 256

# The names a browser on this machine uses for a loopback gateway.
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def _ollama_defaults() -> tuple[str, ...]:
    """Ollama's ``envconfig.AllowedOrigins`` without ``OLLAMA_ORIGINS``: the
    loopback names on any port, and the schemes of apps that run in a
    browser engine (Electron's ``app://``, Tauri, VS Code's webviews)."""
    found = []
    for host in ("localhost", "127.0.0.1", "0.0.0.0"):
        for scheme in ("http", "https"):
            found += [f"{scheme}://{host}", f"{scheme}://{host}:*"]
    schemes = ("app", "file", "tauri", "vscode-webview", "vscode-file")
    return (*found, *(f"{scheme}://*" for scheme in schemes))


OLLAMA_DEFAULT_ORIGINS = _ollama_defaults()

LogLevel = Literal["critical", "error", "warning", "info", "debug", "trace"]
LogFormat = Literal["text", "json"]


def _comma_list(value: Any) -> Any:
    # A flag or an environment variable gives one string: "a.example,b.example".
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return value


NameList = Annotated[
    tuple[Annotated[str, Field(min_length=1)], ...],
    BeforeValidator(_comma_list),
    Field(strict=False),
    Expect("a list of strings (or one string, comma-separated)"),
]


class ConfigError(ValueError):
    """The settings are invalid; the message names the field and says why."""


class ServerSection(Schema):
    """``[server]``: where the gateway listens and how it talks."""

    host: Annotated[str, Flag("--host", "ADDRESS"), Field(min_length=1)] = DEFAULT_HOST
    """The address to bind; anything but loopback needs ``[[keys]]``."""
    port: Annotated[int, Flag("--port", "N"), Field(ge=0, le=65535)] = DEFAULT_PORT
    """The port."""
    ollama_port: Annotated[int | None, Flag("--ollama-port", "N"), Field(ge=1, le=65535)] = None
    """A second port on ``host``, served by the same app, for apps written for
    Ollama: 11434 (Ollama's) keeps their default URL. Unset: Ollama's API is
    served on ``port`` only (it always is, beside ``/v1``)."""
    log_level: Annotated[LogLevel, Flag("--log-level", "LEVEL")] = "info"
    """uvicorn's and tierlm's log level."""
    log_format: Annotated[LogFormat, Flag("--log-format", "FORMAT")] = "text"
    """``text`` (one line per record) or ``json`` (one JSON object per line, the
    access log included); every line of a request carries its request id."""
    default_class: Annotated[str | None, Field(min_length=1)] = None
    """The class of keyless requests without ``X-Tierlm-Class`` (unset: ``chat``
    if defined, else the class of the lowest tier: an OpenAI client is usually a person)."""
    sse_heartbeat: Annotated[float, Field(gt=0)] = 15.0
    """Seconds between SSE comment lines on a quiet stream: 15 s is what most SSE
    servers use to keep proxies from closing a quiet connection."""
    dashboard_window: Annotated[float, Field(gt=0)] = 300.0
    """Seconds of history in the dashboard's timeline ("the last minutes")."""
    shutdown_grace: Annotated[float, Flag("--shutdown-grace", "S"), Field(ge=0)] = 30.0
    """On SIGTERM, seconds the accepted requests (running or queued) get to
    finish before they are cancelled with ``shutting_down``: 30 s is
    Kubernetes' default grace period between SIGTERM and SIGKILL."""
    allowed_hosts: Annotated[NameList | None, Flag("--allowed-hosts", "HOST,...")] = None
    """Host header names accepted; any other gets 421, so a web page cannot reach
    a loopback gateway through DNS rebinding. Unset: the loopback names and
    ``host``; any name when ``host`` is a wildcard address (0.0.0.0, ::), which
    needs keys. ``*`` accepts any name."""
    cors_origins: Annotated[NameList, Flag("--cors-origins", "URL,...")] = ()
    """Web origins (``http://localhost:3000``; ``*`` matches any characters:
    ``chrome-extension://*``) whose pages may call the gateway (CORS); a
    request from any other page's origin gets 403. Empty by default: no
    browser page but the gateway's own dashboard (and ``ollama_origins`` on
    Ollama's API)."""
    ollama_origins: NameList = OLLAMA_DEFAULT_ORIGINS
    """Web origins (wildcards as in ``cors_origins``) whose pages may call
    Ollama's API (``/api/*``) but nothing else: Ollama's own defaults
    (``localhost``, ``127.0.0.1`` and ``0.0.0.0`` on any port, ``app://``,
    ``file://``, ``tauri://``, ``vscode-webview://``, ``vscode-file://``), so
    apps that run in a browser engine and were written for Ollama work
    unchanged; ``[]``: none."""

    def accepted_hosts(self) -> frozenset[str] | None:
        """The Host header names accepted (lower case, no brackets); None: any."""
        if self.allowed_hosts is not None:
            names = frozenset(_host_name(name) for name in self.allowed_hosts)
            return None if "*" in names else names
        if _is_wildcard(self.host):
            return None
        return LOOPBACK_NAMES | {_host_name(self.host)}


class LimitSettings(Schema):
    """``[limits]``: what one request may ask for, and how much may wait."""

    max_body_bytes: Annotated[int, Flag("--max-body-bytes", "N"), Field(ge=1)] = 1 << 20
    """Larger request bodies get 413 before they are parsed. 1 MiB: ~250 k tokens
    of text at ~4 bytes a token, beyond any local model's context."""
    default_max_tokens: Annotated[int, Field(ge=1)] = DEFAULT_MAX_TOKENS
    """For a request without max_tokens (at most ``max_tokens_limit``): bounded,
    so a request that forgets it cannot hold the device for minutes (the sim
    backend's default: 16, a short answer)."""
    max_tokens_limit: Annotated[int, Flag("--max-tokens-limit", "N"), Field(ge=1)] = 4096
    """The largest max_tokens accepted (larger gets 400): 4096 is the context of
    most small local models, and an answer cannot be longer than the context."""
    context_max_tokens: bool = True
    """On a backend that knows its model's context (llama-cpp), a request
    without max_tokens may write what the context leaves after its prompt, at
    most ``max_tokens_limit``, as OpenAI does (a fixed default cut JSON answers
    short: LangChain's ``LengthFinishReasonError``); ``default_max_tokens``
    is then the default only where the context is unknown. false: always
    ``default_max_tokens``."""
    responses_store_bytes: Annotated[int, Field(ge=0)] = 32 << 20
    """Memory for the conversations ``/v1/responses`` keeps for
    ``previous_response_id`` (their JSON size): past it the oldest are
    forgotten (0: none are kept). 32 MiB: thousands of agent turns, or 32
    requests of ``max_body_bytes``."""
    queue_limit: Annotated[int, Flag("--queue-limit", "N"), Field(ge=1)] = 1000
    """Queued jobs per class beyond which requests get 429 + Retry-After. A queued
    job costs a few kB; 1000 leaves room for the gateway benchmark's 500 clients.
    With keys, a full class still admits a key below its fair share of it."""
    key_queue_limit: Annotated[int | None, Flag("--key-queue-limit", "N"), Field(ge=1)] = None
    """Queued jobs per API key, over all classes, beyond which its requests get
    429 (unset: no cap but the classes' limits and the fair share; a key's own
    ``queue_limit`` overrides it)."""
    max_connections: Annotated[int, Flag("--max-connections", "N"), Field(ge=1)] = 1000
    """Requests in flight (head received, response not finished) beyond which
    the next one gets 503 + Retry-After; idle connections and unfinished heads
    do not count (``edge/in_flight.py``), nor does ``/health``: twice the
    gateway benchmark's 500 concurrent streams, below the usual limit of 1024
    open files."""
    header_timeout: Annotated[float, Flag("--header-timeout", "S"), Field(gt=0)] = 10.0
    """Seconds a client has to send a whole request head, from its connection
    (or its previous response); then the connection is closed. A client on
    loopback or a LAN sends one in milliseconds; 10 s cuts slowloris clients."""
    body_timeout: Annotated[float, Flag("--body-timeout", "S"), Field(gt=0)] = 30.0
    """Seconds a client has to send a request body, from its head: then 408 and
    the connection is closed. 30 s is 35 kB/s for a body of ``max_body_bytes``."""
    keep_alive_timeout: Annotated[float, Field(gt=0)] = 5.0
    """Seconds an idle kept-alive connection stays open (uvicorn's default)."""
    max_header_bytes: Annotated[int, Field(ge=1024)] = 16384
    """Largest request head (request line and headers), in bytes: larger is
    431 (400 if it trickles in) and the connection is closed. 16 KiB is h11's
    default (and Node's)."""

    @model_validator(mode="before")
    @classmethod
    def _default_below_limit(cls, value: Any) -> Any:
        # Unset: the usual default, lowered to a lower limit.
        if isinstance(value, Mapping) and "default_max_tokens" not in value:
            limit = value.get("max_tokens_limit")
            if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1:
                return {**value, "default_max_tokens": min(DEFAULT_MAX_TOKENS, limit)}
        return value

    @model_validator(mode="after")
    def _check(self) -> LimitSettings:
        if self.default_max_tokens > self.max_tokens_limit:
            raise FieldError(
                f"must be <= max_tokens_limit ({self.max_tokens_limit}), "
                f"got {self.default_max_tokens}",
                "default_max_tokens",
            )
        return self


class MetricsSettings(Schema):
    """``[metrics]``: who may read ``/metrics``, and in which names."""

    public: bool = False
    """Serve ``/metrics`` without a key even when keys are configured: for a
    scraper that sends no credentials (llm-d's endpoint picker). Its series
    name models, classes and producers (keys' names): open them only on a
    network you trust."""
    vllm_compat: bool = False
    """Also emit the queue, running and LoRA-info series under vLLM's names
    (``vllm:num_requests_waiting``...), so a router's built-in vLLM engine
    config reads tierlm unchanged (docs/distributed.md "llm-d")."""


class ServerSettings(Schema):
    """Everything ``create_app`` needs: the TOML file's sections.

    ``classes``, ``keys`` and ``scheduler`` are what the gateway runs with (the
    default classes changed and extended by ``[classes.NAME]``, the resolved
    keys, a ``SchedulerConfig``); the tables as written are ``class_tables``,
    ``key_tables`` and ``scheduler_table``.
    """

    # Schema's, but not strict at the top: `keys` may be a list. (The sections
    # are strict.) The environment is read by config.load_settings, never
    # here: create_app(ServerSettings()) is the same anywhere.
    model_config = ConfigDict(strict=False)

    server: ServerSection = Field(default_factory=ServerSection)
    """Where the gateway listens and how it talks."""
    limits: LimitSettings = Field(default_factory=LimitSettings)
    """What one request may ask for, and how much may wait."""
    backend: AnyBackend = Field(default_factory=DEFAULT_BACKEND)
    """What runs the models: ``kind`` = sim, llama-cpp, openai or ollama. Unset,
    ``tierlm serve`` picks llama-cpp with the embedded SmolLM2 when
    ``tierlm[local]`` is installed, else sim (docs/gateway.md "Backends")."""
    scheduler_table: SchedulerSettings = Field(default_factory=SchedulerSettings, alias="scheduler")
    """The scheduling policy's tunables."""
    class_tables: Mapping[str, ClassSettings] = Field(default_factory=dict, alias="classes")
    """Task classes changed or added, by name."""
    key_tables: tuple[KeySettings, ...] = Field(default=(), alias="keys")
    """API keys; without any, the gateway binds loopback only."""
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    """``/metrics``: without a key, vLLM's names (docs/distributed.md)."""
    embeddings: AnyEmbeddings = Field(default_factory=SimEmbeddings)
    """``/v1/embeddings``, on the embedding lane: ``backend`` = minilm, llama-cpp,
    sim or none (unset: sim with the sim backend, else minilm when the ``[embed]``
    extra is installed, else none)."""
    batches: BatchSettings = Field(default_factory=BatchSettings)
    """The Batch API: its SQLite file (``data_dir``) and limits."""
    people: PeopleSettings = Field(default_factory=PeopleSettings)
    """Who is a person: requests that name no class judged by their pacing
    (docs/design.md §4.11)."""

    _classes: dict[str, TaskClass] = PrivateAttr(default_factory=dict)
    _queue_limits: dict[str, int] = PrivateAttr(default_factory=dict)
    _keys: tuple[ApiKey, ...] = PrivateAttr(default=())
    _program_class: str | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _embeddings_default(cls, value: Any) -> Any:
        # [embeddings] without `backend`: the LLM backend's default embedder.
        if not isinstance(value, Mapping):
            return value
        backend = backend_class(value.get("backend")) or DEFAULT_BACKEND
        embeddings = with_backend(
            value.get("embeddings", {}), default_embedder(backend.default_embedder)
        )
        value = {**value, "embeddings": embeddings}
        # [limits] without default_max_tokens: the backend's own, if it has one.
        limits = value.get("limits", {})
        default = backend.default_max_tokens
        if (
            default is not None
            and isinstance(limits, Mapping)
            and "default_max_tokens" not in limits
        ):
            limit = limits.get("max_tokens_limit")
            if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1:
                default = min(default, limit)
            value["limits"] = {**limits, "default_max_tokens": default}
        return value

    @model_validator(mode="after")
    def _resolve(self) -> ServerSettings:
        classes, queue_limits = resolve_classes(
            self.class_tables, self.scheduler_table.default_classes
        )
        self._classes, self._queue_limits = classes, queue_limits
        self._keys = resolve_keys(self.key_tables, classes)
        default = self.server.default_class
        if default is not None and default not in classes:
            raise FieldError(
                f"unknown class {default!r} (classes: {', '.join(sorted(classes))})",
                "server",
                "default_class",
            )
        try:
            self._program_class = program_class_of(self.people, classes)
        except ValueError:
            fair = sorted(c.name for c in classes.values() if c.fair)
            raise FieldError(
                f"{self.people.program_class!r} is not a fair-pool class "
                f"(fair classes: {', '.join(fair) or 'none'})",
                "people",
                "program_class",
            ) from None
        if self.embeddings.enabled and self.embeddings.served_model() in self.backend.model_ids():
            raise FieldError(
                f"{self.embeddings.served_model()!r} is already the name of an LLM model of "
                "[backend]; give the embedding model another name",
                "embeddings",
                "model",
            )
        if not self._keys and not is_loopback(self.server.host):
            raise FieldError(
                f"refusing to listen on {self.server.host!r} without API keys: every "
                "program that can reach that address could use the model, claim the chat "
                "class and pause the scheduler. Add [[keys]] to the config file (or pass "
                f"--api-key), or bind {DEFAULT_HOST}.",
                "server",
                "host",
            )
        return self

    @property
    def classes(self) -> Mapping[str, TaskClass]:
        """The task classes in effect, by name."""
        return self._classes

    @property
    def keys(self) -> tuple[ApiKey, ...]:
        """The API keys in effect (``key_env`` read)."""
        return self._keys

    @property
    def scheduler(self) -> SchedulerConfig:
        return self.scheduler_table.config()

    @property
    def program_class(self) -> str | None:
        """The fair class programs' requests are served in (``[people]``)."""
        return self._program_class

    def queue_limit(self, class_name: str) -> int:
        return self._queue_limits.get(class_name, self.limits.queue_limit)

    def anonymous_class(self) -> str:
        """The class of keyless requests that claim none."""
        if self.server.default_class is not None:
            return self.server.default_class
        if "chat" in self.classes:
            return "chat"
        return min(self.classes.values(), key=lambda c: (c.tier, c.name)).name


def _host_name(host: str) -> str:
    return host.strip().lower().strip("[]")


def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(_host_name(host)).is_unspecified
    except ValueError:
        return False


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
