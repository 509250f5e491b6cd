"""A closure job's journal of its ``ctx.generate`` calls, replayed after preemption.

docs/design.md §4.9. A preempted closure job
(``submit(work=...)``) is run again from its start; without a journal it would
generate again every call it had already made. With one, its ``ctx.generate``
calls are numbered in the order the work makes them, and each call's output is
recorded under that position together with a digest of its request. On a
re-run, the call at a position:

- with the same request, completed before: its recorded output is yielded at
  once, piece by piece, and the runner is not called;
- with the same request, interrupted by the preemption: its recorded output is
  yielded, then the call continues live from prompt + that output
  (``resume_text``), for the tokens still due, as ``Scheduler.generate`` does;
- with a different request (the work diverged: it depends on time, randomness
  or something outside the job): generated live, and every recorded call from
  that position on is dropped.

This is how durable workflow engines replay (Temporal's event history, DBOS's
step outputs), with their determinism check made as simple as it gets: both
match a call to the record at the same position (Temporal by command type and
id, DBOS by step name) and fail the workflow with a non-determinism error when
they differ. Here the key is the whole request, and a mismatch is not an
error: regenerating is always correct, only slower.

Memory is bounded per job and in total (``SchedulerConfig.journal_bytes_per_job``
and ``journal_bytes_total``), counted as the memory the recorded pieces take.
A piece that does not fit is not recorded, nor are the rest of its call's
pieces: that call replays what was kept and resumes live from there, so past the
bound a job still runs correctly; it just regenerates. A journal is dropped
when its job ends.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field, replace

from tierlm.runners.requests import GenerationRequest

__all__ = ["CallRecord", "Journal", "JournalBudget"]

# What one recorded call costs besides its pieces: the record object, its
# digest and its list (measured with sys.getsizeof on CPython 3.11: ~200 B).
CALL_BYTES = 200
# One list slot per recorded piece (a pointer).
SLOT_BYTES = 8


def request_key(request: GenerationRequest) -> bytes:
    """A digest of everything the request asks (its repr lists every field).

    A digest, not the request: an agent's messages can be large, and a work
    function may mutate the list it passed after the call; the digest is
    taken when the call is made and costs 32 bytes. ``person`` is left out:
    it says who waits on this run, not what the call asks (docs/design.md §4.7).
    """
    asked = replace(request, person=False)
    return hashlib.sha256(repr(asked).encode()).digest()


def piece_bytes(piece: str) -> int:
    return sys.getsizeof(piece) + SLOT_BYTES


class JournalBudget:
    """The bounds shared by every journal of one scheduler."""

    __slots__ = ("per_job", "total", "used")

    def __init__(self, per_job: int, total: int) -> None:
        self.per_job = per_job
        self.total = total
        self.used = 0
        """Bytes held by all journals now."""


@dataclass(eq=False, slots=True)
class CallRecord:
    """One ``ctx.generate`` call: its request's digest and the pieces it yielded."""

    key: bytes
    pieces: list[str] = field(default_factory=list)
    finished: bool = False
    """The call's stream ended on its own (every piece it produced is here)."""
    cut: bool = False
    """A piece did not fit the bound: ``pieces`` is a prefix, and stays one."""


class Journal:
    """One job's ``ctx.generate`` calls, kept across its runs (module docstring)."""

    __slots__ = ("_budget", "_call_pieces", "_calls", "_cursor", "_generated", "bytes")

    def __init__(self, budget: JournalBudget) -> None:
        self._budget = budget
        self._calls: list[CallRecord] = []
        self._cursor = 0
        self.bytes = 0
        """Bytes this journal holds (counted in its budget's ``used``)."""
        self._generated: list[tuple[bytes, int]] = []
        """Per position, kept or not: the call's digest and the most pieces any
        run generated for it. A piece at or below that mark is earlier work
        done again, whether it comes from the journal or, past its bound, from
        the runner (docs/design.md §4.6 (a slice worth its resume)). Small (a
        digest and a count a call) and dropped with the journal."""
        self._call_pieces = 0

    def __len__(self) -> int:
        return len(self._calls)

    def start_run(self) -> None:
        """A run of the job starts: its first call is position 0 again."""
        self._cursor = 0

    def count(self) -> bool:
        """One more piece of the call last opened reached the work; True when
        no earlier run had generated it (the job makes new progress)."""
        position = self._cursor - 1
        key, most = self._generated[position]
        self._call_pieces += 1
        if self._call_pieces <= most:
            return False
        self._generated[position] = (key, self._call_pieces)
        return True

    def open(self, request: GenerationRequest) -> CallRecord:
        """The record for the work's next call: the recorded one if the request
        matches it, else a new, empty one (dropping the rest of the journal)."""
        key = request_key(request)
        position = self._cursor
        self._cursor += 1
        self._call_pieces = 0
        if position >= len(self._generated) or self._generated[position][0] != key:
            del self._generated[position:]  # new work from here on
            self._generated.append((key, 0))
        if position < len(self._calls):
            record = self._calls[position]
            if record.key == key:
                return record
            self._drop_from(position)  # diverged: live from here on
        record = CallRecord(key)
        # Recorded only at its own position: after a call that could not be
        # kept, no later call of this run is (positions must stay true).
        if position == len(self._calls) and self._reserve(CALL_BYTES):
            self._calls.append(record)
        else:
            record.cut = True  # not kept: a later run generates it live again
        return record

    def add(self, record: CallRecord, piece: str) -> None:
        """Record one more piece of ``record``'s call, if it fits."""
        if record.cut:
            return
        if self._reserve(piece_bytes(piece)):
            record.pieces.append(piece)
        else:
            record.cut = True

    def finish(self, record: CallRecord) -> None:
        """``record``'s call ended on its own: replay it whole from now on."""
        if not record.cut:
            record.finished = True

    def clear(self) -> None:
        """The job ended: free everything."""
        self._drop_from(0)
        self._generated.clear()

    def _reserve(self, size: int) -> bool:
        budget = self._budget
        if self.bytes + size > budget.per_job or budget.used + size > budget.total:
            return False
        self.bytes += size
        budget.used += size
        return True

    def _drop_from(self, position: int) -> None:
        dropped = self._calls[position:]
        del self._calls[position:]
        size = sum(CALL_BYTES + sum(piece_bytes(p) for p in r.pieces) for r in dropped)
        self.bytes -= size
        self._budget.used -= size
