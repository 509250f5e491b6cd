"""What the simulator records per job and per run: plain data, and its accounting.

The recorder fills these from the scheduler's events (submit, start, swap, end)
and from the runner's report of every generation call (how its prompt was made
ready, at what cost, the tokens it produced); the metrics are computed from
them alone, whichever policy ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tierlm.core.jobs import Subject
from tierlm.runners.simulated import SimulatedCall

__all__ = [
    "CHAT_CLASS",
    "FOREGROUND_NONE",
    "PREEMPTED",
    "JobRecord",
    "RunRecord",
    "SimRecords",
    "run_waste",
]

CHAT_CLASS = "chat"
"""The class of a person's chats (docs/design.md §3), which the metrics single out."""
FOREGROUND_NONE = ""
"""The class name recorded when no AI surface is open."""

PREEMPTED = "requeued"
"""``RunRecord.how`` of a run stopped by a preemption (its job was re-queued)."""


@dataclass(slots=True)
class RunRecord:
    """One dispatch of a job: from STARTED to its end (a swap it caused included)."""

    start: float
    end: float | None = None
    how: str | None = None
    """completed / requeued (preempted) / cancelled / failed; None while running."""
    swap_start: float | None = None
    swap_end: float | None = None
    tokens: int = 0
    """Tokens the runner generated in this run (kept or discarded)."""
    prompt_seconds: float = 0.0
    """Fresh prompt evaluation (work done for the first time)."""
    cut_seconds: float = 0.0
    """Fresh prompt evaluation cut short before its first token and not kept
    (all of it, or on a device with KV snapshots its aborted batch): redone later."""
    resume_seconds: float = 0.0
    """Re-evaluating prompt + partial output, or restoring a KV snapshot: what
    resuming cost (docs/design.md §8.2)."""
    reevaluations: int = 0
    restores: int = 0

    @property
    def device_seconds(self) -> float:
        """The run's time on the device, its swap excluded."""
        if self.end is None:
            return 0.0
        swap = 0.0
        if self.swap_start is not None:
            swap = (self.swap_end if self.swap_end is not None else self.end) - self.swap_start
        return self.end - self.start - swap

    def account(self, call: SimulatedCall) -> None:
        """Add one generation call of this run."""
        self.tokens += call.tokens
        first_time = call.prompt_seconds - call.resume_seconds
        if call.tokens == 0 and call.stopped:
            # Cut before its first token: what a KV snapshot keeps is done;
            # the rest (the aborted batch, or all of it) is evaluated again.
            self.cut_seconds += first_time - call.kept_seconds
            self.prompt_seconds += call.kept_seconds
        else:
            self.prompt_seconds += first_time
        self.resume_seconds += call.resume_seconds
        if call.ready == "restore":
            self.restores += 1
        elif call.ready == "re-evaluate":
            self.reevaluations += 1


def run_waste(run: RunRecord, *, restarts: bool) -> float:
    """Device time of ``run`` whose work was thrown away or redone
    (docs/design.md §8.4).

    - A run stopped by a preemption of a job that RESTARTS: all of it (its
      swap aside): the next run does it all again.
    - Otherwise what resuming cost (re-evaluating prompt + partial output, or
      restoring a snapshot), and a fresh prompt evaluation cut short by a
      preemption before its first token (the next run evaluates it again).

    A run stopped by the end of the simulation (not by the policy) wastes
    nothing more: its work is cut by the horizon, not thrown away.
    """
    if run.how == PREEMPTED and restarts:
        return run.device_seconds
    cut = run.cut_seconds if run.how == PREEMPTED else 0.0
    return run.resume_seconds + cut


@dataclass(slots=True)
class JobRecord:
    """Everything the metrics need about one job.

    The recorder files it when the job is submitted; the simulator's context
    then sets its shape (prompt and output tokens, calls, ideal time, whether
    it restarts).
    """

    id: int
    class_name: str
    producer: str
    model_id: str
    subject: Subject | None
    deadline: float | None
    submitted: float
    prompt_tokens: int = 0
    output_tokens: int = 0
    calls: int = 1
    generation: bool = False
    restarts: bool = False
    """A preempted run is thrown away and the job starts again (docs/design.md §8)."""
    ideal_seconds: float = 0.0
    """Prefill of each call's prompt + decode of every token: its device time uninterrupted."""
    first_token: float | None = None
    """When the first token that reached the caller was produced."""
    ended: float | None = None
    outcome: str = "unfinished"
    """completed / failed / cancelled (by its caller) / unfinished (at the horizon)."""
    preemptions: int = 0
    swaps: int = 0
    swap_seconds: float = 0.0
    runs: list[RunRecord] = field(default_factory=list)

    @property
    def busy_seconds(self) -> float:
        return sum((r.end - r.start) for r in self.runs if r.end is not None)

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.submitted

    @property
    def wasted_seconds(self) -> float:
        return sum(run_waste(run, restarts=self.restarts) for run in self.runs)

    @property
    def tokens_discarded(self) -> int:
        if not self.restarts:
            return 0
        return sum(run.tokens for run in self.runs if run.how == PREEMPTED)

    @property
    def tokens_kept(self) -> int:
        return sum(run.tokens for run in self.runs) - self.tokens_discarded

    def lateness(self, horizon: float) -> float | None:
        """How late it finished, ``max(0, end - deadline)``; not done by the
        horizon: ``horizon - deadline`` (a lower bound). None: it does not
        count (no deadline, cancelled by its caller, or due after the horizon
        and not done)."""
        if self.deadline is None or self.outcome == "cancelled":
            return None
        if self.outcome == "completed" and self.ended is not None and self.ended <= horizon:
            return max(0.0, self.ended - self.deadline)
        return horizon - self.deadline if self.deadline < horizon else None


@dataclass(slots=True)
class SimRecords:
    """One simulated run: a workload under one policy, up to ``horizon``."""

    policy: str
    workload: str
    seed: int
    horizon: float
    token_interval: float
    prefill_per_token: float
    swap_seconds: float
    jobs: list[JobRecord] = field(default_factory=list)
    foreground: list[tuple[float, str]] = field(default_factory=list)
    """(time, class name or FOREGROUND_NONE) at every foreground change."""
    returns: list[tuple[float, float]] = field(default_factory=list)
    """(start, end) of each swap back with no job (docs/design.md §4.8 (excursions))."""
    fair_classes: list[str] = field(default_factory=list)
    """Classes in the fair pool (their producers are compared for fairness)."""
    budget_caps: dict[str, float] = field(default_factory=dict)
    """Budgeted classes (extraction) and their cap on the share of busy time."""
    initial_model: str | None = None
    """The model the device held at t = 0."""
    chat_grace: float = 0.0
    """The policy's hold on swaps after a chat (docs/design.md §4.8), for
    the metrics' notion of work the policy could have run."""
    chat_idle: float | None = None
    """How long after the last chat an open chat surface still holds swaps
    (None: as long as it stays open)."""
    hints: dict[str, Any] = field(default_factory=dict)
    """What the workload knows about itself (e.g. ``min_swaps``), for metrics."""
