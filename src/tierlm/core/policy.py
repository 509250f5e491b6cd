"""The policy interface: what the asyncio shell asks of a scheduling policy.

Every policy, ours (`TieredPolicy`) and the baselines the simulator compares it
with, implements this, so every comparison runs through the same shell
(docs/design.md §1). A policy is sans-I/O: time is an argument, it never reads a clock,
never awaits, never touches a runner. The shell tells it what happened and asks
it what to do.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import Protocol

from tierlm.core.classes import TaskClass
from tierlm.core.jobs import Foreground, Job

__all__ = ["Policy", "Preemption"]


class Preemption(enum.Enum):
    """How to stop a running job (docs/design.md §4 preemption kinds).

    Only a person waiting may cut a prompt evaluation short: cut, it is lost
    (llama.cpp drops the aborted batch), and a prompt longer than a slice
    would be cut at every slice and never finish. So fairness yields.
    """

    YIELD = "yield"
    """For fairness (a slice used, the pool floor, overdue work, any tier below
    T1): at the first token boundary after the prompt evaluation under way."""
    PREEMPT = "preempt"
    """For T0 or T1 work (a chat, the foreground): at the next token boundary,
    or at once during a prompt evaluation."""


class Policy(Protocol):
    """A scheduling policy for one device that holds one model at a time."""

    @property
    def name(self) -> str:
        """Short name for tables and charts ("tierlm", "fifo", ...)."""

    @property
    def classes(self) -> Mapping[str, TaskClass]:
        """The task classes the policy knows."""

    @property
    def foreground(self) -> Foreground | None:
        """The surface the person looks at, as last set (``set_foreground``)."""

    def submit(self, job: Job, now: float) -> None:
        """A new job enters the queue."""

    def remove(self, job: Job, now: float) -> None:
        """A queued job leaves the queue without running (its caller cancelled)."""

    def requeue(self, job: Job, now: float) -> None:
        """A preempted job goes back to the queue (after ``finished``)."""

    def set_foreground(self, foreground: Foreground | None, now: float) -> None:
        """The surface the person looks at changed (None: no AI surface open)."""

    def pick(self, now: float, loaded_model: str | None) -> Job | None:
        """The device is free: the job to run next, removed from the queue.

        None means run nothing now (empty, or waiting for a better moment such
        as the end of a chat grace period; ``next_wakeup`` says when).
        """

    def should_preempt(
        self, running: Job, now: float, loaded_model: str | None
    ) -> Preemption | None:
        """Whether to stop ``running``, and how (None: let it run). The shell
        asks again while a ``YIELD`` is under way: a ``PREEMPT`` then cuts it
        short."""

    def started(self, job: Job, now: float) -> None:
        """``job`` was dispatched (its swap, if any, starts now)."""

    def finished(self, job: Job, now: float) -> None:
        """``job`` stopped running: completed, failed, cancelled or preempted."""

    def swapped(self, model_id: str, seconds: float, now: float) -> None:
        """The runner finished loading ``model_id``; the swap took ``seconds``
        (the tiered policy caps its chat holds by it: docs/design.md §4 affinity)."""

    def next_wakeup(self, now: float) -> float | None:
        """The next time the policy's answer may change with no event (or None)."""

    def tier(self, job: Job, now: float) -> int:
        """The job's effective tier now (for snapshots and metrics)."""

    def queued(self) -> Iterator[Job]:
        """Every queued job, in no particular order."""

    def queue_order(self, now: float, loaded_model: str | None) -> list[Job]:
        """Every queued job, in the order the policy would dispatch them if the
        device freed now and nothing else changed: the same order ``pick``
        would give, call after call, with the device holding each picked job's
        model in turn (tiers, each tier's order, affinity and swaps). Timers are
        ignored (a chat grace, a deadline still ahead), and so is what running
        the jobs would change (vruntime charges, budget shares). A query: it
        changes nothing. For snapshots and queue positions (docs/design.md §2)."""

    def __len__(self) -> int:
        """How many jobs are queued."""

    def vruntimes(self, now: float) -> dict[str, float]:
        """Per-producer virtual runtime, where the policy keeps one."""

    def budget_shares(self, now: float) -> dict[str, float]:
        """Per budgeted class, its share of busy time in its window."""
