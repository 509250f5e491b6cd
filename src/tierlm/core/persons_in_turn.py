"""Persons in turn (docs/design.md §4.2): the order among chats.

Chat is first come, first served per person, not across people: one user's
twenty queued messages must not delay nine others by twenty answers. Among
queued T0 jobs the person served least recently goes first (one never served
first of all, by arrival), each person's own messages in submit order. A
person who sends one message at a time is served as before; a person who
queues many is served one message per round.

A person is ``Job.chat_person``: ``(who,)`` (an API key, or a keyless
producer), or ``(who, name)``, a person an API key names. Named persons share
their key's turn: the key takes its turn among the others as one person does,
and its named persons take the key's turns in turn among themselves. So a
key that invents names gets no more turns than one person.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Iterable

from tierlm.core.classes import Tier
from tierlm.core.jobs import Job, Person

__all__ = ["REMEMBERED", "ChatTurns", "chat_order"]

REMEMBERED = 4096
"""Persons whose last turn is remembered (and as many keys), most recent
kept: far more people than one device can serve in a minute, and a bounded
table whoever invents names. A forgotten person counts as never served: it
goes first among those waiting, as a newcomer does."""


class ChatTurns:
    """When each person (and each key naming persons) was last served, as a
    turn number."""

    __slots__ = ("_served", "latest", "remembered")

    def __init__(self, remembered: int = REMEMBERED) -> None:
        self._served: OrderedDict[Person, int] = OrderedDict()
        self.latest = 0
        """The newest turn's number (read only outside): a cache of an
        answer that depends on the turns compares it (``ModelQueue.best``)."""
        self.remembered = remembered

    def served(self, person: Person) -> None:
        """A chat of ``person`` started: its turn is the newest, and its key's."""
        self.latest += 1
        for who in (person[:1], _own(person)):
            self._served[who] = self.latest
            self._served.move_to_end(who)
        while len(self._served) > 2 * self.remembered:
            self._served.popitem(last=False)

    def turn(self, person: Person) -> int:
        """The person's key's last turn (0: never served, or forgotten)."""
        return self._served.get(person[:1], 0)

    def rank(self, person: Person) -> tuple[int, int]:
        """Who goes first among waiting persons, least first: its key's last
        turn, then its own."""
        return self._served.get(person[:1], 0), self._served.get(_own(person), 0)


def _own(person: Person) -> Person:
    # Its own turn, apart from its key's: the key's unnamed requests are one
    # more person among the names, not behind them all.
    return person if len(person) > 1 else (*person, "")


def chat_order(jobs: Iterable[Job], turns: ChatTurns) -> dict[int, int]:
    """Queued T0 jobs in the order persons in turn serves them, start after
    start (for ``queue_order``): job id -> its place among them."""
    people: dict[Person, list[int]] = {}
    for job in jobs:
        if job.task_class.tier == Tier.T0:
            people.setdefault(job.chat_person, []).append(job.id)
    for ids in people.values():
        ids.sort()
    # A key's named persons take the key's turns in turn among themselves:
    # the key's jobs in that order, then the keys (and persons) in turn.
    keys: dict[Person, list[Person]] = {}
    for person in people:
        keys.setdefault(person[:1], []).append(person)
    lines = {
        key: _in_turn({p: people[p] for p in named}, turns.rank, turns.latest)
        for key, named in keys.items()
    }
    order = _in_turn(lines, lambda key: (turns.turn(key), 0), turns.latest)
    return {job_id: place for place, job_id in enumerate(order)}


def _in_turn(
    queues: dict[Person, list[int]], rank: Callable[[Person], tuple[int, int]], turn: int
) -> list[int]:
    """The job ids of ``queues`` (whose -> its job ids) served in turn: the
    least ``rank`` first, each one's next after the others' turns (``turn``:
    the latest so far)."""
    heap = [(rank(whose), min(ids), whose) for whose, ids in queues.items()]
    heapq.heapify(heap)
    order: list[int] = []
    taken = dict.fromkeys(queues, 0)
    while heap:
        _rank, job_id, whose = heapq.heappop(heap)
        order.append(job_id)
        taken[whose] += 1
        if taken[whose] < len(queues[whose]):
            turn += 1  # served now: its next waits for the others' turns
            heapq.heappush(heap, ((turn, turn), queues[whose][taken[whose]], whose))
    return order
