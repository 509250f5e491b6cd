"""How big this machine is, for the lane's default concurrency (docs/design.md §5)."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

__all__ = ["default_concurrency", "total_memory_bytes"]

# The seed's future work: 2 batches at once, 3 on machines with >= 8 cores and
# >= 16 GiB. Two overlap one batch's Python work (tokenising, copying out the
# vectors) with the other's matrix work; more would only contend for the cores
# that the LLM needs too.
SMALL_MACHINE_CONCURRENCY = 2
LARGE_MACHINE_CONCURRENCY = 3
LARGE_MACHINE_CORES = 8
LARGE_MACHINE_MEMORY = 16 * 1024**3


def total_memory_bytes(meminfo: str | os.PathLike[str] = "/proc/meminfo") -> int | None:
    """The machine's physical memory in bytes, or None when it cannot be told.

    psutil when it is installed (the ``embed`` extra has it); otherwise Linux's
    ``/proc/meminfo``; otherwise POSIX ``sysconf``.
    """
    try:
        # Imported by name: psutil ships no type information, and the lane
        # must work without it.
        psutil: Any = importlib.import_module("psutil")
    except ImportError:
        pass
    else:
        return int(psutil.virtual_memory().total)
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemTotal:"):
                # "MemTotal:       24570556 kB"
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        page_size = os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    if pages <= 0 or page_size <= 0:
        return None
    return pages * page_size


def default_concurrency(cpu_count: int | None = None, memory_bytes: int | None = None) -> int:
    """2 batches at once; 3 on machines with >= 8 cores and >= 16 GiB (docs/design.md §5).

    Arguments left None are detected (``os.cpu_count()``, :func:`total_memory_bytes`);
    a machine that cannot be measured counts as small.
    """
    cores = os.cpu_count() if cpu_count is None else cpu_count
    memory = total_memory_bytes() if memory_bytes is None else memory_bytes
    if (
        cores is not None
        and memory is not None
        and cores >= LARGE_MACHINE_CORES
        and memory >= LARGE_MACHINE_MEMORY
    ):
        return LARGE_MACHINE_CONCURRENCY
    return SMALL_MACHINE_CONCURRENCY
