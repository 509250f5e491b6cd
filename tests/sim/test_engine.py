"""The simulator's engine: per-policy resume vs restart, records, workloads, trace."""

from __future__ import annotations

import itertools
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from tierlm.sim import DeviceModel, compute_metrics, simulate
from tierlm.sim.engine import SimContext
from tierlm.sim.jobspec import JobSpec
from tierlm.sim.policies import POLICIES
from tierlm.sim.trace import TraceMissingError, default_trace_path, load_trace
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
        sim.submit(JobSpec("nataraj", "m1", 150, 300, producer="deck", resumable=True))
        await sim.sleep(5.02)
        sim.submit(JobSpec("chat", "m1", 150, 30))


def _by_class(name: str, policy: str) -> dict[str, Any]:
    rec = simulate(CardThenChat(), policy)
    return {job.class_name: job for job in rec.jobs}


def test_tierlm_resumes_a_preempted_card_keeping_its_tokens() -> None:
    jobs = _by_class("card", "tierlm")
    card, chat = jobs["nataraj"], jobs["chat"]
    # Prefill 1 s, then 15 tokens/s: at 5.02 s the 61st token is in progress;
    # the card stops when it is done, at 1 + 61/15 s.
    stop = 1 + 61 * TOKEN
    assert card.preemptions == 1 and card.outcome == "completed"
    assert card.tokens_kept == 300 and card.tokens_discarded == 0
    # Only the prefill of prompt + the 61 kept tokens is redone.
    assert card.wasted_seconds == pytest.approx((150 + 61) / 150)
    assert [r.how for r in card.runs] == ["requeued", "completed"]
    assert card.runs[0].end == pytest.approx(stop)
    assert chat.ttft == pytest.approx(stop - 5.02 + 1 + TOKEN)
    assert chat.runs[0].start == pytest.approx(stop)


def test_baselines_restart_a_preempted_card_from_scratch() -> None:
    jobs = _by_class("card", "strict-priority")
    card = jobs["nataraj"]
    stop = 1 + 61 * TOKEN
    assert card.preemptions == 1
    assert card.tokens_discarded == 61 and card.tokens_kept == 300
    assert card.wasted_seconds == pytest.approx(stop)  # the whole first run


def test_fifo_chat_waits_for_the_card() -> None:
    jobs = _by_class("card", "fifo")
    card, chat = jobs["nataraj"], jobs["chat"]
    assert card.preemptions == 0 and card.wasted_seconds == 0
    assert chat.ttft == pytest.approx(21 - 5.02 + 1 + TOKEN)


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


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_every_workload_runs_under_every_policy(name: str) -> None:
    if WORKLOADS[name].requires_trace and not default_trace_path().is_file():
        pytest.skip(f"needs the trace at {default_trace_path()}")
    workload = get_workload(name)
    for policy in POLICIES:
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


def test_missing_trace_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.csv"
    with pytest.raises(TraceMissingError, match=r"azure-llm-2023-conv\.csv.*not found"):
        get_workload("azure-chat", trace=missing)


def test_trace_is_read_in_place() -> None:
    path = default_trace_path()
    if not path.is_file():
        pytest.skip(f"needs the trace at {path}")
    assert path.parent.name == "traces" and "shared" in path.parts
    requests = load_trace(path)
    assert len(requests) == 19_366
    assert requests[0].at == 0.0
    assert all(a.at <= b.at for a, b in itertools.pairwise(requests))
    assert requests[-1].at == pytest.approx(3501.7, abs=1.0)  # about an hour


def test_progress_is_reported_and_changes_nothing() -> None:
    """Progress comes from scheduler events, not from a timer of its own (an
    extra timer would reorder events that fall on the same instant)."""
    workload = get_workload("fair-pool")
    seen: list[float] = []
    quiet = compute_metrics(simulate(workload, "fifo", duration=600.0))
    watched = compute_metrics(simulate(workload, "fifo", duration=600.0, progress=seen.append))
    assert quiet == watched
    assert len(seen) > 20 and seen == sorted(seen) and seen[-1] == 600.0
