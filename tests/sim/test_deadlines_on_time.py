"""Deadlines on time (docs/design.md §4.8) on the Azure conversation trace
(§8): at 8 slots the cron job's worst lateness is no worse than FIFO's
(+resume), and the person still waits far less than under FIFO; and the
pool's adversarial cases about deadlines. Virtual time."""

from __future__ import annotations

import pytest

from tierlm.core.config import SchedulerConfig
from tierlm.sim import compute_metrics, simulate
from tierlm.sim.compare import compare
from tierlm.sim.device import DeviceModel
from tierlm.sim.workloads import get_workload

HOURS = 4.0  # bench/traces.py's length: the trace's hour over four simulated ones


def run(policy: str, seed: int, deadlines: str = "after-people") -> dict[str, float]:
    records = simulate(
        get_workload("azure-chat"),
        policy,
        seed=seed,
        duration=HOURS * 3600,
        device=DeviceModel(slots=8),
        config=SchedulerConfig(deadlines=deadlines),
    )
    metrics = compute_metrics(records)
    return {
        "late": metrics["deadlines"]["lateness_max"],
        "wait_p99": metrics["chat"]["wait_p99"],
    }


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_on_time_cron_is_no_later_than_fifo_s_and_people_wait_less(seed: int) -> None:
    on_time = run("tierlm", seed, deadlines="on-time")
    fifo = run("fifo+resume", seed)
    default = run("tierlm", seed)
    assert on_time["late"] <= fifo["late"], (on_time, fifo)
    assert on_time["late"] < default["late"] / 4, (on_time, default)
    assert on_time["wait_p99"] < fifo["wait_p99"] / 2, (on_time, fifo)


@pytest.mark.parametrize("slots", [1, 8])
@pytest.mark.parametrize("name", ["deadline-abuse", "overdue-flood"])
def test_on_time_keeps_the_pools_protections_against_deadlines(name: str, slots: int) -> None:
    """The pool's cases about deadlines hold on time too, though pressing work
    asks no loan: a producer claiming every deadline already past leaves an
    honest peer its share, and an overdue flood leaves the pool its floor
    (docs/design.md §4.5)."""
    workload = get_workload(name)
    story = workload.story()
    assert story is not None
    result = compare(
        workload,
        ["tierlm"],
        duration=600.0,
        device=DeviceModel(slots=slots),
        config=SchedulerConfig(deadlines="on-time"),
    )
    value = story.read(result.metrics["tierlm"])
    assert story.met(value), f"{name}: {story.show(value)}, {story.target}"
