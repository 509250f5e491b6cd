"""Decision cost: one pick, and one preemption check, at 10 to 100 000 queued jobs.

docs/design.md §8: the median time of one scheduling decision with N jobs
queued over all tiers, several producers and 3 models; expected O(log n)
(target: median <= 20 us at 10 000 jobs, and the 100 000 figure <= 3x the 1 000
figure). The seed's picker scans the whole queue on every pick (docs/design.md §6.9).

The queue is kept at N in steady state: each step picks a job, runs it (the
producer is charged, so the fair pool's order changes), and submits a fresh one.
Only the `pick` call and the `should_preempt` call are timed.

    python bench/pick_cost.py [--sizes 10,100,1000,10000,100000] [--steps 2000]

Writes bench/results/pick_cost.json and prints a table.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tierlm.core import Job, Policy, SchedulerConfig, TieredPolicy, default_classes
from tierlm.core.jobs import Foreground

RESULTS = Path(__file__).parent / "results" / "pick_cost.json"
MODELS = ("m1", "m2", "m3")
PolicyFactory = Callable[[], Policy]


def make_job(rng: random.Random, job_id: int, now: float, classes: dict[str, object]) -> Job:
    """A job of a realistic mix: mostly fair-pool and extraction, a few chats."""
    roll = rng.random()
    if roll < 0.001:
        name = "chat"
    elif roll < 0.4:
        name = "extract"
    elif roll < 0.7:
        name = "nataraj"
    else:
        name = "gana"
    task_class = default_classes()[name]
    deadline = None
    if name == "gana" and rng.random() < 0.3:
        deadline = now + rng.uniform(-600, 3600)  # some overdue (T3), most ahead
    return Job(
        id=job_id,
        task_class=task_class,
        model_id=rng.choice(MODELS),
        producer=f"{name}:{rng.randrange(16)}",
        subject=f"note-{rng.randrange(1000)}" if name == "extract" else None,
        deadline=deadline,
        submitted_at=now,
    )


def measure(factory: PolicyFactory, size: int, steps: int, seed: int = 1) -> dict[str, float]:
    rng = random.Random(seed)
    policy = factory()
    classes: dict[str, object] = dict(policy.classes)
    now = 0.0
    next_id = 1
    for _ in range(size):
        policy.submit(make_job(rng, next_id, now, classes), now)
        next_id += 1
    policy.set_foreground(Foreground("extract", "note-7"), now)
    loaded = "m1"
    pick_ns: list[int] = []
    preempt_ns: list[int] = []
    gc.disable()  # a collection inside one timed call is noise, not decision cost
    try:
        for _ in range(steps):
            t0 = time.perf_counter_ns()
            job = policy.pick(now, loaded)
            pick_ns.append(time.perf_counter_ns() - t0)
            if job is None:
                break
            loaded = job.model_id
            policy.started(job, now)
            # An arrival while it runs: the preemption check the shell makes.
            policy.submit(make_job(rng, next_id, now, classes), now)
            next_id += 1
            t0 = time.perf_counter_ns()
            policy.should_preempt(job, now + 0.5, loaded)
            preempt_ns.append(time.perf_counter_ns() - t0)
            now += 1.0
            policy.finished(job, now)
    finally:
        gc.enable()
    return {
        "queued": size,
        "pick_median_us": statistics.median(pick_ns) / 1000,
        "pick_p99_us": sorted(pick_ns)[int(len(pick_ns) * 0.99)] / 1000,
        "preempt_median_us": statistics.median(preempt_ns) / 1000,
        "steps": len(pick_ns),
    }


def policies() -> dict[str, PolicyFactory]:
    found: dict[str, PolicyFactory] = {
        "tierlm": lambda: TieredPolicy(default_classes(), SchedulerConfig()),
    }
    try:  # the simulator's port of the seed's pseudocode, when present
        from tierlm.sim.baselines import SeedLiteralPolicy

        found["seed-literal"] = lambda: SeedLiteralPolicy(default_classes())
    except ImportError:
        pass
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000,10000,100000")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument(
        "--seed-literal-max",
        type=int,
        default=100_000,
        help="largest queue to run the O(n) seed-literal policy at",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    console = Console()
    results: dict[str, list[dict[str, float]]] = {}
    for name, factory in policies().items():
        rows = []
        for size in sizes:
            if name == "seed-literal" and size > args.seed_literal_max:
                continue
            steps = (
                args.steps
                if name == "tierlm"
                else max(20, min(args.steps, 2_000_000 // max(size, 1)))
            )
            with console.status(f"{name}: {size} queued jobs"):
                rows.append(measure(factory, size, steps))
        results[name] = rows

    table = Table(title="Decision cost (median, microseconds)")
    table.add_column("queued", justify="right")
    for name in results:
        table.add_column(f"{name} pick", justify="right")
        table.add_column(f"{name} preempt check", justify="right")
    if "seed-literal" in results:
        table.add_column("seed-literal / tierlm (pick)", justify="right")
    by_size = {name: {int(r["queued"]): r for r in rows} for name, rows in results.items()}
    for size in sizes:
        cells = [f"{size:,}"]
        for name in results:
            row = by_size[name].get(size)
            cells += (
                [f"{row['pick_median_us']:.1f}", f"{row['preempt_median_us']:.1f}"]
                if row
                else ["-", "-"]
            )
        if "seed-literal" in results:
            ours, theirs = by_size["tierlm"].get(size), by_size["seed-literal"].get(size)
            cells.append(
                f"{theirs['pick_median_us'] / ours['pick_median_us']:.0f}x"
                if ours and theirs
                else "-"
            )
        table.add_row(*cells)
    console.print(table)

    ours = by_size["tierlm"]
    summary: dict[str, float | bool] = {}
    if 10_000 in ours:
        summary["pick_median_us_at_10000"] = ours[10_000]["pick_median_us"]
        summary["target_20us_at_10000_met"] = ours[10_000]["pick_median_us"] <= 20
    if 1_000 in ours and 100_000 in ours:
        growth = ours[100_000]["pick_median_us"] / ours[1_000]["pick_median_us"]
        summary["growth_100000_over_1000"] = growth
        summary["target_growth_3x_met"] = growth <= 3
    # The seed's O(n) picker against ours, side by side (docs/design.md §6.9).
    theirs_by_size = by_size.get("seed-literal", {})
    for size in (1_000, 10_000, 100_000):
        if size in ours and size in theirs_by_size:
            ratio = theirs_by_size[size]["pick_median_us"] / ours[size]["pick_median_us"]
            summary[f"seed_literal_over_tierlm_pick_at_{size}"] = ratio
    console.print(summary)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "pick_cost",
                "python": sys.version.split()[0],
                "machine": platform.machine(),
                "results": results,
                "summary": summary,
            },
            indent=2,
        )
        + "\n"
    )
    console.print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
