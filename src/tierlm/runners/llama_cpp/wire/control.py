"""The control block: a few words of memory shared by the runner and its worker.

A cancel must reach the decode loop between two tokens, and llama.cpp's abort
callback in the middle of a prompt evaluation, without waiting for anything:
the worker's threads may be busy, and a message would queue behind them. So
the runner writes the cancel into shared memory and the worker reads it before
every token and between graph nodes (``llama_set_abort_callback``). The same
block carries how many pieces the reader has taken, which bounds how far the
decode loop runs ahead of it (``RUN_AHEAD``).

A runner with ``slots`` > 1 runs that many generations at once
(docs/design.md §1.6): each holds a *slot*, its own pair
of words; slot 0 is the only one of a runner with one slot.

One more word is the worker's heartbeat: a thread of its own bumps it twice a
second, whatever the decode is doing (llama.cpp's calls release the GIL), so a
worker that beats no more is stopped or wedged, not busy (docs/design.md §1.3).

Each word packs a generation's id (its ``Generate`` command's ``call_id``)
with its value, so one aligned 64-bit store updates both at once and a stale
word (an earlier generation's) is told apart without a lock.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import tempfile

from tierlm.runners.cancellation import CancelReason

__all__ = ["DEFAULT_STALL_TIMEOUT", "HEARTBEAT_SECONDS", "MAX_SLOTS", "ControlBlock"]

MAX_SLOTS = 64
"""The most generations a worker runs at once (``LlamaCppRunner(slots=...)``)."""
_WORDS_PER_SLOT = 2
HEARTBEAT_SECONDS = 0.5
"""How often the worker says it is alive (``ControlBlock.beat``): often enough
that a watchdog of a few seconds sees many beats, rarely enough to cost nothing."""
DEFAULT_STALL_TIMEOUT = 30.0
"""Seconds without a heartbeat before the watchdog kills the worker: 60 missed
beats (``HEARTBEAT_SECONDS``), far beyond a loaded machine's scheduling
hiccup (a thread of a busy 2-core machine waits well under a second), and well
inside what a person waits before giving up. The heartbeat thread runs while
llama.cpp computes, so a long prompt evaluation or model load is no stall."""
_HEARTBEAT = MAX_SLOTS * _WORDS_PER_SLOT  # the word after the slots'
_SIZE = (_HEARTBEAT + 1) * 8
_CANCEL, _CONSUMED = 0, 1
_SHIFT = 32


# A reason as the control block stores it: a small number, in one aligned word
# with the generation's id (0 is "no cancel").
_CODES = {
    CancelReason.PREEMPTED: 1,
    CancelReason.CALLER: 2,
    CancelReason.SHUTDOWN: 3,
    CancelReason.READER_LEFT: 4,
    CancelReason.YIELD: 5,
}
_REASONS = {code: reason for reason, code in _CODES.items()}


class ControlBlock:
    """Shared words, per slot: ``cancel`` = (generation's call id, reason),
    ``consumed`` = (generation's call id, pieces taken by the reader)."""

    def __init__(self, fd: int | None = None) -> None:
        """A new block in a temporary file (``fd`` None), to pass to a worker
        process by its descriptor, or the block behind an inherited ``fd``."""
        if fd is None:
            with tempfile.TemporaryFile(prefix="tierlm-llama-control-") as file:
                file.truncate(_SIZE)
                self.fd = os.dup(file.fileno())
        else:
            self.fd = fd
        self._map = mmap.mmap(self.fd, _SIZE, mmap.MAP_SHARED)
        self._words = (ctypes.c_int64 * (_SIZE // 8)).from_buffer(self._map)
        # Never unmapped by hand: a late cancel from another thread must find
        # the memory there. It goes with the last reference.

    def release_fd(self) -> None:
        """Close the descriptor (the mapping stays): once a worker has it, or
        once this process has mapped it."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def cancel(self, call_id: int, reason: CancelReason, slot: int = 0) -> None:
        if reason is CancelReason.READER_LEFT:
            current = self.stop_reason(call_id, slot)
            if current is CancelReason.YIELD:
                # Nobody takes the first token a yield waits for: stop at once,
                # still as a preemption (its KV snapshot).
                reason = CancelReason.PREEMPTED
            elif current is not None:
                # The reader leaves after every cancel: keep the reason it left
                # for (a preemption's KV snapshot depends on it).
                return
        self._words[slot * _WORDS_PER_SLOT + _CANCEL] = (call_id << _SHIFT) | _CODES[reason]

    def stop_reason(self, call_id: int, slot: int = 0) -> CancelReason | None:
        word = self._words[slot * _WORDS_PER_SLOT + _CANCEL]
        if word >> _SHIFT != call_id:
            return None
        return _REASONS[word & 0xFF]

    def set_consumed(self, call_id: int, pieces: int, slot: int = 0) -> None:
        self._words[slot * _WORDS_PER_SLOT + _CONSUMED] = (call_id << _SHIFT) | pieces

    def beat(self) -> None:
        """The worker is alive (its heartbeat thread)."""
        self._words[_HEARTBEAT] += 1

    def beats(self) -> int:
        """Heartbeats so far; the runner's watchdog watches it change."""
        beats: int = self._words[_HEARTBEAT]
        return beats

    def consumed(self, call_id: int, slot: int = 0) -> int:
        word = self._words[slot * _WORDS_PER_SLOT + _CONSUMED]
        return word & 0xFFFFFFFF if word >> _SHIFT == call_id else 0
