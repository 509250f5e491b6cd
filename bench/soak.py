"""Soak: does the gateway's memory level off, or leak?

A real ``tierlm serve`` subprocess on 127.0.0.1 (the simulated backend, ONE
model, the simulated embedder) gets a bounded mix of requests for ``--minutes``
from ``--workers`` concurrent clients (httpx): chats, streamed chats,
background jobs of a fixed set of producers, streams the client leaves after
a few tokens, requests given up while queued, embeddings, bad requests, and
the state API, /metrics and the dashboard's state. The server's resident set
(RSS) is sampled every ``--sample`` seconds (psutil).

Reported in ./bench-results/soak.json: the RSS samples, the slope of a
least-squares line through them (MB/min) over the whole run and over its last
5 minutes (after the warm-up: the fair pool remembers a producer for
``idle_reset``, 300 s, and the dashboard's timeline keeps ``dashboard_window``,
300 s, so the first 5 minutes fill bounded structures by design), the growth
per request after the warm-up, the mean RSS of each minute, the requests by kind
and outcome, and a verdict: it levels off when the RSS peaked before the last
``PEAK_MARGIN`` seconds (a leak keeps setting new peaks as requests go on).

``--debug`` runs the server under tracemalloc (10 frames) and diffs two
snapshots, one after the warm-up and one at the end, taken in the server on
SIGUSR1 (a bootstrap wraps ``tierlm.cli.main``; no server code is involved):
the top allocation sites that grew are in the JSON under ``tracemalloc``. It
slows the server; use it to find a leak, not to measure the slope.

``--malloc-arena-max N`` sets glibc's ``MALLOC_ARENA_MAX`` for the server: an
RSS that grows while the Python heap does not is the C allocator's (arenas
and fragmentation), which this tells apart.

    python bench/soak.py [--minutes 10] [--workers 6] [--token-interval 0.002]
                         [--sample 5] [--debug] [--malloc-arena-max N]
                         [--out bench-results/soak.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psutil

from _lib.results import load_now, machine, results_file

HOST = "127.0.0.1"
RESULTS = results_file("soak")
START_TIMEOUT = 60.0
# The bounded structures fill within 300 s (idle_reset, dashboard_window): the
# slope that says "leak" is the one after them.
WARMUP_SECONDS = 300.0
PEAK_MARGIN = 120.0
"""Seconds: an RSS whose peak is older than this at the end has stopped
growing. (A leak of even 100 bytes a request, at the ~50 requests/s of the
default mix, sets a new peak every few seconds.)"""
PRODUCERS = [f"agent{i}" for i in range(12)]
MESSAGES = [{"role": "user", "content": "soak"}]
KINDS = (
    "chat",
    "chat_stream",
    "background",
    "stream_left",
    "given_up",
    "embeddings",
    "bad_request",
    "observe",
)

# Runs in the server process with --debug: tracemalloc, and a snapshot on SIGUSR1.
BOOTSTRAP = """
import gc, os, signal, sys, tracemalloc
tracemalloc.start(10)
taken = [0]
def snapshot(signum, frame):
    gc.collect()
    taken[0] += 1
    path = os.path.join(os.environ["SOAK_SNAPSHOTS"], f"snap{taken[0]}.pickle")
    tracemalloc.take_snapshot().dump(path)
    open(path + ".done", "w").close()
signal.signal(signal.SIGUSR1, snapshot)
from tierlm.cli import main
sys.exit(main(sys.argv[1:]))
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """``tierlm serve`` as a subprocess, its RSS sampled in a thread."""

    def __init__(self, argv: list[str], debug_dir: str | None, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (read at the end)
        prefix = [sys.executable, "-m", "tierlm.cli"]
        env = {**os.environ, **env}
        if debug_dir is not None:
            prefix = [sys.executable, "-c", BOOTSTRAP]
            env["SOAK_SNAPSHOTS"] = debug_dir
        cmd = [*prefix, "serve", *argv, "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.ps = psutil.Process(self.proc.pid)
        self.samples: list[tuple[float, float]] = []
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tierlm serve exited:\n{self.tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError("tierlm serve did not start")
            time.sleep(0.1)

    def sample_every(self, seconds: float) -> None:
        self._started = time.monotonic()

        def run() -> None:
            while True:
                with contextlib.suppress(psutil.Error):
                    rss = self.ps.memory_info().rss / 2**20
                    self.samples.append((time.monotonic() - self._started, rss))
                if self._stop.wait(seconds):
                    return

        threading.Thread(target=run, daemon=True).start()

    def snapshot(self, debug_dir: str, index: int) -> Path:
        """Ask the server for a tracemalloc snapshot (--debug) and wait for it."""
        os.kill(self.proc.pid, signal.SIGUSR1)
        path = Path(debug_dir) / f"snap{index}.pickle"
        deadline = time.monotonic() + 300
        while not Path(f"{path}.done").exists():
            if time.monotonic() > deadline:
                raise RuntimeError("no tracemalloc snapshot from the server")
            time.sleep(0.2)
        return path

    def stop(self) -> int:
        self._stop.set()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def tail(self, lines: int = 30) -> str:
        self.log.seek(0)
        return "".join(self.log.readlines()[-lines:])


class Load:
    """The request mix, from ``workers`` concurrent loops until ``deadline``."""

    def __init__(self, url: str, seed: int) -> None:
        self.url = url
        self.random = random.Random(seed)
        self.outcomes: Counter[tuple[str, str]] = Counter()
        self.unexpected: list[str] = []

    def body(self, max_tokens: int, **extra: Any) -> dict[str, Any]:
        return {"model": "sim-a", "messages": MESSAGES, "max_tokens": max_tokens, **extra}

    async def run(self, workers: int, deadline: float) -> None:
        limits = httpx.Limits(max_connections=workers * 2)
        async with httpx.AsyncClient(base_url=self.url, timeout=60, limits=limits) as client:
            await asyncio.gather(*(self.worker(client, deadline) for _ in range(workers)))

    async def worker(self, client: httpx.AsyncClient, deadline: float) -> None:
        while time.monotonic() < deadline:
            kind = self.random.choice(KINDS)
            try:
                outcome = await getattr(self, kind)(client)
            except (httpx.HTTPError, json.JSONDecodeError) as exc:
                outcome = f"unexpected: {type(exc).__name__}"
            self.outcomes[kind, outcome] += 1
            if outcome.startswith("unexpected") and len(self.unexpected) < 20:
                self.unexpected.append(f"{kind}: {outcome}")

    @staticmethod
    def status(response: httpx.Response, expected: int = 200) -> str:
        if response.status_code == expected:
            return "ok"
        if response.status_code == 429:
            return "queue_full"  # an expected answer under load
        return f"unexpected: {response.status_code} {response.text[:120]}"

    async def chat(self, client: httpx.AsyncClient) -> str:
        return self.status(await client.post("/v1/chat/completions", json=self.body(8)))

    async def chat_stream(self, client: httpx.AsyncClient) -> str:
        body = self.body(16, stream=True)
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            done = False
            async for line in response.aiter_lines():
                done = done or line == "data: [DONE]"
            return "ok" if done and response.status_code == 200 else self.status(response)

    def background_headers(self) -> dict[str, str]:
        return {
            "X-Tierlm-Class": self.random.choice(("gana", "nataraj")),
            "X-Tierlm-Producer": self.random.choice(PRODUCERS),
        }

    async def background(self, client: httpx.AsyncClient) -> str:
        response = await client.post(
            "/v1/chat/completions", json=self.body(30), headers=self.background_headers()
        )
        return self.status(response)

    async def stream_left(self, client: httpx.AsyncClient) -> str:
        """A stream the client leaves after a few chunks (its job is cancelled)."""
        body = self.body(200, stream=True)
        headers = self.background_headers()
        async with client.stream(
            "POST", "/v1/chat/completions", json=body, headers=headers
        ) as response:
            if response.status_code != 200:
                return self.status(response)
            data = 0
            async for line in response.aiter_lines():
                data += line.startswith("data:")
                if data >= 3:
                    break
        return "left"

    async def given_up(self, client: httpx.AsyncClient) -> str:
        """A request whose client gives up after 50 ms, queued or running."""
        try:
            response = await client.post(
                "/v1/chat/completions",
                json=self.body(100),
                headers=self.background_headers(),
                timeout=httpx.Timeout(60, read=0.05),
            )
        except httpx.ReadTimeout:
            return "given_up"
        return self.status(response)

    async def embeddings(self, client: httpx.AsyncClient) -> str:
        texts = [f"note {self.random.randrange(10**6)}" for _ in range(4)]
        body = {"model": "sim-embed", "input": texts}
        return self.status(await client.post("/v1/embeddings", json=body))

    async def bad_request(self, client: httpx.AsyncClient) -> str:
        if self.random.random() < 0.5:
            response = await client.post(
                "/v1/chat/completions",
                content=b"{not json",
                headers={"Content-Type": "application/json"},
            )
        else:
            response = await client.post("/v1/chat/completions", json={"model": "nope"})
        return "rejected" if 400 <= response.status_code < 500 else self.status(response)

    async def observe(self, client: httpx.AsyncClient) -> str:
        for path in ("/v1/scheduler/state", "/metrics", "/dashboard/state", "/ready"):
            response = await client.get(path)
            if response.status_code != 200:
                return self.status(response)
        return "ok"


def slope(samples: list[tuple[float, float]]) -> float | None:
    """MB per minute of a least-squares line through (seconds, MB) samples."""
    if len(samples) < 3:
        return None
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_m = sum(m for _, m in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    if var == 0:
        return None
    cov = sum((t - mean_t) * (m - mean_m) for t, m in samples)
    return cov / var * 60


def tracemalloc_diff(first: Path, last: Path, top: int = 15) -> dict[str, Any]:
    """What Python allocated between the two snapshots: the totals (the
    tracemalloc's own bookkeeping is outside them, and inflates the RSS of a
    --debug run) and the allocation sites that grew most."""
    import tracemalloc

    old = tracemalloc.Snapshot.load(str(first))
    new = tracemalloc.Snapshot.load(str(last))
    stats = new.compare_to(old, "traceback")
    growth = []
    for stat in stats[:top]:
        frames = [f"{frame.filename}:{frame.lineno}" for frame in stat.traceback]
        growth.append(
            {
                "size_diff_kb": round(stat.size_diff / 1024, 1),
                "count_diff": stat.count_diff,
                "size_kb": round(stat.size / 1024, 1),
                "traceback": frames[-4:],
            }
        )

    def total(snapshot: tracemalloc.Snapshot) -> float:
        return round(sum(stat.size for stat in snapshot.statistics("filename")) / 2**20, 2)

    return {"traced_mb": {"first": total(old), "last": total(new)}, "top_growth": growth}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--token-interval", type=float, default=0.002)
    parser.add_argument("--sample", type=float, default=5.0, help="seconds between RSS samples")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--debug", action="store_true", help="tracemalloc snapshots (slow)")
    parser.add_argument(
        "--malloc-arena-max",
        type=int,
        help="MALLOC_ARENA_MAX for the server (glibc's malloc arenas, one per thread by default)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    argv = [
        *("--backend", "sim", "--model", "sim-a", "--swap-seconds", "0"),
        *("--token-interval", str(args.token_interval), "--log-level", "warning"),
        *("--shutdown-grace", "5"),
    ]
    debug_dir = tempfile.mkdtemp(prefix="soak-") if args.debug else None
    load_before = load_now()
    env = {}
    if args.malloc_arena_max is not None:
        env["MALLOC_ARENA_MAX"] = str(args.malloc_arena_max)
    server = Server(argv, debug_dir, env)
    print(f"soak: tierlm serve pid {server.proc.pid} at {server.url}, {args.minutes} min")
    server.sample_every(args.sample)
    load = Load(server.url, args.seed)
    duration = args.minutes * 60
    started = time.monotonic()
    snapshots: list[Path] = []

    async def drive() -> None:
        warm_until = started + min(WARMUP_SECONDS, duration / 2)
        if debug_dir is not None:
            await load.run(args.workers, warm_until)
            snapshots.append(await asyncio.to_thread(server.snapshot, debug_dir, 1))
        await load.run(args.workers, started + duration)

    asyncio.run(drive())
    if debug_dir is not None:
        snapshots.append(server.snapshot(debug_dir, 2))
    time.sleep(args.sample)  # one more sample, at rest
    exit_code = server.stop()

    samples = server.samples
    end = samples[-1][0] if samples else 0.0
    last5 = [(t, m) for t, m in samples if t >= end - 300]
    last3 = [(t, m) for t, m in samples if t >= end - 180]
    after_warmup = [(t, m) for t, m in samples if t >= WARMUP_SECONDS]
    whole, tail = slope(samples), slope(last5)
    requests = sum(load.outcomes.values())
    peak_at = max(samples, key=lambda s: s[1])[0] if samples else 0.0
    levels_off = bool(samples) and peak_at < end - PEAK_MARGIN
    warm_slope = slope(after_warmup)
    per_request = None if warm_slope is None else warm_slope * 2**20 / 60 / (requests / duration)
    minutes: dict[int, list[float]] = {}
    for t, m in samples:
        minutes.setdefault(int(t // 60), []).append(m)
    result: dict[str, Any] = {
        "benchmark": "soak",
        "command": "python bench/soak.py " + " ".join(sys.argv[1:]),
        "settings": {
            "minutes": args.minutes,
            "workers": args.workers,
            "token_interval": args.token_interval,
            "sample_seconds": args.sample,
            "serve_argv": argv,
            "debug": args.debug,
            "server_env": env,
        },
        "machine": machine(load_before),
        "requests": requests,
        "requests_per_second": round(requests / duration, 1),
        "outcomes": {
            f"{kind} {outcome}": n for (kind, outcome), n in sorted(load.outcomes.items())
        },
        "unexpected": load.unexpected,
        "server_exit_code": exit_code,
        "rss_mb": {
            "first": samples[0][1] if samples else None,
            "at_warmup_end": after_warmup[0][1] if after_warmup else None,
            "last": samples[-1][1] if samples else None,
            "peak": max(m for _, m in samples) if samples else None,
        },
        "slope_mb_per_min": {
            "whole_run": whole,
            "last_5_min": tail,
            "after_warmup": warm_slope,
            "last_3_min": slope(last3),
        },
        "rss_growth_bytes_per_request_after_warmup": per_request,
        "peak_at_seconds": peak_at,
        "levels_off": levels_off,
        "mean_rss_mb_per_minute": {
            str(minute): round(sum(ms) / len(ms), 2) for minute, ms in sorted(minutes.items())
        },
        "samples": [[round(t, 1), round(m, 2)] for t, m in samples],
    }
    if len(snapshots) == 2:
        result["tracemalloc"] = tracemalloc_diff(snapshots[0], snapshots[1])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")

    def mb(value: float | None) -> str:
        return "n/a" if value is None else f"{value:+.3f} MB/min"

    rss = result["rss_mb"]
    print(
        f"requests       {requests} ({result['requests_per_second']}/s), unexpected: "
        f"{sum(n for (_, o), n in load.outcomes.items() if o.startswith('unexpected'))}"
    )
    print(f"RSS            {rss['first']:.1f} MB -> {rss['last']:.1f} MB (peak {rss['peak']:.1f})")
    print(
        f"slope          whole run {mb(whole)}, last 5 min {mb(tail)}, after warm-up "
        f"{mb(warm_slope)} ({per_request or 0:.0f} B a request)"
    )
    print(f"levels off     {'yes' if levels_off else 'NO'} (peak at {peak_at:.0f} s of {end:.0f})")
    if "tracemalloc" in result:
        traced = result["tracemalloc"]["traced_mb"]
        print(f"traced (Python) {traced['first']} MB -> {traced['last']} MB between the snapshots")
        for item in result["tracemalloc"]["top_growth"][:8]:
            print(
                f"  {item['size_diff_kb']:+} kB ({item['count_diff']:+d}) {item['traceback'][-1]}"
            )
    print(f"wrote {args.out}")
    if exit_code != 0:
        print(f"tierlm serve exited {exit_code}:\n{server.tail()}", file=sys.stderr)


if __name__ == "__main__":
    main()
