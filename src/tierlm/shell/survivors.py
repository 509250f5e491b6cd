"""The jobs a crash of the device ran under, and how they come back
(docs/design.md §4.9 (re-queue after a crash)).

A crash ends every sequence of the batch at once: the one that caused it (a
request that makes llama.cpp abort) and its batch-mates alike, and nothing
tells them apart. Re-queued together, the cause crashes the batch again and
every one of them is then at its second crash. So the survivors of a crash
are held out of the policy's queue and re-admitted ONE AT A TIME: the next
goes back to the queue only once the one before has ended for good. A job
that crashes the device again while it is the one re-admitted is the cause:
it alone fails (``CrashedTwice``), and the others, each resuming from the
text it produced, complete. Jobs that were in no crash run beside it as
usual; should one of them crash the device under it, both are at a crash
they may not have caused, which this rule cannot tell (a second fault).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from tierlm.runners.errors import CrashedTwice, DeviceCrashed
from tierlm.shell.entries import Entry

__all__ = ["Survivors"]


class Survivors:
    """The survivors of crashes, waiting, and the one re-admitted."""

    def __init__(self) -> None:
        self.held: deque[Entry[Any]] = deque()
        """Survivors not yet re-admitted, in the order their crash ended them."""
        self.trial: Entry[Any] | None = None
        """The survivor re-admitted, until it ends for good (a preemption
        re-queues it still on trial: the next waits)."""
        self.reporting: set[int] = set()
        """Jobs running when a crash was first reported, whose own report (or
        any end of their run) is awaited. A job started on the new worker
        before the first report is among them: it delays the survivors, once."""

    def __len__(self) -> int:
        return len(self.held)

    def run_ended(self, entry: Entry[Any]) -> bool:
        """A run of ``entry`` ended, however: whether it was one whose crash
        report was awaited."""
        if entry.job.id in self.reporting:
            self.reporting.discard(entry.job.id)
            return True
        return False

    def crashed(
        self,
        entry: Entry[Any],
        crash: DeviceCrashed,
        resumable: bool,
        awaited: bool,
        running: Mapping[int, Entry[Any]],
    ) -> Exception | None:
        """``entry``'s run ended in ``crash`` (``awaited``: as a batch-mate of
        a crash already reported; ``running``: the jobs still running): None
        when it is held to come back, else the error it fails with (the cause,
        or work that cannot resume without loss)."""
        if not awaited:
            # The first report of a crash: the jobs running now were in it too,
            # and each reports it in turn (a llama.cpp runner raises it in each
            # generation after the new worker holds the model). Nobody comes
            # back before they have: the first to report is often the cause,
            # which would otherwise come back before the rest are held.
            self.reporting.update(running)
        entry.crashes += 1
        if entry.crashes > 1:
            return CrashedTwice.of(entry.job.id, crash)
        if not resumable:
            return crash
        self.held.append(entry)
        return None

    def next(self, rank: Callable[[Entry[Any]], int]) -> Entry[Any] | None:
        """The survivor to re-admit now, if any: one at a time, the best
        ``rank`` (its effective tier) first, so a person's chat does not wait
        for background answers to finish one after another; in crash order
        among equals."""
        if self.trial is not None or self.reporting or not self.held:
            return None
        self.trial = min(self.held, key=rank)
        self.held.remove(self.trial)
        return self.trial

    def resolved(self, entry: Entry[Any]) -> None:
        """``entry`` ended for good (completed, failed, cancelled while held)."""
        if self.trial is entry:
            self.trial = None
        elif entry in self.held:
            self.held.remove(entry)
