"""The Azure trace's chats over four background producers, at scale (docs/design.md §4.4).

Runs the ``azure-pool`` workload (the Azure LLM 2023 conversation trace as a
person's chats at 45 % of the device, four fair-pool producers that come and
go) for long enough to replay about 8 800 of the trace's requests, under
tierlm and FIFO on the same seed, and reports the two numbers the workload is
about:

- the worst 60 s service gap between two backlogged pool producers, as a
  share of the window (VTC's measure; tierlm's bound: 12 %);
- the longest a background producer waited, after it arrived, for its first
  dispatch (tierlm's bound: FIFO's on the same run).

Deterministic (virtual time): the figures do not depend on the machine.

    python bench/trace_pool.py [--hours 116] [--policies tierlm,fifo] [--seed 1] [--slots 1]

``--slots k`` runs it on a batched device of k slots (the default llama.cpp
curve, docs/design.md §4.7). Writes ./bench-results/trace_pool.json (with k > 1:
trace_pool_slots<k>.json) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from _lib.results import load_now, machine, results_file
from tierlm.sim import compute_metrics, simulate
from tierlm.sim.device import DeviceModel
from tierlm.sim.policies import parse_policy_names
from tierlm.sim.workloads import get_workload
from tierlm.sim.workloads.azure_pool import GAP_BOUND, gap_share, pool_wait

# ~8 800 chats at the default chat load on the default device (~76 per hour).
DEFAULT_HOURS = 116.0


def measure(policy: str, hours: float, seed: int, slots: int) -> dict[str, Any]:
    started = time.perf_counter()
    records = simulate(
        get_workload("azure-pool"),
        policy,
        seed=seed,
        duration=hours * 3600.0,
        device=DeviceModel(slots=slots),
    )
    metrics = compute_metrics(records)
    return {
        "chats": metrics["chat"]["count"],
        "busy": metrics["utilisation"],
        "gap_share_60s": gap_share(metrics),
        "max_diff_60s_s": metrics["fairness"]["max_diff_60s"],
        "arrival_wait_max_s": pool_wait(metrics),
        "arrival_waits": metrics["arrival_waits"],
        "chat_wait_max_s": metrics["chat"]["wait_max"],
        "wall_s": time.perf_counter() - started,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=DEFAULT_HOURS)
    parser.add_argument("--policies", default="tierlm,fifo")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--slots", type=int, default=1, help="the device's slots (default 1)")
    args = parser.parse_args()
    load_before = load_now()
    if args.slots < 1:
        parser.error(f"--slots: must be >= 1, got {args.slots}")
    name = "trace_pool" if args.slots == 1 else f"trace_pool_slots{args.slots}"
    results_path = results_file(name)
    policies = parse_policy_names(args.policies)
    console = Console(stderr=True)
    results: dict[str, Any] = {}
    for policy in policies:
        console.print(f"simulating {policy} for {args.hours:g} h ...")
        results[policy] = measure(policy, args.hours, args.seed, args.slots)
    table = Table(
        title=f"azure-pool, {args.hours:g} simulated hours, seed {args.seed}, {args.slots} slot(s)"
    )
    for column in ("policy", "chats", "busy", "60 s gap", "arrival wait max", "chat wait max"):
        table.add_column(column, justify="right")
    for policy, r in results.items():
        table.add_row(
            policy,
            str(r["chats"]),
            f"{r['busy']:.1%}",
            f"{r['gap_share_60s']:.1%}",
            f"{r['arrival_wait_max_s']:.1f} s",
            f"{r['chat_wait_max_s']:.2f} s",
        )
    Console().print(table)
    verdict: dict[str, Any] = {"gap_bound": GAP_BOUND}
    ours = results.get("tierlm")
    if ours is not None:
        verdict["gap_met"] = ours["gap_share_60s"] <= GAP_BOUND
        if "fifo" in results:
            verdict["arrival_wait_met"] = (
                ours["arrival_wait_max_s"] <= results["fifo"]["arrival_wait_max_s"]
            )
    results_path.write_text(
        json.dumps(
            {
                "hours": args.hours,
                "seed": args.seed,
                "slots": args.slots,
                "policies": results,
                "targets": verdict,
                "machine": machine(load_before),
            },
            indent=2,
        )
    )
    print(f"targets: {verdict}; wrote {results_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
