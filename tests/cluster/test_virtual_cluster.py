"""R real Schedulers on simulated devices in one virtual-time loop, behind
``tierlm.cluster.rank`` (tierlm.sim.virtual_cluster): 10 simulated
minutes each, deterministic, about a second of wall time per run."""

from __future__ import annotations

import statistics

import pytest

from tierlm.sim.virtual_cluster import background, chats, run_cluster
from tierlm.testing import run_virtual

pytestmark = pytest.mark.fast  # the inner loop: scripts/test --fast (tests/conftest.py)

R = 3
MINUTES_10 = 600.0


@pytest.mark.parametrize("models", range(1, 2 * R + 1))
async def test_swaps_stay_within_the_models_plus_two(models: int) -> None:
    """60 % load on 1..2R models for 10 minutes (at most R models at once):
    each model is loaded about once, whatever the number of models."""
    arrivals = background(models, R, load=0.6, duration=MINUTES_10)
    result = await run_cluster(arrivals, replicas=R, router="tierlm", until=900.0)
    assert result.swaps <= models + 2, result.swaps_by_replica
    assert not result.refused and result.unfinished == 0 and result.others_failed == 0


def test_the_power_of_two_baseline_swaps_an_order_of_magnitude_more() -> None:
    """Ray Serve's default router (two at random, the shorter queue) knows no
    models: every device serves every model."""
    arrivals = background(R, R, load=0.6, duration=MINUTES_10)
    ours = run_virtual(run_cluster(arrivals, replicas=R, router="tierlm", until=900.0))
    baseline = run_virtual(run_cluster(arrivals, replicas=R, router="p2c", until=900.0))
    assert ours.swaps <= R + 2
    assert baseline.swaps >= 10 * ours.swaps


async def test_a_chat_gets_its_first_token_at_once_under_a_background_flood() -> None:
    """170 % background load on R models, queues capped at 30 per class: the
    background gets 429s, no chat does, and a chat's first token comes within
    a token of its arrival (it goes where its model is loaded and preempts)."""
    arrivals = background(R, R, load=1.7, duration=MINUTES_10) + chats(
        "m0", every=20.0, duration=MINUTES_10
    )
    result = await run_cluster(arrivals, replicas=R, router="tierlm", until=700.0, queue_limit=30)
    assert result.refused, "the flood is refused in part"
    assert not [a for a in result.refused if a.class_name == "chat"]
    waits = result.waits("chat")
    assert len(waits) == 30
    assert statistics.median(waits) <= 0.1
    assert max(waits) <= 10.0


async def test_a_request_is_refused_only_when_every_replica_is_full() -> None:
    arrivals = background(R, R, load=1.7, duration=MINUTES_10)
    result = await run_cluster(arrivals, replicas=R, router="tierlm", until=700.0, queue_limit=10)
    assert len(result.refused) > 100
    assert result.refused_while_open == 0


async def test_a_replica_removed_mid_run_loses_only_its_own_queue() -> None:
    arrivals = background(R, R, load=1.0, duration=MINUTES_10)
    result = await run_cluster(
        arrivals, replicas=R, router="tierlm", until=1500.0, remove=(300.0, "r1")
    )
    assert result.lost_expected > 0, "the removed replica had work"
    assert result.lost == result.lost_expected
    assert result.others_failed == 0 and result.unfinished == 0
    late = [p for p in result.placed if p.arrival.at > 300.0]
    assert late and all(p.replica != "r1" for p in late)
