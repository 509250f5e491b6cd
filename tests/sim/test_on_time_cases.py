"""Deadlines on time (docs/design.md §4.8 (on time)) where it used to break
its word: a pressing cron job on m1 and a job on m2 at the starvation bound
took turns at the device, a swap at every slice's end. Against FIFO on the
same workload (``tierlm.sim.workloads.on_time_cases``). Virtual time."""

from __future__ import annotations

import pytest

from tierlm.core.config import SchedulerConfig
from tierlm.sim import compute_metrics, simulate
from tierlm.sim.device import DeviceModel
from tierlm.sim.workloads.on_time_cases import CronVsStarved


def run(policy: str, slots: int, seed: int, deadlines: str = "after-people") -> dict[str, float]:
    records = simulate(
        CronVsStarved(),
        policy,
        seed=seed,
        duration=CronVsStarved.default_duration,
        device=DeviceModel(slots=slots),
        config=SchedulerConfig(deadlines=deadlines),
    )
    metrics = compute_metrics(records)
    return {"swaps": metrics["swaps"]["count"], "late": metrics["deadlines"]["lateness_max"]}


@pytest.mark.parametrize("seed", [3, 4])
@pytest.mark.parametrize("slots", [1, 8])
def test_on_time_does_not_ping_pong_between_pressing_work_and_the_starvation_bound(
    slots: int, seed: int
) -> None:
    """A swap made on time holds until the job it was made for has run: no
    more swaps than FIFO, and cron no later than FIFO+resume's. It took
    turns: on one slot 91 swaps in 30 min and cron 842 s late (FIFO+resume:
    58 swaps, 65 s)."""
    on_time = run("tierlm", slots, seed, deadlines="on-time")
    fifo = run("fifo", slots, seed)
    resume = run("fifo+resume", slots, seed)
    assert on_time["swaps"] <= fifo["swaps"], (on_time, fifo)
    assert on_time["late"] <= resume["late"], (on_time, resume)
