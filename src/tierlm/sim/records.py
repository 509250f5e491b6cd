"""What the simulator records per job and per run: plain data, and its accounting.

The engine fills these from the scheduler's events (submit, start, swap, end)
and from the jobs' own work (tokens, first token, discarded work); the metrics
are computed from them alone, whichever policy ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tierlm.core.jobs import Subject

__all__ = ["FOREGROUND_NONE", "JobRecord", "RunRecord", "SimRecords", "account_run"]

FOREGROUND_NONE = ""
"""The class name recorded when no AI surface is open."""


@dataclass(slots=True)
class RunRecord:
    """One dispatch of a job: from STARTED to its end (a swap it caused included)."""

    start: float
    end: float | None = None
    how: str | None = None
    """completed / requeued / cancelled / failed; None while running."""
    swap_start: float | None = None
    swap_end: float | None = None
    tokens: int = 0
    """Tokens this run generated (kept or discarded)."""


@dataclass(slots=True)
class JobRecord:
    """Everything the metrics need about one job.

    The recorder files it when the job is submitted; the simulator's context
    then sets its shape (prompt and output tokens, ``resumable``, ideal time).
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
    resumable: bool = False
    """A generate-style job (a chat, a Nataraj card): it resumes under policies
    that resume (docs/design.md §4 re-queue, §6.8), restarts under the others."""
    ideal_seconds: float = 0.0
    """Prefill of the prompt + decode of every token: its device time uninterrupted."""
    first_token: float | None = None
    """When the first token that reached the caller was produced."""
    ended: float | None = None
    outcome: str = "unfinished"
    """completed / failed / cancelled (by its caller) / unfinished (at the horizon)."""
    preemptions: int = 0
    tokens_kept: int = 0
    tokens_discarded: int = 0
    wasted_seconds: float = 0.0
    """Device time whose work was thrown away (docs/design.md §8 wasted device time)."""
    swaps: int = 0
    swap_seconds: float = 0.0
    runs: list[RunRecord] = field(default_factory=list)
    prefilled: bool = False
    """A kept run has prefilled the prompt (a later resumed prefill is a redo)."""

    @property
    def busy_seconds(self) -> float:
        return sum((r.end - r.start) for r in self.runs if r.end is not None)

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.submitted


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
    fair_classes: list[str] = field(default_factory=list)
    """Classes in the fair pool (their producers are compared for fairness)."""
    budget_caps: dict[str, float] = field(default_factory=dict)
    """Budgeted classes (extraction) and their cap on the share of busy time."""
    hints: dict[str, Any] = field(default_factory=dict)
    """What the workload knows about itself (e.g. ``min_swaps``), for metrics."""


def account_run(
    record: JobRecord,
    *,
    resume: bool,
    elapsed: float,
    prefill: float,
    tokens: int,
    preempted: bool,
) -> None:
    """Account one run's work as kept or wasted (docs/design.md §8 wasted device time).

    ``elapsed`` is the run's device time after any swap, ``prefill`` the prefill
    it would have needed (the part of ``elapsed`` spent before the first token is
    ``min(elapsed, prefill)``), ``tokens`` the tokens it generated.

    - Restart (closure jobs, and every job under policies that restart, as the
      seed does: "re-queued ... so it runs again later from scratch"): a
      preempted run's whole time and tokens are discarded.
    - Resume (docs/design.md §6.8: generated text is kept): the tokens are kept; what
      is redone is the prefill of prompt + partial output on the next run, so a
      run's prefill is wasted when an earlier run already prefilled the prompt,
      and a run stopped before its first token wastes everything it spent.

    A run stopped by the end of the simulation (not by the policy) wastes
    nothing: its work is cut by the horizon, not thrown away.
    """
    prefill_part = min(elapsed, prefill)
    if not resume:
        if preempted:
            record.wasted_seconds += elapsed
            record.tokens_discarded += tokens
        else:
            record.tokens_kept = tokens
        return
    if preempted and tokens == 0:
        record.wasted_seconds += elapsed
        return
    if record.prefilled:
        record.wasted_seconds += prefill_part
    record.prefilled = True
    record.tokens_kept += tokens
