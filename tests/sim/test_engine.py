"""The simulator's engine: resume vs restart per column and per device, records, workloads."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import pytest

from tierlm.runners.simulated import DEFAULT_RESTORE_SECONDS
from tierlm.sim import DeviceModel, compute_metrics, simulate
from tierlm.sim.device import ResumeCost
from tierlm.sim.engine import SimContext
from tierlm.sim.jobspec import JobSpec
from tierlm.sim.policies import DEFAULT_COLUMNS
from tierlm.sim.workload import Workload
from tierlm.sim.workloads import WORKLOADS, get_workload

TOKEN = 1 / 15  # the default device: 15 tokens/s decode, 150 tokens/s prefill


class CardThenChat(Workload):
    """A 300-token Nataraj card; a chat arrives 5.02 s later (mid-token)."""

    name = "card-then-chat"
    description = "test"
    default_duration = 60.0

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        return [self._go(sim)]

    async def _go(self, sim: SimContext) -> None:
        sim.submit(JobSpec("nataraj", "m1", 150, 300, producer="deck", generation=True))
        await sim.sleep(5.02)
        sim.submit(JobSpec("chat", "m1", 150, 30))


def _by_class(policy: str, resume: ResumeCost = "restore") -> dict[str, Any]:
    rec = simulate(CardThenChat(), policy, device=DeviceModel(resume=resume))
    return {job.class_name: job for job in rec.jobs}


# Prefill 1 s, then 15 tokens/s: at 5.02 s the 61st token is in progress; the
# card stops when it is done, at 1 + 61/15 s.
STOP = 1 + 61 * TOKEN


def test_tierlm_resumes_a_preempted_card_from_its_kv_snapshot() -> None:
    jobs = _by_class("tierlm")
    card, chat = jobs["nataraj"], jobs["chat"]
    assert card.preemptions == 1 and card.outcome == "completed"
    assert card.tokens_kept == 300 and card.tokens_discarded == 0
    assert [r.how for r in card.runs] == ["requeued", "completed"]
    assert card.runs[1].restores == 1
    # Only the restore is redone work (DEFAULT_RESTORE_SECONDS).
    assert card.wasted_seconds == pytest.approx(DEFAULT_RESTORE_SECONDS)
    assert card.runs[0].end == pytest.approx(STOP)
    assert chat.ttft == pytest.approx(STOP - 5.02 + 1 + TOKEN)
    assert chat.runs[0].start == pytest.approx(STOP)
    # The resumed run: restore, then the 239 tokens still due.
    assert card.runs[1].end - card.runs[1].start == pytest.approx(
        DEFAULT_RESTORE_SECONDS + 239 * TOKEN
    )


def test_a_device_that_re_evaluates_redoes_prompt_and_partial_output() -> None:
    card = _by_class("tierlm", "re-evaluate")["nataraj"]
    assert card.runs[1].reevaluations == 1 and card.tokens_kept == 300
    assert card.wasted_seconds == pytest.approx((150 + 61) / 150)


def test_baselines_restart_a_preempted_card_from_scratch() -> None:
    card = _by_class("strict-priority")["nataraj"]
    assert card.preemptions == 1 and card.restarts
    assert card.tokens_discarded == 61 and card.tokens_kept == 300
    assert card.wasted_seconds == pytest.approx(STOP)  # the whole first run


def test_a_baseline_with_resume_resumes_on_the_same_device() -> None:
    card = _by_class("strict-priority+resume")["nataraj"]
    assert card.preemptions == 1 and not card.restarts
    assert card.wasted_seconds == pytest.approx(DEFAULT_RESTORE_SECONDS)
    # And tierlm without zero-loss preemption restarts, as the seed does.
    assert _by_class("tierlm+restart")["nataraj"].wasted_seconds == pytest.approx(STOP)
    # A device that cannot resume makes every column restart.
    assert _by_class("tierlm", "restart")["nataraj"].wasted_seconds == pytest.approx(STOP)


RESTORE = DEFAULT_RESTORE_SECONDS


class LongCardThenChat(Workload):
    """A card with a 1 500-token prompt (10 s to evaluate); a chat arrives 8 s
    in, when 1 200 of its tokens are evaluated: two batches of 512 done."""

    name = "long-card-then-chat"
    description = "test"
    default_duration = 60.0

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        return [self._go(sim)]

    async def _go(self, sim: SimContext) -> None:
        sim.submit(JobSpec("nataraj", "m1", 1500, 30, producer="deck", generation=True))
        await sim.sleep(8.0)
        sim.submit(JobSpec("chat", "m1", 150, 30))


@pytest.mark.parametrize(
    ("resume", "waste", "resumed_prompt"),
    [
        # The aborted third batch is lost; the resume restores 1 024 tokens.
        ("restore", 8.0 - 1024 / 150 + RESTORE, RESTORE + 476 / 150),
        ("re-evaluate", 8.0, 10.0),  # the whole cut evaluation, and all of it again
        ("restart", 8.0, 10.0),
    ],
)
def test_a_cut_evaluation_keeps_its_finished_batches_only_with_kv_snapshots(
    resume: ResumeCost, waste: float, resumed_prompt: float
) -> None:
    card = _by_class_of(LongCardThenChat(), resume)["nataraj"]
    assert [r.how for r in card.runs] == ["requeued", "completed"]
    assert card.runs[0].tokens == 0
    assert card.wasted_seconds == pytest.approx(waste)
    resumed = card.runs[1]
    assert resumed.end - resumed.start == pytest.approx(resumed_prompt + 30 * TOKEN)


def _by_class_of(workload: Workload, resume: ResumeCost) -> dict[str, Any]:
    rec = simulate(workload, "tierlm", device=DeviceModel(resume=resume))
    return {job.class_name: job for job in rec.jobs}


def test_fifo_chat_waits_for_the_card() -> None:
    jobs = _by_class("fifo")
    card, chat = jobs["nataraj"], jobs["chat"]
    assert card.preemptions == 0 and card.wasted_seconds == 0
    assert chat.ttft == pytest.approx(21 - 5.02 + 1 + TOKEN)


class RoundThenChat(Workload):
    """An agent round of three calls (150-token prompts, 40 tokens each); a chat
    arrives during the third call."""

    name = "round-then-chat"
    description = "test"
    default_duration = 60.0

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        return [self._go(sim)]

    async def _go(self, sim: SimContext) -> None:
        sim.submit(JobSpec("gana", "m1", 150, 120, producer="gana:a", calls=3))
        # Each call: 1 s prompt + 40 tokens (2.67 s); the third call's 17th
        # token is in progress at 2 x 3.667 + 1 + 16.5 / 15 s.
        await sim.sleep(2 * (1 + 40 * TOKEN) + 1 + 16.5 * TOKEN)
        sim.submit(JobSpec("chat", "m1", 150, 30, generation=True))


def _round(policy: str) -> tuple[Any, int]:
    rec = simulate(RoundThenChat(), policy)
    (gana,) = [job for job in rec.jobs if job.class_name == "gana"]
    # What the runner generated, run by run (a replayed call costs it nothing).
    return gana, sum(run.tokens for run in gana.runs)


def test_a_closure_round_replays_its_journal_after_a_preemption() -> None:
    gana, runner_tokens = _round("tierlm")
    assert gana.preemptions == 1 and gana.outcome == "completed"
    # Calls 1 and 2 replay from the journal; call 3 resumes after its 17
    # tokens: the runner generated 40 + 40 + 40 tokens, not 80 + 80 + 57.
    assert runner_tokens == 120
    assert gana.runs[1].restores == 1
    assert gana.wasted_seconds == pytest.approx(DEFAULT_RESTORE_SECONDS)


def test_a_closure_round_without_journal_redoes_every_call() -> None:
    gana, runner_tokens = _round("strict-priority")
    assert runner_tokens == 40 + 40 + 17 + 120
    assert gana.wasted_seconds == pytest.approx(2 * (1 + 40 * TOKEN) + 1 + 17 * TOKEN)


class OtherModel(Workload):
    name = "other-model"
    description = "test"
    default_duration = 60.0

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        return [self._go(sim)]

    async def _go(self, sim: SimContext) -> None:
        sim.submit(JobSpec("gana", "m2", 150, 15, producer="gana:x", deadline=5.0))


def test_records_the_swap_a_job_caused_and_its_lateness() -> None:
    rec = simulate(OtherModel(), "tierlm", device=DeviceModel(swap_seconds=7.0))
    (job,) = rec.jobs
    assert job.swaps == 1 and job.swap_seconds == pytest.approx(7.0)
    assert (job.runs[0].swap_start, job.runs[0].swap_end) == pytest.approx((0.0, 7.0))
    assert job.ended == pytest.approx(7 + 1 + 1)
    m = compute_metrics(rec)
    assert m["swaps"]["count"] == 1 and m["deadlines"]["lateness_max"] == pytest.approx(4.0)
    assert m["busy_seconds"] == pytest.approx(9.0)


def test_simulate_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown 'lifo'"):
        simulate(CardThenChat(), "lifo")
    with pytest.raises(ValueError, match="duration"):
        simulate(CardThenChat(), "tierlm", duration=0)
    with pytest.raises(ValueError, match="decode_tps"):
        DeviceModel(decode_tps=0)


# Short runs; many-producers with fewer producers (its 100 000 are for the
# benchmark of the fair pool's cost, not for a test).
SMALL = {"many-producers": {"producers": 2000.0}}


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_every_workload_runs_under_every_policy(name: str) -> None:
    workload = get_workload(name, params=SMALL.get(name))
    for policy in DEFAULT_COLUMNS:
        rec = simulate(workload, policy, duration=240.0)
        assert rec.jobs, (name, policy)
        assert all(job.submitted <= 240.0 for job in rec.jobs)
        m = compute_metrics(rec)
        assert 0 < m["utilisation"] <= 1.0 + 1e-9
        assert m["jobs"]["submitted"] == len(rec.jobs)


def test_same_seed_same_records_other_seed_other_records() -> None:
    workload = get_workload("issue118")
    first = compute_metrics(simulate(workload, "tierlm", seed=7, duration=300.0))
    again = compute_metrics(simulate(workload, "tierlm", seed=7, duration=300.0))
    other = compute_metrics(simulate(workload, "tierlm", seed=8, duration=300.0))
    assert first == again
    assert first != other


def test_producers_draw_the_same_jobs_whatever_the_policy() -> None:
    """Each producer has its own random stream: a policy changes when, not what."""
    workload = get_workload("issue118")
    sizes: dict[str, dict[str, list[tuple[int, int]]]] = {}
    for policy in ("tierlm", "fifo"):
        rec = simulate(workload, policy, duration=300.0)
        by_producer: dict[str, list[tuple[int, int]]] = {}
        for j in rec.jobs:
            if j.producer.startswith(("extract", "gana")):
                by_producer.setdefault(j.producer, []).append((j.prompt_tokens, j.output_tokens))
        sizes[policy] = by_producer
    assert sizes["tierlm"] == sizes["fifo"]
    assert len(sizes["tierlm"]["extract:backfill"]) >= 299  # one a second from t = 1 s


def test_progress_is_reported_and_changes_nothing() -> None:
    """Progress comes from scheduler events, not from a timer of its own (an
    extra timer would reorder events that fall on the same instant)."""
    workload = get_workload("fair-pool")
    seen: list[float] = []
    quiet = compute_metrics(simulate(workload, "fifo", duration=600.0))
    watched = compute_metrics(simulate(workload, "fifo", duration=600.0, progress=seen.append))
    assert quiet == watched
    assert len(seen) > 20 and seen == sorted(seen) and seen[-1] == 600.0
