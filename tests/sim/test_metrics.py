"""The metric functions against hand-computed cases."""

from __future__ import annotations

import pytest

from tierlm.runners.requests import GenerationRequest
from tierlm.runners.simulated import PromptReady, SimulatedCall
from tierlm.sim.metrics import compute_metrics, jain_index, percentile
from tierlm.sim.records import JobRecord, RunRecord, SimRecords, run_waste


def job(
    id: int,
    class_name: str,
    submitted: float,
    runs: list[tuple[float, float]],
    *,
    producer: str | None = None,
    model: str = "m1",
    prompt: int = 100,
    output: int = 10,
    ended: float | None = None,
    outcome: str = "completed",
    first_token: float | None = None,
    deadline: float | None = None,
    swap: tuple[float, float] | None = None,
    restarts: bool = False,
    how: str = "completed",
) -> JobRecord:
    record = JobRecord(
        id=id,
        class_name=class_name,
        producer=producer or class_name,
        model_id=model,
        subject=None,
        deadline=deadline,
        submitted=submitted,
        prompt_tokens=prompt,
        output_tokens=output,
        restarts=restarts,
        ideal_seconds=prompt * 0.01 + output * 0.1,
        first_token=first_token,
        ended=ended if ended is not None else (runs[-1][1] if runs else None),
        outcome=outcome,
    )
    for start, end in runs:
        record.runs.append(RunRecord(start, end, how))
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
        initial_model="m1",
    )
    for key, value in kw.items():
        setattr(rec, key, value)
    return rec


def call(
    ready: PromptReady, seconds: float, tokens: int, *, stopped: bool, kept: float = 0.0
) -> SimulatedCall:
    """A call whose prompt was evaluated fresh, or (re-evaluated, restored)
    whose every second redid earlier work; ``kept``: of a cut evaluation, what
    a KV snapshot keeps."""
    request = GenerationRequest("m1", prompt="x", max_tokens=100)
    resume = 0.0 if ready == "fresh" else seconds
    return SimulatedCall(request, ready, seconds, tokens, None, stopped, resume, kept)


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
        # 5.1 s: waited 4 s, for a swap back to its model
        job(2, "chat", 20.0, [(21.0, 26.1)], first_token=25.1, swap=(21.0, 24.0)),
        job(3, "chat", 95.0, [], outcome="unfinished", ended=100.0),  # no answer by 100
    ]
    chat = compute_metrics(records(jobs, 100.0))["chat"]
    assert chat["count"] == 3 and chat["unanswered"] == 1 and chat["met_swap"] == 1
    # The unanswered chat counts with its wait so far (5 s), a lower bound.
    assert chat["ttfts"] == pytest.approx([1.1, 5.1, 5.0])
    assert chat["ttft_p50"] == pytest.approx(5.0)
    assert chat["ttft_max"] == pytest.approx(5.1)
    assert chat["ttft_p99"] == pytest.approx(5.0 + 0.1 * 0.98)
    assert chat["waits"] == pytest.approx([0.0, 4.0, 3.9])
    assert chat["wait_max"] == pytest.approx(4.0)
    assert chat["ratio_p99"] == pytest.approx(percentile([1.0, 5.1 / 1.1, 5.0 / 1.1], 99))
    # One token boundary of waiting allowed: over 1.1 + 0.1 s.
    assert chat["ratio_boundary_p99"] == pytest.approx(
        percentile([1.1 / 1.2, 5.1 / 1.2, 5.0 / 1.2], 99)
    )


def test_busy_swaps_utilisation_offered_load_and_completed() -> None:
    jobs = [
        job(1, "gana", 0.0, [(0.0, 20.0)], swap=(0.0, 10.0)),  # 10 s swap, 10 s of work
        job(2, "extract", 0.0, [(20.0, 50.0)]),
        job(3, "extract", 0.0, [(90.0, 130.0)], outcome="unfinished", ended=130.0),
        job(4, "extract", 60.0, [], outcome="cancelled", ended=61.0),
        job(5, "extract", 120.0, [], outcome="unfinished", ended=130.0),  # after the end
    ]
    m = compute_metrics(records(jobs, 100.0, hints={"min_swaps": 1, "stated_load": {"gana": 1}}))
    # Busy: 20 + 30 + 10 (the last run is clipped at the 100 s horizon).
    assert m["busy_seconds"] == pytest.approx(60.0)
    assert m["utilisation"] == pytest.approx(0.6)
    assert m["swaps"]["count"] == 1
    assert m["swaps"]["seconds"] == pytest.approx(10.0)
    assert m["swaps"]["share"] == pytest.approx(10.0 / 60.0)
    assert m["swaps"]["per_hour"] == pytest.approx(36.0)
    assert m["swaps"]["ratio_to_min"] == pytest.approx(1.0)
    assert m["jobs"]["completed"] == 2
    assert m["jobs"]["unfinished"] == 2 and m["jobs"]["cancelled"] == 1
    assert m["jobs"]["completed_by_class"] == {"extract": 1, "gana": 1}
    assert m["service_by_producer"] == {"extract": pytest.approx(40.0), "gana": 20.0}
    assert m["service_by_class"] == {"extract": pytest.approx(40.0), "gana": 20.0}
    # Offered: each job's uninterrupted time (1 + 1 = 2 s), submitted before 100 s.
    offered = m["offered_load"]
    assert offered["by_class"] == {"extract": pytest.approx(0.06), "gana": pytest.approx(0.02)}
    assert offered["total"] == pytest.approx(0.08)
    assert offered["stated"] == {"gana": 1}
    # Waits from submit to first dispatch; the never-started, uncancelled job
    # counts with its wait so far.
    assert m["waits"]["extract"] == {"count": 2, "p50": pytest.approx(55.0), "max": 90.0}


def test_waste_restart_discards_a_preempted_run_swap_aside() -> None:
    run = RunRecord(0.0, 12.0, "requeued", swap_start=0.0, swap_end=2.0)
    run.account(call("fresh", 1.0, 90, stopped=True))
    assert run_waste(run, restarts=True) == pytest.approx(10.0)
    # Completed or cut by the horizon: nothing thrown away.
    run.how = "completed"
    assert run_waste(run, restarts=True) == 0.0


def test_waste_of_a_resumed_job_is_what_resuming_cost() -> None:
    first = RunRecord(0.0, 3.0, "requeued")
    first.account(call("fresh", 1.0, 20, stopped=True))
    assert run_waste(first, restarts=False) == 0.0  # its tokens are kept
    reevaluated = RunRecord(5.0, 14.2, "completed")
    reevaluated.account(call("re-evaluate", 1.2, 80, stopped=False))
    assert run_waste(reevaluated, restarts=False) == pytest.approx(1.2)
    assert (reevaluated.reevaluations, reevaluated.restores) == (1, 0)
    restored = RunRecord(5.0, 13.1, "completed")
    restored.account(call("restore", 0.1, 80, stopped=False))
    assert run_waste(restored, restarts=False) == pytest.approx(0.1)
    assert (restored.reevaluations, restored.restores) == (0, 1)


def test_waste_of_a_prompt_cut_before_its_first_token() -> None:
    cut = RunRecord(0.0, 0.4, "requeued")
    cut.account(call("fresh", 0.4, 0, stopped=True))
    assert run_waste(cut, restarts=False) == pytest.approx(0.4)
    # Cut by the end of the simulation, not by a preemption: not waste.
    cut.how = "cancelled"
    assert run_waste(cut, restarts=False) == 0.0


def test_a_cut_evaluation_wastes_only_what_its_snapshot_does_not_keep() -> None:
    # 0.9 s evaluated when the cut came; the finished batches (0.5 s) are kept
    # in a KV snapshot, and the resume restores them and evaluates the rest.
    cut = RunRecord(0.0, 0.9, "requeued")
    cut.account(call("fresh", 0.9, 0, stopped=True, kept=0.5))
    assert cut.cut_seconds == pytest.approx(0.4)
    assert cut.prompt_seconds == pytest.approx(0.5)
    assert run_waste(cut, restarts=False) == pytest.approx(0.4)
    resumed = RunRecord(1.0, 3.0, "completed")
    resumed.account(
        SimulatedCall(
            GenerationRequest("m1", prompt="x", max_tokens=10),
            "restore", 0.03 + 0.6, 10, 1.7, False, resume_seconds=0.03,
        )
    )  # fmt: skip
    assert resumed.prompt_seconds == pytest.approx(0.6)  # the rest: first-time work
    assert run_waste(resumed, restarts=False) == pytest.approx(0.03)


def test_waste_names_the_cut_prompt_evaluations() -> None:
    cut = job(1, "extract", 0.0, [(0.0, 0.4), (2.0, 4.0)])
    cut.runs[0].how = "requeued"
    cut.runs[0].account(call("fresh", 0.4, 0, stopped=True))
    cut.runs[1].account(call("fresh", 1.0, 10, stopped=False))
    waste = compute_metrics(records([cut], 10.0))["waste"]
    assert waste["cut_prompt_seconds"] == pytest.approx(0.4)
    assert waste["wasted_seconds"] == pytest.approx(0.4)
    assert waste["wasted_share"] == pytest.approx(0.4 / 2.4)


def test_waste_share_and_tokens_over_the_run() -> None:
    restarted = job(1, "nataraj", 0.0, [(0.0, 3.0), (5.0, 16.0)], restarts=True)
    restarted.runs[0].how = "requeued"
    restarted.runs[0].account(call("fresh", 1.0, 20, stopped=True))
    restarted.runs[1].account(call("fresh", 1.0, 100, stopped=False))
    resumed = job(2, "nataraj", 20.0, [(20.0, 23.0), (25.0, 34.2)])
    resumed.runs[0].how = "requeued"
    resumed.runs[0].account(call("fresh", 1.0, 20, stopped=True))
    resumed.runs[1].account(call("re-evaluate", 1.2, 80, stopped=False))
    m = compute_metrics(records([restarted, resumed], 40.0))
    waste = m["waste"]
    assert waste["wasted_seconds"] == pytest.approx(3.0 + 1.2)
    assert waste["wasted_share"] == pytest.approx(4.2 / (3.0 + 11.0 + 3.0 + 9.2))
    assert waste["restarted_seconds"] == pytest.approx(3.0)
    assert waste["resume_seconds"] == pytest.approx(1.2) and waste["reevaluations"] == 1
    assert waste["tokens_discarded"] == 20 and waste["tokens_kept"] == 200


def _fair(jobs: list[JobRecord], horizon: float) -> dict[str, object]:
    return compute_metrics(records(jobs, horizon, fair_classes=["gana", "nataraj"]))["fairness"]


def test_fair_share_of_two_backlogged_producers() -> None:
    # Both have work over [0, 120): a runs 0-40 and 80-120, b runs 40-80.
    jobs = [
        job(1, "gana", 0.0, [(0.0, 40.0), (80.0, 120.0)], producer="gana:a", ended=120.0),
        job(2, "gana", 0.0, [(40.0, 80.0)], producer="gana:b", ended=120.0),
        job(3, "extract", 0.0, [], ended=120.0),  # not in the fair pool
    ]
    fair = _fair(jobs, 120.0)
    producers = fair["producers"]
    assert isinstance(producers, dict)
    assert producers["gana:a"]["fair_share"] == pytest.approx(60.0)
    assert producers["gana:a"]["ratio"] == pytest.approx(80 / 60)
    assert producers["gana:b"]["ratio"] == pytest.approx(40 / 60)
    assert fair["min_ratio"] == pytest.approx(40 / 60) and fair["worst_producer"] == "gana:b"
    assert fair["jain"] == pytest.approx(jain_index([80 / 60, 40 / 60]))
    # Each 60 s window: a 40 s, b 20 s; fair 30 each.
    assert fair["max_diff_60s"] == pytest.approx(20.0)
    assert fair["shortfall_60s"] == pytest.approx(10.0)


def test_fair_share_follows_demand_max_min() -> None:
    # b has work only over [0, 20) (its one 10 s job waits 10 s, then runs):
    # it is owed half of [0, 20), and a the rest: max-min given demand.
    jobs = [
        job(1, "gana", 0.0, [(0.0, 10.0), (20.0, 100.0)], producer="gana:a", ended=100.0),
        job(2, "gana", 0.0, [(10.0, 20.0)], producer="gana:b"),
    ]
    producers = _fair(jobs, 100.0)["producers"]
    assert isinstance(producers, dict)
    assert producers["gana:b"]["fair_share"] == pytest.approx(10.0)
    assert producers["gana:a"]["fair_share"] == pytest.approx(90.0)
    assert producers["gana:a"]["ratio"] == pytest.approx(1.0)
    assert producers["gana:b"]["ratio"] == pytest.approx(1.0)


def test_a_producer_with_work_part_of_the_time_counts() -> None:
    # b submits one job at 0 (runs 20-30) and one at 60 (runs 80-90): never
    # backlogged through a whole 60 s window, it is still owed half of the
    # time it had work, 30 s, and got 20 s.
    jobs = [
        job(1, "gana", 0.0, [(0.0, 20.0), (30.0, 80.0), (90.0, 120.0)], producer="gana:a"),
        job(2, "gana", 0.0, [(20.0, 30.0)], producer="gana:b"),
        job(3, "gana", 60.0, [(80.0, 90.0)], producer="gana:b"),
    ]
    fair = _fair(jobs, 120.0)
    producers = fair["producers"]
    assert isinstance(producers, dict)
    assert producers["gana:b"]["fair_share"] == pytest.approx(30.0)
    assert producers["gana:b"]["ratio"] == pytest.approx(20 / 30)
    assert producers["gana:a"]["fair_share"] == pytest.approx(90.0)
    assert fair["worst_producer"] == "gana:b"
    assert fair["max_diff_60s"] is None  # never two backlogged through a window


def test_a_starved_one_job_producer_is_owed_its_part() -> None:
    jobs = [
        job(1, "gana", 0.0, [(0.0, 120.0)], producer="gana:a"),
        job(2, "gana", 0.0, [], producer="gana:b", outcome="unfinished", ended=120.0),
    ]
    fair = _fair(jobs, 120.0)
    assert fair["worst_producer"] == "gana:b" and fair["min_ratio"] == 0.0
    producers = fair["producers"]
    assert isinstance(producers, dict)
    assert producers["gana:b"]["fair_share"] == pytest.approx(60.0)
    assert producers["gana:b"]["min_share_300s"] is None  # the run is shorter than a window


def test_fair_share_is_hierarchical_class_then_path() -> None:
    # Three producers with work over [0, 90), 30 s each: "swarm/1" and
    # "swarm/2" share the part of "swarm", solo has its own half.
    jobs = [
        job(1, "gana", 0.0, [(0.0, 30.0)], producer="swarm/1", ended=90.0),
        job(2, "gana", 0.0, [(30.0, 60.0)], producer="swarm/2", ended=90.0),
        job(3, "gana", 0.0, [(60.0, 90.0)], producer="solo", ended=90.0),
    ]
    producers = _fair(jobs, 90.0)["producers"]
    assert isinstance(producers, dict)
    assert producers["solo"]["fair_share"] == pytest.approx(45.0)
    assert producers["swarm/1"]["fair_share"] == pytest.approx(22.5)
    # Classes first: one Nataraj against two Ganas gets half.
    jobs = [
        job(1, "gana", 0.0, [(0.0, 25.0)], producer="gana:1", ended=100.0),
        job(2, "gana", 0.0, [(25.0, 50.0)], producer="gana:2", ended=100.0),
        job(3, "nataraj", 0.0, [(50.0, 100.0)], producer="nataraj:deck", ended=100.0),
    ]
    producers = _fair(jobs, 100.0)["producers"]
    assert isinstance(producers, dict)
    assert producers["nataraj:deck"]["fair_share"] == pytest.approx(50.0)
    assert producers["gana:1"]["fair_share"] == pytest.approx(25.0)


def test_the_pools_capacity_is_its_device_time_and_idle_time_with_work() -> None:
    # Idle while the pool waits counts (the policy could have used it) ...
    idle = [job(1, "gana", 0.0, [(50.0, 100.0)], producer="gana:a")]
    producers = _fair(idle, 100.0)["producers"]
    assert isinstance(producers, dict)
    assert producers["gana:a"]["fair_share"] == pytest.approx(100.0)
    # ... time that chat held the device does not.
    chat = [
        job(1, "chat", 0.0, [(0.0, 50.0)]),
        job(2, "gana", 0.0, [(50.0, 100.0)], producer="gana:a"),
    ]
    fair = _fair(chat, 100.0)
    producers = fair["producers"]
    assert isinstance(producers, dict)
    assert producers["gana:a"]["fair_share"] == pytest.approx(50.0)
    assert producers["gana:a"]["ratio"] == pytest.approx(1.0)
    # Fair within itself, the pool had half the device: the table says so.
    assert fair["pool_share"] == pytest.approx(0.5)


def test_min_share_of_a_300_s_window_while_backlogged() -> None:
    # a has work throughout [0, 600) and runs [0, 60), [290, 320), [560, 600).
    a_runs = [(0.0, 60.0), (290.0, 320.0), (560.0, 600.0)]
    b_runs = [(60.0, 290.0), (320.0, 560.0)]
    jobs = [
        job(1, "gana", 0.0, a_runs, producer="gana:a", ended=600.0),
        job(2, "gana", 0.0, b_runs, producer="gana:b", ended=600.0),
    ]
    producers = _fair(jobs, 600.0)["producers"]
    assert isinstance(producers, dict)
    # Windows end every 30 s from 300 s: [0, 300) holds 70 s of a's, [30, 330)
    # 60 s, [60, 360) .. [240, 540) only the 30 s at 290: the least is 30/300.
    assert producers["gana:a"]["min_share_300s"] == pytest.approx(0.1)
    assert producers["gana:b"]["min_share_300s"] == pytest.approx(230 / 300)


def _budget(jobs: list[JobRecord], **kw: object) -> dict[str, object]:
    rec = records(jobs, 600.0, budget_caps={"extract": 0.6}, chat_grace=30.0, **kw)
    extract = compute_metrics(rec)["budget"]["extract"]
    assert isinstance(extract, dict)
    return extract


def test_budget_share_per_300_s_window_and_contended_windows() -> None:
    jobs = [
        job(1, "extract", 0.0, [(0.0, 200.0)]),
        job(2, "gana", 0.0, [(200.0, 300.0)], ended=300.0),  # waits over [0, 300]
        job(3, "extract", 0.0, [(300.0, 600.0)]),
    ]
    extract = _budget(jobs)
    # Windows end at 300, 330, ..., 600: [0, 300] is 200/300, [300, 600] is all extract.
    assert extract["windows"] == 11
    assert extract["max_share"] == pytest.approx(1.0)
    # Only [0, 300] had another class waiting throughout.
    assert extract["contended_windows"] == 1
    assert extract["max_share_contended"] == pytest.approx(200 / 300)
    assert extract["cap"] == 0.6
    assert extract["longest_job_seconds"] == pytest.approx(100 * 0.01 + 10 * 0.1)


def test_work_on_another_model_contends_while_a_swap_is_allowed() -> None:
    jobs = [
        job(1, "extract", 0.0, [(0.0, 600.0)]),
        job(2, "gana", 0.0, [], model="m2", outcome="unfinished", ended=600.0),
    ]
    assert _budget(jobs)["contended_windows"] == 11


def test_work_only_a_held_swap_could_reach_does_not_contend() -> None:
    # A chat on m1 ended at 2 s with the chat surface open: no swap away from
    # m1 (docs/design.md §4.8), so the Gana round on m2 cannot run.
    jobs = [
        job(1, "chat", 0.0, [(0.0, 2.0)]),
        job(2, "extract", 0.0, [(2.0, 600.0)]),
        job(3, "gana", 0.0, [], model="m2", outcome="unfinished", ended=600.0),
    ]
    assert _budget(jobs, foreground=[(0.0, "chat")])["contended_windows"] == 0
    # With a limit on that hold (chat_idle 60 s), the swap is allowed from 62 s:
    # windows starting at or after 62 s, ending 390 .. 600, are contended.
    assert _budget(jobs, foreground=[(0.0, "chat")], chat_idle=60.0)["contended_windows"] == 8
    # Without the open surface only chat_grace holds it: from 32 s.
    assert _budget(jobs)["contended_windows"] == 9
    # Work on the held model itself always contends.
    jobs[2] = job(3, "gana", 0.0, [], model="m1", outcome="unfinished", ended=600.0)
    assert _budget(jobs, foreground=[(0.0, "chat")])["contended_windows"] == 11


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


def test_a_batch_s_time_is_shared_by_the_sequences_in_it() -> None:
    """The budget's share counts slot-time (docs/design.md §4.7): alone, a run
    has the device; beside three others, a quarter of it."""
    from tierlm.sim.intervals import Coverage, SharedTime

    alone = SharedTime([(0.0, 10.0)], [(10.0, 20.0)])
    assert alone.overlap(0.0, 20.0) == Coverage([(0.0, 10.0)]).overlap(0.0, 20.0) == 10.0
    batch = SharedTime([(0.0, 8.0)], [(0.0, 8.0), (0.0, 8.0), (0.0, 8.0)])
    assert batch.overlap(0.0, 8.0) == 2.0
    # Two of mine beside two others for 4 s, then mine alone for 4 s.
    mixed = SharedTime([(0.0, 4.0), (0.0, 8.0)], [(0.0, 4.0), (0.0, 4.0)])
    assert mixed.overlap(0.0, 8.0) == 2.0 + 4.0
    assert mixed.overlap(2.0, 6.0) == 1.0 + 2.0
