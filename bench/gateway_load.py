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
flags, on a plain asyncio loop (the server's uvicorn picks uvloop when it is
installed, as it is here). Both variants run in one invocation, one after the other, and
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

Then the loop-lag phase (bench/_lib/gateway/lag.py): for 500 and 1 000 streams
of 4 tokens released at once, uvicorn serving a trivial Starlette app
(bench/_lib/trivial_app.py) and then the gateway, each a fresh process, each
measuring its own event loop with the gateway's probe: the lag's p50 / p99 /
max during the load, ``/health`` p50 / p95 at the client before and during
it, and how many streams were served, side by side. ``--baseline-src DIR``
adds a third subject, the gateway of another checkout's ``src`` (an earlier
commit: ``git archive <commit> src | tar -x -C DIR``), so a change is measured
before and after in the same run; ``--lag-only`` skips the 500-stream
variants.

    python bench/gateway_load.py [--background 500] [--chats 30] [--tokens 20]
                                 [--token-interval 0.005] [--timeout 175]
                                 [--lag-streams 500,1000] [--lag-tokens 4]
                                 [--order inprocess,gateway] [--seed 1] [--out FILE]
                                 [--lag-only] [--baseline-src DIR]

Writes ./bench-results/gateway_load.json and prints tables. Takes ~2.5 minutes
(and ~2 more for the loop-lag phase) with the defaults: each variant is
(500 + 30) x 20 tokens x 5 ms = 53 s of simulated device time, which no
amount of concurrency shortens (one device).
``--timeout`` bounds the whole run: a variant still running at its share of it
is cancelled and its unfinished requests are counted as errors.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from _lib.gateway.clients import run_gateway, run_inprocess
from _lib.gateway.lag import lag_phase, lag_table, trivial_server
from _lib.gateway.plan import CHAT_WINDOW, MIX, MODEL, plan
from _lib.gateway.server import HOST, Server
from _lib.gateway.stats import compare, summarise
from _lib.gateway.table import table
from _lib.results import load_now, machine, results_file

RESULTS = results_file("gateway_load")

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
# The loop-lag phase (bench/_lib/gateway/lag.py): the gateway's event loop
# under 500 and 1000 streams, beside uvicorn serving a trivial app under the
# same clients. 4 tokens a stream: 1000 x 4 x 5 ms = 20 s of device time.
LAG_STREAMS = "500,1000"
LAG_TOKENS = 4
# Well above the 500 queued of one class at most: the load must be accepted (429
# is a benchmark error here, not backpressure working).
QUEUE_LIMIT = 5000


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
    parser.add_argument(
        "--lag-streams",
        default=LAG_STREAMS,
        help="loop-lag phase: stream counts, comma-separated ('' skips it)",
    )
    parser.add_argument(
        "--lag-tokens", type=int, default=LAG_TOKENS, help="loop-lag phase: tokens a stream"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lag-only", action="store_true", help="only the loop-lag phase")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="loop-lag phase: also the gateway of this src folder (PYTHONPATH)",
    )
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

    lag_streams = [int(n) for n in args.lag_streams.split(",") if n.strip()]
    # Short jobs: each job's start and end cost the gateway about as much as its
    # 4 tokens of device time, so the phase may take several times that.
    lag_budgets = {
        n: max(60.0, 5.0 * n * args.lag_tokens * args.token_interval) for n in lag_streams
    }
    dog = threading.Timer(args.timeout + sum(lag_budgets.values()) * 2 + 20.0, watchdog)
    dog.daemon = True
    dog.start()

    load_before = load_now()
    raw: dict[str, dict[str, Any]] = {}
    lag_results: dict[str, dict[str, Any]] = {}
    server_info: dict[str, Any] = {}
    try:
        for variant in [] if args.lag_only else order:
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
        for streams in lag_streams:
            pair = lag_results.setdefault(str(streams), {})
            names = ["trivial", "gateway"] + (["baseline"] if args.baseline_src else [])
            for name in names:
                if name == "trivial":
                    subject = trivial_server(streams, args.token_interval)
                elif name == "baseline":
                    baseline = {"PYTHONPATH": str(args.baseline_src.resolve())}
                    subject = Server(serve_argv, env=baseline)
                else:
                    subject = Server(serve_argv)
                gc.collect()
                with console.status(f"loop lag: {name}, {streams} streams"):
                    subject.start()
                    try:
                        pair[name] = asyncio.run(
                            lag_phase(subject, streams, args.lag_tokens, lag_budgets[streams])
                        )
                    finally:
                        pair[name]["stop"] = subject.stop()
                        subject.close()
    finally:
        dog.cancel()
        if server.proc is not None and server.proc.poll() is None:
            server.stop()
        server.close()

    inp = gw = comparison = None
    if not args.lag_only:
        inp = summarise(raw["inprocess"], args.token_interval)
        gw = summarise(raw["gateway"], args.token_interval)
        comparison = compare(inp, gw)
        title = (
            f"{args.background} background streams + {args.chats} chats, {args.tokens} tokens at "
            f"{args.token_interval * 1000:g} ms (order: {', '.join(order)})"
        )
        console.print(table(inp, gw, server_info, title))
    if lag_results:
        console.print(lag_table(lag_results))
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
            "lag_streams": lag_streams,
            "lag_tokens": args.lag_tokens,
            "lag_only": args.lag_only,
            "baseline_src": str(args.baseline_src) if args.baseline_src else None,
        },
        "command": ["python", *sys.argv],
        "machine": machine(
            load_before,
            httpx=httpx.__version__,
            event_loop="uvicorn's loop='auto' (uvloop when installed), h11",
        ),
        "total_seconds": time.perf_counter() - began,
        "inprocess": inp,
        "gateway": gw,
        "server": server_info,
        "comparison": comparison,
        # Each server's own loop lag under N streams, the gateway beside uvicorn
        # serving a trivial app (bench/_lib/gateway/lag.py).
        "loop_lag_vs_trivial": lag_results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.out} in {result['total_seconds']:.0f} s")
    failed = sum(inp["errors"].values()) + sum(gw["errors"].values()) if inp and gw else 0
    failed += sum(len(row["errors"]) for pair in lag_results.values() for row in pair.values())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
