"""Where a benchmark writes its numbers, and the envelope every results file has.

By default a folder of the user's, ``./bench-results/`` in the working
directory (or ``$TIERLM_BENCH_RESULTS``, which ``tierlm bench`` sets from its
``--out`` and ``--update-committed``): a run on someone's machine must not
rewrite the figures committed in ``bench/results/``, which are the ones the
docs quote, measured on the project's machines. Those are updated only when
asked: ``tierlm bench --update-committed NAME`` (or the variable set to
``bench/results``).

Every results file says under ``"machine"`` what ran it (``machine``): the
CPU, the core count, the platform and Python, the one-minute load average
before and after the run (a figure measured on a busy machine says so), and
the commit.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_FOLDER", "ENV", "load_now", "machine", "results_file", "write_results"]

DEFAULT_FOLDER = Path("bench-results")
ENV = "TIERLM_BENCH_RESULTS"


def results_file(name: str) -> Path:
    """``<folder>/<name>.json``, the folder created if needed."""
    folder = Path(os.environ.get(ENV) or DEFAULT_FOLDER)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{name}.json"


def write_results(name: str, payload: Mapping[str, Any]) -> Path:
    """``payload`` as ``<folder>/<name>.json`` (``results_file``), one-space
    indented, and says so on stderr."""
    out = results_file(name)
    out.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return out


def load_now() -> float:
    """The one-minute load average now (take it before the run)."""
    return round(os.getloadavg()[0], 2)


def machine(load_before: float, **extra: Any) -> dict[str, Any]:
    """The envelope: what ran the benchmark, its load before (``load_now``
    at the start) and after, the commit; ``extra`` adds what a benchmark
    also depends on (a thread count, a library's version)."""
    return {
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_before": load_before,
        "load_after": load_now(),
        "commit": _commit(),
        **extra,
    }


def _commit() -> str | None:
    """The checkout's commit (``+`` when it has changes), None outside git."""
    try:
        head = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+" if dirty else "")


def _git(*args: str) -> str:
    here = Path(__file__).resolve().parent
    done = subprocess.run(
        ["git", *args], cwd=here, capture_output=True, text=True, timeout=10, check=True
    )
    return done.stdout.strip()
