"""Keeping the models persons use loaded through a rolling update or a scale-down.

A person's chat runs at once on a replica that holds its model, and pays a
swap anywhere else. In a steady fleet one replica holds the chat's model and
its scheduler keeps it there while the person may type again (docs/design.md
§4.8, holds). A rolling update or a scale-down stops that replica: Serve
stops routing to it, and the next chats swap on another replica, behind the
work under way there (docs/distributed.md: a chat's first token 4.1 s during a rollout
against 0.12 s steady). And a replica that Serve starts in its place holds
the first model or none, idle: the router gives it background work at once
(an idle replica is the best place for it), which swaps away the very model
persons are on.

So the ingress keeps a *keeper* for each model persons use (a person's chat
on it within the scheduler's ``chat_idle``, seen by this ingress or reported
by a replica, ``persons`` in its routing stats). A keeper is a replica asked
to hold the model (``TierlmReplica.keep``: it loads it if it does not hold
it, and says ``keeps`` in its routing stats while it holds it and the keep
lasts); the router sends it no background work of another model while
another replica can take it (``demoted``), and the ingress's mover moves no
such work there. A model gets a keeper, looked at every ``KEEP_PERIOD_S``:

- when **no replica holds it** (its holder left the fleet, or drains): the
  idle replica best placed (a new one first, then one holding nothing, not
  one holding another model persons use); none idle: the next look tries
  again (an idle device's swap costs nobody, a busy one's costs its queue
  twice: there and back, as its own scheduler returns to its work);
- while **the fleet changes** (a replica drained, as an update stops one,
  in the last ``CHANGING_S``; a replica killed is replaced by a peer, not
  a successor; or replicas of two generations run: a rolling update
  replaces them one by one; each replica reports its ``generation``, a hash
  of the arguments it was deployed with, so an ingress that started in the
  middle of the update knows it too) and only old replicas hold it: a
  replica that joined since (a new one), idle or holding the model
  already. So the copy on the new replica exists before the old holder
  stops, and no chat waits for a swap then.

- in a **steady** fleet, the replica holding it (its own scheduler holds it
  while the person may type again, docs/design.md §4.8, but only until
  it has idled a few swaps' worth with another model's work queued there:
  the router sent that work to it as an idle replica); of several, the one
  a rolling update stops last (Serve stops the oldest first: its
  controller's order, else ``stop_order``). And a steady keep moves there
  when it can at no one's cost: the replica an update stops last, if
  later than the keeper, is asked too when it holds the model or has
  nothing queued (holding no model persons use, nor one an operator
  loaded: ``operator_model`` in its stats), and the old keeper is
  released once it has the model loaded. So with Serve's default
  rollout (an old replica stopped before its successor starts) the holder
  is stopped last, when new replicas run: one of them keeps the model
  first.

While the fleet changes, a model kept only by old replicas gets a new
keeper too (two for a while). A keep lasts ``chat_idle`` past the person's
last chat (renewed while they chat); the keeper's scheduler keeps its own
rules (a person's chat on another model still swaps it).
Pure: the stats and the clock are arguments (Unix seconds, the stats' clock).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tierlm.cluster import STALE_AFTER, View, views
from tierlm.cluster.stats import DEFAULT_CHAT_CLASSES
from tierlm.ray.affinity import wait_s

__all__ = [
    "ASK_AGAIN_S",
    "CHANGING_PERIOD_S",
    "CHANGING_S",
    "KEEP_PERIOD_S",
    "QUIET_PERIOD_S",
    "Keep",
    "Keeper",
    "demoted",
    "keeper_first",
    "keeps_of",
    "new_replicas",
    "stop_order",
]

KEEP_PERIOD_S = 1.0
"""Seconds between two looks at the fleet while persons use a model."""
CHANGING_PERIOD_S = 0.5
"""The same while the fleet changes: a new replica is idle for the router's
next stats poll, and should be the keeper before that."""
QUIET_PERIOD_S = 5.0
"""Seconds between two looks while none does (a replica may report one)."""
CHANGING_S = 600.0
"""After a replica left the fleet, how long the fleet counts as changing (a
rolling update replaces its replicas one or a few at a time, each start
taking up to minutes)."""
ASK_AGAIN_S = 10.0
"""A keeper asked and not yet showing ``keeps`` is asked again after this."""


@dataclass(frozen=True, slots=True)
class Keep:
    """Ask ``replica`` to hold ``model`` for ``for_s`` seconds."""

    replica: str
    model: str
    for_s: float


def keeps_of(stats: Mapping[str, Any] | None) -> str | None:
    """The model a replica keeps for persons, by its routing stats."""
    if not stats:
        return None
    kept = stats.get("keeps")
    return str(kept) if kept else None


def demoted(
    stats: Mapping[str, Mapping[str, Any] | None],
    keeping: Mapping[str, str],
    model: str,
    class_name: str,
    persons: Collection[str] = (),
) -> set[str]:
    """The replicas a request of ``model`` and ``class_name`` should go to
    only after the others: keepers of another model persons use (by their
    stats, or ``keeping``: the ingress's, replica -> model, asked but maybe
    not polled yet), and idle replicas holding another of ``persons``' models
    while none keeps it (a replica Serve just started holds the first model,
    and is idle: the keeper asks it a moment later). While two generations
    run (``new_replicas``: a rolling update), the copy that matters is the
    new replicas' (the old ones are stopping): an idle new replica holding a
    persons' model is held back until a new replica keeps it, and an old
    keeper is free once a new replica holds its model. A chat goes anywhere:
    it is a person's."""
    chat_classes: frozenset[str] = frozenset(DEFAULT_CHAT_CLASSES)
    for s in stats.values():
        if s and s.get("chat_classes"):
            chat_classes = frozenset(str(c) for c in s["chat_classes"])
            break
    if class_name in chat_classes:
        return set()
    new = new_replicas(stats)
    keepers = dict(keeping)
    for name, s in stats.items():
        kept = keeps_of(s)
        if kept is not None:
            keepers[name] = kept
    kept_models = set(keepers.values())
    kept_new = {m for n, m in keepers.items() if n in new}
    loaded_new = {
        str(s.get("loaded_model"))
        for n, s in stats.items()
        if n in new and s and s.get("swapping_to") is None and s.get("loaded_model")
    }
    out = {
        name
        for name, kept in keepers.items()
        if kept != model and not (new and name not in new and kept in loaded_new)
    }
    for name, s in stats.items():
        if s and persons and not s.get("busy") and not s.get("queued_by_class"):
            held = s.get("swapping_to") or s.get("loaded_model")
            if held == model or held not in persons:
                continue
            # Until a keeper of it exists (a new one, in an update): then
            # the other holders are free.
            if held not in (kept_new if name in new else kept_models):
                out.add(name)
    return out


def keeper_first(
    order: Sequence[str],
    every: Mapping[str, View],
    keepers: Mapping[str, str],
    model: str,
    class_name: str,
    now: float,
    *,
    tried: Collection[str] = (),
    stale_after: float = STALE_AFTER,
) -> list[str]:
    """``order`` (the ranking's, best first) with the replica keeping
    ``model`` first for a chat on it (``keepers``: replica -> the model it
    keeps), while the chat waits there at most one chat run longer than on
    the best replica. Another replica holding the model is free to take
    other models' work (``demoted``), and may have taken some already,
    placed by another ingress or its mover since the stats: a chat sent
    there then waits for two swaps. The keeper keeps the model for persons.
    Only a keeper that holds (or loads) the model: the ingress's list may
    name one asked a moment ago, or one whose keep ended (its scheduler, or
    an admin load, swapped the model away)."""
    out = list(order)
    if not out:
        return out
    chosen = [
        every[n]
        for n in out
        if keepers.get(n) == model
        and n not in tried
        and n in every
        and every[n].model == model  # an ask not yet done, or a keep since ended: not it
        and every[n].is_chat(class_name)
        and every[n].fresh(now, stale_after)
        and not every[n].draining
        and class_name not in every[n].full
    ]
    best = every.get(out[0])
    if not chosen or best is None:
        return out
    keeper = min(chosen, key=lambda v: wait_s(v, model, class_name))
    if wait_s(keeper, model, class_name) > wait_s(best, model, class_name) + keeper.chat_run_s:
        return out
    out.remove(keeper.name)
    return [keeper.name, *out]


def stop_order(stats: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    """The replicas in the order a rolling update stops them, first first,
    when Serve's controller does not say (``tierlm.ray.keep_loop``): Serve
    2.60 stops the old version's running replicas in the order they came to
    run, about the order their constructors ended (``born`` in their stats;
    two that end within one of the controller's loops come in the order it
    started them). A replica that does not say comes first."""

    def born(name: str) -> float:
        s = stats.get(name) or {}
        value = s.get("born")
        return float(value) if isinstance(value, (int, float)) else -float("inf")

    return sorted(stats, key=lambda n: (born(n), n))


def new_replicas(stats: Mapping[str, Mapping[str, Any] | None]) -> set[str]:
    """The replicas of a newer generation than the oldest replica's (by
    ``up_s``), by their stats: none unless two generations run."""
    generations = {n: s.get("generation") for n, s in stats.items() if s}
    if len(set(generations.values())) < 2:
        return set()
    oldest = max(generations, key=lambda n: (float((stats[n] or {}).get("up_s") or 0.0), n))
    return {n for n, g in generations.items() if g != generations[oldest]}


class Keeper:
    """The ingress's keepers of persons' models, look after look (module
    docstring). ``keep_for_s``: how long after a person's last chat the model
    counts as in use (the scheduler's ``chat_idle``)."""

    def __init__(self, keep_for_s: float = 60.0, stale_after: float = STALE_AFTER) -> None:
        self.keep_for_s = keep_for_s
        self.stale_after = stale_after
        self.last_chat: dict[str, float] = {}
        """Model -> when a person's chat on it last came (Unix seconds)."""
        self.seen: set[str] = set()
        self.new: set[str] = set()
        """Replicas first seen after the first look: started since."""
        self.looked = False
        self.left_at: float | None = None
        """When a replica last left the fleet (or began to drain)."""
        self.asked: dict[str, tuple[str, float]] = {}
        """Model -> the replica last asked to keep it, and when."""
        self.reserved: dict[str, str] = {}
        """Replica -> the model it keeps or was asked to (for the router)."""
        self.order: dict[str, int] = {}
        """Live replica -> its place in the order a rolling update stops them
        (Serve's list, else ``stop_order``) at the last look."""

    def chat(self, model: str, at: float) -> None:
        """A person's chat on ``model`` came at ``at``."""
        if at > self.last_chat.get(model, -float("inf")):
            self.last_chat[model] = at

    def in_use(self, now: float) -> dict[str, float]:
        """The models persons use now, with their last chat."""
        for model in [m for m, at in self.last_chat.items() if now - at > self.keep_for_s]:
            del self.last_chat[model]
        return dict(self.last_chat)

    def changing(self, now: float) -> bool:
        return self.left_at is not None and now - self.left_at <= CHANGING_S

    def period(self, now: float) -> float:
        """Seconds to the next look."""
        if not self.in_use(now):
            return QUIET_PERIOD_S
        return CHANGING_PERIOD_S if self.changing(now) else KEEP_PERIOD_S

    def look(
        self,
        stats: Mapping[str, Mapping[str, Any]],
        complete: bool,
        now: float,
        order: Sequence[str] | None = None,
    ) -> list[Keep]:
        """The keeps to ask for, given the routing stats of the replicas that
        answered; ``order``: the running replicas in the order a rolling
        update stops them, as Serve's controller lists them (None: by their
        ``born``, ``stop_order``); ``complete``: every running replica answered (a missing one
        then left the fleet; otherwise it may just be slow)."""
        for s in stats.values():
            for model, age in dict(s.get("persons") or {}).items():
                self.chat(str(model), now - float(age))
        every = views(stats)
        gone = self.seen - set(stats) if complete else set()
        # An update stops replicas by draining them; a replica that is gone
        # without draining crashed or was killed, and its replacement is a
        # peer, not a successor: no reason to move a keep onto it.
        if any(v.draining for v in every.values()):
            self.left_at = now
        self.seen -= gone
        self.new -= gone
        if self.looked:
            self.new |= set(stats) - self.seen
        self.seen |= set(stats)
        self.looked = True
        # Two generations at once: a rolling update under way, whatever this
        # ingress saw (it may have started in the middle of it): the replicas
        # not of the oldest replica's generation are the new ones.
        newer = new_replicas(stats)
        if newer:
            self.left_at = now
            self.new |= newer
        live = {n: v for n, v in every.items() if v.fresh(now, self.stale_after) and not v.draining}
        in_use = self.in_use(now)
        self.reserved = {}
        keepers: dict[str, list[str]] = {}
        for name in sorted(live):
            kept = keeps_of(stats[name])
            if kept is not None and live[name].model == kept:
                keepers.setdefault(kept, []).append(name)
                self.reserved[name] = kept
        changing = self.changing(now)
        listed = [n for n in order or () if n in live]
        by_born = stop_order({n: stats[n] for n in live if n not in listed})
        known = listed + [n for n in by_born if isinstance(stats[n].get("born"), (int, float))]
        self.order = {n: i for i, n in enumerate(known)}
        out: list[Keep] = []
        for model in sorted(in_use, key=lambda m: (-in_use[m], m)):
            for_s = in_use[model] + self.keep_for_s - now
            kept_on = keepers.get(model, [])
            last = None if changing or not kept_on else self._last(model, live, stats, in_use)
            if last in kept_on and live[last].loaded_model == model:
                # The replica an update stops last holds it: the others are free.
                for keeper in kept_on:
                    if keeper != last:
                        out.append(Keep(keeper, model, 0.0))
                        del self.reserved[keeper]
                kept_on = [last]
            for keeper in kept_on:
                left = float(stats[keeper].get("keep_left_s") or 0.0)
                if for_s > left + self.keep_for_s / 2:  # the person chats on: renew
                    out.append(Keep(keeper, model, for_s))
            if last is not None and last not in kept_on and self._may_ask(model, last, now):
                # Steady, kept, but not on the replica an update stops last: a
                # copy there too (it holds the model, or has nothing queued).
                out.append(Keep(last, model, for_s))
                self.asked[model] = (last, now)
                self.reserved[last] = model
                continue
            if kept_on and (not changing or any(n in self.new for n in kept_on)):
                continue  # kept, and by a new replica if the fleet changes
            asked = self.asked.get(model)
            if asked is not None and asked[0] in live and now - asked[1] < ASK_AGAIN_S:
                self.reserved.setdefault(asked[0], model)
                continue
            chosen = self._choose(model, live, stats, in_use, now)
            if chosen is not None:
                out.append(Keep(chosen, model, for_s))
                self.asked[model] = (chosen, now)
                self.reserved[chosen] = model
        return out

    def _may_ask(self, model: str, replica: str, now: float) -> bool:
        asked = self.asked.get(model)
        return asked is None or asked[0] != replica or now - asked[1] >= ASK_AGAIN_S

    def _last(
        self,
        model: str,
        live: Mapping[str, View],
        stats: Mapping[str, Mapping[str, Any]],
        in_use: Mapping[str, float],
    ) -> str | None:
        """Of the replicas that may keep ``model`` at no one's cost now (they
        hold it, or have nothing queued, nor another model persons use, nor
        a model an operator loaded: a job under way ends first, then the
        load, and the router sends them no other model's work meanwhile),
        the one a rolling update stops last; None if that is no later than
        a replica keeping it now."""
        fit = [
            n
            for n, v in live.items()
            if self.reserved.get(n, model) == model
            and keeps_of(stats[n]) in (None, model)
            and stats[n].get("operator_model") in (None, model)
            and (
                v.model == model
                or (not v.queued and v.swapping_to is None and v.model not in in_use)
            )
        ]
        if not fit:
            return None
        last = max(fit, key=lambda n: self.order.get(n, -1))
        if last not in self.order:  # replicas that do not say when they started
            return None
        kept = [self.order.get(n, -1) for n in fit if keeps_of(stats[n]) == model]
        if kept and self.order.get(last, -1) <= max(kept):
            return last if keeps_of(stats[last]) == model else None
        return last

    def _choose(
        self,
        model: str,
        live: Mapping[str, View],
        stats: Mapping[str, Mapping[str, Any]],
        in_use: Mapping[str, float],
        now: float,
    ) -> str | None:
        """The replica to keep ``model`` on now, or None (module docstring)."""
        free = {
            n: v
            for n, v in live.items()
            if n not in self.reserved
            and keeps_of(stats[n]) is None
            and (v.model == model or v.model not in in_use)
        }
        holders = [n for n, v in live.items() if v.model == model]
        last = self.order.get  # the later a rolling update stops it, the better
        if holders:
            if not self.changing(now):  # steady: the holder keeps it
                steady = [n for n in holders if n in free]
                return min(steady, key=lambda n: (-last(n, -1), not live[n].idle, n), default=None)
            # Only a new replica: a copy there outlives the old holders.
            new_holders = sorted(n for n in holders if n in self.new and n in free)
            if new_holders:
                return new_holders[0]
            pool = [n for n, v in free.items() if n in self.new and v.idle]
        else:
            pool = [n for n, v in free.items() if v.idle]
        if not pool:
            return None
        return min(
            pool,
            key=lambda n: (
                live[n].model != model,
                n not in self.new,
                live[n].model is not None,
                -last(n, -1),
                n,
            ),
        )
