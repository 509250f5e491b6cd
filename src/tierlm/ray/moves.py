"""Which queued requests the ingress moves to another replica, and why.

A request queued on a replica stays there until that replica runs it, and
the router only places new requests. Two fleet changes leave queued work
where it waits longest (docs/distributed.md "Autoscaling"):

- **a rolling update or a scale-down**: Serve stops routing to a replica it
  stops, then waits for its requests, queued ones included, before it drains
  it; the queue runs out on the old replica while the new ones are idle;
- **a scale-out** (Serve's autoscaling): the new replicas start idle while
  the old one holds the burst that made Serve add them.

So the ingress looks at the replicas' routing stats every few seconds
(``MOVE_PERIOD_S``, by broadcast: any router) and moves a request that has
produced nothing yet when:

- its replica is gone from the fleet's replicas (stopping, or silent) for
  two looks in a row (``ABSENT_LOOKS``: one missed answer on a busy machine
  is no reason), or it drains;
- or another replica would start it sooner by more than ``MOVE_GAIN_S``, as
  the ranking judges a wait (``affinity.wait_s``; on its own replica the
  backlog but its own run, an upper bound: the ingress does not see queue
  positions),
  and its own replica is busy (an idle one is about to start it). Each move
  counts on the target and off the source, so one look does not send every
  request to one idle replica. A replica keeping a model persons use
  (``tierlm.ray.keeping``) takes no other model's work by a move, and such
  work queued on it (placed before it was asked to keep, or when no other
  replica could take it) moves to another that can.

A move places the request again (``exclude`` its replica: the router puts
that one last) and cancels it on the old replica only once another took it
and it still had not started there (``TierlmIngress``): nothing is lost, a
request that started meanwhile stays. Pure: the stats and the clock are
arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tierlm.cluster import STALE_AFTER, View, views
from tierlm.ray.affinity import wait_s
from tierlm.ray.keeping import demoted

__all__ = ["ABSENT_LOOKS", "MOVE_GAIN_S", "MOVE_PERIOD_S", "Mover", "Waiting"]

MOVE_PERIOD_S = 2.0
"""Seconds between two looks at the fleet while requests wait."""
ABSENT_LOOKS = 2
MOVE_GAIN_S = 2.0
"""A move must start the request at least this much sooner (a move costs a
round trip, and the estimate of the wait at home is an upper bound)."""


@dataclass(frozen=True, slots=True)
class Waiting:
    """A request the ingress placed that has produced nothing yet."""

    key: int
    replica: str
    model: str
    class_name: str


class Mover:
    """Chooses the moves, look after look (module docstring)."""

    def __init__(self, stale_after: float = STALE_AFTER) -> None:
        self.stale_after = stale_after
        self.absent: dict[str, int] = {}
        """Looks in a row a replica holding a waiting request was missing."""

    def choose(
        self,
        waiting: Sequence[Waiting],
        stats: Mapping[str, Mapping[str, Any]],
        now: float,
        keeping: Mapping[str, str] | None = None,
        persons: Sequence[str] = (),
    ) -> list[tuple[int, str]]:
        """The requests to move (their ``key``) and why, oldest first as
        given; ``stats`` are the routing stats of the replicas that answered,
        ``now`` on their clock; ``keeping``: the ingress's keepers (replica ->
        model), asked maybe after the stats were read; ``persons``: the
        models persons use (an idle replica holding one takes other work
        last, as with the router: ``keeping.demoted``)."""
        held = {w.replica for w in waiting}
        self.absent = {r: self.absent.get(r, 0) + 1 for r in held if r not in stats}
        if not stats:
            return []  # nobody answered: no judgement
        every = views(stats)
        open_ = {
            name: v
            for name, v in every.items()
            if v.fresh(now, self.stale_after) and not v.draining
        }
        moves: list[tuple[int, str]] = []
        for w in waiting:
            home = every.get(w.replica)
            if self.absent.get(w.replica, 0) >= ABSENT_LOOKS:
                moves.append((w.key, f"replica {w.replica} left the fleet or does not answer"))
                continue
            if home is None:
                continue
            if home.draining:
                moves.append((w.key, f"replica {w.replica} drains"))
                continue
            kept = demoted(stats, keeping or {}, w.model, w.class_name, persons)
            targets = [
                v
                for n, v in open_.items()
                if n != w.replica and w.class_name not in v.full and n not in kept
            ]
            if w.replica in kept and targets:
                # Its replica keeps a model persons use: run there, it would
                # swap it away (its scheduler does once it has idled a few
                # swaps' worth with this waiting).
                best = min(targets, key=lambda v: (wait_s(v, w.model, w.class_name), v.name))
                moves.append((w.key, f"replica {w.replica} keeps a model persons use"))
                best.add(w.model, w.class_name)
                _take(home, w.model, w.class_name)
                continue
            if not home.busy or not targets:
                continue  # about to start it, or nowhere better
            # Its own run is in its replica's backlog: not a wait of its own.
            here = max(0.0, wait_s(home, w.model, w.class_name) - home.run_of(w.class_name))
            best = min(targets, key=lambda v: (wait_s(v, w.model, w.class_name), v.name))
            there = wait_s(best, w.model, w.class_name)
            if there + MOVE_GAIN_S < here:
                moves.append((w.key, f"replica {best.name} starts it sooner ({there:.1f} s)"))
                best.add(w.model, w.class_name)
                _take(home, w.model, w.class_name)
        return moves


def _take(view: View, model: str, class_name: str) -> None:
    """Count a request moved away from ``view`` (``View.add``'s reverse)."""
    view.backlog_s = max(0.0, view.backlog_s - view.run_of(class_name))
    for counts, key in ((view.queued_by_class, class_name), (view.queued_by_model, model)):
        if counts.get(key, 0) > 0:
            counts[key] -= 1
    if view.is_chat(class_name) and view.chat_queued > 0:
        view.chat_queued -= 1
