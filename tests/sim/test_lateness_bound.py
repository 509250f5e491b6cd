"""The lateness a person-first schedule cannot avoid (docs/design.md §8,
``tierlm.sim.lateness_bound``): hand-computed cases, then the simulator's
own runs, where tierlm (whose chats never wait for a swap on ``issue118``)
must never beat it."""

from __future__ import annotations

import pytest

from tests.sim.test_metrics import records as metric_records
from tierlm.sim import compute_metrics, simulate
from tierlm.sim.device import DeviceModel
from tierlm.sim.lateness_bound import lateness_bounds
from tierlm.sim.records import JobRecord, SimRecords
from tierlm.sim.workloads import get_workload

SWAP = 10.0


def chat(id: int, at: float, seconds: float, model: str = "m1") -> JobRecord:
    return JobRecord(
        id, "chat", "chat", model, None, None, at, ideal_seconds=seconds, outcome="completed"
    )


def cron(id: int, at: float, seconds: float, due: float, model: str = "m2") -> JobRecord:
    return JobRecord(
        id, "gana", "gana:x", model, None, due, at, ideal_seconds=seconds, outcome="unfinished"
    )


def records(jobs: list[JobRecord], horizon: float = 1000.0, initial: str = "m1") -> SimRecords:
    rec = metric_records(jobs, horizon, initial_model=initial)
    assert rec.swap_seconds == SWAP
    return rec


def test_a_job_on_another_model_runs_only_in_gaps_that_hold_both_swaps() -> None:
    # Chats hold the device over [0, 5], [30, 35] and [100, 105]. The job
    # (10 s, due at 20) gets 25 - 20 = 5 s of the first gap, then finishes
    # 5 s into the second's usable part: 35 + 10 (swap in) + 5 = 50.
    jobs = [chat(1, 0, 5), chat(2, 30, 5), chat(3, 100, 5), cron(4, 1, 10, due=20)]
    assert lateness_bounds(records(jobs)) == [pytest.approx(30.0)]


def test_a_gap_shorter_than_two_swaps_gives_nothing() -> None:
    # [5, 24] holds 19 s < two swaps; the job waits for [35, 100).
    jobs = [chat(1, 0, 5), chat(2, 24, 11), chat(3, 100, 5), cron(4, 6, 4, due=10)]
    assert lateness_bounds(records(jobs)) == [pytest.approx(35 + SWAP + 4 - 10)]


def test_after_the_last_chat_no_swap_back_is_owed() -> None:
    jobs = [chat(1, 0, 5), cron(2, 1, 10, due=12)]
    assert lateness_bounds(records(jobs)) == [pytest.approx(5 + SWAP + 10 - 12)]


def test_a_job_on_the_loaded_model_at_the_start_needs_no_swap_in() -> None:
    jobs = [cron(1, 0, 8, due=10, model="m2"), chat(2, 20, 5)]
    assert lateness_bounds(records(jobs, initial="m2")) == [0.0]
    # The same job with m1 loaded: swap in, 8 s, swap back = 28 > 20: it
    # fits only after the chat.
    assert lateness_bounds(records(jobs, initial="m1")) == [pytest.approx(25 + SWAP + 8 - 10)]


def test_work_on_the_persons_model_is_not_held_by_swaps() -> None:
    jobs = [chat(1, 0, 50), cron(2, 0, 10, due=5, model="m1")]
    assert lateness_bounds(records(jobs)) == [pytest.approx(5.0)]


def test_a_job_that_cannot_finish_by_the_horizon_counts_as_the_metric_does() -> None:
    jobs = [chat(1, 0, 95), cron(2, 1, 10, due=20), cron(3, 1, 10, due=2000)]
    # due 20 but no room before the horizon (100): horizon - due; the job due
    # after the horizon and not done is not counted, as by the lateness metric.
    assert lateness_bounds(records(jobs, horizon=100.0)) == [pytest.approx(80.0)]


@pytest.mark.parametrize("slots", [1, 8])
def test_tierlm_whose_chats_never_wait_never_beats_the_bound(slots: int) -> None:
    """tierlm keeps the headline on ``issue118`` (tests/sim/test_headline_seeds.py:
    no chat waits for a swap), so job by job its lateness is at least the
    bound of its own run; below it, the bound or the headline would be wrong."""
    device = DeviceModel(slots=slots)
    held = 0
    for seed in range(1, 11):
        rec = simulate(get_workload("issue118"), "tierlm", seed=seed, device=device)
        deadlines = compute_metrics(rec)["deadlines"]
        bounds = lateness_bounds(rec)
        late = [x for job in rec.jobs if (x := job.lateness(rec.horizon)) is not None]
        assert len(bounds) == len(late) == deadlines["count"], seed
        assert all(x >= b - 1e-9 for x, b in zip(late, bounds, strict=True)), seed
        assert deadlines["lateness_max"] >= deadlines["bound_max"], seed
        held += sum(1 for b in bounds if b > 0)
    assert held > 0  # on some seeds the person's chats do hold the cron job
