"""Gateway under load: 500 concurrent streams through `tierlm serve` vs the scheduler in-process.

`tierlm serve --backend sim` runs as a real subprocess on
127.0.0.1 (a free port); this process opens 500 concurrent streaming chat
completions to it with httpx (one ``AsyncClient``, a pool big enough for all of
them), each of a background class (gana, nataraj, extract: ``X-Tierlm-Class``,
a few producers per class with ``X-Tierlm-Producer``), all released at once,
plus a few chat requests arriving one at a time while the background queue is
full, so each chat meets a running background job and must preempt it. The
chats are sent from a second process with its own event loop: the loop that
reads 500 streams stalls for tens of ms at a time, which a chat timed on it
would blame on the gateway (both loops' lag is reported). The
same load pattern (same classes, producers, arrival times, max_tokens) then
runs in THIS process against ``Scheduler.generate`` with the same
``SimulatedRunner`` and scheduler settings, built from the same ``tierlm serve``
flags, on a plain asyncio loop (the server's uvicorn runs on plain asyncio too:
no uvloop here). Both variants run in one invocation, one after the other, and
are compared as ratios and differences: this machine is shared and noisy, so
absolute numbers from different runs are not comparable.

Why one after the other and not at the same time: the two would compete for the
same two cores, and the in-process scheduler would share its event loop (or the
GIL) with the 500 HTTP clients, whose parsing would then delay its tokens: its
numbers would measure the clients, not the scheduler. Run back to back, each
variant has the machine to itself; ``--order`` swaps which goes first.

Reported, for each variant and as gateway vs in-process:

- errors by kind (target 0): HTTP statuses, transport errors, error events in
  the stream, streams that ended early or whose text is not exactly
  ``w0 w1 ... w{n-1}`` (every token once, in order, across preemptions), and
  requests still unfinished at the hard timeout;
- time to first token as the client sees it (request sent -> first content
  chunk; in-process: ``generate`` called -> first piece), p50/p99, for all
  requests, for the chats (which preempt) and for the
  background requests (whose TTFT is mostly queueing: one device runs one job at
  a time, so there it measures the device's throughput under the gateway);
- the gateway's own view, from its /metrics: mean TTFT per class from submit to
  the first token produced, so the client's mean minus it is the HTTP + SSE cost;
- tokens/s delivered to the clients (ideal: 1 / token interval);
- the server's peak RSS (VmHWM at the end; RSS also sampled every 100 ms) and
  the CPU seconds the server and this process used.

    python bench/gateway_load.py [--background 500] [--chats 30] [--tokens 20]
                                 [--token-interval 0.005] [--timeout 175]
                                 [--order inprocess,gateway] [--seed 1] [--out FILE]

Writes bench/results/gateway_load.json and prints a table. Takes ~2.5 minutes
with the defaults: each variant is (500 + 30) x 20 tokens x 5 ms = 53 s of
simulated device time, which no amount of concurrency shortens (one device).
``--timeout`` bounds the whole run: a variant still running at its share of it
is cancelled and its unfinished requests are counted as errors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import multiprocessing
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from tierlm.runners.protocol import Cancelled
from tierlm.scheduler import Scheduler
from tierlm.server.backends import make_runner
from tierlm.server.serve_cli import add_arguments, settings_from_args

RESULTS = Path(__file__).parent / "results" / "gateway_load.json"
HOST = "127.0.0.1"
MODEL = "sim-a"
MESSAGES = [{"role": "user", "content": "Summarise the note in one sentence."}]

# 5 ms a token (200 tokens/s, a fast desktop GPU's decode rate): slow enough that
# a token's timer is far above the event loop's per-wake-up cost (tens of µs;
# sub-millisecond sleeps measure the loop, not the gateway), fast enough that
# 530 requests of 20 tokens take 53 s of device time per variant, so both
# variants (the gateway's takes 1.1-1.4x longer here) and the server's start
# and stop fit in ~2.5 minutes with room to spare under the hard timeout.
TOKEN_INTERVAL = 0.005
TOKENS = 20
BACKGROUND = 500
CHATS = 30
# Background classes and their share of the background requests, with how many
# producers each (the fair pool's vruntime is per producer: a few alternate).
MIX = {"gana": (0.40, 4), "nataraj": (0.35, 4), "extract": (0.25, 2)}
# Chats arrive between these fractions of the expected device time: after the
# start-up burst (500 connections accepted, ~2.5 s here) and before the queue
# drains, so every chat finds a background job running and preempts it.
CHAT_WINDOW = (0.1, 0.85)
# Well above the 500 queued of one class at most: the load must be accepted (429
# is a benchmark error here, not backpressure working).
QUEUE_LIMIT = 5000
# Lead time between creating the client tasks and releasing them, so creating
# 530 tasks is not inside anyone's measured time.
LEAD = 0.3
SERVER_START_TIMEOUT = 30.0
SERVER_STOP_TIMEOUT = 15.0
RSS_SAMPLE_INTERVAL = 0.1
# The lag probe's timer: often enough to catch a stall of a few token intervals,
# rare enough (100 wake-ups a second) to cost nothing measurable.
LAG_INTERVAL = 0.01
# Per-request HTTP timeouts: a queued stream gets a position comment at least
# every 0.25 s while the queue moves, so a 60 s silence is a hang.
HTTP_TIMEOUT = httpx.Timeout(connect=30.0, read=60.0, write=30.0, pool=60.0)


@dataclass(frozen=True, slots=True)
class Spec:
    """One client: its class, producer and arrival (seconds after the release)."""

    index: int
    class_name: str
    producer: str
    offset: float


@dataclass(slots=True)
class Record:
    """What one client saw (times from ``time.perf_counter``)."""

    spec: Spec
    start: float | None = None
    headers_at: float | None = None
    running_at: float | None = None
    first: float | None = None
    end: float | None = None
    tokens: int = 0
    comments: int = 0
    """SSE comment lines (queue position, running) received."""
    text: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def ttft(self) -> float | None:
        if self.start is None or self.first is None:
            return None
        return self.first - self.start


def peak_in_flight(records: Sequence[Record]) -> int:
    """Most requests between their start and their end at one moment."""
    edges = [(r.start, 1) for r in records if r.start is not None]
    edges += [(r.end, -1) for r in records if r.start is not None and r.end is not None]
    now = peak = 0
    for _, step in sorted(edges):  # at a tie, an end (-1) sorts before a start
        now += step
        peak = max(peak, now)
    return peak


class LagProbe:
    """How late this process's event loop runs a timer: its own stalls, which every
    time measured in it (a client's TTFT, the in-process scheduler's tokens) includes."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(LAG_INTERVAL)
            self.lags.append(loop.time() - started - LAG_INTERVAL)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> dict[str, float | int | None]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        return dist(self.lags)


def plan(background: int, chats: int, tokens: int, interval: float, seed: int) -> list[Spec]:
    """The load pattern both variants replay: background at 0, chats spread out."""
    rng = random.Random(seed)
    classes: list[tuple[str, str]] = []
    for name, (share, producers) in MIX.items():
        count = round(background * share)
        classes += [(name, f"{name}-{i % producers}") for i in range(count)]
    while len(classes) < background:  # rounding
        classes.append(("gana", "gana-0"))
    classes = classes[:background]
    # Interleaved: the burst's arrival order (and so the queue) mixes classes.
    rng.shuffle(classes)
    specs = [Spec(i, c, p, 0.0) for i, (c, p) in enumerate(classes)]
    expected = (background + chats) * tokens * interval
    lo, hi = (f * expected for f in CHAT_WINDOW)
    step = (hi - lo) / max(chats, 1)
    for k in range(chats):
        # A random point inside each slot, so arrivals fall anywhere in a token.
        offset = lo + step * (k + rng.random())
        specs.append(Spec(background + k, "chat", f"person-{k % 3}", offset))
    return specs


def expected_text(tokens: int) -> str:
    # SimulatedRunner's pieces: "w<i> ", numbered across preemptions.
    return "".join(f"w{i} " for i in range(tokens))


def check(record: Record, tokens: int) -> None:
    if record.error is not None:
        return
    if record.first is None:
        record.error = "no token"
    elif record.tokens != tokens:
        record.error = f"{record.tokens} of {tokens} tokens"
    elif "".join(record.text) != expected_text(tokens):
        record.error = "wrong text"


async def sleep_until(when: float) -> None:
    delay = when - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


# -- the in-process variant ------------------------------------------------------


async def inprocess_client(
    scheduler: Scheduler, spec: Spec, tokens: int, release: float, rec: Record
) -> None:
    await sleep_until(release + spec.offset)
    rec.start = time.perf_counter()
    try:
        stream = scheduler.generate(
            spec.class_name, MODEL, messages=MESSAGES, max_tokens=tokens, producer=spec.producer
        )
        async with contextlib.aclosing(stream):
            async for piece in stream:
                if rec.first is None:
                    rec.first = time.perf_counter()
                rec.tokens += 1
                rec.text.append(piece)
    except Cancelled as exc:
        rec.error = f"Cancelled({exc.reason.value})"
    except asyncio.CancelledError:
        rec.error = "unfinished at the hard timeout"
        raise
    except Exception as exc:
        rec.error = type(exc).__name__
    finally:
        rec.end = time.perf_counter()
    check(rec, tokens)


async def run_inprocess(
    serve_argv: list[str], specs: Sequence[Spec], tokens: int, budget: float
) -> dict[str, Any]:
    # The gateway's own construction (Gateway.start): same runner, classes, config.
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    settings = settings_from_args(parser.parse_args(serve_argv))
    runner = make_runner(settings.backend)
    records = [Record(spec) for spec in specs]
    cpu_before = time.process_time()
    async with Scheduler(runner, settings.classes, settings.scheduler) as scheduler:
        # Warm-up, not measured: first-call costs (lazy imports, caches).
        async for _ in scheduler.generate("gana", MODEL, messages=MESSAGES, max_tokens=2):
            pass
        release = time.perf_counter() + LEAD
        tasks = [
            asyncio.create_task(inprocess_client(scheduler, s, tokens, release, r))
            for s, r in zip(specs, records, strict=True)
        ]
        probe = LagProbe()
        probe.start()
        timed_out = await wait_bounded(tasks, release + budget)
        loop_lag = await probe.stop()
        stats = scheduler.stats
    return {
        "records": records,
        "release": release,
        "timed_out": timed_out,
        "loop_lag": loop_lag,
        "bench_cpu_seconds": time.process_time() - cpu_before,
        "scheduler": {
            "preemptions": stats.preemptions,
            "requeues": stats.requeues,
            "completed": stats.completed,
            "cancelled": stats.cancelled,
            "failed": stats.failed,
            "swaps": stats.swaps,
        },
    }


async def wait_bounded(tasks: list[asyncio.Task[None]], deadline: float) -> bool:
    """Wait for every task until ``deadline``; cancel the rest. True if any was."""
    _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.perf_counter()))
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return bool(pending)


# -- the gateway variant ---------------------------------------------------------


async def gateway_client(
    client: httpx.AsyncClient,
    spec: Spec,
    tokens: int,
    release: float,
    rec: Record,
) -> None:
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": tokens, "stream": True}
    headers = {"X-Tierlm-Class": spec.class_name, "X-Tierlm-Producer": spec.producer}
    await sleep_until(release + spec.offset)
    rec.start = time.perf_counter()
    try:
        async with client.stream(
            "POST", "/v1/chat/completions", json=body, headers=headers
        ) as response:
            rec.headers_at = time.perf_counter()
            if response.status_code != 200:
                await response.aread()
                try:
                    code = response.json()["error"].get("code")
                except (ValueError, KeyError, TypeError, AttributeError):
                    code = None
                rec.error = f"HTTP {response.status_code}" + (f" {code}" if code else "")
                return
            done = await read_sse(response, rec)
        if rec.error is None and not done:
            rec.error = "stream ended without [DONE]"
    except asyncio.CancelledError:
        rec.error = "unfinished at the hard timeout"
        raise
    except httpx.HTTPError as exc:
        rec.error = type(exc).__name__
    except ValueError as exc:  # a data line that is not JSON
        rec.error = f"bad event: {exc}"
    finally:
        rec.end = time.perf_counter()
    check(rec, tokens)


async def read_sse(response: httpx.Response, rec: Record) -> bool:
    """Read a chat-completion stream into ``rec``; True if it ended with [DONE]."""
    async for line in response.aiter_lines():
        if not line:
            continue
        if line[0] == ":":
            rec.comments += 1
            # ": tierlm queued job=.. tier=.. position=.." / ": tierlm running job=.."
            if rec.running_at is None and line.startswith(": tierlm running"):
                rec.running_at = time.perf_counter()
            continue
        if not line.startswith("data: "):
            rec.error = rec.error or f"unexpected line {line[:40]!r}"
            continue
        payload = line[6:]
        if payload == "[DONE]":
            return True
        event = json.loads(payload)
        if "error" in event:
            error = event["error"]
            rec.error = f"error event: {error.get('code') or error.get('type')}"
            continue
        for choice in event.get("choices", ()):
            content = (choice.get("delta") or {}).get("content")
            if content:
                if rec.first is None:
                    rec.first = time.perf_counter()
                rec.tokens += 1
                rec.text.append(content)
    return False


class Server:
    """`tierlm serve` as a subprocess on a free loopback port, with its memory watched."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        # Open for the server's whole life (its output, shown if it fails); closed
        # by close(), after the tail has been read.
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
        self.proc: subprocess.Popen[bytes] | None = None
        self.ps: psutil.Process | None = None
        self.samples: list[tuple[float, int]] = []
        self._stop_sampling = threading.Event()
        self._sampler: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        self.port = free_port()
        cmd = [sys.executable, "-m", "tierlm.cli", "serve", *self.argv, "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.ps = psutil.Process(self.proc.pid)
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        with httpx.Client(timeout=2.0) as client:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"tierlm serve exited with {self.proc.returncode}:\n{self.tail()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.url}/health").status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"tierlm serve: no /health within {SERVER_START_TIMEOUT} s")
                time.sleep(0.05)
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        assert self.ps is not None
        while not self._stop_sampling.wait(RSS_SAMPLE_INTERVAL):
            try:
                self.samples.append((time.perf_counter(), self.ps.memory_info().rss))
            except psutil.Error:
                return

    def rss(self) -> int:
        assert self.ps is not None
        return int(self.ps.memory_info().rss)

    def cpu_seconds(self) -> float:
        assert self.ps is not None
        times = self.ps.cpu_times()
        return float(times.user + times.system)

    def vm_hwm(self) -> int | None:
        """The kernel's peak resident set of the server (bytes)."""
        assert self.proc is not None
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return None

    def stop(self) -> dict[str, Any]:
        """SIGTERM, as an operator would; SIGKILL only if it does not stop in time."""
        self._stop_sampling.set()
        if self._sampler is not None:
            self._sampler.join()
        if self.proc is None:
            return {}
        started = time.perf_counter()
        killed = False
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(SERVER_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                killed = True
        code = self.proc.returncode
        return {
            "returncode": code,
            # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal
            # so the exit status says what stopped it: -15 is a clean stop.
            "clean_stop": not killed and code in (0, -signal.SIGTERM),
            "stop_seconds": time.perf_counter() - started,
            "killed_after_timeout": killed,
        }

    def close(self) -> None:
        self.log.close()

    def tail(self, lines: int = 30) -> str:
        self.log.flush()
        self.log.seek(0)
        return "\n".join(self.log.read().splitlines()[-lines:])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def scrape(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text -> samples by name."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def server_view(samples: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, Any]:
    def by(name: str, label: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for labels, value in samples.get(name, ()):
            key = labels.get(label, "")
            out[key] = out.get(key, 0.0) + value
        return out

    sums = by("tierlm_time_to_first_token_seconds_sum", "class")
    counts = by("tierlm_time_to_first_token_seconds_count", "class")
    jobs: dict[str, float] = {}
    for labels, value in samples.get("tierlm_jobs_total", ()):
        jobs[f"{labels.get('class')}/{labels.get('outcome')}"] = value
    return {
        "ttft_mean_by_class": {c: sums[c] / counts[c] for c in sums if counts.get(c)},
        "ttft_count_by_class": counts,
        "preemptions": sum(by("tierlm_preemptions_total", "class").values()),
        "jobs": jobs,
        "rejected": by("tierlm_rejected_requests_total", "reason"),
        "client_disconnects": by("tierlm_client_disconnects_total", "state"),
    }


def chat_clients(url: str, specs: list[Spec], tokens: int, budget: float, conn: Connection) -> None:
    """The gateway variant's chat clients, in a process of their own.

    The 500 background streams keep the main event loop busy (reading ~4
    queue-position comments per token, and collecting their garbage): it stalls
    for tens of ms, at times hundreds. A chat timed on that loop would time the
    benchmark's own client; here the chats have a loop to themselves, as a chat
    UI would. ``time.perf_counter`` is CLOCK_MONOTONIC, one clock for every
    process, so the parent's release time and the records' times hold here too.
    """
    asyncio.run(_chat_clients(url, specs, tokens, budget, conn))


async def _chat_clients(
    url: str, specs: list[Spec], tokens: int, budget: float, conn: Connection
) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=HTTP_TIMEOUT) as client:
        warm = Record(Spec(-1, "gana", "warm-up (chat process)", 0.0))
        await gateway_client(client, warm.spec, 2, time.perf_counter(), warm)
        conn.send(warm.error)
        release: float = conn.recv()
        records = [Record(spec) for spec in specs]
        tasks = [
            asyncio.create_task(gateway_client(client, s, tokens, release, r))
            for s, r in zip(specs, records, strict=True)
        ]
        probe = LagProbe()
        probe.start()
        timed_out = await wait_bounded(tasks, release + budget)
        lag = await probe.stop()
    # Plain data: this module is __mp_main__ here, a name the parent cannot unpickle.
    names = [f.name for f in fields(Record) if f.name != "spec"]
    rows = [{name: getattr(r, name) for name in names} for r in records]
    conn.send((rows, timed_out, lag))


def receive(conn: Connection, timeout: float) -> Any:
    """The next message from a child, or TimeoutError / EOFError (it died)."""
    if not conn.poll(max(0.0, timeout)):
        raise TimeoutError(f"no answer within {timeout:.0f} s")
    return conn.recv()


async def run_gateway(
    server: Server, specs: Sequence[Spec], tokens: int, budget: float
) -> dict[str, Any]:
    records = [Record(spec) for spec in specs]
    background = [r for r in records if r.spec.class_name != "chat"]
    chats = [r for r in records if r.spec.class_name == "chat"]
    # spawn, not fork: this process has threads (the RSS sampler, the watchdog).
    mp = multiprocessing.get_context("spawn")
    ours, theirs = mp.Pipe()
    chat_proc = mp.Process(
        target=chat_clients,
        args=(server.url, [r.spec for r in chats], tokens, budget, theirs),
        daemon=True,
    )
    chat_proc.start()
    limits = httpx.Limits(
        max_connections=len(specs) + 16, max_keepalive_connections=len(specs) + 16
    )
    try:
        async with httpx.AsyncClient(
            base_url=server.url, limits=limits, timeout=HTTP_TIMEOUT
        ) as client:
            # Warm-up, not measured (first-request costs in every process).
            warm = Record(Spec(-1, "gana", "warm-up", 0.0))
            await gateway_client(client, warm.spec, 2, time.perf_counter(), warm)
            chat_warm = await asyncio.to_thread(receive, ours, SERVER_START_TIMEOUT)
            for error in (warm.error, chat_warm):
                if error is not None:
                    raise RuntimeError(f"warm-up request failed: {error}\n{server.tail()}")
            rss_idle = server.rss()
            cpu_server = server.cpu_seconds()
            cpu_bench = time.process_time()
            release = time.perf_counter() + LEAD
            ours.send(release)
            chat_result = asyncio.ensure_future(
                asyncio.to_thread(receive, ours, LEAD + budget + 10.0)
            )
            tasks = [
                asyncio.create_task(gateway_client(client, r.spec, tokens, release, r))
                for r in background
            ]
            probe = LagProbe()
            probe.start()
            timed_out = await wait_bounded(tasks, release + budget)
            loop_lag = await probe.stop()
            chat_lag: dict[str, Any] | None = None
            try:
                rows, chats_timed_out, chat_lag = await chat_result
                for record, row in zip(chats, rows, strict=True):
                    for name, value in row.items():
                        setattr(record, name, value)
                timed_out = timed_out or chats_timed_out
            except (TimeoutError, EOFError, OSError) as exc:
                for record in chats:
                    record.error = f"chat process: {type(exc).__name__}"
            cpu_bench = time.process_time() - cpu_bench
            cpu_server = server.cpu_seconds() - cpu_server
            try:
                metrics = (await client.get("/metrics", timeout=10.0)).text
                view = server_view(scrape(metrics))
            except httpx.HTTPError as exc:
                view = {"error": f"/metrics: {type(exc).__name__}"}
    finally:
        chat_proc.join(5.0)
        if chat_proc.is_alive():
            chat_proc.kill()
            chat_proc.join()
    return {
        "records": records,
        "release": release,
        "timed_out": timed_out,
        "loop_lag": loop_lag,
        "chat_process_loop_lag": chat_lag,
        "bench_cpu_seconds": cpu_bench,
        "server_cpu_seconds": cpu_server,
        "server_rss_idle_bytes": rss_idle,
        "server_view": view,
    }


# -- summaries -------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float | None:
    """Percentile with linear interpolation (numpy's default); None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def dist(values: Sequence[float]) -> dict[str, float | int | None]:
    return {
        "count": len(values),
        "p50": pct(values, 0.50),
        "p99": pct(values, 0.99),
        "mean": sum(values) / len(values) if values else None,
        "max": max(values) if values else None,
    }


def summarise(result: dict[str, Any], interval: float) -> dict[str, Any]:
    records: list[Record] = result["records"]
    release: float = result["release"]
    ok = [r for r in records if r.error is None]

    def ttfts(pred: Any) -> list[float]:
        return [t for r in ok if pred(r) and (t := r.ttft) is not None]

    delivered = sum(r.tokens for r in records)
    ends = [r.end for r in records if r.end is not None]
    wall = (max(ends) - release) if ends else None
    tokens_per_s = delivered / wall if wall else None
    by_class = {
        c: dist(ttfts(lambda r, c=c: r.spec.class_name == c))
        for c in sorted({r.spec.class_name for r in records})
    }
    running_to_first = [
        r.first - r.running_at for r in ok if r.first is not None and r.running_at is not None
    ]
    headers = [
        r.headers_at - r.start for r in ok if r.headers_at is not None and r.start is not None
    ]
    summary: dict[str, Any] = {
        "requests": len(records),
        "ok": len(ok),
        "errors": dict(Counter(r.error for r in records if r.error is not None)),
        "timed_out": result["timed_out"],
        "peak_in_flight": peak_in_flight(records),
        "loop_lag": result["loop_lag"],
        "ttft_all": dist(ttfts(lambda r: True)),
        "ttft_chat": dist(ttfts(lambda r: r.spec.class_name == "chat")),
        "ttft_background": dist(ttfts(lambda r: r.spec.class_name != "chat")),
        "ttft_by_class": by_class,
        "tokens_delivered": delivered,
        "wall_seconds": wall,
        "tokens_per_second": tokens_per_s,
        "device_utilisation": tokens_per_s * interval if tokens_per_s else None,
        "bench_cpu_seconds": result["bench_cpu_seconds"],
    }
    if headers:
        summary["response_headers"] = dist(headers)
    if running_to_first:
        summary["running_comment_to_first_token"] = dist(running_to_first)
        # What the clients had to read: queue-position comments against tokens.
        summary["sse_comment_lines"] = sum(r.comments for r in records)
    summary["chat_requests"] = [
        {
            "offset": r.spec.offset,
            "ttft": r.ttft,
            "response_headers": None
            if r.headers_at is None or r.start is None
            else r.headers_at - r.start,
            "error": r.error,
        }
        for r in records
        if r.spec.class_name == "chat"
    ]
    for key in (
        "scheduler",
        "chat_process_loop_lag",
        "server_cpu_seconds",
        "server_rss_idle_bytes",
        "server_view",
    ):
        if key in result:
            summary[key] = result[key]
    if "server_view" in result and "ttft_mean_by_class" in result["server_view"]:
        # Client-observed mean minus the gateway's own (submit -> first token
        # produced): what HTTP, request parsing and SSE delivery add on average.
        server = result["server_view"]["ttft_mean_by_class"]
        summary["http_overhead_mean_by_class"] = {
            c: by_class[c]["mean"] - server[c]
            for c in by_class
            if c in server and by_class[c]["mean"] is not None
        }
    return summary


def compare(inp: dict[str, Any], gw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for group in ("ttft_all", "ttft_chat", "ttft_background"):
        for q in ("p50", "p99", "mean"):
            a, b = inp[group][q], gw[group][q]
            if a is not None and b is not None:
                out[f"{group}_{q}_added_seconds"] = b - a
                out[f"{group}_{q}_ratio"] = b / a if a else None
    a, b = inp["tokens_per_second"], gw["tokens_per_second"]
    if a and b:
        out["tokens_per_second_ratio"] = b / a
    return out


# -- output ----------------------------------------------------------------------


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.1f} ms"


def secs(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f} s"


def ttft_cell(value: float | None) -> str:
    if value is None:
        return "-"
    return ms(value) if abs(value) < 1.0 else secs(value)


def mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.1f} MiB"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or b is None else f"{b / a:.2f}x"


def table(inp: dict[str, Any], gw: dict[str, Any], server: dict[str, Any], title: str) -> Table:
    t = Table(title=title)
    for header in ("", "in-process", "gateway", "gateway - in-process", "ratio"):
        t.add_column(header, justify="left" if not header else "right")

    def errors(s: dict[str, Any]) -> str:
        n = sum(s["errors"].values())
        return f"{n}" + (
            "" if not n else " (" + ", ".join(f"{k}: {v}" for k, v in s["errors"].items()) + ")"
        )

    t.add_row(
        "requests ok / sent",
        f"{inp['ok']} / {inp['requests']}",
        f"{gw['ok']} / {gw['requests']}",
        "",
        "",
    )
    t.add_row("errors", errors(inp), errors(gw), "", "")
    t.add_row(
        "peak requests in flight", str(inp["peak_in_flight"]), str(gw["peak_in_flight"]), "", ""
    )
    for label, group in (
        ("all", "ttft_all"),
        ("chat", "ttft_chat"),
        ("background", "ttft_background"),
    ):
        for q in ("p50", "p99"):
            a, b = inp[group][q], gw[group][q]
            added = None if a is None or b is None else b - a
            t.add_row(
                f"TTFT {label} {q} (n={gw[group]['count']})",
                ttft_cell(a),
                ttft_cell(b),
                ttft_cell(added),
                ratio(a, b),
            )
    server_ttft = gw.get("server_view", {}).get("ttft_mean_by_class", {})
    if "chat" in server_ttft:
        # The gateway's own clock: submit -> first token produced, without HTTP.
        a, b = inp["ttft_chat"]["mean"], server_ttft["chat"]
        t.add_row(
            "TTFT chat mean, in the server",
            ttft_cell(a),
            ttft_cell(b),
            ttft_cell(None if a is None else b - a),
            ratio(a, b),
        )
    overhead = gw.get("http_overhead_mean_by_class", {})
    if overhead:
        chat = overhead.get("chat")
        bg = [v for c, v in overhead.items() if c != "chat"]
        t.add_row("HTTP+SSE cost, chat (mean)", "", ms(chat), "", "")
        if bg:
            t.add_row("HTTP+SSE cost, background (mean)", "", ms(sum(bg) / len(bg)), "", "")
    if "response_headers" in gw:
        t.add_row(
            "request -> response headers p50 / p99",
            "",
            f"{ms(gw['response_headers']['p50'])} / {ms(gw['response_headers']['p99'])}",
            "",
            "",
        )
    if "sse_comment_lines" in gw:
        t.add_row(
            "SSE lines read: comments / tokens",
            "",
            f"{gw['sse_comment_lines']:,} / {gw['tokens_delivered']:,}",
            "",
            "",
        )
    a, b = inp["tokens_per_second"], gw["tokens_per_second"]
    t.add_row(
        "tokens/s delivered",
        f"{a:,.1f}" if a else "-",
        f"{b:,.1f}" if b else "-",
        f"{b - a:+,.1f}" if a and b else "-",
        ratio(a, b),
    )
    t.add_row(
        "device busy (tokens/s x interval)",
        f"{inp['device_utilisation']:.1%}" if inp["device_utilisation"] else "-",
        f"{gw['device_utilisation']:.1%}" if gw["device_utilisation"] else "-",
        "",
        "",
    )
    t.add_row(
        "wall (release -> last token)",
        secs(inp["wall_seconds"]),
        secs(gw["wall_seconds"]),
        "",
        ratio(inp["wall_seconds"], gw["wall_seconds"]),
    )
    sv = gw.get("server_view", {})
    t.add_row(
        "preemptions",
        str(inp["scheduler"]["preemptions"]),
        str(int(sv.get("preemptions", 0))) if "preemptions" in sv else "-",
        "",
        "",
    )
    t.add_row(
        "bench loop lag p99 / max (background)",
        f"{ms(inp['loop_lag']['p99'])} / {ms(inp['loop_lag']['max'])}",
        f"{ms(gw['loop_lag']['p99'])} / {ms(gw['loop_lag']['max'])}",
        "",
        "",
    )
    chat_lag = gw.get("chat_process_loop_lag")
    if chat_lag:
        t.add_row(
            "bench loop lag p99 / max (chat process)",
            "",
            f"{ms(chat_lag['p99'])} / {ms(chat_lag['max'])}",
            "",
            "",
        )
    t.add_row("server peak RSS (VmHWM)", "", mib(server.get("vm_hwm_bytes")), "", "")
    t.add_row(
        "server RSS idle -> sampled max",
        "",
        f"{mib(gw.get('server_rss_idle_bytes'))} -> {mib(server.get('rss_sampled_max_bytes'))}",
        "",
        "",
    )
    t.add_row(
        "CPU s: server / this process",
        f"- / {inp['bench_cpu_seconds']:.1f}",
        f"{gw.get('server_cpu_seconds', 0):.1f} / {gw['bench_cpu_seconds']:.1f}",
        "",
        "",
    )
    return t


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--background", type=int, default=BACKGROUND, help="background streams, all at once"
    )
    parser.add_argument(
        "--chats", type=int, default=CHATS, help="chat requests arriving during the run"
    )
    parser.add_argument("--tokens", type=int, default=TOKENS, help="max_tokens of every request")
    parser.add_argument(
        "--token-interval", type=float, default=TOKEN_INTERVAL, help="sim seconds a token"
    )
    parser.add_argument(
        "--timeout", type=float, default=175.0, help="hard bound of the whole run, s"
    )
    parser.add_argument("--order", default="inprocess,gateway", help="which variant runs first")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    order = [v.strip() for v in args.order.split(",")]
    if sorted(order) != ["gateway", "inprocess"]:
        parser.error("--order: give inprocess,gateway or gateway,inprocess")
    began = time.perf_counter()
    hard_deadline = began + args.timeout
    # A table this wide wraps badly at the 80 columns rich assumes off a terminal.
    console = Console(width=None if sys.stdout.isatty() else 140)

    serve_argv = [
        "--backend", "sim",
        "--model", MODEL,
        "--host", HOST,
        "--token-interval", str(args.token_interval),
        "--queue-limit", str(QUEUE_LIMIT),
        # No access log: 530 log lines are I/O the in-process variant does not do.
        "--log-level", "warning",
    ]  # fmt: skip
    specs = plan(args.background, args.chats, args.tokens, args.token_interval, args.seed)
    device_seconds = len(specs) * args.tokens * args.token_interval
    # Each variant may take its device time twice over plus slack; never past
    # the hard deadline (the server's start and stop need ~10 s of it).
    phase_budget = 2.0 * device_seconds + 10.0

    # The last resort: whatever hangs, the run ends and the server is killed.
    server = Server(serve_argv)

    def watchdog() -> None:
        console.print(f"[red]hard timeout ({args.timeout:g} s + 20 s): killing the run")
        if server.proc is not None and server.proc.poll() is None:
            server.proc.kill()
        os._exit(3)

    dog = threading.Timer(args.timeout + 20.0, watchdog)
    dog.daemon = True
    dog.start()

    load_before = os.getloadavg()
    raw: dict[str, dict[str, Any]] = {}
    server_info: dict[str, Any] = {}
    try:
        for variant in order:
            # Out of time, a variant still runs a second, so that its requests are
            # reported (as unfinished) rather than the run ending without results.
            budget = max(1.0, min(phase_budget, hard_deadline - time.perf_counter() - 10.0))
            gc.collect()
            with console.status(
                f"{variant}: {len(specs)} streams, ~{device_seconds:.0f} s of device time"
            ):
                if variant == "inprocess":
                    raw[variant] = asyncio.run(
                        run_inprocess(serve_argv, specs, args.tokens, budget)
                    )
                else:
                    server.start()
                    try:
                        raw[variant] = asyncio.run(run_gateway(server, specs, args.tokens, budget))
                        server_info["vm_hwm_bytes"] = server.vm_hwm()
                        server_info["rss_sampled_max_bytes"] = max(
                            (b for _, b in server.samples), default=None
                        )
                        server_info["rss_samples"] = len(server.samples)
                    finally:
                        server_info.update(server.stop())
                    # At --log-level warning the log is the banner line and nothing
                    # else unless something went wrong: keep anything more.
                    log = server.tail().splitlines()
                    if len(log) > 2 or not server_info.get("clean_stop"):
                        server_info["log_tail"] = "\n".join(log)
    finally:
        dog.cancel()
        if server.proc is not None and server.proc.poll() is None:
            server.stop()
        server.close()

    inp = summarise(raw["inprocess"], args.token_interval)
    gw = summarise(raw["gateway"], args.token_interval)
    comparison = compare(inp, gw)
    title = (
        f"{args.background} background streams + {args.chats} chats, {args.tokens} tokens at "
        f"{args.token_interval * 1000:g} ms (order: {', '.join(order)})"
    )
    console.print(table(inp, gw, server_info, title))
    if server_info.get("log_tail"):
        console.print(f"[yellow]server log tail:\n{server_info['log_tail']}")

    result = {
        "benchmark": "gateway_load",
        "settings": {
            "background": args.background,
            "chats": args.chats,
            "tokens": args.tokens,
            "token_interval": args.token_interval,
            "background_mix": {k: {"share": s, "producers": p} for k, (s, p) in MIX.items()},
            "chat_window_fraction": CHAT_WINDOW,
            "order": order,
            "seed": args.seed,
            "timeout": args.timeout,
            "serve_argv": serve_argv,
            "device_seconds_per_variant": device_seconds,
        },
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "httpx": httpx.__version__,
            "event_loop": "asyncio (no uvloop; uvicorn with h11)",
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
        },
        "total_seconds": time.perf_counter() - began,
        "inprocess": inp,
        "gateway": gw,
        "server": server_info,
        "comparison": comparison,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.out} in {result['total_seconds']:.0f} s")
    failed = sum(inp["errors"].values()) + sum(gw["errors"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
