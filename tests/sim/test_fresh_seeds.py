"""The headline on seeds nobody tuned on (docs/design.md §4.8 (presence), §8):
``issue118`` on thirty seeds (200-229), one and eight slots. On such seeds a
swap to another model for an overdue cron job started while the person was
on the deck page, and their first chat met the swap back (10 s; seed 25 at 8
slots, seed 136 at 1 slot, of 1-159). ``test_headline_seeds`` keeps seeds
1-10 in the fast run; these take a few minutes."""

from __future__ import annotations

import pytest

from tierlm.sim.compare import compare
from tierlm.sim.device import DeviceModel
from tierlm.sim.workloads import get_workload

SEEDS = range(200, 230)


@pytest.mark.slow
@pytest.mark.parametrize("slots", [1, 8])
def test_no_chat_waits_for_a_swap_on_fresh_seeds(slots: int) -> None:
    waits, met = {}, {}
    for seed in SEEDS:
        result = compare(
            get_workload("issue118"), ["tierlm"], seed=seed, device=DeviceModel(slots=slots)
        )
        chat = result.metrics["tierlm"]["chat"]
        assert chat["count"] >= 10, (seed, chat["count"])  # the person did chat
        waits[seed] = chat["wait_p99"]
        met[seed] = chat["met_swap"]
    assert max(waits.values()) <= 0.1, waits
    assert not any(met.values()), met
