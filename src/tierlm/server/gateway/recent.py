"""The recently finished jobs, for the state API and the dashboard ("what just
happened"): a bounded list, filled as each gateway job's handle resolves."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from tierlm.runners.cancellation import Cancelled
from tierlm.shell.handles import GenerationHandle, GenerationRun, JobState

__all__ = ["RECENT_JOBS", "RecentJobs", "timings"]

# Finished jobs kept: enough for a screenful on the dashboard.
RECENT_JOBS = 50

_OUTCOMES = {JobState.DONE: "completed", JobState.FAILED: "failed"}


class RecentJobs:
    """The last ``RECENT_JOBS`` jobs that ended, newest first."""

    def __init__(self, size: int = RECENT_JOBS) -> None:
        self._entries: deque[dict[str, Any]] = deque(maxlen=size)

    def ended(
        self,
        handle: GenerationHandle,
        ended_at: float,
        disconnected: str | None = None,
        runs: Sequence[GenerationRun] = (),
    ) -> None:
        """``handle`` resolved at ``ended_at``; ``disconnected``: where its client
        left it ("queued", "running"), if it did; ``runs``: its runs."""
        job = handle.job
        entry: dict[str, Any] = {
            "id": job.id,
            "class": job.class_name,
            "producer": job.producer,
            "model": job.model_id,
            "outcome": _OUTCOMES.get(handle.state, "cancelled"),
            "ended_at": ended_at,
            "tokens": len(handle.pieces),
            **timings(job.submitted_at, ended_at, handle.first_token_at, runs),
        }
        if disconnected is not None:
            entry["reason"] = f"client disconnected while {disconnected}"
        elif handle.state is not JobState.DONE:
            try:
                handle.result()
            except Cancelled as exc:
                entry["reason"] = exc.reason.value
            except Exception as exc:
                entry["reason"] = repr(exc)
        self._entries.appendleft(entry)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def timings(
    submitted_at: float,
    ended_at: float,
    first_token_at: float | None,
    runs: Sequence[GenerationRun],
) -> dict[str, float | None]:
    """A finished job's times in seconds, as the dashboard shows them: its
    ``wait`` (submitted to first dispatched), ``ttft`` (submitted to first
    token), ``duration`` (submitted to end), ``decode`` (its runs' first to
    last token) and ``tokens_per_s`` over that decode; None where unknown."""
    started = [run.started_at for run in runs if run.started_at is not None]
    decode = sum(run.decode_seconds for run in runs)
    # A run's first token is decoded before its first_token_at: n tokens, n - 1 gaps.
    gaps = sum(max(0, run.tokens - 1) for run in runs)
    return {
        "wait": min(started) - submitted_at if started else None,
        "ttft": None if first_token_at is None else first_token_at - submitted_at,
        "duration": ended_at - submitted_at,
        "decode": decode,
        "tokens_per_s": gaps / decode if decode > 0 and gaps else None,
    }
