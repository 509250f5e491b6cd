"""What ``tierlm demo`` and ``tierlm simulate`` share: device options, the
progress bar, and writing results.json and the charts."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from tierlm.runners.simulated import DEFAULT_RESTORE_SECONDS, LLAMA_CPP_CPU_BATCH_COST
from tierlm.sim.charts import CDF_FILE, TIMELINE_FILE, chat_cdf, timeline
from tierlm.sim.compare import Comparison, PolicyProgress, compare
from tierlm.sim.device import (
    DEFAULT_DECODE_TPS,
    DEFAULT_PREFILL_TPS,
    DEFAULT_RESUME,
    DEFAULT_SWAP_SECONDS,
    RESUME_COSTS,
    DeviceModel,
)
from tierlm.sim.report import print_report, write_results
from tierlm.sim.workload import Workload

__all__ = [
    "SimProgress",
    "add_device_arguments",
    "add_quiet_argument",
    "device_from_args",
    "positive_float",
    "positive_int",
    "run_comparison",
    "sim_progress",
    "simulate_and_write",
]


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
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
    group.add_argument(
        "--resume",
        choices=RESUME_COSTS,
        default=DEFAULT_RESUME,
        help="what resuming a preempted job costs the device: restart (redo it all), "
        "re-evaluate (prompt + partial output again), restore (a KV snapshot) "
        f"(default {DEFAULT_RESUME})",
    )
    group.add_argument(
        "--restore-seconds",
        type=non_negative_float,
        default=DEFAULT_RESTORE_SECONDS,
        metavar="S",
        help=f"seconds to save and restore one KV snapshot (default {DEFAULT_RESTORE_SECONDS:g})",
    )
    group.add_argument(
        "--slots",
        type=positive_int,
        default=1,
        metavar="K",
        help="sequences the device decodes at once, a batch whose step costs "
        f"1 + {LLAMA_CPP_CPU_BATCH_COST:g} (k - 1) of one's (the llama.cpp CPU curve; default 1)",
    )


def add_quiet_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar (it goes to stderr, and only to a terminal)",
    )


def device_from_args(args: argparse.Namespace) -> DeviceModel:
    return DeviceModel(
        decode_tps=args.decode_tps,
        prefill_tps=args.prefill_tps,
        swap_seconds=args.swap_seconds,
        resume=args.resume,
        restore_seconds=args.restore_seconds,
        slots=args.slots,
    )


class SimProgress:
    """One bar per simulated policy: simulated time done / total."""

    def __init__(self, progress: Progress | None) -> None:
        self._progress = progress

    def comparison(self, label: str, policies: Sequence[str], horizon: float) -> PolicyProgress:
        """Bars for one comparison; returns the callback ``compare`` reports to."""
        progress = self._progress
        if progress is None:
            return lambda _name, _now: None
        tasks: dict[str, TaskID] = {
            name: progress.add_task(f"{label} {name}", total=horizon) for name in policies
        }

        def advance(name: str, now: float) -> None:
            progress.update(tasks[name], completed=min(now, horizon))

        return advance


@contextmanager
def sim_progress(quiet: bool) -> Iterator[SimProgress]:
    """A progress bar on stderr, shown only to a terminal and unless ``quiet``:
    a long run (24 simulated hours) says how far it is, a pipe or a log gets
    only the results."""
    console = Console(stderr=True)
    if quiet or not console.is_terminal:
        yield SimProgress(None)
        return
    with Progress(
        TextColumn("{task.description:<32}"),
        BarColumn(),
        TextColumn("{task.completed:>7.0f}/{task.total:.0f} simulated s"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        yield SimProgress(progress)


def run_comparison(
    workload: Workload,
    policies: Sequence[str],
    *,
    seed: int,
    duration: float | None,
    device: DeviceModel,
    out: Path,
    console: Console,
    quiet: bool = False,
    target_seeds: Sequence[int] = (),
) -> Comparison:
    """Simulate with a progress bar, print the tables, write results and charts."""
    run = simulate_and_write(
        workload,
        policies,
        seed=seed,
        duration=duration,
        device=device,
        out=out,
        quiet=quiet,
        target_seeds=target_seeds,
    )
    print_report(run.comparison, console)
    console.print(
        f"Simulated {len(policies)} policies x {run.comparison.duration:.0f} s in "
        f"{run.elapsed:.1f} s of wall time. Wrote {', '.join(map(str, run.files))}."
    )
    return run.comparison


@dataclass(frozen=True, slots=True)
class WrittenRun:
    comparison: Comparison
    elapsed: float
    """Wall-clock seconds the simulation took."""
    files: tuple[Path, ...]
    """results.json, the timeline, the chat CDF."""


def simulate_and_write(
    workload: Workload,
    policies: Sequence[str],
    *,
    seed: int,
    duration: float | None,
    device: DeviceModel,
    out: Path,
    quiet: bool = False,
    target_seeds: Sequence[int] = (),
    title: str | None = None,
) -> WrittenRun:
    """Simulate with a progress bar and write results.json and the charts,
    printing nothing: ``tierlm demo`` and ``tierlm simulate`` say it their own
    way. ``title`` names the workload on the charts (default: its name)."""
    horizon = float(duration if duration is not None else workload.default_duration)
    started = time.perf_counter()
    with sim_progress(quiet) as bars:
        comparison = compare(
            workload,
            policies,
            seed=seed,
            duration=horizon,
            device=device,
            progress=bars.comparison(workload.name, policies, horizon),
            target_seeds=target_seeds,
        )
    elapsed = time.perf_counter() - started
    results = write_results(comparison, out)
    timeline_png = timeline(comparison.records, out / TIMELINE_FILE, title=title)
    cdf_png = chat_cdf(
        {name: m["chat"]["ttfts"] for name, m in comparison.metrics.items()},
        {name: m["chat"]["waits"] for name, m in comparison.metrics.items()},
        out / CDF_FILE,
        workload=title or workload.name,
        token_interval=device.token_interval,
    )
    return WrittenRun(comparison, elapsed, (results, timeline_png, cdf_png))
