"""A 500-note backfill as one batch vs as 500 concurrent HTTP requests.

`tierlm serve --backend sim` runs as a real subprocess on 127.0.0.1 (a fresh
one, with a fresh data directory, per variant). The same work, N notes of
``--tokens`` tokens each, is sent two ways:

- **requests**: N non-streamed chat completions at once, each held open by
  its client (class nataraj, one producer: what a producer does today);
- **batch**: one JSONL file uploaded to ``/v1/files``, one ``POST
  /v1/batches``, then polled until completed (docs/gateway.md "Batches"):
  the gateway feeds ``batches.in_flight`` of its requests at a time.

While each runs, a person's streamed chat arrives every ``--chat-every``
seconds from another thread (its own connection): its time to first token is
what the person notices. Reported per variant: wall time to the last answer,
notes/s and tokens/s (ideal: 1 / token interval, one device), the chats'
first-token time as the client sees it (p50, max), errors, and the gateway's
CPU seconds and peak RSS. The two run one after the other on this shared
machine, so compare them as ratios, within one run.

    python bench/batch_vs_requests.py [--notes 500] [--tokens 8]
                                      [--token-interval 0.002] [--chat-every 1.0]
                                      [--slots 8]

Writes batch_vs_requests.json to the results folder (bench/_results.py).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
from typing import Any

import httpx
import openai

from _lib.gateway.server import Server
from _lib.results import results_file

RESULTS = results_file("batch_vs_requests")
MODEL = "sim-a"


def note(i: int, tokens: int) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"extract the facts of note {i}"}],
        "max_tokens": tokens,
    }


def chats(url: str, every: float, stop: Any, results: Any) -> None:
    """A person's streamed chat every ``every`` seconds until ``stop`` is set; each
    one's first-token time (request sent -> first content chunk) as the client
    sees it, put on ``results`` (None: an error). In a process of its own: the
    loop reading 500 answers would delay a chat timed beside it."""
    body = {**note(-1, 2), "stream": True}
    with httpx.Client(base_url=url, timeout=60) as client:
        while not stop.wait(every):
            started = time.perf_counter()
            first = None
            try:
                with client.stream("POST", "/v1/chat/completions", json=body) as response:
                    for line in response.iter_lines():
                        if first is None and line.startswith("data: ") and '"w' in line:
                            first = time.perf_counter() - started
            except httpx.HTTPError:
                pass
            results.put(first)


async def as_requests(url: str, notes: int, tokens: int) -> int:
    """N concurrent requests; the number that failed."""
    limits = httpx.Limits(max_connections=notes + 10, max_keepalive_connections=notes + 10)
    headers = {"X-Tierlm-Class": "nataraj", "X-Tierlm-Producer": "notes"}
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=600, headers=headers) as c:
        answers = await asyncio.gather(
            *(c.post("/v1/chat/completions", json=note(i, tokens)) for i in range(notes)),
            return_exceptions=True,
        )
    return sum(1 for a in answers if not isinstance(a, httpx.Response) or a.status_code != 200)


def as_batch(url: str, notes: int, tokens: int) -> int:
    """One batch of N lines, polled to its end; the number of requests that failed."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
    lines = [
        {
            "custom_id": f"note-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": note(i, tokens),
        }
        for i in range(notes)
    ]
    content = "\n".join(json.dumps(line) for line in lines).encode()
    file = client.files.create(file=("notes.jsonl", io.BytesIO(content)), purpose="batch")
    batch = client.batches.create(
        input_file_id=file.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"tierlm_class": "nataraj", "tierlm_producer": "notes"},
    )
    while batch.status not in ("completed", "failed", "expired", "cancelled"):
        time.sleep(0.1)
        batch = client.batches.retrieve(batch.id)
    counts = batch.request_counts
    assert counts is not None
    return counts.failed + (notes - counts.completed - counts.failed)


def variant(name: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as data:
        server = Server(
            [
                "--backend",
                "sim",
                "--token-interval",
                str(args.token_interval),
                "--slots",
                str(args.slots),
                "--data-dir",
                data,
                "--log-level",
                "warning",
            ]
        )
        server.start()
        try:
            spawn = multiprocessing.get_context("spawn")
            stop, results = spawn.Event(), spawn.Queue()
            person = spawn.Process(target=chats, args=(server.url, args.chat_every, stop, results))
            person.start()
            cpu = server.cpu_seconds()
            started = time.perf_counter()
            if name == "requests":
                failed = asyncio.run(as_requests(server.url, args.notes, args.tokens))
            else:
                failed = as_batch(server.url, args.notes, args.tokens)
            elapsed = time.perf_counter() - started
            stop.set()
            person.join()
            waits = []
            while not results.empty():
                waits.append(results.get())
            cpu = server.cpu_seconds() - cpu
            peak = server.vm_hwm()
        finally:
            server.stop()
            server.close()
    ttft = [w for w in waits if w is not None]
    return {
        "seconds": round(elapsed, 2),
        "notes_per_second": round(args.notes / elapsed, 1),
        "tokens_per_second": round(args.notes * args.tokens / elapsed, 1),
        "device_busy_share": round(args.notes * args.tokens * args.token_interval / elapsed, 3),
        "failed": failed,
        "chats": len(ttft),
        "chat_errors": len(waits) - len(ttft),
        "chat_first_token_ms_p50": round(statistics.median(ttft) * 1000, 1) if ttft else None,
        "chat_first_token_ms_max": round(max(ttft) * 1000, 1) if ttft else None,
        "server_cpu_seconds": round(cpu, 2),
        "server_peak_rss_mb": None if peak is None else round(peak / 2**20, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=500)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--token-interval", type=float, default=0.002)
    parser.add_argument("--chat-every", type=float, default=1.0)
    parser.add_argument("--slots", type=int, default=8, help="the device's slots (sim)")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    rows = {name: variant(name, args) for name in ("requests", "batch")}
    result = {
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "notes": args.notes,
        "tokens": args.tokens,
        "token_interval": args.token_interval,
        "slots": args.slots,
        "ideal_seconds": args.notes * args.tokens * args.token_interval,
        "rows": rows,
        "batch_vs_requests_throughput": round(
            rows["batch"]["notes_per_second"] / rows["requests"]["notes_per_second"], 2
        ),
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{'':10} {'s':>7} {'notes/s':>8} {'tok/s':>7} {'busy':>5} {'failed':>6} "
        f"{'chat p50 ms':>11} {'chat max ms':>11} {'cpu s':>6} {'rss MB':>7}"
    )
    for name, r in rows.items():
        print(
            f"{name:10} {r['seconds']:7} {r['notes_per_second']:8} {r['tokens_per_second']:7} "
            f"{r['device_busy_share']:5} {r['failed']:6} {r['chat_first_token_ms_p50']!s:>11} "
            f"{r['chat_first_token_ms_max']!s:>11} {r['server_cpu_seconds']:6} "
            f"{r['server_peak_rss_mb']!s:>7}"
        )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
