"""Where a benchmark writes its numbers.

By default a folder of the user's, ``./bench-results/`` in the working
directory (or ``$TIERLM_BENCH_RESULTS``, which ``tierlm bench`` sets from its
``--out`` and ``--update-committed``): a run on someone's machine must not
rewrite the figures committed in ``bench/results/``, which are the ones the
docs quote, measured on the project's machines. Those are updated only when
asked: ``tierlm bench --update-committed NAME`` (or the variable set to
``bench/results``).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DEFAULT_FOLDER", "ENV", "results_file"]

DEFAULT_FOLDER = Path("bench-results")
ENV = "TIERLM_BENCH_RESULTS"


def results_file(name: str) -> Path:
    """``<folder>/<name>.json``, the folder created if needed."""
    folder = Path(os.environ.get(ENV) or DEFAULT_FOLDER)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{name}.json"
