"""Whether a replica's tierlm still works: what ``check_health`` tells Serve.

Serve replaces a replica whose ``check_health`` raises. A tierlm is unwell,
and a new process would do better, when:

- **its scheduler stalled**: work is waiting (a job runs, or jobs are queued
  while dispatch is not paused) and nothing happened for ``stall_after_s``:
  no scheduler event (a dispatch, a swap, a job's end) and no token;
- **its llama.cpp worker crash-loops**: ``CRASH_LOOP`` restarts within
  ``CRASH_WINDOW_S`` (one restart is the worker's watchdog doing its job,
  docs/gateway.md; a loop is a device or a model that does not work here).

Pure: the clock and the counts are arguments.
"""

from __future__ import annotations

from collections import deque

__all__ = ["CRASH_LOOP", "CRASH_WINDOW_S", "DEFAULT_STALL_AFTER_S", "Liveness"]

# Longer than any prompt evaluation or swap a device should spend without a
# token or an event (the seed's swaps take ~10 s).
DEFAULT_STALL_AFTER_S = 120.0
CRASH_LOOP = 3
CRASH_WINDOW_S = 300.0


class Liveness:
    """Progress and worker restarts of one replica, and what is wrong."""

    def __init__(self, stall_after_s: float, now: float) -> None:
        self.stall_after_s = stall_after_s
        self.last_progress = now
        self._restarts: deque[float] = deque()
        self._restart_count = 0

    def progress(self, now: float) -> None:
        """A scheduler event or a token."""
        self.last_progress = now

    def problem(self, now: float, *, working: bool, restarts: int) -> str | None:
        """Why the replica should be replaced, or None. ``working``: a job runs,
        or jobs wait while dispatch is not paused; ``restarts``: the worker's
        restarts so far."""
        for _ in range(max(0, restarts - self._restart_count)):
            self._restarts.append(now)
        self._restart_count = max(self._restart_count, restarts)
        while self._restarts and now - self._restarts[0] > CRASH_WINDOW_S:
            self._restarts.popleft()
        if len(self._restarts) >= CRASH_LOOP:
            return (
                f"the llama.cpp worker restarted {len(self._restarts)} times within "
                f"{CRASH_WINDOW_S:g} s (a crash loop)"
            )
        if not working:
            self.last_progress = now  # idle is not stalled
            return None
        idle_for = now - self.last_progress
        if idle_for > self.stall_after_s:
            return (
                f"the scheduler stalled: work waits and nothing happened for {idle_for:.0f} s "
                f"(stall_after_s = {self.stall_after_s:g})"
            )
        return None
