"""The recently finished jobs, for the state API and the dashboard ("what just
happened"): a bounded list, filled as each gateway job's handle resolves."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from tierlm.runners.cancellation import Cancelled
from tierlm.shell.handles import GenerationHandle, JobState

__all__ = ["RECENT_JOBS", "RecentJobs"]

# Finished jobs kept: enough for a screenful on the dashboard.
RECENT_JOBS = 50

_OUTCOMES = {JobState.DONE: "completed", JobState.FAILED: "failed"}


class RecentJobs:
    """The last ``RECENT_JOBS`` jobs that ended, newest first."""

    def __init__(self, size: int = RECENT_JOBS) -> None:
        self._entries: deque[dict[str, Any]] = deque(maxlen=size)

    def ended(
        self, handle: GenerationHandle, ended_at: float, disconnected: str | None = None
    ) -> None:
        """``handle`` resolved at ``ended_at``; ``disconnected``: where its client
        left it ("queued", "running"), if it did."""
        job = handle.job
        entry: dict[str, Any] = {
            "id": job.id,
            "class": job.class_name,
            "producer": job.producer,
            "model": job.model_id,
            "outcome": _OUTCOMES.get(handle.state, "cancelled"),
            "ended_at": ended_at,
            "tokens": len(handle.pieces),
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
