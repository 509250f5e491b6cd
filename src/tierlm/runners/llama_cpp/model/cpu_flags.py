"""What the CPU can do, as far as llama.cpp's known crashes depend on it.

On Intel CPUs with AMX, llama.cpp segfaults in every batched decode of a Q4
model whose weights are repacked into AMX buffers (llama.cpp issues #16315,
#20824; reproduced on this project's AMX machines). With one slot only a
prompt evaluation is a batch, and the start-up probe finds the crash
(docs/design.md §1.2);
with several slots EVERY step is a batched decode, so the runner does not wait
for the crash: on such a CPU it loads without repacking from the start.

One small function of its own, so that another check of the same flags (the
start-up probe's) can share it.
"""

from __future__ import annotations

import functools
from pathlib import Path

__all__ = ["cpu_has_amx", "extra_bufts_for_slots"]

_CPUINFO = Path("/proc/cpuinfo")


@functools.cache
def cpu_has_amx(cpuinfo: Path = _CPUINFO) -> bool:
    """Does a CPU of this machine report AMX (``amx_tile``, ``amx_int8``,
    ``amx_bf16`` in /proc/cpuinfo's flags)? False where there is no such file."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return False
    flags = (
        line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")
    )
    return any(flag.startswith("amx") for line_flags in flags for flag in line_flags)


def extra_bufts_for_slots(use_extra_bufts: bool | None, slots: int) -> bool | None:
    """The ``use_extra_bufts`` to load with: a choice the user made stands; left
    open (None) with several slots on an AMX CPU, off (the crash); otherwise
    open (llama.cpp's default, checked by the start-up probe)."""
    if use_extra_bufts is None and slots > 1 and cpu_has_amx():
        return False
    return use_extra_bufts
