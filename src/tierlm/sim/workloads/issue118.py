"""``issue118``: the bug tierlm was built for (seed §"Why", GitHub issue #118).

"Opening Shiv chat while Nataraj is filling its deck makes chat wait 30-110 s
before the first token." Around it, the rest of a busy phone:

- the person: on the Nataraj deck page (foreground ``nataraj``) for 60-120 s,
  swiping a card every 15-30 s; then opens chat (foreground ``chat``: also the
  two-lane queue's "chat surface open", its pauseLowPriority) and sends 3-6
  messages, each after reading the last reply; then leaves AI surfaces
  (foreground None) for 60-180 s; and again;
- Nataraj fills a deck of 10 cards, card by card, refilling as cards are
  swiped;
- an extraction backfill of 500 notes arriving 1 per second from t = 1 s,
  then a new note every 60-180 s;
- Gana cron ticks, each due 60 s after it fires: ``gana:digest`` every 180 s
  and ``gana:inbox`` every 240 s on the chat model ``m1``, and
  ``gana:translate`` every 300 s on a second model ``m2`` (due 120 s after).

It repeats for any duration: ``bench/sim_speed.py`` runs it for 24 hours.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from tierlm.sim.context import SimContext
from tierlm.sim.workload import Workload
from tierlm.sim.workloads.producers import (
    Deck,
    chat_session,
    deck_filler,
    extract_job,
    extraction,
    gana_cron,
)

__all__ = ["Issue118"]

DECK_CARDS = 10
BACKFILL_NOTES = 500


class Issue118(Workload):
    name = "issue118"
    description = (
        "Nataraj fills a deck while the person opens chat and sends messages; "
        "a 500-note extraction backfill at 1/s; Gana cron ticks with deadlines; "
        "one Gana on a second model"
    )
    # 20 minutes: the backfill's 500 s of arrivals, and four or five rounds of
    # deck page -> chat -> away.
    default_duration = 1200.0

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        deck = Deck(target=DECK_CARDS)
        return [
            _person(sim, deck),
            deck_filler(sim, deck),
            backfill_then_notes(sim),
            gana_cron(sim, "gana:digest", period=180.0, first=30.0, slack=60.0),
            gana_cron(sim, "gana:inbox", period=240.0, first=100.0, slack=60.0),
            gana_cron(sim, "gana:translate", model="m2", period=300.0, first=150.0, slack=120.0),
        ]

    def params(self) -> dict[str, Any]:
        return {"deck_cards": DECK_CARDS, "backfill_notes": BACKFILL_NOTES}


async def backfill_then_notes(sim: SimContext) -> None:
    """The extraction backfill, then a note the person writes every 60-180 s
    (also the ``sessions`` workload's)."""
    await extraction(sim, notes=BACKFILL_NOTES, interval=1.0, start=1.0)
    rng = sim.rng("extract:new")
    note = BACKFILL_NOTES
    while True:
        await sim.sleep(rng.uniform(60.0, 180.0))
        sim.submit(extract_job(rng, note, producer="extract:new"))
        note += 1


async def _person(sim: SimContext, deck: Deck) -> None:
    rng = sim.rng("person")
    while True:
        # The deck page (NatarajDeckPage): swipe a card every 15-30 s.
        sim.set_foreground("nataraj")
        leave = sim.now() + rng.uniform(60.0, 120.0)
        while True:
            swipe = rng.uniform(15.0, 30.0)
            if sim.now() + swipe > leave:
                break
            await sim.sleep(swipe)
            deck.take()
        await sim.sleep_until(leave)
        # Shiv chat: the surface opens, then the conversation.
        sim.set_foreground("chat")
        await chat_session(sim, rng, messages=rng.randint(3, 6))
        await sim.sleep(rng.uniform(5.0, 15.0))  # reads the last reply
        # Elsewhere in the app: no AI surface.
        sim.set_foreground(None)
        await sim.sleep(rng.uniform(60.0, 180.0))
