"""Deadlines on time (docs/design.md §4.8 (on time)), tried where it used to
break its word (not registered in ``WORKLOADS``: ``bench/on_time.py`` and
``tests/sim/test_on_time_cases.py`` run it).

- ``cron-vs-starved``: a cron job every 60 s on m1, due 30 s after it fires,
  beside a backlogged deck on m1 and a backlogged agent on m2 (10 s jobs).
  The agent's jobs reach the starvation bound while the cron presses: each
  took the device from the other at its slice's end, a swap each time (on
  one slot 91 swaps in 30 min and cron 842 s late, FIFO+resume 58 swaps and
  65 s).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from tierlm.sim.context import SimContext
from tierlm.sim.workload import Workload
from tierlm.sim.workloads.producers import backlogged, gana_cron, output_for

__all__ = ["CronVsStarved"]

PROMPT = 60  # tokens: 0.4 s of prefill on the default device


class CronVsStarved(Workload):
    name = "cron-vs-starved"
    description = (
        "a cron job every 60 s on m1 (due 30 s after it fires) beside a backlogged deck "
        "on m1 and a backlogged agent on m2 (10 s jobs)"
    )
    default_duration = 1800.0

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        output = output_for(sim.device, 10.0, PROMPT)
        prompt = (PROMPT, PROMPT)
        return [
            backlogged(sim, "gana:deck", model="m1", outstanding=2, prompt=prompt, output=output),
            backlogged(sim, "gana:agent", model="m2", outstanding=2, prompt=prompt, output=output),
            gana_cron(sim, "gana:cron", model="m1", period=60.0, first=30.0, slack=30.0),
        ]
