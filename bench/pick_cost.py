"""Decision cost: one pick, one preemption check, one submit, against queue
size (10 to 100 000 jobs) and against distinct producers (1 000 to 100 000).

docs/design.md §8: the median time of one scheduling decision with N jobs
queued over all tiers and 3 models; expected O(log n) in jobs AND in producers
(targets: median pick <= 20 us at 10 000 jobs and at 10 000 producers, and the
100 000 figure <= 3x the 1 000 figure on both axes). The seed's picker scans
the whole queue on every pick (docs/design.md §6.9); the first fair pool
scanned every producer on every submit (§6.10).

The queue is kept at N in steady state: each step picks a job, runs it (the
running job is charged at the preemption check and at its end, so the fair
pool's order changes), and submits a fresh one. The producers axis keeps
10 000 jobs queued and draws each job's producer from P ids (one per user
behind a gateway): at P = 100 000 most submits come from a producer that is
new or returning, and producers away longer than idle_reset are forgotten as
the steps advance the clock 1 s each. Only `pick`, `should_preempt` and
`submit` are timed.

    python bench/pick_cost.py [--sizes 10,...,100000] [--producers 1000,10000,100000]
                              [--steps 2000]
    python bench/pick_cost.py --baseline DIR [--rounds 7] [--sizes 1000,10000,100000]
    python bench/pick_cost.py --profile FILE [--profile-queued 10000]

Writes ./bench-results/pick_cost.json and prints two tables. ``--baseline DIR``
(another checkout, e.g. ``git worktree add /tmp/base HEAD``) measures this
tree's policy and DIR's in turns instead, each round in fresh processes, the
order swapped every round, and reports the medians over the rounds and their
ratio: on a shared machine only figures taken side by side compare.
``--profile FILE`` writes the cProfile of the steady state's picks and
preemption checks (top functions, by cumulative and by own time).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from _lib.results import load_now, machine, results_file
from tierlm.core import Job, Policy, SchedulerConfig, TieredPolicy, default_classes
from tierlm.core.jobs import Foreground
from tierlm.testing import next_start

RESULTS = results_file("pick_cost")
MODELS = ("m1", "m2", "m3")
CLASSES = default_classes()
PolicyFactory = Callable[[], Policy]


def make_job(rng: random.Random, job_id: int, now: float, producers: int = 16) -> Job:
    """A job of a realistic mix: mostly fair-pool and extraction, a few chats;
    its producer one of ``producers`` ids of its class."""
    roll = rng.random()
    if roll < 0.001:
        name = "chat"
    elif roll < 0.4:
        name = "extract"
    elif roll < 0.7:
        name = "nataraj"
    else:
        name = "gana"
    task_class = CLASSES[name]
    deadline = None
    if name == "gana" and rng.random() < 0.3:
        deadline = now + rng.uniform(-600, 3600)  # some overdue (T3), most ahead
    return Job(
        id=job_id,
        task_class=task_class,
        model_id=rng.choice(MODELS),
        producer=f"{name}:{rng.randrange(producers)}",
        subject=f"note-{rng.randrange(1000)}" if name == "extract" else None,
        deadline=deadline,
        submitted_at=now,
    )


def measure(
    factory: PolicyFactory,
    size: int,
    steps: int,
    seed: int = 1,
    producers: int = 16,
    profiles: tuple[cProfile.Profile, cProfile.Profile] | None = None,
) -> dict[str, float]:
    """The steady state's medians; with ``profiles``, the picks and the
    preemption checks are also profiled (into the first and the second)."""
    pick_prof, preempt_prof = profiles or (None, None)
    rng = random.Random(seed)
    policy = factory()
    now = 0.0
    next_id = 1
    for _ in range(size):
        policy.submit(make_job(rng, next_id, now, producers), now)
        next_id += 1
    policy.set_foreground(Foreground("extract", "note-7"), now)
    loaded = "m1"
    pick_ns: list[int] = []
    preempt_ns: list[int] = []
    submit_ns: list[int] = []
    gc.disable()  # a collection inside one timed call is noise, not decision cost
    try:
        for _ in range(steps):
            if pick_prof is not None:
                pick_prof.enable()
            t0 = time.perf_counter_ns()
            job = next_start(policy, now, loaded)
            pick_ns.append(time.perf_counter_ns() - t0)
            if pick_prof is not None:
                pick_prof.disable()
            if job is None:
                break
            loaded = job.model_id
            # An arrival while it runs: the preemption check the shell makes.
            arrival = make_job(rng, next_id, now, producers)
            next_id += 1
            t0 = time.perf_counter_ns()
            policy.submit(arrival, now)
            submit_ns.append(time.perf_counter_ns() - t0)
            if preempt_prof is not None:
                preempt_prof.enable()
            t0 = time.perf_counter_ns()
            policy.should_preempt(job, now + 0.5, loaded)
            preempt_ns.append(time.perf_counter_ns() - t0)
            if preempt_prof is not None:
                preempt_prof.disable()
            now += 1.0
            policy.finished(job, now)
    finally:
        gc.enable()
    return {
        "queued": size,
        "producers": producers,
        "pick_median_us": statistics.median(pick_ns) / 1000,
        "pick_p99_us": sorted(pick_ns)[int(len(pick_ns) * 0.99)] / 1000,
        "preempt_median_us": statistics.median(preempt_ns) / 1000,
        "submit_median_us": statistics.median(submit_ns) / 1000,
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
    parser.add_argument("--producers", default="1000,10000,100000")
    parser.add_argument("--producers-queued", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--baseline", type=Path, help="a checkout to measure against, in turns")
    parser.add_argument("--rounds", type=int, default=7, help="rounds with --baseline")
    parser.add_argument("--profile", type=Path, help="write the cProfile text here")
    parser.add_argument("--profile-queued", type=int, default=10_000)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--seed-literal-max",
        type=int,
        default=100_000,
        help="largest queue to run the O(n) seed-literal policy at",
    )
    args = parser.parse_args()
    load_before = load_now()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.one:  # one side of a --baseline round: the rows on stdout
        factory = policies()["tierlm"]
        print(json.dumps([measure(factory, size, args.steps) for size in sizes]))
        return 0
    if args.profile is not None:
        args.profile.write_text(profile_text(args.profile_queued, args.steps))
        print(f"wrote {args.profile}")
        return 0
    if args.baseline is not None:
        return interleaved(args.baseline, sizes, args.steps, args.rounds, load_before)
    producer_counts = [int(p) for p in args.producers.split(",")]
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
    by_producers: list[dict[str, float]] = []
    for count in producer_counts:
        with console.status(f"tierlm: {count} producers"):
            by_producers.append(
                measure(policies()["tierlm"], args.producers_queued, args.steps, producers=count)
            )

    by_size = {name: {int(r["queued"]): r for r in rows} for name, rows in results.items()}
    console.print(size_table(results, sizes, by_size))
    console.print(producers_table(by_producers, args.producers_queued))
    summary = summarize(by_size, {int(r["producers"]): r for r in by_producers})
    console.print(summary)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "pick_cost",
                "machine": machine(load_before),
                "results": results,
                "by_producers": by_producers,
                "summary": summary,
            },
            indent=2,
        )
        + "\n"
    )
    console.print(f"wrote {RESULTS}")
    return 0


def profile_text(size: int, steps: int) -> str:
    """The cProfile of ``measure``'s steady state at ``size`` queued."""
    profiles = (cProfile.Profile(), cProfile.Profile())
    measure(policies()["tierlm"], size, steps, profiles=profiles)
    out = [
        f"cProfile of bench/pick_cost.py's steady state at {size:,} queued, {steps:,} steps, "
        "seed 1 (profiling inflates per-call cost: read the shares and call counts, "
        "not the seconds)\n"
    ]
    for name, prof in zip(
        ("decide (next_start: a free one-slot device)", "should_preempt (after an arrival)"),
        profiles,
        strict=True,
    ):
        for order in ("cumulative", "tottime"):
            text = io.StringIO()
            stats = pstats.Stats(prof, stream=text).strip_dirs().sort_stats(order)
            stats.print_stats(25)
            out.append(f"=== {name}, top 25 by {order} ===\n{text.getvalue()}")
    return "\n".join(out)


def interleaved(base: Path, sizes: list[int], steps: int, rounds: int, load: float) -> int:
    """This tree's policy against ``base``'s, in turns (the module doc)."""
    trees = {"this": Path(__file__).resolve().parents[1], "baseline": base.resolve()}
    runs: dict[str, list[list[dict[str, float]]]] = {name: [] for name in trees}
    console = Console()
    for round_ in range(rounds):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for name in order:
            env = {**os.environ, "PYTHONPATH": str(trees[name] / "src")}
            command = [sys.executable, __file__, "--one", "--steps", str(steps)]
            command += ["--sizes", ",".join(map(str, sizes))]
            with console.status(f"round {round_ + 1}/{rounds}: {name}"):
                done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(done.stdout.splitlines()[-1]))
    rows = []
    table = Table(title=f"pick / preempt check, median of {rounds} interleaved rounds (us)")
    for column in ("queued", "pick", "baseline pick", "ratio", "preempt", "baseline", "ratio"):
        table.add_column(column, justify="right")
    for i, size in enumerate(sizes):
        row: dict[str, float] = {"queued": size}
        for what in ("pick", "preempt", "submit"):
            for name in trees:
                row[f"{name}_{what}_us"] = statistics.median(
                    r[i][f"{what}_median_us"] for r in runs[name]
                )
            row[f"{what}_ratio"] = row[f"this_{what}_us"] / row[f"baseline_{what}_us"]
            row[f"{what}_ratio_per_round_median"] = statistics.median(
                a[i][f"{what}_median_us"] / b[i][f"{what}_median_us"]
                for a, b in zip(runs["this"], runs["baseline"], strict=True)
            )
        rows.append(row)
        table.add_row(
            f"{size:,}",
            *(f"{row[k]:.1f}" for k in ("this_pick_us", "baseline_pick_us")),
            f"{row['pick_ratio']:.2f}x",
            *(f"{row[k]:.1f}" for k in ("this_preempt_us", "baseline_preempt_us")),
            f"{row['preempt_ratio']:.2f}x",
        )
    console.print(table)
    # Added beside the last full run's tables, if the file holds one.
    found = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    found.update(benchmark="pick_cost")
    found["interleaved"] = {
        "machine": machine(load, baseline=_describe(trees["baseline"])),
        "rounds": rounds,
        "steps": steps,
        "rows": rows,
        "runs": runs,
    }
    RESULTS.write_text(json.dumps(found, indent=2) + "\n")
    console.print(f"wrote {RESULTS}")
    return 0


def _describe(tree: Path) -> str:
    """The baseline's commit, or its path outside git."""
    try:
        done = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return str(tree)
    return done.stdout.strip()


def size_table(
    results: dict[str, list[dict[str, float]]],
    sizes: list[int],
    by_size: dict[str, dict[int, dict[str, float]]],
) -> Table:
    table = Table(title="Decision cost by queued jobs (median, microseconds)")
    table.add_column("queued", justify="right")
    for name in results:
        table.add_column(f"{name} pick", justify="right")
        table.add_column(f"{name} preempt check", justify="right")
    if "seed-literal" in results:
        table.add_column("seed-literal / tierlm (pick)", justify="right")
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
    return table


def producers_table(rows: list[dict[str, float]], queued: int) -> Table:
    table = Table(
        title=f"tierlm decision cost by distinct producers, {queued:,} queued (median, us)"
    )
    for column in ("producers", "pick", "preempt check", "submit"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            f"{int(row['producers']):,}",
            f"{row['pick_median_us']:.1f}",
            f"{row['preempt_median_us']:.1f}",
            f"{row['submit_median_us']:.1f}",
        )
    return table


def summarize(
    by_size: dict[str, dict[int, dict[str, float]]], by_producers: dict[int, dict[str, float]]
) -> dict[str, float | bool]:
    ours = by_size["tierlm"]
    summary: dict[str, float | bool] = {}
    if 10_000 in ours:
        summary["pick_median_us_at_10000"] = ours[10_000]["pick_median_us"]
        summary["target_20us_at_10000_met"] = ours[10_000]["pick_median_us"] <= 20
    if 1_000 in ours and 100_000 in ours:
        growth = ours[100_000]["pick_median_us"] / ours[1_000]["pick_median_us"]
        summary["growth_100000_over_1000"] = growth
        summary["target_growth_3x_met"] = growth <= 3
    if 10_000 in by_producers:
        pick = by_producers[10_000]["pick_median_us"]
        summary["pick_median_us_at_10000_producers"] = pick
        summary["target_20us_at_10000_producers_met"] = pick <= 20
    if 1_000 in by_producers and 100_000 in by_producers:
        low, high = by_producers[1_000], by_producers[100_000]
        for what in ("pick", "preempt", "submit"):
            ratio = high[f"{what}_median_us"] / low[f"{what}_median_us"]
            summary[f"producers_{what}_growth_100000_over_1000"] = ratio
        summary["target_producers_growth_3x_met"] = all(
            summary[f"producers_{what}_growth_100000_over_1000"] <= 3
            for what in ("pick", "preempt", "submit")
        )
    # The seed's O(n) picker against ours, side by side (docs/design.md §6.9).
    theirs_by_size = by_size.get("seed-literal", {})
    for size in (1_000, 10_000, 100_000):
        if size in ours and size in theirs_by_size:
            ratio = theirs_by_size[size]["pick_median_us"] / ours[size]["pick_median_us"]
            summary[f"seed_literal_over_tierlm_pick_at_{size}"] = ratio
    return summary


if __name__ == "__main__":
    raise SystemExit(main())
