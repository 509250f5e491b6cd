"""Which replicas a fleet-wide answer did not hear from, by name.

A broadcast (``tierlm.ray.reach``) says how many replicas it reached, and
each answer names its replica; a replica that does not answer (frozen by
SIGSTOP, its event loop blocked) names nothing. The ingress remembers the
replicas it heard from, so that ``/health`` can name the silent ones rather
than just drop them ("degraded: 2 of 3 answer; q4g4 did not"): the silent are
the remembered replicas not heard from this time, the most recently heard
first, as many as went silent. A remembered replica beyond that count left
the fleet (Serve stopped it) and is forgotten. A silent replica never heard
from (it froze before its first answer) is shown unnamed.

Pure: the clock is an argument.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Roster", "Seen"]


@dataclass
class Seen:
    """A replica heard from: when (the caller's clock), and its process."""

    at: float
    pid: int | None = None


class Roster:
    """The replicas the ingress has heard from (module docstring)."""

    def __init__(self) -> None:
        self.seen: dict[str, Seen] = {}

    def heard(self, name: str, at: float, pid: int | None = None) -> None:
        self.seen[name] = Seen(at, pid)

    def silent(self, answered: Iterable[str], count: int) -> list[str]:
        """The names of ``count`` replicas that did not answer, given the
        names that did: remembered ones first (the most recently heard), then
        ``unnamed-<i>``. The remembered replicas beyond them are forgotten."""
        heard = set(answered)
        others = sorted(
            (name for name in self.seen if name not in heard),
            key=lambda name: (-self.seen[name].at, name),
        )
        named = others[:count]
        for gone in others[count:]:
            del self.seen[gone]
        return named + [f"unnamed-{i}" for i in range(1, count - len(named) + 1)]
