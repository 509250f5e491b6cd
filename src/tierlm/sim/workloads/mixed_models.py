"""``mixed-models``: jobs on three models arriving interleaved A B C A B C.

Every 300 s a burst of 24 Gana rounds arrives, one a second, cycling models
A, B, C (three Ganas, one per model, 8 rounds each; rounds of 4-8 s). A
burst is ~2.5 min of work, so a schedule can finish it before the next one.

Minimum possible swaps: whatever model is loaded when a burst arrives, the
other two must be loaded after it, so any schedule that finishes each burst
before the next arrives swaps at least twice per burst: ``min_swaps`` = 2 per
burst (the device starts on A, the first burst's first model). That bound
needs foresight: a burst's first round is on A, and a device that finished the
last burst on B or C and is idle must swap for it or idle until a round on its
model arrives. A work-conserving policy (one that never idles with work
queued) therefore swaps at least three times in every
burst after the first: ``min_swaps_work_conserving`` = 2 + 3 (bursts - 1).
"""

from __future__ import annotations

import math
from collections.abc import Coroutine
from typing import Any

from tierlm.sim.context import SimContext
from tierlm.sim.jobspec import JobSpec
from tierlm.sim.workload import Workload

__all__ = ["MixedModels"]

MODELS = ("A", "B", "C")
PER_MODEL = 8
PERIOD = 300.0
PROMPT = (200, 400)
OUTPUT = (40, 90)


class MixedModels(Workload):
    name = "mixed-models"
    description = "bursts of Gana rounds on three models, interleaved A B C A B C"
    default_duration = 1200.0
    initial_model = "A"

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        return [_bursts(sim)]

    def hints(self, duration: float) -> dict[str, Any]:
        bursts = math.ceil(duration / PERIOD)
        return {
            "min_swaps": 2 * bursts,
            "min_swaps_work_conserving": 2 + 3 * (bursts - 1),
            "bursts": bursts,
        }

    def params(self) -> dict[str, Any]:
        return {"models": list(MODELS), "per_model": PER_MODEL, "period_s": PERIOD}


async def _bursts(sim: SimContext) -> None:
    rng = sim.rng("bursts")
    start = 0.0
    while True:
        await sim.sleep_until(start)
        for _ in range(PER_MODEL):
            for model in MODELS:
                sim.submit(
                    JobSpec(
                        "gana",
                        model,
                        prompt_tokens=rng.randint(*PROMPT),
                        output_tokens=rng.randint(*OUTPUT),
                        producer=f"gana:{model}",
                    )
                )
                await sim.sleep(1.0)
        start += PERIOD
