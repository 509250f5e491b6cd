"""A swap under way counted by what is left of it (``tierlm.ray.progress``):
pure, no Ray. On a real Ray, through a rolling update: bench/cluster.py
--ray-phases rollout."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cluster.replica_stats import idle_replica
from tierlm.cluster import rank
from tierlm.ray.progress import swap_left, with_swap_left

pytestmark = pytest.mark.fast

NOW = 1000.0


def loading(model: str, elapsed: float | None, at: float = NOW, **fields: Any) -> dict[str, Any]:
    return idle_replica(
        at,
        loaded_model="m1",
        swapping_to=model,
        busy=True,
        swap_s=2.0,
        chat_run_s=0.2,
        swap_elapsed_s=elapsed,
        **fields,
    )


def test_what_is_left_counts_the_time_since_the_stats_too() -> None:
    assert swap_left(loading("m0", 0.5), NOW) == pytest.approx(1.5)
    assert swap_left(loading("m0", 0.5, at=NOW - 1.0), NOW) == pytest.approx(0.5)
    assert swap_left(loading("m0", 3.0), NOW) == 0.0  # late: nearly done
    assert swap_left(loading("m0", None), NOW) is None  # progress not reported
    assert swap_left(idle_replica(NOW, loaded_model="m0"), NOW) is None  # no swap


def test_a_chat_goes_to_the_replica_nearly_done_loading_its_model() -> None:
    """Counted whole, the swap under way ties with a swap from scratch, and a
    chat already placed there tips it to the replica that has not begun: a
    second swap for the person. Counted by what is left, the chat waits the
    rest of the load."""
    fleet: dict[str, dict[str, Any] | None] = {
        "a": loading("m0", 1.6, chat_queued=1, queued_by_class={"chat": 1}),
        "b": idle_replica(NOW, loaded_model="m1", swap_s=2.0, chat_run_s=0.2),
    }
    assert rank(fleet, "m0", "chat", NOW) == ["b", "a"]
    assert rank(with_swap_left(fleet, "m0", "chat", NOW), "m0", "chat", NOW) == ["a", "b"]
    # Other work reads swap_s as the next swap's price: left as it is.
    assert with_swap_left(fleet, "m0", "extract", NOW) == fleet
    # A replica loading another model: its swap is not the chat's.
    other = {**fleet, "a": loading("m2", 1.6)}
    assert with_swap_left(other, "m0", "chat", NOW) == other
