"""Persons served in turn (docs/design.md §4.2): the order among chats.

Chat is first come, first served per person, not across people: one user's
twenty queued messages must not delay nine others by twenty answers. Among
queued T0 jobs the producer served least recently goes first (one never served
first of all, by arrival), each producer's own messages in submit order. A
person who sends one message at a time is served as before; a person who
queues many is served one message per round.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterable

from tierlm.core.classes import Tier
from tierlm.core.jobs import Job

__all__ = ["REMEMBERED", "ChatTurns", "chat_order"]

REMEMBERED = 4096
"""Chat producers whose last turn is remembered, most recent kept: far more
people than one device can serve in a minute, and a bounded table whoever
invents producer ids. A forgotten producer counts as never served: it goes
first among those waiting, as a newcomer does."""


class ChatTurns:
    """When each chat producer was last served, as a turn number."""

    __slots__ = ("_served", "_turn", "remembered")

    def __init__(self, remembered: int = REMEMBERED) -> None:
        self._served: OrderedDict[str, int] = OrderedDict()
        self._turn = 0
        self.remembered = remembered

    def served(self, producer: str) -> None:
        """A chat of ``producer`` started: its turn is the newest."""
        self._turn += 1
        self._served[producer] = self._turn
        self._served.move_to_end(producer)
        while len(self._served) > self.remembered:
            self._served.popitem(last=False)

    def turn(self, producer: str) -> int:
        """The producer's last turn (0: never served, or forgotten)."""
        return self._served.get(producer, 0)

    @property
    def latest(self) -> int:
        return self._turn


def chat_order(jobs: Iterable[Job], turns: ChatTurns) -> dict[int, int]:
    """Queued T0 jobs in the order persons in turn serves them, start after
    start (for ``queue_order``): job id -> its place among them."""
    people: dict[str, list[int]] = {}
    for job in jobs:
        if job.task_class.tier == Tier.T0:
            people.setdefault(job.producer, []).append(job.id)
    heap = []
    for producer, ids in people.items():
        ids.sort()
        heap.append((turns.turn(producer), ids[0], producer))
    heapq.heapify(heap)
    order: dict[int, int] = {}
    taken = dict.fromkeys(people, 0)
    turn = turns.latest
    while heap:
        _turn, job_id, producer = heapq.heappop(heap)
        order[job_id] = len(order)
        taken[producer] += 1
        if taken[producer] < len(people[producer]):
            turn += 1  # served now: its next message waits for the others' turns
            heapq.heappush(heap, (turn, people[producer][taken[producer]], producer))
    return order
