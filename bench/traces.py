"""People, cron and the pool on both Azure traces, at 1 and k slots, against
the baselines that resume (docs/design.md §4.4, §4.5, §4.7, §8.5).

Runs ``azure-chat`` (the trace's chats beside a deck, an extraction backfill
and Gana cron ticks with deadlines), ``azure-pool`` (the trace's chats over
four pool producers that come and go) and ``chats-alone`` (the chats with no
background) on two traces:

- ``conv``: the Azure LLM 2023 conversation trace shipped with tierlm;
- ``code``: the 2023 *code* trace (long prompts: mean context 2 048 tokens),
  read from ``--code-trace PATH`` (``data/AzureLLMInferenceTrace_code.csv`` of
  Azure/AzurePublicDataset, CC-BY 4.0; not committed here). Without it, only
  ``conv`` runs, and the results say so.

For each (trace, workload, slots, seed, policy): a person's time to first
token p50 / p99 and wait for the device p99, how many chats met a swap, how
many excursions away from the person's model a chat met (bets lost,
``tierlm.sim.excursions``), cron
lateness max / p95 (``azure-chat``) beside its bound (the least lateness a
schedule that never makes a chat wait for a swap can have, even knowing
every chat in advance: ``tierlm.sim.lateness_bound``), the worst 60 s service
gap between two backlogged pool producers (``azure-pool``, VTC's measure),
extraction's worst contended window, wasted device time. ``tierlm:on-time``
is tierlm with deadlines on time (``SchedulerConfig.deadlines``,
docs/design.md §4.8). Deterministic (virtual time): the figures do not
depend on the machine; runs go two at a time.

    python bench/traces.py [--hours 4] [--seeds 1,2] [--slots 1,8] [--code-trace PATH]

Writes ./bench-results/traces.json and prints one table per trace and slots.
"""

from __future__ import annotations

import argparse
import itertools
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from _lib.results import load_now, machine, write_results
from tierlm.core.config import SchedulerConfig
from tierlm.sim import compute_metrics, simulate
from tierlm.sim.device import DeviceModel
from tierlm.sim.workloads import get_workload
from tierlm.sim.workloads.azure_pool import gap_share

POLICIES = ("tierlm", "tierlm:on-time", "fifo+resume", "strict-priority+resume")
ON_TIME = ":on-time"
"""``tierlm:on-time``: tierlm with ``SchedulerConfig(deadlines="on-time")``,
the operator's choice of punctual deadlines over the person's idle gap
(docs/design.md §4.8 (deadlines on time))."""
WORKLOADS = ("azure-chat", "azure-pool", "chats-alone")
CHATS_ALONE = ("azure-chat", {"background": 0})
"""``chats-alone``: the trace's chats with no background: what the device
gives people with nothing else to do, where tierlm must be within 1.05x of
FIFO (docs/design.md §8)."""


def measure(job: tuple[str, Path | None, str, int, int, str, float]) -> dict[str, Any]:
    trace_name, trace, workload, slots, seed, policy, hours = job
    started = time.perf_counter()
    name, params = CHATS_ALONE if workload == "chats-alone" else (workload, {})
    mode = "on-time" if policy.endswith(ON_TIME) else "after-people"
    records = simulate(
        get_workload(name, trace=trace, params=params),
        policy.removesuffix(ON_TIME),
        seed=seed,
        duration=hours * 3600.0,
        device=DeviceModel(slots=slots),
        config=SchedulerConfig(deadlines=mode),
    )
    m = compute_metrics(records)
    chat = m["chat"]
    extract = m["budget"].get("extract", {})
    return {
        "trace": trace_name,
        "workload": workload,
        "slots": slots,
        "seed": seed,
        "policy": policy,
        "chats": chat["count"],
        "ttft_p50_s": chat["ttft_p50"],
        "ttft_p99_s": chat["ttft_p99"],
        "wait_p99_s": chat["wait_p99"],
        "cron_late_max_s": m["deadlines"]["lateness_max"],
        "cron_late_p95_s": m["deadlines"]["lateness_p95"],
        "cron_bound_max_s": m["deadlines"]["bound_max"],
        "chats_met_swap": chat["met_swap"],
        "bets": m["excursions"]["bets"],
        "bets_lost": m["excursions"]["lost"],
        "chats_in_lost_bets": m["excursions"]["chats_met"],
        "gap_share_60s": gap_share(m) if workload == "azure-pool" else None,
        "extract_max_contended": extract.get("max_share_contended"),
        "extract_cap": extract.get("cap"),
        "wasted_share": m["waste"]["wasted_share"],
        "slots_busy": m["busy_seconds"] / m["horizon"],
        "wall_s": time.perf_counter() - started,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=4.0)
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--slots", default="1,8")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--code-trace", type=Path, default=None)
    parser.add_argument("--jobs", type=int, default=2, help="simulations at once (default 2)")
    args = parser.parse_args()
    load_before = load_now()
    traces: list[tuple[str, Path | None]] = [("conv", None)]
    if args.code_trace is not None:
        if not args.code_trace.is_file():
            parser.error(f"--code-trace: {args.code_trace} is not a file")
        traces.append(("code", args.code_trace))
    seeds = [int(s) for s in args.seeds.split(",")]
    slots = [int(s) for s in args.slots.split(",")]
    policies = args.policies.split(",")
    workloads = args.workloads.split(",")
    jobs = [
        (name, path, w, k, s, p, args.hours)
        for (name, path), w, k, s, p in itertools.product(traces, workloads, slots, seeds, policies)
    ]
    console = Console(stderr=True)
    console.print(f"{len(jobs)} simulations of {args.hours:g} h, {args.jobs} at a time ...")
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(measure, jobs))
    console.print(f"done in {time.perf_counter() - started:.0f} s")
    print_tables(rows)
    write_results(
        "traces",
        {
            "hours": args.hours,
            "seeds": seeds,
            "traces": [name for name, _ in traces],
            "code_trace": "missing" if args.code_trace is None else "given",
            "rows": rows,
            "machine": machine(load_before),
        },
    )
    return 0


def _f(value: float | None, digits: int = 1, pct: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}%}" if pct else f"{value:.{digits}f}"


def print_tables(rows: list[dict[str, Any]]) -> None:
    console = Console()
    keys = sorted({(r["trace"], r["workload"], r["slots"]) for r in rows})
    for trace, workload, slots in keys:
        table = Table(title=f"{workload} on the {trace} trace, {slots} slot(s); worst seed")
        for column in (
            "policy",
            "TTFT p50 s",
            "TTFT p99 s",
            "wait p99 s",
            "cron late max s",
            "its bound s",
            "chats met swap",
            "bets lost",
            "60 s gap",
            "extract",
            "waste",
        ):
            table.add_column(column, justify="right")
        key = (trace, workload, slots)
        mine = [r for r in rows if (r["trace"], r["workload"], r["slots"]) == key]
        for policy in dict.fromkeys(r["policy"] for r in mine):
            runs = [r for r in mine if r["policy"] == policy]

            def worst(key: str, runs: list[dict[str, Any]] = runs) -> float | None:
                values = [r[key] for r in runs if r[key] is not None]
                return max(values) if values else None

            table.add_row(
                policy,
                _f(worst("ttft_p50_s")),
                _f(worst("ttft_p99_s")),
                _f(worst("wait_p99_s"), 2),
                _f(worst("cron_late_max_s")),
                _f(worst("cron_bound_max_s")),
                _f(worst("chats_met_swap"), 0),
                _bets(runs),
                _f(worst("gap_share_60s"), pct=True),
                _f(worst("extract_max_contended"), pct=True),
                _f(worst("wasted_share"), pct=True),
            )
        console.print(table)
        if workload == "chats-alone":
            console.print(_alone_ratio(mine))


def _bets(runs: list[dict[str, Any]]) -> str:
    """Excursions a chat met / excursions (docs/design.md §4.8), over the seeds."""
    bets = sum(r.get("bets") or 0 for r in runs)
    return f"{sum(r.get('bets_lost') or 0 for r in runs)}/{bets}" if bets else "-"


def _alone_ratio(rows: list[dict[str, Any]]) -> str:
    """tierlm's TTFT over FIFO's (+resume) with no background, worst seed."""
    parts = []
    for key in ("ttft_p50_s", "ttft_p99_s"):
        ratios = []
        for seed in {r["seed"] for r in rows}:
            of = {r["policy"]: r[key] for r in rows if r["seed"] == seed}
            if "tierlm" in of and "fifo+resume" in of and of["fifo+resume"]:
                ratios.append(of["tierlm"] / of["fifo+resume"])
        if ratios:
            parts.append(f"{key[5:8]} {max(ratios):.3f}x")
    return "chats alone, tierlm / fifo+resume (worst seed): " + ", ".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
