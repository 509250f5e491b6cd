"""Which queued requests the ingress moves (``tierlm.ray.moves.Mover``):
pure, no Ray. On a real Ray: tests/cluster/test_ray_scale.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cluster.replica_stats import idle_replica
from tierlm.ray.moves import Mover, Waiting

pytestmark = pytest.mark.fast

NOW = 1000.0


def stats(**fields: Any) -> dict[str, Any]:
    defaults: dict[str, Any] = {"loaded_model": "m0", "swap_s": 2.0, "run_s": {"gana": 3.0}}
    return idle_replica(NOW, **{**defaults, **fields})


BUSY = stats(busy=True, backlog_s=15.0, queued_by_class={"gana": 4}, queued_by_model={"m0": 4})


def waiting(n: int, replica: str = "old", class_name: str = "gana") -> list[Waiting]:
    return [Waiting(i, replica, "m0", class_name) for i in range(n)]


def test_a_scale_out_moves_queued_work_to_the_new_idle_replicas_until_it_pays_no_more() -> None:
    """4 queued behind 15 s of backlog; two new idle replicas (a 2 s swap
    away): one each, then the old replica's wait (6 s: its backlog but the
    request's own run) is no longer MOVE_GAIN_S above theirs (a swap and a
    run: 7 s)."""
    cluster = {"old": BUSY, "new1": stats(loaded_model=None), "new2": stats(loaded_model=None)}
    moves = Mover().choose(waiting(4), cluster, NOW)
    assert [key for key, _ in moves] == [0, 1]
    assert all("starts it sooner" in why for _, why in moves)
    assert {why.split()[1] for _, why in moves} == {"new1", "new2"}


def test_nothing_moves_without_a_gain_or_from_an_idle_replica() -> None:
    assert Mover().choose(waiting(1), {"old": BUSY, "b": BUSY}, NOW) == []
    idle = stats(queued_by_class={"gana": 1})  # not busy: about to start it
    assert Mover().choose(waiting(1), {"old": idle, "b": stats()}, NOW) == []
    full = stats(full=["gana"])
    assert Mover().choose(waiting(1), {"old": BUSY, "b": full}, NOW) == []
    stale = stats(at=NOW - 60)
    assert Mover().choose(waiting(1), {"old": BUSY, "b": stale}, NOW) == []


def test_a_replica_gone_for_two_looks_or_draining_loses_its_queue() -> None:
    mover = Mover()
    others = {"b": BUSY}
    assert mover.choose(waiting(2), others, NOW) == []  # one missed look: no judgement
    moved = mover.choose(waiting(2), others, NOW)
    assert [key for key, _ in moved] == [0, 1] and "left the fleet" in moved[0][1]
    assert Mover().choose(waiting(1), {}, NOW) == []  # nobody answered
    draining = {"old": stats(draining=True), "b": BUSY}
    assert "drains" in Mover().choose(waiting(1), draining, NOW)[0][1]


def test_a_chat_waits_only_behind_chats() -> None:
    """A queued chat behind another chat: an idle replica starts it now."""
    home = stats(busy=True, running={"chat": 1}, chat_queued=1, chat_run_s=4.0, backlog_s=30.0)
    moved = Mover().choose(waiting(1, class_name="chat"), {"old": home, "b": stats()}, NOW)
    assert [key for key, _ in moved] == [0]
