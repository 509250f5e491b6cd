"""Tokens generated per second over the last seconds, for the dashboard: the
device's aggregate rate (every slot of a batch), counted as the pieces reach
their requests (one piece per token)."""

from __future__ import annotations

from collections import deque

__all__ = ["Throughput"]

WINDOW = 10.0
"""Seconds the rate is taken over: long enough to smooth a batch's bursts,
short enough that a stop shows within seconds."""


class Throughput:
    def __init__(self, window: float = WINDOW) -> None:
        self.window = window
        # (time, tokens) per distinct time: bounded by the rate of the clock's
        # distinct readings, never by the tokens (a batch's are one entry).
        self._counts: deque[list[float]] = deque()

    def add(self, now: float, tokens: int = 1) -> None:
        if self._counts and self._counts[-1][0] == now:
            self._counts[-1][1] += tokens
        else:
            self._counts.append([now, float(tokens)])
        self._trim(now)

    def _trim(self, now: float) -> None:
        while self._counts and self._counts[0][0] < now - self.window:
            self._counts.popleft()

    def rate(self, now: float) -> float:
        """Tokens a second over the last ``window`` seconds."""
        self._trim(now)
        return sum(count for _, count in self._counts) / self.window
