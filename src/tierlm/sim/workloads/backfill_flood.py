"""``backfill-flood``: extraction offered 3x its budget while the fair pool competes.

"extraction offered 3x its budget while Nataraj and two Ganas
compete". The budget is 60 % of busy time (docs/design.md §3), so extraction offers
1.8 devices' worth of work: notes of ~3 s (150-300 prompt tokens, 15-30 out)
arriving as a Poisson stream of 0.6 notes/s. Nataraj fills a deck nobody
swipes (always backlogged) and two Ganas keep two rounds queued each.

Half-way, the person opens one note for 90 s (foreground ``extract`` with that
note as subject, and its extraction submitted with ``foregroundHint``, seed
scenario 7): docs/design.md §6.2 hoists that one note; the seed's ``_tier`` hoists the
whole backfill.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from tierlm.sim.context import SimContext
from tierlm.sim.jobspec import JobSpec
from tierlm.sim.workload import Workload
from tierlm.sim.workloads.producers import (
    GANA_OUTPUT,
    GANA_PROMPT,
    Deck,
    backlogged,
    deck_filler,
    extraction,
)

__all__ = ["BackfillFlood"]

NOTE_PROMPT = (150, 300)
NOTE_OUTPUT = (15, 30)
# Mean note: 225 / 150 + 22.5 / 15 = 3.0 s of device time on the default device.
MEAN_NOTE_SECONDS = 3.0
OFFERED = 3 * 0.6  # 3x the 60 % budget, in devices
OPEN_NOTE = "note-opened"
OPEN_FOR = 90.0


class BackfillFlood(Workload):
    name = "backfill-flood"
    description = (
        "extraction offered 3x its 60 % budget (Poisson, ~3 s notes) while Nataraj and "
        "two Ganas stay backlogged; the person opens one note for 90 s half-way"
    )
    default_duration = 1200.0

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        # The note rate is fixed by the token sizes, measured on the default
        # device: on a faster device extraction offers less than 3x.
        interval = MEAN_NOTE_SECONDS / OFFERED
        return [
            extraction(
                sim,
                notes=10**9,
                interval=interval,
                prompt=NOTE_PROMPT,
                output=NOTE_OUTPUT,
                poisson=True,
            ),
            deck_filler(sim, Deck(target=10**9)),
            backlogged(sim, "gana:a", outstanding=2, prompt=GANA_PROMPT, output=GANA_OUTPUT),
            backlogged(sim, "gana:b", outstanding=2, prompt=GANA_PROMPT, output=GANA_OUTPUT),
            _open_note(sim),
        ]

    def params(self) -> dict[str, Any]:
        return {
            "offered_extraction_devices": OFFERED,
            "note_interval_s": MEAN_NOTE_SECONDS / OFFERED,
            "opened_note_for_s": OPEN_FOR,
        }


async def _open_note(sim: SimContext) -> None:
    await sim.sleep_until(sim.duration / 2)
    sim.set_foreground("extract", OPEN_NOTE)
    # ExtractKnowledgeUseCase, "note just opened" (foregroundHint: true).
    sim.submit(JobSpec("extract", "m1", 400, 40, producer="extract:opened", subject=OPEN_NOTE))
    await sim.sleep(OPEN_FOR)
    sim.set_foreground(None)
