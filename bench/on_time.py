"""Deadlines on time against the default and FIFO, per case and seed
(docs/design.md §4.8 (on time)).

Cases:

- ``conv@0.3``, ``conv@0.5``: ``azure-chat`` (the Azure LLM 2023
  conversation trace's chats beside a deck, an extraction backlog and Gana
  cron ticks with deadlines) at a chat load of 30 % and 50 % of the device;
  ``--trace PATH`` replays another trace CSV instead (plain or .gz);
- ``cron-vs-starved``: a cron job every 60 s on m1 beside a backlogged deck
  on m1 and a backlogged agent on m2 (``tierlm.sim.workloads.on_time_cases``).

For each (case, slots, seed, policy): swaps, cron lateness max and p95, a
person's wait for the device p99 and max and time to first token p99, chats
that met a swap. ``tierlm:on-time`` is tierlm with ``SchedulerConfig(deadlines
="on-time")``. The targets (issue 55): on time, swaps <= FIFO's, cron
lateness <= FIFO+resume's, a person's wait p99 within one swap (10 s) of the
default's. Deterministic (virtual time); runs go two at a time.

    python bench/on_time.py [--hours 4] [--seeds 21,22,23,24,25] [--slots 1,8]

Writes on_time.json to the results folder (bench/_lib/results.py) and prints
one table per case and slots.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from _lib.results import load_now, machine, write_results
from tierlm.core.config import SchedulerConfig
from tierlm.sim import compute_metrics, simulate
from tierlm.sim.device import DeviceModel
from tierlm.sim.workload import Workload
from tierlm.sim.workloads import get_workload
from tierlm.sim.workloads.on_time_cases import CronVsStarved

POLICIES = ("tierlm", "tierlm:on-time", "fifo", "fifo+resume")
ON_TIME = ":on-time"
CASES = ("conv@0.3", "conv@0.5", "cron-vs-starved")
SWAP = 10.0  # the simulated device's swap (DeviceModel's default)
TARGETS = ("swaps_le_fifo", "late_le_fifo_resume", "extra_wait_le_one_swap")


def workload(case: str, trace: Path | None) -> Workload:
    if case == CronVsStarved.name:
        return CronVsStarved()
    _name, load = case.split("@")
    return get_workload("azure-chat", trace=trace, params={"chat_load": float(load)})


def measure(job: tuple[str, Path | None, int, int, str, float]) -> dict[str, Any]:
    case, trace, slots, seed, policy, hours = job
    started = time.perf_counter()
    mode = "on-time" if policy.endswith(ON_TIME) else "after-people"
    duration = hours * 3600.0 if case != CronVsStarved.name else CronVsStarved.default_duration
    records = simulate(
        workload(case, trace),
        policy.removesuffix(ON_TIME),
        seed=seed,
        duration=duration,
        device=DeviceModel(slots=slots),
        config=SchedulerConfig(deadlines=mode),
    )
    m = compute_metrics(records)
    chat = m["chat"]
    return {
        "case": case,
        "slots": slots,
        "seed": seed,
        "policy": policy,
        "swaps": m["swaps"]["count"],
        "cron_late_max_s": m["deadlines"]["lateness_max"],
        "cron_late_p95_s": m["deadlines"]["lateness_p95"],
        "chats": chat["count"],
        "wait_p99_s": chat["wait_p99"] if chat["count"] else None,
        "wait_max_s": chat["wait_max"] if chat["count"] else None,
        "ttft_p99_s": chat["ttft_p99"] if chat["count"] else None,
        "chats_met_swap": chat["met_swap"],
        "wall_s": time.perf_counter() - started,
    }


def verdicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (case, slots, seed): on time against the targets."""
    out = []
    for key in sorted({(r["case"], r["slots"], r["seed"]) for r in rows}):
        of = {r["policy"]: r for r in rows if (r["case"], r["slots"], r["seed"]) == key}
        on, default = of.get("tierlm:on-time"), of.get("tierlm")
        fifo, resume = of.get("fifo"), of.get("fifo+resume")
        if on is None or default is None or fifo is None or resume is None:
            continue
        extra = None
        if on["wait_p99_s"] is not None and default["wait_p99_s"] is not None:
            extra = on["wait_p99_s"] - default["wait_p99_s"]
        out.append(
            {
                "case": key[0],
                "slots": key[1],
                "seed": key[2],
                "swaps_le_fifo": on["swaps"] <= fifo["swaps"],
                "late_le_fifo_resume": on["cron_late_max_s"] <= resume["cron_late_max_s"],
                "extra_wait_p99_s": extra,
                "extra_wait_le_one_swap": extra is None or extra <= SWAP,
            }
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=4.0)
    parser.add_argument("--seeds", default="21,22,23,24,25")
    parser.add_argument("--slots", default="1,8")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--trace", type=Path, default=None)
    parser.add_argument("--jobs", type=int, default=2, help="simulations at once (default 2)")
    parser.add_argument("--name", default="on_time", help="results file name (default on_time)")
    args = parser.parse_args()
    load_before = load_now()
    seeds = [int(s) for s in args.seeds.split(",")]
    slots = [int(s) for s in args.slots.split(",")]
    jobs = [
        (c, args.trace, k, s, p, args.hours)
        for c, k, s, p in itertools.product(
            args.cases.split(","), slots, seeds, args.policies.split(",")
        )
    ]
    print(f"{len(jobs)} simulations, {args.jobs} at a time ...", file=sys.stderr)
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(measure, jobs))
    print(f"done in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    checks = verdicts(rows)
    print_table(rows, checks)
    write_results(
        args.name,
        {
            "hours": args.hours,
            "seeds": seeds,
            "trace": str(args.trace) if args.trace else "azure-llm-2023-conv (shipped)",
            "rows": rows,
            "verdicts": checks,
            "machine": machine(load_before),
        },
    )
    return 0


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_table(rows: list[dict[str, Any]], checks: list[dict[str, Any]]) -> None:
    """One line per (case, slots, seed, policy), then the verdicts."""
    print(
        f"{'case':16} {'k':>2} {'seed':>4} {'policy':15} {'swaps':>5} {'late max':>8} "
        f"{'late p95':>8} {'wait p99':>8} {'wait max':>8} {'met swap':>8}"
    )
    for r in sorted(rows, key=lambda r: (r["case"], r["slots"], r["seed"])):
        print(
            f"{r['case']:16} {r['slots']:>2} {r['seed']:>4} {r['policy']:15} {r['swaps']:>5} "
            f"{_f(r['cron_late_max_s']):>8} {_f(r['cron_late_p95_s']):>8} "
            f"{_f(r['wait_p99_s']):>8} {_f(r['wait_max_s']):>8} {r['chats_met_swap']:>8}"
        )
    failed = [c for c in checks if not all(c[k] for k in TARGETS)]
    print(f"on time against its targets: {len(checks) - len(failed)} of {len(checks)} cases met")
    for c in failed:
        print("  missed:", c)


if __name__ == "__main__":
    raise SystemExit(main())
