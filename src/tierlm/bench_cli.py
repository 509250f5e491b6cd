"""``tierlm bench``: run the benchmarks under ``bench/`` of a tierlm checkout.

Benchmarks are scripts, not package code (they need a checkout, and some need
real models); this command finds them and runs each with the current Python.
Their numbers land in ``./bench-results/`` (``--out``), a folder of the user's:
the figures committed in ``bench/results/``, which the docs quote, change only
with ``--update-committed`` (``bench/_lib/results.py`` reads the choice from
``TIERLM_BENCH_RESULTS``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["DEFAULT_OUT", "add_arguments", "find_bench_dir", "run"]

DEFAULT_OUT = Path("bench-results")


def find_bench_dir(start: Path | None = None) -> Path | None:
    """``bench/`` in the current directory or above, else beside the package."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "bench").is_dir() and (folder / "pyproject.toml").is_file():
            return folder / "bench"
    beside = Path(__file__).resolve().parents[2] / "bench"  # editable install: src/tierlm
    return beside if beside.is_dir() else None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "names",
        nargs="*",
        help="benchmarks to run, e.g. pick_cost sim_speed (default: list them)",
    )
    parser.add_argument("--dir", type=Path, default=None, help="the bench/ folder to use")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"folder for the results (default ./{DEFAULT_OUT}/)",
    )
    where.add_argument(
        "--update-committed",
        action="store_true",
        help="write the committed figures in bench/results/ instead (for the project's machines)",
    )


def run(args: argparse.Namespace) -> int:
    bench = args.dir or find_bench_dir()
    if bench is None or not bench.is_dir():
        print("tierlm bench: no bench/ folder; run it in a tierlm checkout", file=sys.stderr)
        return 2
    available = sorted(p.stem for p in bench.glob("*.py") if not p.stem.startswith("_"))
    if not args.names:
        print(f"benchmarks in {bench}:")
        for name in available:
            print(f"  {name}")
        print("run: tierlm bench NAME [NAME ...]")
        return 0
    unknown = [n for n in args.names if n not in available]
    if unknown:
        print(
            f"tierlm bench: unknown benchmark(s) {', '.join(unknown)}; "
            f"available: {', '.join(available)}",
            file=sys.stderr,
        )
        return 2
    out = (bench / "results" if args.update_committed else args.out).resolve()
    env = {**os.environ, "TIERLM_BENCH_RESULTS": str(out)}
    status = 0
    for name in args.names:
        print(f"== {name} == (results in {out})", flush=True)
        status |= subprocess.call(
            [sys.executable, str(bench / f"{name}.py")], cwd=bench.parent, env=env
        )
    return status
