"""``tierlm simulate``: one workload under chosen policies, side by side.

    tierlm simulate --workload W --policies a,b,c --seed N --duration D --out DIR

Prints a table (with a progress bar while it runs) and writes results.json,
timeline.png and chat_ttft_cdf.png to DIR.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from tierlm.sim.cli_common import (
    add_device_arguments,
    device_from_args,
    positive_float,
    run_comparison,
)
from tierlm.sim.policies import POLICIES, parse_policy_names
from tierlm.sim.trace import TraceMissingError
from tierlm.sim.workloads import WORKLOADS, get_workload

__all__ = ["add_arguments", "run"]

DEFAULT_OUT = Path("tierlm-sim")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workload",
        required=True,
        choices=list(WORKLOADS),
        # argparse %-formats help text: a literal % must be doubled.
        help="; ".join(f"{name}: {w.description}" for name, w in WORKLOADS.items()).replace(
            "%", "%%"
        ),
    )
    parser.add_argument(
        "--policies",
        default=",".join(POLICIES),
        help=f"comma-separated, from {', '.join(POLICIES)} (default: all)",
    )
    parser.add_argument("--seed", type=int, default=1, help="workload seed (default 1)")
    parser.add_argument(
        "--duration",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help="simulated seconds (default: the workload's own)",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default ./{DEFAULT_OUT}/)"
    )
    parser.add_argument(
        "--trace",
        type=Path,
        default=None,
        help="the Azure trace CSV for azure-chat (default ../shared/traces/ beside the repo)",
    )
    add_device_arguments(parser)


def run(args: argparse.Namespace) -> int:
    console = Console()
    try:
        policies = parse_policy_names(args.policies)
        device = device_from_args(args)
        workload = get_workload(args.workload, trace=args.trace)
    except TraceMissingError as exc:
        print(f"tierlm simulate: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"tierlm simulate: {exc}", file=sys.stderr)
        return 2
    run_comparison(
        workload,
        policies,
        seed=args.seed,
        duration=args.duration,
        device=device,
        out=args.out,
        console=console,
    )
    return 0
