"""Keepers of the models persons use (``tierlm.ray.keeping``): pure, no Ray.
On a real Ray, through a rolling update: tests/cluster/test_ray_rollout.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cluster.replica_stats import idle_replica
from tierlm.ray.keeping import CHANGING_S, Keep, Keeper, demoted, keeper_first
from tierlm.ray.moves import Mover, Waiting

pytestmark = pytest.mark.fast

NOW = 1000.0


def stats(model: str | None, at: float = NOW, **fields: Any) -> dict[str, Any]:
    return idle_replica(at, loaded_model=model, swap_s=2.0, **fields)


def busy(model: str, **fields: Any) -> dict[str, Any]:
    return stats(
        model,
        busy=True,
        running={"extract": 1},
        queued_by_class={"extract": 3},
        queued_by_model={model: 3},
        backlog_s=4.0,
        **fields,
    )


def keeper(fleet: dict[str, dict[str, Any]], chat_on: str = "m0") -> Keeper:
    """A keeper that has seen ``fleet`` once and a person's chat on ``chat_on``
    (the holder, if any, asked to keep it)."""
    k = Keeper(keep_for_s=60.0)
    k.chat(chat_on, NOW - 1)
    holders = sorted(
        n for n, s in fleet.items() if s["loaded_model"] == chat_on and not s.get("keeps")
    )
    expected = [Keep(holders[0], chat_on, pytest.approx(59.0))] if holders else []
    assert k.look(fleet, True, NOW) == expected
    return k


def kept(model: str, **fields: Any) -> dict[str, Any]:
    return busy(model, keeps=model, keep_left_s=55.0, **fields)


def test_in_a_steady_fleet_the_holder_keeps_the_persons_model() -> None:
    """The replica holding m0 is asked to keep it (the router then sends it
    no other model's work), once; then nothing more, the keep renewed only
    as the person chats on."""
    k = keeper({"a": busy("m0"), "b": busy("m1"), "c": stats("m2")})
    assert k.reserved == {"a": "m0"}
    for t in range(1, 5):
        assert k.look({"a": kept("m0"), "b": busy("m1"), "c": stats("m2")}, True, NOW + t) == []
    assert k.reserved == {"a": "m0"}


def test_the_holder_leaving_makes_an_idle_replica_the_keeper_not_a_busy_one() -> None:
    """The only holder of m0 leaves (missing from a complete look): the idle
    replica keeps m0 (a load: it holds m2); a busy one is not asked (its own
    scheduler would swap back to its queue). None idle: nobody, until one is."""
    k = keeper({"a": stats("m0"), "b": busy("m1"), "c": stats("m2")})
    asked = k.look({"b": busy("m1"), "c": stats("m2")}, True, NOW + 1)
    assert asked == [Keep("c", "m0", pytest.approx(58.0))]
    assert k.reserved == {"c": "m0"}

    k = keeper({"a": stats("m0"), "b": busy("m1"), "c": busy("m2")})
    assert k.look({"b": busy("m1"), "c": busy("m2")}, True, NOW + 1) == []
    k.asked.clear()  # (asked "a" before it left: ASK_AGAIN_S)
    asked = k.look({"b": busy("m1"), "c": busy("m2"), "a2": stats("m0")}, True, NOW + 2)
    assert asked == [Keep("a2", "m0", pytest.approx(57.0))]


def test_a_slow_answer_is_not_a_replica_leaving() -> None:
    """A look where some replica did not answer (``complete`` false) says
    nothing about who left: the fleet stays steady."""
    k = keeper({"a": kept("m0"), "b": busy("m1"), "c": stats("m2")})
    assert k.look({"b": busy("m1"), "c": stats("m2")}, False, NOW + 1) != []  # nobody holds m0
    assert not k.changing(NOW + 1)


def test_while_the_fleet_changes_a_new_replica_keeps_the_model_old_ones_hold() -> None:
    """A rolling update: b (not the holder) drains and leaves first; a new
    replica comes up holding m0 (preloaded), idle: it keeps m0 now (no load),
    so the copy is there when the old holder a stops. An old idle replica is
    not asked: it will leave too."""
    k = keeper({"a": kept("m0"), "b": busy("m1"), "c": stats("m2")})
    draining = {"a": kept("m0"), "b": busy("m1", draining=True), "c": stats("m2")}
    assert k.look(draining, True, NOW + 0.5) == []
    assert k.look({"a": kept("m0"), "c": stats("m2")}, True, NOW + 1) == []
    assert k.changing(NOW + 1)
    fleet = {"a": kept("m0"), "c": stats("m2"), "b2": stats("m0")}
    assert k.look(fleet, True, NOW + 2) == [Keep("b2", "m0", pytest.approx(57.0))]
    assert k.reserved == {"a": "m0", "b2": "m0"}  # two keepers for a while
    # It says so in its stats: kept, nothing more asked; the holder leaves.
    fleet = {"c": stats("m2"), "b2": stats("m0", keeps="m0", keep_left_s=55.0)}
    assert k.look(fleet, True, NOW + 3) == []
    assert k.reserved == {"b2": "m0"}
    # Steady again (CHANGING_S later, the person still chatting): kept, renewed.
    later = NOW + CHANGING_S + 10
    k.chat("m0", NOW + CHANGING_S)
    fleet = {"c": stats("m2", later), "b2": stats("m0", later, keeps="m0", keep_left_s=5.0)}
    assert k.look(fleet, True, later) == [Keep("b2", "m0", pytest.approx(50.0))]


def test_a_replica_gone_without_draining_is_no_update() -> None:
    """A replica killed (gone without draining) is replaced by a peer, not a
    successor: the fleet is steady, and the keep stays with the holder; the
    idle replacement is not asked to load the model (it would swap away a
    model another person's turn was just placed on)."""
    k = keeper({"a": kept("m0"), "b": busy("m1"), "c": stats("m2")})
    assert k.look({"a": kept("m0"), "c": stats("m2")}, True, NOW + 1) == []
    assert not k.changing(NOW + 1)
    fleet = {"a": kept("m0"), "c": stats("m2"), "b2": stats("m1")}
    assert k.look(fleet, True, NOW + 2) == []
    assert k.reserved == {"a": "m0"}


def test_an_ingress_that_started_mid_update_knows_the_new_replicas_by_generation() -> None:
    """Replicas of two generations (the hash of their arguments) at once: a
    rolling update, though this ingress saw nobody leave; the replicas not of
    the oldest one's generation are new: the idle one holding m0 keeps it."""
    k = Keeper(keep_for_s=60.0)
    k.chat("m0", NOW)
    fleet = {
        "a": kept("m0", generation="g1", up_s=300.0),
        "c": busy("m2", generation="g1", up_s=300.0),
        "b2": stats("m0", generation="g2", up_s=4.0),
    }
    assert k.look(fleet, True, NOW) == [Keep("b2", "m0", pytest.approx(60.0))]
    assert k.changing(NOW)


def test_a_model_nobody_chats_on_any_more_gets_no_keeper() -> None:
    k = keeper({"a": stats("m0"), "b": busy("m1"), "c": stats("m2")})
    assert k.look({"b": busy("m1"), "c": stats("m2")}, True, NOW + 61) == []


def test_a_new_ingress_learns_the_persons_models_from_the_replicas() -> None:
    """An ingress started in the middle of a rollout has seen no chat: the
    replicas report their persons' models (``persons``: seconds since)."""
    k = Keeper(keep_for_s=60.0)
    fleet = {"b": busy("m1", persons={"m0": 3.0}), "c": stats("m2"), "d": stats("m3")}
    assert k.look(fleet, True, NOW) == [Keep("c", "m0", pytest.approx(57.0))]
    assert k.reserved == {"c": "m0"}


def test_a_keeper_of_another_persons_model_is_not_taken() -> None:
    k = Keeper(keep_for_s=60.0)
    k.chat("m0", NOW)
    k.chat("m1", NOW)
    fleet = {"b": stats("m1", keeps="m1", keep_left_s=50.0), "c": stats("m1")}
    # c holds m1, a model persons use: not swapped away for m0 either.
    assert k.look(fleet, True, NOW) == []


def test_the_router_and_the_mover_give_a_keepers_device_no_other_models_work() -> None:
    fleet: dict[str, dict[str, Any] | None] = {
        "a": stats("m0", keeps="m0"),
        "b": busy("m1"),
        "c": None,
    }
    assert demoted(fleet, {}, "m1", "extract") == {"a"}
    assert demoted(fleet, {"c": "m0"}, "m1", "extract") == {"a", "c"}
    assert demoted(fleet, {"c": "m0"}, "m0", "extract") == set()
    assert demoted(fleet, {"c": "m0"}, "m1", "chat") == set()  # a person's: anywhere
    old = busy("m1") | {"backlog_s": 30.0}
    moves = Mover().choose(
        [Waiting(1, "b", "m1", "extract")], {"a": stats("m0", keeps="m0"), "b": old}, NOW
    )
    assert moves == []
    # Asked a moment ago, not in its stats yet: the ingress's list says so.
    wait = [Waiting(1, "b", "m1", "extract")]
    assert Mover().choose(wait, {"a": stats("m0"), "b": old}, NOW) != []
    assert Mover().choose(wait, {"a": stats("m0"), "b": old}, NOW, {"a": "m0"}) == []
    # An idle replica holding a persons' model nobody keeps yet (a new one,
    # preloaded): held back, as the router holds it back.
    assert Mover().choose(wait, {"a": stats("m0"), "b": old}, NOW, {}, ("m0",)) == []


def test_an_idle_replica_holding_a_persons_model_takes_other_work_last() -> None:
    """A replica Serve just started holds the first model (a preload), idle:
    before the keeper asks it, the router already gives it no background
    work of another model while persons use the one it holds."""
    fleet: dict[str, dict[str, Any] | None] = {"new": stats("m0"), "b": busy("m1")}
    assert demoted(fleet, {}, "m1", "extract", ("m0",)) == {"new"}
    assert demoted(fleet, {}, "m1", "extract", ()) == set()
    assert demoted({"new": busy("m0"), "b": busy("m1")}, {}, "m1", "extract", ("m0",)) == set()
    # Once a replica keeps m0, the other idle holders take work again.
    fleet["a"] = kept("m0")
    assert demoted(fleet, {}, "m1", "extract", ("m0",)) == {"a"}


def test_work_queued_on_a_keeper_for_another_model_moves_off_it() -> None:
    """Placed before the replica was asked to keep m0: it would swap m0 away
    there, so the mover sends it to a replica that can take it."""
    keeper_ = stats("m0", keeps="m0", busy=True, queued_by_class={"extract": 1})
    moves = Mover().choose([Waiting(1, "a", "m1", "extract")], {"a": keeper_, "b": busy("m1")}, NOW)
    assert moves == [(1, "replica a keeps a model persons use")]
    # Nowhere else to go: it stays.
    assert Mover().choose([Waiting(1, "a", "m1", "extract")], {"a": keeper_}, NOW) == []


def test_in_an_update_the_new_copy_is_held_back_and_the_old_keeper_freed() -> None:
    """Two generations (a rolling update): the old keeper of m0 stops soon,
    so the copy that matters is a new replica's. An idle new replica holding
    m0 gets no m1 work although the old one keeps m0 (Serve sent it such
    work, and it swapped m0 away); once a new replica has m0 loaded, the old
    keeper takes other work first."""
    old = busy("m0", keeps="m0", keep_left_s=50.0, generation="g1", up_s=100.0)
    fresh = stats("m0", generation="g2", up_s=1.0)
    fleet: dict[str, dict[str, Any] | None] = {"old": old, "new": fresh}
    assert demoted(fleet, {}, "m1", "extract", ("m0",)) == {"new"}
    # Still loading m0 there: the old keeper is not freed yet.
    loading = fresh | {"loaded_model": "m1", "swapping_to": "m0", "busy": True}
    assert demoted({"old": old, "new": loading}, {"new": "m0"}, "m1", "extract", ("m0",)) == {
        "old",
        "new",
    }
    # One generation: the old rule (the keeper held back, other holders free).
    same = {"old": old, "new": fresh | {"generation": "g1"}}
    assert demoted(same, {}, "m1", "extract", ("m0",)) == {"old"}


def test_a_chat_goes_to_the_keeper_of_its_model_unless_it_is_busier() -> None:
    """Another replica holding m0 idle looks best for a chat on m0, but it is
    free to take other models' work (another ingress may have placed some
    there since the stats): the keeper, one chat ahead, takes the chat; two
    chats ahead (more than a chat run busier), the ranking's order stands."""
    from tierlm.cluster import rank, views

    keeper_ = stats("m0", keeps="m0", busy=True, running={"chat": 1}, chat_run_s=0.2)
    fleet: dict[str, dict[str, Any] | None] = {"free": stats("m0", chat_run_s=0.2), "k": keeper_}
    order = rank(fleet, "m0", "chat", NOW)
    assert order[0] == "free"
    assert keeper_first(order, views(fleet), {"k": "m0"}, "m0", "chat", NOW) == ["k", "free"]
    assert keeper_first(order, views(fleet), {"k": "m0"}, "m0", "extract", NOW) == order
    assert keeper_first(order, views(fleet), {"k": "m0"}, "m0", "chat", NOW, tried={"k"}) == order
    # Asked to keep m0 but holding m1 now (an admin load swapped it away).
    moved = {**fleet, "k": keeper_ | {"loaded_model": "m1", "keeps": None}}
    assert keeper_first(order, views(moved), {"k": "m0"}, "m0", "chat", NOW) == order
    fleet["k"] = keeper_ | {"chat_queued": 1, "queued_by_class": {"chat": 1}}
    assert (
        keeper_first(rank(fleet, "m0", "chat", NOW), views(fleet), {"k": "m0"}, "m0", "chat", NOW)[
            0
        ]
        == "free"
    )
