"""The metric functions against hand-computed cases."""

from __future__ import annotations

import pytest

from tierlm.sim.metrics import compute_metrics, jain_index, percentile
from tierlm.sim.records import JobRecord, RunRecord, SimRecords, account_run


def job(
    id: int,
    class_name: str,
    submitted: float,
    runs: list[tuple[float, float]],
    *,
    producer: str | None = None,
    prompt: int = 100,
    output: int = 10,
    ended: float | None = None,
    outcome: str = "completed",
    first_token: float | None = None,
    deadline: float | None = None,
    wasted: float = 0.0,
    swap: tuple[float, float] | None = None,
) -> JobRecord:
    record = JobRecord(
        id=id,
        class_name=class_name,
        producer=producer or class_name,
        model_id="m1",
        subject=None,
        deadline=deadline,
        submitted=submitted,
        prompt_tokens=prompt,
        output_tokens=output,
        resumable=False,
        ideal_seconds=prompt * 0.01 + output * 0.1,
        first_token=first_token,
        ended=ended if ended is not None else (runs[-1][1] if runs else None),
        outcome=outcome,
        wasted_seconds=wasted,
    )
    for start, end in runs:
        record.runs.append(RunRecord(start, end, "completed"))
    if swap is not None:
        record.runs[0].swap_start, record.runs[0].swap_end = swap
    return record


def records(jobs: list[JobRecord], horizon: float, **kw: object) -> SimRecords:
    rec = SimRecords(
        policy="test",
        workload="test",
        seed=1,
        horizon=horizon,
        token_interval=0.1,
        prefill_per_token=0.01,
        swap_seconds=10.0,
        jobs=jobs,
    )
    for key, value in kw.items():
        setattr(rec, key, value)
    return rec


def test_percentile_interpolates_between_order_statistics() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([5.1, 1.1, 5.0], 99) == pytest.approx(5.0 + 0.1 * 0.98)
    assert percentile([0.0, 10.0, 20.0], 95) == pytest.approx(19.0)


def test_jain_index() -> None:
    assert jain_index([5.0, 5.0, 5.0]) == pytest.approx(1.0)
    assert jain_index([80.0, 40.0]) == pytest.approx(120**2 / (2 * (80**2 + 40**2)))
    assert jain_index([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)  # 1/n: one gets all
    assert jain_index([]) is None


def test_chat_ttft_wait_and_censored_chats() -> None:
    # Uncontended TTFT of a 100-token prompt: 100 x 0.01 + one 0.1 s token = 1.1 s.
    jobs = [
        job(1, "chat", 10.0, [(10.0, 12.1)], first_token=11.1),  # 1.1 s, no wait
        job(2, "chat", 20.0, [(24.0, 26.1)], first_token=25.1),  # 5.1 s: waited 4 s
        job(3, "chat", 95.0, [], outcome="unfinished", ended=100.0),  # no answer by 100
    ]
    chat = compute_metrics(records(jobs, 100.0))["chat"]
    assert chat["count"] == 3 and chat["unanswered"] == 1
    # The unanswered chat counts with its wait so far (5 s), a lower bound.
    assert chat["ttfts"] == pytest.approx([1.1, 5.1, 5.0])
    assert chat["ttft_p50"] == pytest.approx(5.0)
    assert chat["ttft_max"] == pytest.approx(5.1)
    assert chat["ttft_p99"] == pytest.approx(5.0 + 0.1 * 0.98)
    assert chat["waits"] == pytest.approx([0.0, 4.0, 3.9])
    assert chat["wait_max"] == pytest.approx(4.0)
    assert chat["ratio_p99"] == pytest.approx(percentile([1.0, 5.1 / 1.1, 5.0 / 1.1], 99))


def test_busy_waste_swaps_utilisation_and_completed() -> None:
    jobs = [
        # 10 s swap then 10 s of work; 4 s of its work was thrown away earlier.
        job(1, "gana", 0.0, [(0.0, 20.0)], swap=(0.0, 10.0), wasted=4.0),
        job(2, "extract", 0.0, [(20.0, 50.0)]),
        job(3, "extract", 0.0, [(90.0, 130.0)], outcome="unfinished", ended=130.0),
        job(4, "extract", 60.0, [], outcome="cancelled", ended=61.0),
    ]
    m = compute_metrics(records(jobs, 100.0, hints={"min_swaps": 1}))
    # Busy: 20 + 30 + 10 (the last run is clipped at the 100 s horizon).
    assert m["busy_seconds"] == pytest.approx(60.0)
    assert m["utilisation"] == pytest.approx(0.6)
    assert m["waste"]["wasted_seconds"] == pytest.approx(4.0)
    assert m["waste"]["wasted_share"] == pytest.approx(4.0 / 60.0)
    assert m["swaps"]["count"] == 1
    assert m["swaps"]["seconds"] == pytest.approx(10.0)
    assert m["swaps"]["share"] == pytest.approx(10.0 / 60.0)
    assert m["swaps"]["per_hour"] == pytest.approx(36.0)
    assert m["swaps"]["ratio_to_min"] == pytest.approx(1.0)
    assert m["jobs"]["completed"] == 2
    assert m["jobs"]["unfinished"] == 1 and m["jobs"]["cancelled"] == 1
    assert m["jobs"]["completed_by_class"] == {"extract": 1, "gana": 1}
    assert m["service_by_producer"] == {
        "extract": pytest.approx(40.0),
        "gana": pytest.approx(20.0),
    }


def test_fairness_windows_and_jain_over_the_backlogged_epoch() -> None:
    # Both backlogged over [0, 120): a runs 0-40 and 80-120, b runs 40-80.
    jobs = [
        job(1, "gana", 0.0, [(0.0, 40.0), (80.0, 120.0)], producer="gana:a", ended=120.0),
        job(2, "gana", 0.0, [(40.0, 80.0)], producer="gana:b", ended=120.0),
        job(3, "extract", 0.0, [], ended=120.0),  # not in the fair pool
    ]
    fair = compute_metrics(records(jobs, 120.0, fair_classes=["gana"]))["fairness"]
    # Each 60 s window: a 40 s, b 20 s -> difference 20 s.
    assert fair["max_diff_60s"] == pytest.approx(20.0)
    assert fair["epochs"] == 1 and fair["epoch_sizes"] == [2]
    # Over the epoch: a 80 s, b 40 s.
    assert fair["jain"] == pytest.approx(120**2 / (2 * (80**2 + 40**2)))
    assert fair["producers"] == ["gana:a", "gana:b"]


def test_fairness_ignores_windows_where_a_producer_is_not_backlogged() -> None:
    jobs = [
        job(1, "gana", 0.0, [(0.0, 60.0)], producer="gana:a", ended=60.0),
        job(2, "gana", 30.0, [(60.0, 90.0)], producer="gana:b", ended=90.0),
    ]
    fair = compute_metrics(records(jobs, 120.0, fair_classes=["gana"]))["fairness"]
    assert fair["max_diff_60s"] is None and fair["jain"] is None


def test_budget_share_per_300_s_window_and_contended_windows() -> None:
    jobs = [
        job(1, "extract", 0.0, [(0.0, 200.0)]),
        job(2, "gana", 0.0, [(200.0, 300.0)], ended=300.0),  # waits over [0, 300]
        job(3, "extract", 0.0, [(300.0, 600.0)]),
    ]
    budget = compute_metrics(records(jobs, 600.0, budget_caps={"extract": 0.6}))["budget"]
    extract = budget["extract"]
    # Windows end at 300, 330, ..., 600: [0, 300] is 200/300, [300, 600] is all extract.
    assert extract["windows"] == 11
    assert extract["max_share"] == pytest.approx(1.0)
    # Only [0, 300] had another class waiting throughout.
    assert extract["contended_windows"] == 1
    assert extract["max_share_contended"] == pytest.approx(200 / 300)
    assert extract["cap"] == 0.6
    assert extract["longest_job_seconds"] == pytest.approx(100 * 0.01 + 10 * 0.1)


def test_deadline_lateness() -> None:
    jobs = [
        job(1, "gana", 0.0, [(60.0, 70.0)], deadline=50.0),  # 20 s late
        job(2, "gana", 0.0, [(50.0, 60.0)], deadline=80.0),  # on time
        job(3, "gana", 0.0, [], deadline=90.0, outcome="unfinished", ended=100.0),  # >= 10
        job(4, "gana", 0.0, [], deadline=150.0, outcome="unfinished", ended=100.0),  # not due
    ]
    deadlines = compute_metrics(records(jobs, 100.0))["deadlines"]
    assert deadlines["count"] == 3
    assert deadlines["late"] == 2
    assert deadlines["lateness_p95"] == pytest.approx(19.0)
    assert deadlines["lateness_max"] == pytest.approx(20.0)


def _record() -> JobRecord:
    return job(1, "nataraj", 0.0, [], output=100)


def test_account_run_restart_discards_a_preempted_run() -> None:
    rec = _record()
    account_run(rec, resume=False, elapsed=3.0, prefill=1.0, tokens=20, preempted=True)
    assert rec.wasted_seconds == pytest.approx(3.0)
    assert rec.tokens_discarded == 20 and rec.tokens_kept == 0
    account_run(rec, resume=False, elapsed=11.0, prefill=1.0, tokens=100, preempted=False)
    assert rec.wasted_seconds == pytest.approx(3.0)
    assert rec.tokens_kept == 100


def test_account_run_resume_keeps_tokens_and_wastes_the_redone_prefill() -> None:
    rec = _record()
    account_run(rec, resume=True, elapsed=3.0, prefill=1.0, tokens=20, preempted=True)
    assert rec.wasted_seconds == 0.0 and rec.tokens_kept == 20
    # The next run prefills prompt + the 20 kept tokens again: that is the waste.
    account_run(rec, resume=True, elapsed=9.2, prefill=1.2, tokens=80, preempted=False)
    assert rec.wasted_seconds == pytest.approx(1.2)
    assert rec.tokens_kept == 100 and rec.tokens_discarded == 0


def test_account_run_resume_cut_during_prefill_wastes_it() -> None:
    rec = _record()
    account_run(rec, resume=True, elapsed=0.4, prefill=1.0, tokens=0, preempted=True)
    assert rec.wasted_seconds == pytest.approx(0.4) and rec.tokens_kept == 0
    # Its prefill never produced a kept token: the next full prefill is not a redo.
    account_run(rec, resume=True, elapsed=11.0, prefill=1.0, tokens=100, preempted=False)
    assert rec.wasted_seconds == pytest.approx(0.4)


def test_a_run_cut_by_the_horizon_is_not_waste() -> None:
    rec = _record()
    account_run(rec, resume=False, elapsed=5.0, prefill=1.0, tokens=40, preempted=False)
    assert rec.wasted_seconds == 0.0 and rec.tokens_kept == 40
