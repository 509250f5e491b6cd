"""tierlm demo's batched-device table keeps its promises (docs/design.md §4.7)."""

from __future__ import annotations

from tierlm.core.config import SchedulerConfig
from tierlm.sim.batched_demo import batched_rows


def test_the_batched_table_one_slot_against_four_and_eight() -> None:
    one, four, eight = batched_rows((1, 4, 8))
    assert (one.slots, four.slots, eight.slots) == (1, 4, 8)
    assert one.seconds / eight.seconds >= 3.0  # the agents workload, 8 slots
    assert one.seconds / four.seconds > 2.0
    floor = 1 / SchedulerConfig().chat_slowdown
    for row in (one, four, eight):
        assert row.chat_steps <= 2, row
        assert row.chat_speed >= floor - 1e-9, row
