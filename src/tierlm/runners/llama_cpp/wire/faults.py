"""FAULT INJECTION, for tests only: make the llama.cpp worker crash on purpose.

The worker exists to survive native crashes (a segfault in llama.cpp, an
abort, the OOM killer). Most are tested for real: a test sends SIGSEGV to the
worker's pid mid-generation. Two cannot be produced that way at the right
moment: the crash of the start-up probe (a real one needs a CPU with AMX and a
quantized model: llama.cpp issues #16315, #20824) and a crash in the middle of
restoring a KV snapshot. For those, a test arms a ``FaultInjection`` and the
worker kills itself with the signal at that point: a real native crash of a
real process, only its cause is deliberate.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass
from typing import Literal

__all__ = ["FaultInjection", "FaultPoint"]

FaultPoint = Literal["probe", "restore", "token"]


@dataclass(frozen=True, slots=True)
class FaultInjection:
    """Where the worker crashes, and how."""

    at: FaultPoint
    """``probe``: in the start-up probe's generation; ``restore``: while restoring
    a KV snapshot; ``token``: before producing token ``after_tokens``."""
    signal: int = signal.SIGSEGV
    after_tokens: int = 0
    only_with_extra_bufts: bool = False
    """``probe``: only when the model was loaded with ``use_extra_bufts`` on (the
    shape of the AMX crash: off, the model works)."""
    every_worker: bool = False
    """Armed again in each restarted worker (else only in the current one)."""

    def fire(self) -> None:
        """Crash this process now, as a native crash would: the signal goes to
        the calling thread, so nothing after this line runs (``os.kill`` may be
        delivered to another thread while this one carries on)."""
        signal.pthread_kill(threading.get_ident(), self.signal)
        while True:  # a handler was installed after all: do not carry on
            time.sleep(1)
