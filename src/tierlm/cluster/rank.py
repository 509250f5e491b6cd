"""Where a request should go: replicas best first (docs/distributed.md "Ranking").

The router places; each tierlm schedules. So the ranking asks only what a
replica's own scheduler will do with the request:

- **chat** (a class of tier 0: a person waits) preempts everything on a device
  but another chat, so it is judged on the chats ahead of it times the chat
  run time, plus a swap if the device does not hold its model; never on the
  background backlog, which it jumps.
- **other work**, best first: the replica holding the model while its backlog
  stays under ``ski_swaps`` swaps' worth (ski rental, as the policy's affinity
  holds: queuing behind that much same-model work costs less than the swap it
  avoids, docs/design.md §4); then an idle replica; then one already queuing
  the model (its scheduler batches that model's jobs behind one swap); then
  the least swap + backlog.

Replicas that drain or whose class is full are left out: an empty answer
means every replica would refuse (the caller answers 429, with the smallest
Retry-After). Replicas whose stats are stale (older than ``stale_after``, of
another version, or paused) come after all fresh ones, in the same order. Ties
go to the name, so the answer is a function of its arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tierlm.cluster.stats import Placement, View

__all__ = ["SKI_SWAPS", "STALE_AFTER", "rank", "views"]

# The scheduler's own bound (SchedulerConfig.grace_factor, docs/design.md §4):
# "betting more than a few swaps is a bad bet".
SKI_SWAPS = 3.0
# Three of Ray Serve's default stats periods (request_routing_stats_period_s, 10 s).
STALE_AFTER = 30.0


def views(
    stats: Mapping[str, Mapping[str, Any] | None],
    placed: Mapping[str, Sequence[Placement]] | None = None,
) -> dict[str, View]:
    """Each replica's ``View``: its stats with the placements made since."""
    placed = placed or {}
    return {name: View.of(name, s, placed.get(name, ())) for name, s in stats.items()}


def rank(
    stats: Mapping[str, Mapping[str, Any] | None],
    model: str,
    class_name: str,
    now: float,
    *,
    placed: Mapping[str, Sequence[Placement]] | None = None,
    stale_after: float = STALE_AFTER,
    ski_swaps: float = SKI_SWAPS,
) -> list[str]:
    """The names of ``stats``' replicas that may take a job of ``class_name``
    on ``model``, best first (module docstring). ``stats`` maps a replica's
    name to its routing-stats dict; ``now`` is on the clock of their ``at``;
    ``placed`` lists, per replica, the requests sent to it since its stats."""
    every = views(stats, placed)
    open_ = [v for v in every.values() if not v.draining and class_name not in v.full]
    chat = any(v.is_chat(class_name) for v in every.values())

    def key(view: View) -> tuple[Any, ...]:
        if chat:
            wait = view.chats_ahead() * view.chat_run_s + view.swap_cost(model)
            return (wait, view.model != model, view.backlog_s, view.name)
        holds = view.model == model
        if holds and view.backlog_s < ski_swaps * view.swap_s:
            return (0, view.backlog_s, view.name)
        if view.idle:
            return (1, view.swap_cost(model), view.name)
        if view.queued_by_model.get(model, 0) > 0:
            return (2, view.backlog_s, view.name)
        return (3, view.swap_cost(model) + view.backlog_s, view.name)

    fresh = sorted((v for v in open_ if v.fresh(now, stale_after)), key=key)
    stale = sorted((v for v in open_ if not v.fresh(now, stale_after)), key=key)
    return [v.name for v in fresh + stale]
