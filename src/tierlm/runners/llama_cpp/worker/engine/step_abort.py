"""Abort the ``llama_decode`` in flight once every generation in it must stop
(docs/design.md §1.6).

A person's chat on a full device stops the background sequences at once
(docs/design.md §4.7, the cut while a person's prompt is evaluated), but a
stop reaches the decode thread only between steps: the chat waited for the
step in flight, the slowest of all (every slot's row; 70 ms at 8 rows on one
CPU thread, 0.5 s on a busy machine), before its own prompt could start. A
step of prompt chunks alone can take seconds (one slot, a long prompt).
llama.cpp checks an abort callback between graph nodes
(``llama_set_abort_callback``) and drops the ubatch it was computing from the
KV cache; so a step can be given up the moment nothing in it is wanted.

Who decides: a watcher thread of the worker's, awake only while a decode
runs, looks at the control block every ``POLL_SECONDS`` and raises a flag
once every generation in the step is stopped (a yield excepted: it stops
after a token, so its step is wanted). What llama.cpp calls between graph
nodes only reads that flag, in C: the C library's ``strlen`` on a two-byte
buffer, 0 while the flag is down and 1 once it is up (``bool`` is the low
byte of the return register on every ABI llama.cpp runs on). A Python
callback there costs ~600 calls a step (+7 % at 8 rows, measured on the
default model), which is why steps with decode rows used to go without one.
Where the C library cannot be opened, the same flag is read by a Python
callback.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from tierlm.runners.cancellation import CancelReason

__all__ = ["POLL_SECONDS", "StepAbort"]

POLL_SECONDS = 0.001
"""How often the watcher looks at the control block during a decode: a
millisecond is well inside a step (tens of ms) and costs the worker's other
threads a few microseconds of the GIL a poll."""


def _flag_reader(flag: ctypes.Array[ctypes.c_char]) -> Any:
    """A ``ggml_abort_callback`` that answers whether ``flag`` is up, in C
    where it can (module docstring)."""
    import llama_cpp

    try:
        strlen = ctypes.CDLL(None).strlen
    except (OSError, AttributeError):
        return llama_cpp.ggml_abort_callback(lambda _data: flag.raw[0] != 0)
    return ctypes.cast(strlen, llama_cpp.ggml_abort_callback)


class StepAbort:
    """The abort callback of one llama.cpp context and the thread that raises it."""

    def __init__(self, ctx: Any, stops: Callable[[Any], CancelReason | None]) -> None:
        """``stops(generation)``: why the runner wants it stopped now, if it does."""
        import llama_cpp

        self._stops = stops
        self._flag = ctypes.create_string_buffer(2)
        self._callback = _flag_reader(self._flag)  # kept: ctypes frees what nothing holds
        llama_cpp.llama_set_abort_callback(
            ctx, self._callback, ctypes.cast(self._flag, ctypes.c_void_p)
        )
        self._ctx = ctx
        self._cond = threading.Condition()
        self._watched: Sequence[Any] | None = None
        self._closed = False
        self.aborted = 0
        """Decodes given up (tests and the worker's stats)."""
        self._thread = threading.Thread(target=self._watch, name="tierlm-step-abort", daemon=True)
        self._thread.start()

    def decode(self, batch: Any, generations: Sequence[Any]) -> int:
        """``llama_decode`` of ``batch``, whose rows are ``generations``'."""
        import llama_cpp

        self._flag[0] = b"\x00"
        with self._cond:
            self._watched = generations
            self._cond.notify_all()
        try:
            status: int = llama_cpp.llama_decode(self._ctx, batch)
        finally:
            with self._cond:
                self._watched = None
                self._cond.notify_all()
        return status

    def _unwanted(self, generations: Sequence[Any]) -> bool:
        for gen in generations:
            reason = self._stops(gen)
            if reason is None or reason is CancelReason.YIELD:
                return False
        return True

    def _watch(self) -> None:
        while True:
            with self._cond:
                while self._watched is None and not self._closed:
                    self._cond.wait()
                watched = self._watched
                if watched is None:  # closed
                    return
            if not self._unwanted(watched):
                time.sleep(POLL_SECONDS)
                continue
            with self._cond:
                if self._watched is watched:
                    self._flag[0] = b"\x01"
                    self.aborted += 1
                while self._watched is watched and not self._closed:
                    self._cond.wait()  # this decode ends; the next is watched afresh

    def close(self) -> None:
        import llama_cpp

        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5.0)
        llama_cpp.llama_set_abort_callback(self._ctx, llama_cpp.ggml_abort_callback(), None)
