"""The headline on every seed (docs/design.md §4.8 (holds), §8.8): the bug
tierlm was built for, ``issue118``, replayed on ten seeds at one and eight
slots. A target met on one seed is not met: half the seeds made a chat wait
9-16 s for two swaps when a model swap away started as the chat page opened."""

from __future__ import annotations

import pytest

from tierlm.sim.compare import compare
from tierlm.sim.device import DeviceModel
from tierlm.sim.workloads import get_workload

SEEDS = range(1, 11)


@pytest.mark.parametrize("slots", [1, 8])
def test_a_chat_waits_for_the_device_at_most_a_tenth_of_a_second_on_every_seed(
    slots: int,
) -> None:
    waits = {}
    for seed in SEEDS:
        result = compare(
            get_workload("issue118"), ["tierlm"], seed=seed, device=DeviceModel(slots=slots)
        )
        chat = result.metrics["tierlm"]["chat"]
        assert chat["count"] >= 10, (seed, chat["count"])  # the person did chat
        waits[seed] = chat["wait_p99"]
    assert max(waits.values()) <= 0.1, waits
