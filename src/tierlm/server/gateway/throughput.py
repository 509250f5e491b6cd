"""Tokens generated per second over the last seconds, for the dashboard: the
device's aggregate rate (every slot of a batch), counted as the pieces reach
their requests (one piece per token); and the same, second by second, over
the dashboard's window (``history``), which it draws as throughput over time
(docs/gateway.md "Dashboard")."""

from __future__ import annotations

from collections import deque

__all__ = ["Throughput"]

WINDOW = 10.0
"""Seconds the rate is taken over: long enough to smooth a batch's bursts,
short enough that a stop shows within seconds."""
HISTORY = 3600
"""Seconds of per-second counts kept (the longest dashboard window drawn)."""


class Throughput:
    def __init__(self, window: float = WINDOW, history: int = HISTORY) -> None:
        self.window = window
        # (time, tokens) per distinct time: bounded by the rate of the clock's
        # distinct readings, never by the tokens (a batch's are one entry).
        self._counts: deque[list[float]] = deque()
        self._seconds: deque[list[int]] = deque(maxlen=history)
        """[whole second, tokens in it], oldest first: one entry a second."""

    def add(self, now: float, tokens: int = 1) -> None:
        if self._counts and self._counts[-1][0] == now:
            self._counts[-1][1] += tokens
        else:
            self._counts.append([now, float(tokens)])
        self._trim(now)
        second = int(now)
        if self._seconds and self._seconds[-1][0] == second:
            self._seconds[-1][1] += tokens
        else:
            self._seconds.append([second, tokens])

    def history(self, now: float, span: float) -> list[list[int]]:
        """``[second, tokens]`` for each second of the last ``span`` with
        tokens, oldest first (a second without any is absent: zero)."""
        since = int(now - span)
        return [list(entry) for entry in self._seconds if entry[0] >= since]

    def _trim(self, now: float) -> None:
        while self._counts and self._counts[0][0] < now - self.window:
            self._counts.popleft()

    def rate(self, now: float) -> float:
        """Tokens a second over the last ``window`` seconds."""
        self._trim(now)
        return sum(count for _, count in self._counts) / self.window
