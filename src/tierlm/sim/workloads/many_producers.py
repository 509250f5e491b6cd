"""``many-producers``: one job each from many distinct producers.

What a gateway sees with one producer id per user: ``producers`` jobs
(default 100 000), each from its own producer (``user:<n>``), arriving evenly
over the first minute, 2 s each, so nearly all of them are queued at once.
The story is cost, not share: the run must finish in reasonable wall time
(docs/design.md §4: O(log n) in jobs and in producers), and the report says
how long it took.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from typing import Any, ClassVar

from tierlm.sim.context import SimContext
from tierlm.sim.jobspec import JobSpec
from tierlm.sim.workload import Workload
from tierlm.sim.workloads.producers import output_for

__all__ = ["ManyProducers"]

ARRIVALS = 60.0  # seconds over which the jobs arrive
JOB_SECONDS = 2.0
PROMPT = 60


class ManyProducers(Workload):
    name = "many-producers"
    description = "100 000 distinct producers (one per user behind a gateway), one 2 s job each"
    default_duration = 600.0
    parameters: ClassVar[Mapping[str, str]] = {
        "producers": "how many distinct producers, one job each (default 100000)"
    }

    def __init__(self, producers: float = 100_000) -> None:
        if producers < 1 or producers != int(producers):
            raise ValueError(f"producers: must be a whole number >= 1, got {producers!r}")
        self.count = int(producers)

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        return [self._arrivals(sim)]

    async def _arrivals(self, sim: SimContext) -> None:
        rng = sim.rng("users")
        output = output_for(sim.device, JOB_SECONDS, PROMPT)
        gap = ARRIVALS / self.count
        for n in range(self.count):
            sim.submit(JobSpec("gana", "m1", PROMPT, rng.randint(*output), producer=f"user:{n}"))
            await sim.sleep(gap)

    def params(self) -> dict[str, Any]:
        return {"producers": self.count, "job_s": JOB_SECONDS}
