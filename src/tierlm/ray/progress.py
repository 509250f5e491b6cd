"""A swap under way, counted by what is left of it (for the router's ranking).

The routing stats say a replica is loading a model (``swapping_to``) but not
how far it is, so ``tierlm.cluster.rank`` counts that swap whole: a chat on
the model sees a replica that will hold it in a moment as far as one that
has not begun. Through a rolling update that sent chats to a replica that
swapped again for them, when the one loading their model was nearly done
(docs/distributed.md "Persons' models through a rollout"). A tierlm replica
adds ``swap_elapsed_s`` to its stats (``TierlmReplica.record_routing_stats``:
seconds since the swap, or the keep's load, began, when the stats were
taken); ``swap_left`` reads what is left, and ``with_swap_left`` hands the
ranking, for a chat, the stats of each replica loading the chat's model
with its ``swap_s`` set to the rest of that swap. Only for a chat and only
on those replicas: a chat's rank adds ``swap_s`` once when the device loads
its model (docs/design.md §4.8: a person's chat waits for that swap), while
other work's ranking reads ``swap_s`` as the price of the next swap (its ski
rental bound), which the swap under way does not change.

Pure: the stats and the clock are arguments (Unix seconds, the stats' clock).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tierlm.cluster.stats import DEFAULT_CHAT_CLASSES, DEFAULT_SWAP_S

__all__ = ["swap_left", "with_swap_left"]


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None


def swap_left(stats: Mapping[str, Any] | None, now: float) -> float | None:
    """Seconds left of the swap a replica's ``stats`` show under way at
    ``now``: its measured ``swap_s`` less what had passed when they were taken
    (``swap_elapsed_s``) and since (``at``); at least 0. None: no swap under
    way, or its progress not reported."""
    if not stats or stats.get("swapping_to") is None:
        return None
    elapsed = _seconds(stats.get("swap_elapsed_s"))
    at = _seconds(stats.get("at"))
    if elapsed is None or at is None:
        return None
    swap = _seconds(stats.get("swap_s"))
    whole = swap if swap is not None else DEFAULT_SWAP_S
    return max(0.0, whole - elapsed - max(0.0, now - at))


def with_swap_left(
    stats: Mapping[str, Mapping[str, Any] | None],
    model: str,
    class_name: str,
    now: float,
) -> dict[str, Mapping[str, Any] | None]:
    """``stats`` for ranking a request of ``class_name`` on ``model``: for a
    chat, each replica loading ``model`` with a known progress gets ``swap_s``
    = what is left of that swap (module docstring); anything else as is."""
    out: dict[str, Mapping[str, Any] | None] = dict(stats)
    chat_classes: frozenset[str] = frozenset(DEFAULT_CHAT_CLASSES)
    for s in stats.values():
        if s and s.get("chat_classes"):
            chat_classes = frozenset(str(c) for c in s["chat_classes"])
            break
    if class_name not in chat_classes:
        return out
    for name, s in stats.items():
        if s and s.get("swapping_to") == model:
            left = swap_left(s, now)
            if left is not None:
                out[name] = {**s, "swap_s": left}
    return out
