"""FAULT INJECTION, for tests only: make the llama.cpp worker crash on purpose.

The worker exists to survive native crashes (a segfault in llama.cpp, an
abort, the OOM killer). Most are tested for real: a test sends SIGSEGV to the
worker's pid mid-generation. Two cannot be produced that way at the right
moment: the crash of the start-up probe (a real one needs a CPU with AMX and a
quantized model: llama.cpp issues #16315, #20824) and a crash in the middle of
restoring a KV snapshot. For those, a test arms a ``FaultInjection`` and the
worker kills itself with the signal at that point: a real native crash of a
real process, only its cause is deliberate.

A third cannot be produced for real once fixed: a request that makes
llama.cpp abort whenever it is decoded (a grammar it accepts, then aborts on),
which crashes its whole batch. ``marked`` stands for it: the worker aborts
whenever it decodes a sequence whose prompt holds the marker. ``tierlm serve``
arms it in each of its workers from ``TIERLM_TEST_CRASH_ON`` (the marker), the
only way to reach a worker the gateway starts (tests/server/test_crash_isolation.py).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from tierlm.runners.requests import GenerationRequest

__all__ = ["CRASH_ON", "FaultInjection", "FaultPoint", "from_environment"]

FaultPoint = Literal["probe", "restore", "token", "marked"]

CRASH_ON = "TIERLM_TEST_CRASH_ON"
"""The environment variable arming ``marked`` in every worker (its marker)."""


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
    marker: str = ""

    def due(self, tokens: int, request: GenerationRequest) -> bool:
        """Whether a sequence of ``request`` that produced ``tokens`` crashes
        the worker at its next decode."""
        if self.at == "token":
            return tokens == self.after_tokens
        if self.at != "marked" or not self.marker:
            return False
        if request.prompt is not None:
            return self.marker in request.prompt
        return any(self.marker in str(m.get("content") or "") for m in request.messages or ())

    def fire(self) -> None:
        """Crash this process now, as a native crash would: the signal goes to
        the calling thread, so nothing after this line runs (``os.kill`` may be
        delivered to another thread while this one carries on)."""
        signal.pthread_kill(threading.get_ident(), self.signal)
        while True:  # a handler was installed after all: do not carry on
            time.sleep(1)


def from_environment(environ: Mapping[str, str] = os.environ) -> list[FaultInjection]:
    """The faults ``CRASH_ON`` arms (none without it): an abort, as llama.cpp's."""
    marker = environ.get(CRASH_ON, "")
    return [FaultInjection("marked", signal.SIGABRT, marker=marker)] if marker else []
