"""Simulator speed: simulated jobs per wall-second, issue118 over 24 simulated hours.

The simulator runs the REAL Scheduler with a SimulatedRunner on a
virtual-time loop; this measures how fast, for each policy, on the `issue118`
workload (the person's deck / chat / away cycle, the 500-note backfill then
new notes, Gana crons on two models) over 86 400 simulated seconds. The
simulation and the metrics (computed after it) are timed apart.

    python bench/sim_speed.py [--hours 24] [--policies tierlm,fifo,...] [--rounds 3]
        [--workload issue118]

Writes ./bench-results/sim_speed.json and prints a table. With ``--rounds``
above 1 the policies take turns round by round and the median round of each
is reported. The day's metrics (chat TTFT, waste, swaps) are recorded too:
they are deterministic, only the wall time varies.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from _lib.results import load_now, machine, results_file
from tierlm.sim import DeviceModel, compute_metrics, simulate
from tierlm.sim.policies import DEFAULT_COLUMNS, parse_policy_names
from tierlm.sim.workloads import get_workload

RESULTS = results_file("sim_speed")


def run_once(
    workload_name: str, policy: str, hours: float, seed: int
) -> tuple[float, float, dict[str, Any]]:
    workload = get_workload(workload_name)
    gc.collect()
    started = time.perf_counter()
    records = simulate(workload, policy, seed=seed, duration=hours * 3600.0)
    wall = time.perf_counter() - started
    started = time.perf_counter()
    metrics = compute_metrics(records)
    return wall, time.perf_counter() - started, metrics


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--policies", default=",".join(DEFAULT_COLUMNS))
    parser.add_argument("--workload", default="issue118")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    load_before = load_now()
    policies = parse_policy_names(args.policies)
    console = Console()
    walls: dict[str, list[float]] = {name: [] for name in policies}
    metric_walls: dict[str, list[float]] = {name: [] for name in policies}
    metrics: dict[str, dict[str, Any]] = {}
    for round_ in range(args.rounds):
        for name in policies:
            with console.status(f"round {round_ + 1}/{args.rounds}: {name}, {args.hours:g} h"):
                wall, metric_wall, m = run_once(args.workload, name, args.hours, args.seed)
            walls[name].append(wall)
            metric_walls[name].append(metric_wall)
            metrics[name] = m  # identical every round (deterministic)

    rows: dict[str, dict[str, Any]] = {}
    for name in policies:
        m = metrics[name]
        wall = statistics.median(walls[name])
        rows[name] = {
            "wall_seconds_median": wall,
            "wall_seconds_rounds": walls[name],
            "metrics_wall_seconds_median": statistics.median(metric_walls[name]),
            "jobs_submitted": m["jobs"]["submitted"],
            "jobs_completed": m["jobs"]["completed"],
            "completed_jobs_per_wall_second": m["jobs"]["completed"] / wall,
            "simulated_seconds_per_wall_second": args.hours * 3600.0 / wall,
            "day": {
                "chat_count": m["chat"]["count"],
                "chat_ttft_p50_s": m["chat"]["ttft_p50"],
                "chat_ttft_p99_s": m["chat"]["ttft_p99"],
                "chat_ttft_max_s": m["chat"]["ttft_max"],
                "chat_wait_max_s": m["chat"]["wait_max"],
                "wasted_share": m["waste"]["wasted_share"],
                "preemptions": m["waste"]["preemptions"],
                "swaps": m["swaps"]["count"],
                "utilisation": m["utilisation"],
            },
        }

    table = Table(
        title=f"{args.workload} over {args.hours:g} simulated hours (median of {args.rounds})"
    )
    for header in (
        "policy",
        "wall s",
        "metrics s",
        "jobs done",
        "jobs / wall s",
        "sim s / wall s",
        "chat p99 s",
        "wasted",
        "swaps",
    ):
        table.add_column(header, justify="left" if header == "policy" else "right")
    for name, row in rows.items():
        day = row["day"]
        table.add_row(
            name,
            f"{row['wall_seconds_median']:.2f}",
            f"{row['metrics_wall_seconds_median']:.2f}",
            f"{row['jobs_completed']:,}",
            f"{row['completed_jobs_per_wall_second']:,.0f}",
            f"{row['simulated_seconds_per_wall_second']:,.0f}",
            f"{day['chat_ttft_p99_s']:.2f}",
            f"{day['wasted_share'] * 100:.1f} %",
            f"{day['swaps']}",
        )
    console.print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "sim_speed",
                "workload": args.workload,
                "simulated_hours": args.hours,
                "seed": args.seed,
                "rounds": args.rounds,
                "device": DeviceModel().to_dict(),
                "machine": machine(load_before),
                "results": rows,
            },
            indent=2,
        )
        + "\n"
    )
    console.print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
