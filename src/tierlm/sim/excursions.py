"""How often the device's bets on a person's reading gap lose
(docs/design.md §4.8 (excursions)), from the records alone.

An *excursion* is a swap away from the model of the person's chats that
starts while the chat page is open: the policy bet that the person would not
write before the device is back (a gap bet, or a hold that ran out: "they
have stopped"). It is *lost* when a chat is submitted after the swap away
began and before the swap back ended: that message waited for background
work's swaps. A policy that never leaves the person's model with the page
open makes no bets; one that ignores the person loses many.
"""

from __future__ import annotations

import bisect
from collections import Counter
from typing import Any

from tierlm.sim.records import CHAT_CLASS, SimRecords

__all__ = ["excursions"]


def excursions(rec: SimRecords) -> dict[str, Any]:
    """``bets``: excursions; ``lost``: those a chat met; ``chats_met``: the
    chats submitted inside a lost one (a share of all chats in
    ``chats_met_share``)."""
    chats = sorted(j.submitted for j in rec.jobs if j.class_name == CHAT_CLASS)
    models = Counter(j.model_id for j in rec.jobs if j.class_name == CHAT_CLASS)
    empty = {"bets": 0, "lost": 0, "lost_share": None, "chats_met": 0, "chats_met_share": 0.0}
    if not chats:
        return empty
    person = models.most_common(1)[0][0]
    swaps = sorted(
        [
            (run.swap_start, run.swap_end if run.swap_end is not None else rec.horizon, j.model_id)
            for j in rec.jobs
            for run in j.runs
            if run.swap_start is not None
        ]
        + [(start, end, person) for start, end in rec.returns]
    )
    bets = lost = met = 0
    on = rec.initial_model
    for i, (start, _end, model) in enumerate(swaps):
        away = on == person and model != person and _chat_open(rec, start)
        on = model
        if not away:
            continue
        back = next((e for s, e, m in swaps[i + 1 :] if m == person), rec.horizon)
        inside = bisect.bisect_left(chats, back) - bisect.bisect_left(chats, start)
        bets += 1
        lost += inside > 0
        met += inside
    return {
        "bets": bets,
        "lost": lost,
        "lost_share": lost / bets if bets else None,
        "chats_met": met,
        "chats_met_share": met / len(chats),
    }


def _chat_open(rec: SimRecords, at: float) -> bool:
    """Whether the chat page was the foreground at ``at``."""
    current = None
    for time, name in rec.foreground:
        if time > at:
            break
        current = name
    return current == CHAT_CLASS
