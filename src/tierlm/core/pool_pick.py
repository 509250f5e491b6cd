"""The fair pool's best job on one model, as a candidate of the picker
(docs/design.md §4.4, §4.5): an open loan (T3, earliest due first) or, if
asked, the EEVDF pick (T4). Answers are cached per model, with the EEVDF
pick and without (a preemption check asks without, the next pick with),
until the pool, the skipped classes, the floor or the competing running job
change."""

from __future__ import annotations

from collections.abc import Mapping

from tierlm.core import fair_choice
from tierlm.core.classes import T3, T4
from tierlm.core.fairness import FairPool
from tierlm.core.floor import PoolFloor
from tierlm.core.jobs import Job
from tierlm.core.queues import Candidate

__all__ = ["PoolPick"]


class PoolPick:
    __slots__ = ("_fair", "_floor", "_jobs", "_loans", "_t4")

    def __init__(self, fair: FairPool, floor: PoolFloor, jobs: Mapping[int, Job]) -> None:
        self._fair = fair
        self._floor = floor
        self._jobs = jobs
        # Per model: (what was asked, the answer), with ``t4`` and without.
        self._t4: dict[str, tuple[object, Candidate | None]] = {}
        self._loans: dict[str, tuple[object, Candidate | None]] = {}

    def clear(self) -> None:
        """Forget every answer (the tests compare a pick without them)."""
        self._t4.clear()
        self._loans.clear()

    def best(
        self, model: str, skip: frozenset[str], running: Job | None, t4: bool
    ) -> Candidate | None:
        """The pool's best job on ``model``: an open loan (T3, EDF) or, if
        ``t4``, the EEVDF pick (T4), in which ``running`` competes."""
        fair, floor = self._fair, self._floor
        key = (fair.version, skip, floor.active, running)
        cache = self._t4 if t4 else self._loans
        cached = cache.get(model)
        if cached is not None and cached[0] == key:
            return cached[1]
        candidate: Candidate | None = None
        if not floor.active:
            loan = fair_choice.best_loan(fair, model, skip)
            if loan is not None:
                candidate = (T3, loan, loan[1])  # its key: (due, id)
        if candidate is None and t4:
            found = (
                fair_choice.best_queued(fair, model, skip)
                if running is None
                else fair_choice.best(fair, model, skip, running_job=running)
            )
            if found is not None:
                candidate = (T4, found[0], found[1])
        cache[model] = (key, candidate)
        return candidate
