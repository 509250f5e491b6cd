"""A person's next turn and their home replica (``tierlm.ray.affinity``,
``tierlm.ray.homes``): pure, no Ray. On a real Ray: tests/cluster/test_ray.py
``test_a_persons_turns_keep_to_their_replica_while_it_is_worth_it``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cluster.replica_stats import idle_replica
from tierlm.cluster import rank, views
from tierlm.ray.affinity import with_home
from tierlm.ray.homes import Homes

pytestmark = pytest.mark.fast

NOW = 1000.0


def stats(**fields: Any) -> dict[str, Any]:
    return idle_replica(NOW, **{"loaded_model": "m0", **fields})


def placed(cluster: dict[str, Any], home: str | None, **kw: Any) -> list[str]:
    order = rank(cluster, "m0", "chat", NOW)
    return with_home(order, views(cluster), home, "m0", "chat", NOW, **kw)


def test_a_chat_goes_home_past_background_the_ranking_would_avoid() -> None:
    """Chat jumps background, so the home's backlog costs the chat nothing;
    the ranking breaks the tie away from it, the home keeps it."""
    cluster = {
        "a": stats(busy=True, backlog_s=30.0, queued_by_class={"gana": 5}),
        "b": stats(),
    }
    assert rank(cluster, "m0", "chat", NOW)[0] == "b"
    assert placed(cluster, "a") == ["a", "b"]
    assert placed(cluster, None) == ["b", "a"]


def test_an_overloaded_home_is_left_for_the_best() -> None:
    """Two chats ahead at home (4 s) against none elsewhere: over 2 s of slack."""
    cluster = {"a": stats(busy=True, chat_queued=1, running={"chat": 1}), "b": stats()}
    assert placed(cluster, "a") == ["b", "a"]
    assert placed(cluster, "a", slack_s=5.0) == ["a", "b"]


def test_a_home_that_is_stale_draining_full_tried_or_gone_is_not_kept() -> None:
    base = {"b": stats()}
    for home in (
        stats(at=NOW - 60),  # stale: frozen or dead
        stats(draining=True),
        stats(full=["chat"]),
    ):
        assert placed({**base, "a": home}, "a")[0] == "b"
    cluster = {"a": stats(busy=True, backlog_s=30.0), "b": stats()}
    assert placed(cluster, "a", tried=frozenset({"a"}))[0] == "b"
    assert placed(cluster, "gone") == rank(cluster, "m0", "chat", NOW)


def test_homes_remember_the_last_replica_and_forget_old_and_least_used() -> None:
    homes = Homes(limit=2, forget_after_s=100.0)
    homes.set("ann", "r1", 0.0)
    homes.set("ann", "r2", 10.0)  # her turn ran elsewhere: her home now
    assert homes.of("ann", 20.0) == "r2"
    assert homes.of("ann", 200.0) is None  # forgotten
    homes.set("ann", "r1", 0.0)
    homes.set("bob", "r1", 1.0)
    homes.set("cyd", "r2", 2.0)  # over the limit: ann, least recently set, goes
    assert len(homes) == 2 and homes.of("ann", 3.0) is None
    assert homes.of(None, 0.0) is None
