"""The keep on the replica a rolling update stops last (``tierlm.ray.keeping``,
``stop_order``): pure, no Ray. With Serve's default rollout (an old replica
stopped before its successor starts) a holder stopped first leaves the
persons' model loaded nowhere until a chat swaps it in; stopped last, new
replicas run by then and one of them keeps it first."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cluster.replica_stats import idle_replica
from tierlm.ray.keeping import ASK_AGAIN_S, Keep, Keeper, stop_order

pytestmark = pytest.mark.fast

NOW = 1000.0


def stats(model: str | None, born: float, **fields: Any) -> dict[str, Any]:
    return idle_replica(NOW, loaded_model=model, swap_s=2.0, born=born, **fields)


def busy(model: str, born: float, **fields: Any) -> dict[str, Any]:
    return stats(
        model,
        born,
        busy=True,
        running={"extract": 1},
        queued_by_class={"extract": 3},
        queued_by_model={model: 3},
        **fields,
    )


def kept(model: str, born: float, **fields: Any) -> dict[str, Any]:
    return busy(model, born, keeps=model, keep_left_s=55.0, **fields)


def chatting(on: str = "m0") -> Keeper:
    k = Keeper(keep_for_s=60.0)
    k.chat(on, NOW - 1)
    return k


def test_serve_stops_the_oldest_first() -> None:
    """By ``born`` (when the constructor ended): Serve 2.60 stops the old
    version's replicas in the order they came to run. A replica that does
    not say is taken for the oldest."""
    fleet: dict[str, dict[str, Any] | None] = {
        "a": stats(None, 3.0),
        "b": stats(None, 1.0),
        "c": idle_replica(NOW),
    }
    assert stop_order(fleet) == ["c", "b", "a"]


def test_of_several_holders_the_one_stopped_last_keeps_the_model() -> None:
    """Three replicas hold m0 (the preload): the newest keeps it, whatever
    its name, idle or not."""
    fleet = {"a": stats("m0", 1.0), "b": busy("m0", 3.0), "c": stats("m0", 2.0)}
    assert chatting().look(fleet, True, NOW) == [Keep("b", "m0", pytest.approx(59.0))]


def test_a_steady_keep_moves_to_the_replica_stopped_last_when_it_holds_the_model() -> None:
    """The keeper is the oldest; the newest comes to hold m0 (busy with m0
    work): asked too, at no cost; once it keeps m0 loaded, the old keeper is
    released (it takes other work again)."""
    k = chatting()
    assert k.look({"a": busy("m0", 1.0), "b": busy("m1", 2.0)}, True, NOW) == [
        Keep("a", "m0", pytest.approx(59.0))
    ]
    fleet = {"a": kept("m0", 1.0), "b": busy("m0", 2.0)}
    assert k.look(fleet, True, NOW + 1) == [Keep("b", "m0", pytest.approx(58.0))]
    assert k.reserved == {"a": "m0", "b": "m0"}
    assert k.look(fleet, True, NOW + 2) == []  # asked: not again at once
    fleet = {"a": kept("m0", 1.0), "b": kept("m0", 2.0)}
    assert k.look(fleet, True, NOW + 3) == [Keep("a", "m0", 0.0)]
    assert k.reserved == {"b": "m0"}
    assert k.look({"a": busy("m0", 1.0), "b": kept("m0", 2.0)}, True, NOW + 4) == []


def test_a_replica_stopped_later_with_nothing_queued_is_asked_to_load_it() -> None:
    """Idle or running one job, nothing queued, holding a model nobody chats
    on: a load that makes nobody wait (the job under way ends first). Not
    one holding another model persons use, nor one an operator loaded, nor
    one with work queued (it would wait for the swap and back)."""
    base = {"a": kept("m0", 1.0)}
    k = chatting()
    assert k.look({**base, "b": stats("m2", 2.0)}, True, NOW) == [
        Keep("b", "m0", pytest.approx(59.0))
    ]
    # Loading m0 for its keep: the old keeper stays until it is loaded.
    loading = stats("m2", 2.0, swapping_to="m0", busy=True, keeps="m0", keep_left_s=59.0)
    assert k.look({**base, "b": loading}, True, NOW + 1) == []
    assert k.reserved == {"a": "m0", "b": "m0"}

    k = chatting()
    k.chat("m1", NOW - 1)
    assert k.look({**base, "b": stats("m1", 2.0)}, True, NOW) == [
        Keep("b", "m1", pytest.approx(59.0))
    ]
    running = stats("m2", 2.0, busy=True, running={"extract": 1})
    assert chatting().look({**base, "b": running}, True, NOW) == [
        Keep("b", "m0", pytest.approx(59.0))
    ]
    for other in (stats("m2", 2.0, operator_model="m2"), busy("m2", 2.0)):
        assert chatting().look({**base, "b": other}, True, NOW) == []


def test_an_ask_not_taken_is_repeated_after_a_while() -> None:
    k = chatting()
    fleet = {"a": kept("m0", 1.0), "b": stats("m2", 2.0)}
    assert k.look(fleet, True, NOW) != []
    assert k.look(fleet, True, NOW + 1) == []
    assert k.look(fleet, True, NOW + ASK_AGAIN_S + 0.5) == [Keep("b", "m0", pytest.approx(48.5))]


def test_no_move_while_the_fleet_changes_nor_without_start_times() -> None:
    """In an update the new replicas' rules hold (test_keeping.py); replicas
    that do not report ``born`` keep their keeper."""
    k = chatting()
    k.left_at = NOW
    fleet = {"a": kept("m0", 1.0), "b": busy("m0", 2.0)}
    assert k.look(fleet, True, NOW) == []
    bare = {n: {f: v for f, v in s.items() if f != "born"} for n, s in fleet.items()}
    assert chatting().look(bare, True, NOW) == []


def test_serves_own_order_comes_before_the_start_times() -> None:
    """Two replicas whose constructors ended within one of the controller's
    loops come in the order it started them, which only it knows: its
    list (``keep_loop.stop_order_of``) decides; a replica it does not list
    yet comes after those it lists."""
    fleet = {"a": stats("m0", 2.0), "b": stats("m0", 1.0), "c": stats("m0", 0.5)}
    assert chatting().look(fleet, True, NOW, order=["a", "b"]) == [
        Keep("c", "m0", pytest.approx(59.0))
    ]
    assert chatting().look(fleet, True, NOW, order=["a", "c", "b"]) == [
        Keep("b", "m0", pytest.approx(59.0))
    ]
