"""bench/gateway_load.py's server: `tierlm serve` as a subprocess, and its /metrics.

``Server`` starts the gateway on a free loopback port, waits for /health,
samples its RSS, and stops it with SIGTERM as an operator would;
``scrape`` and ``server_view`` read the gateway's own view of the run (TTFT per
class, preemptions, jobs) from its Prometheus text.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

HOST = "127.0.0.1"
SERVER_START_TIMEOUT = 30.0
SERVER_STOP_TIMEOUT = 15.0
RSS_SAMPLE_INTERVAL = 0.1


class Server:
    """`tierlm serve` as a subprocess on a free loopback port, with its memory watched."""

    def __init__(
        self, argv: list[str], command: list[str] | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.argv = argv
        self.env = env
        """Added to this process's environment (a baseline's PYTHONPATH)."""
        # Another server instead of `tierlm serve` (the loop-lag baseline's trivial app).
        self.command = command
        # Open for the server's whole life (its output, shown if it fails); closed
        # by close(), after the tail has been read.
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
        self.proc: subprocess.Popen[bytes] | None = None
        self.ps: psutil.Process | None = None
        self.samples: list[tuple[float, int]] = []
        self._stop_sampling = threading.Event()
        self._sampler: threading.Thread | None = None
        self._data: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        self.port = free_port()
        command = self.command or [sys.executable, "-m", "tierlm.cli", "serve"]
        cmd = [*command, *self.argv, "--port", str(self.port)]
        if self.command is None and "--data-dir" not in self.argv:
            # A data dir of its own: another gateway on this machine (the
            # default dir) would refuse it the lock.
            self._data = tempfile.TemporaryDirectory(prefix="tierlm-bench-")
            cmd += ["--data-dir", self._data.name]
        env = None if self.env is None else {**os.environ, **self.env}
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
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
        if self._data is not None:
            self._data.cleanup()

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
        "event_loop_lag": loop_lag(samples),
        "ttft_mean_by_class": {c: sums[c] / counts[c] for c in sums if counts.get(c)},
        "ttft_count_by_class": counts,
        "preemptions": sum(by("tierlm_preemptions_total", "class").values()),
        "jobs": jobs,
        "rejected": by("tierlm_rejected_requests_total", "reason"),
        "client_disconnects": by("tierlm_client_disconnects_total", "state"),
    }


def loop_lag(samples: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, float | None]:
    """The gateway's own event-loop lag (``tierlm_event_loop_lag_seconds``): p99 as
    the upper bound of its histogram bucket, and the largest seen."""
    buckets = sorted(
        (float(labels["le"]), value)
        for labels, value in samples.get("tierlm_event_loop_lag_seconds_bucket", ())
    )
    total = buckets[-1][1] if buckets else 0.0
    p99 = next((le for le, count in buckets if count >= 0.99 * total), None) if total else None
    largest = samples.get("tierlm_event_loop_lag_max_seconds", [({}, None)])[0][1]
    return {"p99_at_most": p99, "max": largest, "probes": total}


Samples = dict[str, list[tuple[dict[str, str], float]]]


def lag_buckets(samples: Samples) -> list[tuple[float, float]]:
    """``tierlm_event_loop_lag_seconds``'s cumulative buckets, (le, count), by le."""
    return sorted(
        (float(labels["le"]), value)
        for labels, value in samples.get("tierlm_event_loop_lag_seconds_bucket", ())
    )
