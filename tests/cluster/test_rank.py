"""tierlm.cluster.rank: the placement rule, by example and by property (Hypothesis)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.cluster.replica_stats import idle_replica
from tierlm.cluster import STALE_AFTER, PlacementLog, View, rank

pytestmark = pytest.mark.fast  # the inner loop: scripts/test --fast (tests/conftest.py)

MODELS = ("m0", "m1", "m2")
CLASSES = ("chat", "extract", "gana")
NOW = 1000.0


def stats(**fields: Any) -> dict[str, Any]:
    return idle_replica(NOW, **fields)


# -- examples -------------------------------------------------------------------


def test_background_work_goes_to_the_replica_holding_its_model() -> None:
    cluster = {
        "a": stats(loaded_model="m1", busy=True, backlog_s=5.0, queued_by_class={"gana": 2}),
        "b": stats(loaded_model="m0", busy=True, backlog_s=8.0, queued_by_class={"gana": 3}),
        "c": stats(loaded_model="m2"),
    }
    assert rank(cluster, "m0", "gana", NOW) == ["b", "c", "a"]


def test_past_a_few_swaps_of_backlog_an_idle_replica_is_worth_the_swap() -> None:
    """Ski rental: queue behind the holder while that costs less than 3 swaps."""
    busy = {"busy": True, "queued_by_class": {"gana": 20}, "queued_by_model": {"m0": 20}}
    cluster = {
        "a": stats(loaded_model="m0", backlog_s=40.0, **busy),
        "b": stats(loaded_model="m1"),
    }
    assert rank(cluster, "m0", "gana", NOW) == ["b", "a"]
    cluster["a"]["backlog_s"] = 25.0
    assert rank(cluster, "m0", "gana", NOW) == ["a", "b"]


def test_then_a_replica_already_queuing_the_model_then_least_swap_plus_backlog() -> None:
    cluster = {
        "a": stats(loaded_model="m1", busy=True, backlog_s=10.0, queued_by_class={"gana": 5}),
        "b": stats(
            loaded_model="m2",
            busy=True,
            backlog_s=50.0,
            queued_by_model={"m0": 1},
            queued_by_class={"gana": 9},
        ),
        "c": stats(loaded_model="m2", busy=True, backlog_s=1.0, queued_by_class={"gana": 1}),
    }
    assert rank(cluster, "m0", "gana", NOW) == ["b", "c", "a"]


def test_chat_ignores_the_background_backlog_it_preempts() -> None:
    cluster = {
        "a": stats(loaded_model="m0", busy=True, backlog_s=300.0, queued_by_class={"gana": 99}),
        "b": stats(loaded_model="m1"),  # idle, but a 10 s swap away
    }
    assert rank(cluster, "m0", "chat", NOW) == ["a", "b"]


def test_chat_counts_the_chats_ahead_against_a_swap() -> None:
    ahead = {"busy": True, "running": {"chat": 1}, "chat_queued": 6}
    cluster = {
        "a": stats(loaded_model="m0", **ahead),  # 7 chats x 2 s = 14 s
        "b": stats(loaded_model="m1"),  # a 10 s swap
    }
    assert rank(cluster, "m0", "chat", NOW) == ["b", "a"]


def test_draining_and_full_replicas_are_left_out_and_stale_ones_last() -> None:
    cluster = {
        "a": stats(draining=True, loaded_model="m0"),
        "b": stats(full=["gana"], loaded_model="m0"),
        "c": stats(at=NOW - STALE_AFTER - 1, loaded_model="m0"),
        "d": stats(loaded_model="m1"),
        "e": {"v": 99},
    }
    assert rank(cluster, "m0", "gana", NOW) == ["d", "c", "e"]
    assert rank(cluster, "m0", "chat", NOW)[:2] == ["b", "d"]
    assert rank({"b": cluster["b"]}, "m0", "gana", NOW) == []  # the caller's 429


def test_placements_since_the_stats_keep_requests_off_one_idle_replica() -> None:
    """Between two polls every replica looks as it did; without the log every
    request would go to the first idle one."""
    cluster = {name: stats() for name in ("a", "b", "c")}
    log = PlacementLog()
    chosen = []
    for model in ("m0", "m1", "m2"):
        best = rank(cluster, model, "gana", NOW, placed=log.since(cluster))[0]
        log.record(best, model, "gana", NOW + 1)
        chosen.append(best)
    assert sorted(chosen) == ["a", "b", "c"]
    # And the same model follows its first placement (it swaps there now).
    assert rank(cluster, "m1", "gana", NOW, placed=log.since(cluster))[0] == chosen[1]
    # A poll after the placements counts them: the log forgets them.
    cluster = {name: stats(at=NOW + 2) for name in cluster}
    assert log.since(cluster) == {} and len(log) == 0


def test_chats_reserved_as_they_are_ranked_spread_before_any_replica_answers() -> None:
    """A burst of chats is ranked before any replica has accepted one: each
    reservation counts at once, so 3 (and 4) chats go to 3 idle replicas
    (the 4th behind one of them), and a released reservation counts no more."""
    cluster = {name: stats(loaded_model="m0") for name in ("a", "b", "c")}
    log = PlacementLog()
    chosen = []
    for i in range(4):
        best = rank(cluster, "m0", "chat", NOW, placed=log.since(cluster, NOW))[0]
        log.reserve(f"req{i}", best, "m0", "chat", NOW)
        chosen.append(best)
    assert sorted(chosen[:3]) == ["a", "b", "c"] and chosen[3] in chosen[:3]
    assert len(log) == 4 and log.pending == 4
    log.confirm("req0", chosen[0], NOW + 0.1)  # taken: a placement now
    log.release("req1", "elsewhere")  # another attempt's end: this one stays
    assert log.pending == 3
    log.release("req1", chosen[1])  # refused: nothing
    placed = log.since(cluster, NOW + 0.2)
    assert sum(len(p) for p in placed.values()) == 3 and log.pending == 2
    assert rank(cluster, "m0", "chat", NOW, placed=placed)[0] == chosen[1]
    # Neither confirmed nor released: it lapses after hold_s.
    assert log.since(cluster, NOW + log.hold_s + 1) == {chosen[0]: placed[chosen[0]][:1]}
    assert log.pending == 0


# -- properties -----------------------------------------------------------------

counts = st.dictionaries(st.sampled_from(CLASSES), st.integers(0, 50), max_size=3)
models_or_none = st.sampled_from((None, *MODELS))
replica_stats = st.fixed_dictionaries(
    {
        "loaded_model": models_or_none,
        "swapping_to": models_or_none,
        "busy": st.booleans(),
        "slots": st.integers(1, 4),
        "running": counts,
        "chat_queued": st.integers(0, 20),
        "queued_by_model": st.dictionaries(st.sampled_from(MODELS), st.integers(0, 50)),
        "queued_by_class": counts,
        "backlog_s": st.floats(0, 1000),
        "swap_s": st.one_of(st.none(), st.floats(0.01, 60)),
        "full": st.lists(st.sampled_from(CLASSES), max_size=2),
        "draining": st.booleans(),
        "paused": st.booleans(),
        "at": st.floats(NOW - 2 * STALE_AFTER, NOW),
    }
).map(lambda fields: stats(**fields))
clusters = st.dictionaries(st.sampled_from("abcdef"), replica_stats, min_size=1, max_size=6)


@settings(max_examples=100, deadline=None)
@given(clusters, st.sampled_from(MODELS), st.sampled_from(CLASSES))
def test_rank_returns_every_open_replica_once_and_no_other(
    cluster: dict[str, dict[str, Any]], model: str, class_name: str
) -> None:
    names = rank(cluster, model, class_name, NOW)
    open_ = {n for n, s in cluster.items() if not s["draining"] and class_name not in s["full"]}
    assert sorted(names) == sorted(open_)


@settings(max_examples=100, deadline=None)
@given(clusters, st.sampled_from(MODELS), st.sampled_from(CLASSES), st.randoms())
def test_rank_depends_on_the_stats_not_their_order(
    cluster: dict[str, dict[str, Any]], model: str, class_name: str, rnd: Any
) -> None:
    items = list(cluster.items())
    rnd.shuffle(items)
    assert rank(dict(items), model, class_name, NOW) == rank(cluster, model, class_name, NOW)


@settings(max_examples=100, deadline=None)
@given(clusters, st.sampled_from(MODELS), st.sampled_from(CLASSES))
def test_fresh_replicas_come_before_stale_and_paused_ones(
    cluster: dict[str, dict[str, Any]], model: str, class_name: str
) -> None:
    names = rank(cluster, model, class_name, NOW)
    fresh = [View.of(n, cluster[n]).fresh(NOW, STALE_AFTER) for n in names]
    assert fresh == sorted(fresh, reverse=True)


@settings(max_examples=100, deadline=None)
@given(clusters, st.sampled_from(MODELS))
def test_chat_goes_where_it_waits_least(cluster: dict[str, dict[str, Any]], model: str) -> None:
    """Among fresh replicas, a chat's estimated wait (chats ahead x chat run
    time + swap; no background backlog) never decreases down the list."""
    names = rank(cluster, model, "chat", NOW)
    fresh = [View.of(n, cluster[n]) for n in names]
    fresh = [v for v in fresh if v.fresh(NOW, STALE_AFTER)]
    waits = [v.chats_ahead() * v.chat_run_s + v.swap_cost(model) for v in fresh]
    assert waits == sorted(waits)


@settings(max_examples=100, deadline=None)
@given(clusters, st.sampled_from(MODELS))
def test_a_holder_under_the_ski_budget_comes_first(
    cluster: dict[str, dict[str, Any]], model: str
) -> None:
    names = rank(cluster, model, "gana", NOW)
    views = [View.of(n, cluster[n]) for n in names]
    fresh = [v for v in views if v.fresh(NOW, STALE_AFTER)]
    holders = [v for v in fresh if v.model == model and v.backlog_s < 3 * v.swap_s]
    if holders:
        assert fresh[0].model == model and fresh[0].backlog_s < 3 * fresh[0].swap_s


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6))
def test_placements_between_polls_spread_over_idle_replicas(replicas: int, models: int) -> None:
    """No herding: with every replica idle at the last poll, distinct models
    placed between polls go to distinct replicas while idle ones are left."""
    cluster = {f"r{i}": stats() for i in range(replicas)}
    log = PlacementLog()
    chosen = []
    for i in range(models):
        best = rank(cluster, f"x{i}", "gana", NOW, placed=log.since(cluster))[0]
        log.record(best, f"x{i}", "gana", NOW + 1)
        chosen.append(best)
    assert len(set(chosen)) == min(replicas, models)
