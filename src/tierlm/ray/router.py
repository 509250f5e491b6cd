"""``TierlmRequestRouter``: Ray Serve's request router, ranking by ``tierlm.cluster``.

Ray Serve asks ``choose_replicas(candidates, pending_request)`` for ranks,
best first, and tries the replicas of each rank that have room under
``max_ongoing_requests`` (the lowest queue first within a rank). This router
returns one replica per rank, in ``tierlm.cluster.rank``'s order over the
replicas' routing stats (``TierlmReplica.record_routing_stats``, polled every
``request_routing_stats_period_s``), counting what it placed since each poll.
A placement counts from the moment it is chosen (``PlacementLog.reserve``:
the best replica is held for the request), so that requests ranked at the
same time, a burst of chats, spread over idle replicas rather than all
seeing the one that looked idle; ``on_request_routed`` confirms it on the
replica that took the request, ``on_request_completed`` before that releases
it (refused, failed), and it lapses on its own after ``RESERVATION_HOLD_S``.
The request's model and class come from the replica call's keyword arguments
(``model``, ``class_name``); ``home`` names the replica that served a
person's last turn, put first while it holds their KV and is not overloaded
(``tierlm.ray.affinity``); a replica that keeps a model persons use
(``keeps`` in its stats, or ``keeping``: the ingress's, not polled yet)
takes other models' background work only after every other replica
(``tierlm.ray.keeping``), and, while two generations run (a rolling
update, when the old ingress and its mover still place work too), takes a
chat on that model first unless it is busier by more than a chat run
(``keeper_first``); a chat counts what is left of a swap to its
model under way (``tierlm.ray.progress``); and
``exclude`` lists replicas the ingress already tried (a 429, a replica that
died): they come last, so that a repeat tells the ingress every replica was
tried. Replicas the ranking leaves out (full or draining at the last poll)
come after the ranked ones: they may have room now, and answer 429 if not.
The ingress's operations calls do not come here: they reach the replicas
by broadcast (``tierlm.ray.reach``), so any router serves the fleet.

No FIFO mixin: each routing task fulfils the request it ranked for.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from tierlm.cluster import PlacementLog, rank, views
from tierlm.ray.affinity import DEFAULT_AFFINITY_SLACK_S, with_home
from tierlm.ray.keeping import demoted, keeper_first, keeps_of, new_replicas
from tierlm.ray.progress import with_swap_left

__all__ = ["TierlmRequestRouter", "replica_name"]


def replica_name(replica_id: ReplicaID) -> str:
    """The name a replica goes by in the stats and the ranking."""
    return str(replica_id.unique_id)


def _request_fields(
    pending: PendingRequest | None,
) -> tuple[str, str, Sequence[str], str | None, dict[str, str]]:
    kwargs: dict[str, Any] = dict(pending.kwargs) if pending is not None else {}
    home = kwargs.get("home")
    keeping = {str(r): str(m) for r, m in kwargs.get("keeping", ()) or ()}
    return (
        str(kwargs.get("model", "")),
        str(kwargs.get("class_name", "")),
        tuple(kwargs.get("exclude", ()) or ()),
        str(home) if home else None,
        keeping,
    )


def _request_id(pending: PendingRequest | None) -> str | None:
    if pending is None:
        return None
    return str(pending.metadata.internal_request_id)


class TierlmRequestRouter(RequestRouter):
    """Ranks replicas with ``tierlm.cluster.rank`` (module docstring)."""

    def initialize_state(
        self, affinity_slack_s: float = DEFAULT_AFFINITY_SLACK_S, **kwargs: Any
    ) -> None:
        self.placements = PlacementLog()
        self.affinity_slack_s = affinity_slack_s

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        if pending_request is not None:
            # Every replica is in the answer: if none of them can take the
            # request now (full, or its queue length not known in time), Serve
            # should wait before asking again. Without it Serve asks again at
            # once, in a loop that held the ingress's CPU and starved the
            # queue-length probes it waited for (seconds per request).
            pending_request.routing_context.should_backoff = True
        by_name = {replica_name(r.replica_id): r for r in candidate_replicas}
        stats = {name: (r.routing_stats or None) for name, r in by_name.items()}
        model, class_name, exclude, home, keeping = _request_fields(pending_request)
        now = time.time()
        request_id = _request_id(pending_request)
        if request_id is not None:  # ranked again (its replica was full): not counted twice
            self.placements.release(request_id)
        placed = self.placements.since(stats, now)
        # A chat counts what is left of a swap to its model, not the whole.
        ranked = with_swap_left(stats, model, class_name, now)
        order = rank(ranked, model, class_name, now, placed=placed)
        order += sorted(set(by_name) - set(order))
        # Keepers of a model persons use take other models' work last
        # (tierlm.ray.keeping): a swap away there makes a person wait.
        asked = dict(pending_request.kwargs) if pending_request is not None else {}
        persons = tuple(str(m) for m in asked.get("persons", ()) or ())
        kept = demoted(stats, keeping, model, class_name, persons)
        order = [n for n in order if n not in kept] + [n for n in order if n in kept]
        tried = frozenset(exclude)
        order = [n for n in order if n not in tried] + [n for n in order if n in tried]
        seen = views(ranked, placed)
        if new_replicas(stats):  # an update: a chat on a persons' model to its keeper
            keepers = {**keeping, **{n: k for n, s in stats.items() if (k := keeps_of(s))}}
            order = keeper_first(order, seen, keepers, model, class_name, now, tried=tried)
        if home is not None:  # a person's next turn: where their KV is, if worth it
            order = with_home(
                order,
                seen,
                home,
                model,
                class_name,
                now,
                tried=tried,
                slack_s=self.affinity_slack_s,
            )
        if order and request_id is not None and model:
            self.placements.reserve(request_id, order[0], model, class_name, now)
        return [[by_name[name]] for name in order]

    def on_request_routed(
        self,
        pending_request: PendingRequest,
        replica_id: ReplicaID,
        result: Any,
    ) -> None:
        request_id = _request_id(pending_request)
        if request_id is None:
            return
        self.placements.confirm(request_id, replica_name(replica_id), time.time())

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        # Serve calls this for every request it sent, also for one a replica
        # refused or that failed before it was routed: a reservation still
        # pending then was never a placement.
        # The calls made while serving one request share its id (the ingress
        # tries the next replica after a 429): release only this replica's.
        self.placements.release(str(internal_request_id), replica_name(replica_id))
