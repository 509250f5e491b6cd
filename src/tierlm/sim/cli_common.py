"""What ``tierlm demo`` and ``tierlm simulate`` share: device options, the
progress bar, and writing results.json and the charts."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tierlm.sim.charts import CDF_FILE, TIMELINE_FILE, chat_cdf, timeline
from tierlm.sim.compare import Comparison, compare
from tierlm.sim.device import (
    DEFAULT_DECODE_TPS,
    DEFAULT_PREFILL_TPS,
    DEFAULT_SWAP_SECONDS,
    DeviceModel,
)
from tierlm.sim.report import print_report, write_results
from tierlm.sim.workload import Workload

__all__ = ["add_device_arguments", "device_from_args", "positive_float", "run_comparison"]


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


def add_device_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("simulated device (defaults: phone-class)")
    group.add_argument(
        "--decode-tps",
        type=positive_float,
        default=DEFAULT_DECODE_TPS,
        metavar="N",
        help=f"decode tokens per second (default {DEFAULT_DECODE_TPS:g})",
    )
    group.add_argument(
        "--prefill-tps",
        type=positive_float,
        default=DEFAULT_PREFILL_TPS,
        metavar="N",
        help=f"prefill tokens per second (default {DEFAULT_PREFILL_TPS:g})",
    )
    group.add_argument(
        "--swap-seconds",
        type=non_negative_float,
        default=DEFAULT_SWAP_SECONDS,
        metavar="S",
        help=f"seconds to swap models (default {DEFAULT_SWAP_SECONDS:g})",
    )


def device_from_args(args: argparse.Namespace) -> DeviceModel:
    return DeviceModel(
        decode_tps=args.decode_tps,
        prefill_tps=args.prefill_tps,
        swap_seconds=args.swap_seconds,
    )


def run_comparison(
    workload: Workload,
    policies: Sequence[str],
    *,
    seed: int,
    duration: float | None,
    device: DeviceModel,
    out: Path,
    console: Console,
) -> Comparison:
    """Simulate with a progress bar, print the tables, write results and charts."""
    horizon = float(duration if duration is not None else workload.default_duration)
    started = time.perf_counter()
    with Progress(
        TextColumn("{task.description:<16}"),
        BarColumn(),
        TextColumn("{task.completed:>6.0f}/{task.total:.0f} simulated s"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        tasks = {name: progress.add_task(name, total=horizon) for name in policies}

        def advance(name: str, now: float) -> None:
            progress.update(tasks[name], completed=min(now, horizon))

        comparison = compare(
            workload, policies, seed=seed, duration=horizon, device=device, progress=advance
        )
    elapsed = time.perf_counter() - started
    print_report(comparison, console)
    results = write_results(comparison, out)
    timeline_png = timeline(comparison.records, out / TIMELINE_FILE)
    cdf_png = chat_cdf(
        {name: m["chat"]["ttfts"] for name, m in comparison.metrics.items()},
        {name: m["chat"]["waits"] for name, m in comparison.metrics.items()},
        out / CDF_FILE,
        workload=workload.name,
        token_interval=device.token_interval,
    )
    console.print(
        f"Simulated {len(policies)} policies x {horizon:.0f} s in {elapsed:.1f} s of wall time. "
        f"Wrote {results}, {timeline_png}, {cdf_png}."
    )
    return comparison
