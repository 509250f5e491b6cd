"""``fair-pool``: backlogged fair-pool producers, 2 then 8, and one that comes and goes.

"2 and 8 equal fair-pool producers kept backlogged, plus one that
goes idle and returns -- VTC's on/off case" (VTC, arXiv:2501.14312). Equal
weights, unequal jobs: fairness means equal service whatever the job size,
which FIFO (service in proportion to job size) does not give.

- first half: ``gana:a`` (jobs ~6 s) and ``gana:b`` (~15 s);
- second half: six more join, ``gana:c`` .. ``gana:h`` (~4 to ~20 s);
- ``gana:onoff`` (~10 s jobs) runs from 0 to 15 % of the run, is idle (more
  than docs/design.md §4's 300 s on the default duration), and returns at 40 %.

Each keeps 3 jobs queued or running, submitted in a burst at its start (a Gana
with a batch of rounds, seed scenario 2).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from tierlm.sim.context import SimContext
from tierlm.sim.workload import Workload
from tierlm.sim.workloads.producers import backlogged

__all__ = ["FairPool"]

OUTSTANDING = 3
PROMPT = (120, 180)  # ~1 s of prefill
# Output tokens per producer (15 tokens/s): mean job ~ 1 s + output / 15.
FIRST = {"gana:a": (60, 90), "gana:b": (190, 230)}
SECOND = {
    "gana:c": (30, 60),
    "gana:d": (90, 120),
    "gana:e": (150, 180),
    "gana:f": (210, 240),
    "gana:g": (270, 300),
    "gana:h": (120, 150),
}
ONOFF = ("gana:onoff", (120, 150))
ONOFF_PHASES = ((0.0, 0.15), (0.40, 1.0))  # fractions of the run


class FairPool(Workload):
    name = "fair-pool"
    description = (
        "2 then 8 backlogged Gana producers with unequal job sizes, and one that "
        "goes idle and returns (VTC's on/off case)"
    )
    default_duration = 1200.0

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        half = sim.duration / 2
        coros = [
            backlogged(sim, name, outstanding=OUTSTANDING, prompt=PROMPT, output=output)
            for name, output in FIRST.items()
        ]
        coros += [
            backlogged(sim, name, outstanding=OUTSTANDING, prompt=PROMPT, output=output, start=half)
            for name, output in SECOND.items()
        ]
        name, output = ONOFF
        coros += [
            backlogged(
                sim,
                name,
                outstanding=OUTSTANDING,
                prompt=PROMPT,
                output=output,
                start=begin * sim.duration,
                stop=end * sim.duration,
            )
            for begin, end in ONOFF_PHASES
        ]
        return coros

    def params(self) -> dict[str, Any]:
        return {"outstanding": OUTSTANDING, "onoff_phases": [list(p) for p in ONOFF_PHASES]}
