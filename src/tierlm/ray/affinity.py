"""A person's next turn goes back to the replica that holds their KV.

A person's conversation grows turn by turn, and the replica that served the
last turn keeps its history's KV (the batched worker keeps a finished
generation's history as a prefix snapshot, docs/design.md §1; the next turn
restores it instead of evaluating it: 0.13 s against 2.2 s for a 441-token
history on this machine's CPU, bench/chat_next_turn.py). Another replica
evaluates the whole history again. So the router puts the person's *home*
first while it is worth it:

- the home is among the replicas the request may go to (running, not
  tried already), its stats fresh (a frozen or dead replica's go stale), it
  does not drain and the request's class is not full there;
- and it is not overloaded: the request would wait there at most
  ``slack_s`` longer than on the best replica the ranking found (a chat:
  the chats ahead of it and a swap; other work: a swap and the backlog).
  ``slack_s`` is what the home saves, the history's evaluation: 2 s by
  default (``FleetArgs.affinity_slack_s``), the 441-token history above.

Otherwise the ranking's order stands (the person falls back, and the replica
that serves this turn is their home from now on). Pure: the clock is an
argument.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tierlm.cluster import STALE_AFTER, View

__all__ = ["DEFAULT_AFFINITY_SLACK_S", "wait_s", "with_home"]

DEFAULT_AFFINITY_SLACK_S = 2.0


def wait_s(view: View, model: str, class_name: str) -> float:
    """What a request would wait on ``view`` before it runs, as the ranking
    judges it (``tierlm.cluster.rank``)."""
    if view.is_chat(class_name):
        return view.chats_ahead() * view.chat_run_s + view.swap_cost(model)
    return view.swap_cost(model) + view.backlog_s


def with_home(
    order: Sequence[str],
    views: Mapping[str, View],
    home: str | None,
    model: str,
    class_name: str,
    now: float,
    *,
    tried: frozenset[str] = frozenset(),
    slack_s: float = DEFAULT_AFFINITY_SLACK_S,
    stale_after: float = STALE_AFTER,
) -> list[str]:
    """``order`` (the ranking's, best first) with ``home`` moved first when it
    holds (module docstring)."""
    out = list(order)
    if home is None or home not in out or home in tried or not out:
        return out
    view = views.get(home)
    if view is None or not view.fresh(now, stale_after):
        return out
    if view.draining or class_name in view.full:
        return out
    best = views.get(out[0])
    if best is not None and wait_s(view, model, class_name) > (
        wait_s(best, model, class_name) + slack_s
    ):
        return out  # overloaded: the person falls back
    out.remove(home)
    return [home, *out]
