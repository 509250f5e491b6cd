"""Anticipatory holds (docs/design.md §4.8): keep the model a moment for the
producer whose job just ended, when it is likely to send the next at once.

An agent sends its next request the moment its last answer arrives; the
scheduler decides in the instant between. With work waiting on another model
and none queued on the loaded one, it swapped after every job: two such agents
on two models kept the device doing work a third of the time (121 swaps in
30 min, exactly FIFO). Iyer & Druschel's anticipatory scheduling (SOSP '01) is
the classic answer for disks: after a request completes, wait a bounded moment
for the same process's next one, when its history says it comes soon, rather
than seek away at once.

The bet here: a producer's think time (its job's end to its next submit on
the same model) is remembered; after its job ends, the device waits up to
twice that (at least ``MIN_HOLD``, for a client's round trip) and never more
than ``SWAP_SHARE`` of the swap it would avoid, so a lost bet costs at most
half a swap. A producer without history, one whose think time is too long to
wait for, or one that did not come back within its last hold gets none.
``max_affinity_wait`` still bounds what any other model's work waits (§4.8).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["MAX_PRODUCERS", "MIN_HOLD", "SWAP_SHARE", "Anticipation"]

MAX_PRODUCERS = 4096
"""Producer-model pairs remembered, least recently seen dropped first:
producer ids are the client's choice, so the memory must not be
(docs/design.md §1.8)."""

MIN_HOLD = 0.1
"""Seconds: a local client's round trip and its own processing between an
answer and the next request (milliseconds), with room to spare."""
SWAP_SHARE = 0.5
"""Of the swap an anticipatory hold avoids, the most it may idle the device:
a lost bet then costs half a swap, a won one saves a whole one."""


@dataclass(slots=True)
class _Ended:
    producer: str
    model_id: str
    at: float


class Anticipation:
    """Each producer's think time per model, and the job that just ended."""

    __slots__ = ("_ended", "_last_end", "_think")

    def __init__(self) -> None:
        self._last_end: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._think: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._ended: _Ended | None = None

    @staticmethod
    def _keep(
        table: OrderedDict[tuple[str, str], float], key: tuple[str, str], value: float
    ) -> None:
        table[key] = value
        table.move_to_end(key)
        if len(table) > MAX_PRODUCERS:
            table.popitem(last=False)

    def ended(self, producer: str, model_id: str, now: float) -> None:
        """A job of ``producer`` on ``model_id`` finished (not a preemption)."""
        self._keep(self._last_end, (producer, model_id), now)
        self._ended = _Ended(producer, model_id, now)

    def returned(self, producer: str, model_id: str) -> None:
        """A job of ``producer`` went back to the queue (preempted): its end
        was no end, and no think time follows it."""
        self._last_end.pop((producer, model_id), None)
        ended = self._ended
        if ended is not None and ended.producer == producer and ended.model_id == model_id:
            self._ended = None

    def submitted(self, producer: str, model_id: str, now: float) -> None:
        """``producer`` sent a job for ``model_id``: its think time, if it had
        one there before, is how long after that one's end."""
        key = (producer, model_id)
        last = self._last_end.pop(key, None)
        if last is not None:
            self._keep(self._think, key, now - last)
        ended = self._ended
        if ended is not None and ended.producer == producer and ended.model_id == model_id:
            self._ended = None  # it came back: the hold is over

    def next_job_hold(self, now: float) -> tuple[str, float] | None:
        """(the producer, until when) to keep a free slot for the pool producer
        whose job just ended mid-turn, when it sends its next within a round
        trip (docs/design.md §4.4 (turns)); None when it does not."""
        ended = self._ended
        if ended is None:
            return None
        think = self._think.get((ended.producer, ended.model_id))
        if think is None or 2 * think > MIN_HOLD:
            return None
        end = ended.at + MIN_HOLD
        return (ended.producer, end) if now < end else None

    def holds_turn(
        self, producer: str, now: float, turn_left: Callable[[str, float], bool]
    ) -> float | None:
        """Until when a free slot waits for the pool producer whose job ended
        mid-turn rather than go to ``producer`` (docs/design.md §4.4 (turns)):
        one that sends its next within a round trip keeps its slot that long,
        rather than lose the rest of its turn in the instant between (an
        agent sending one job at a time lost it at every job). None: no hold."""
        found = self.next_job_hold(now)
        if found is None:
            return None
        holder, until = found
        if holder == producer or not turn_left(holder, now):
            return None
        return until

    def hold_end(self, now: float, loaded_model: str, swap_estimate: float) -> float | None:
        """Until when to keep ``loaded_model`` for the producer whose job just
        ended on it, rather than swap; None when no hold is worth it."""
        ended = self._ended
        if ended is None or ended.model_id != loaded_model:
            return None
        key = (ended.producer, ended.model_id)
        think = self._think.get(key)
        cap = SWAP_SHARE * swap_estimate
        if think is None or 2 * think > cap:
            return None  # no history, or it thinks too long to be worth waiting for
        hold = min(max(2 * think, MIN_HOLD), cap)
        end = ended.at + hold
        if now >= end:
            # The bet was lost: no more holds for it until it shows a short
            # think time again (its next submit measures a new one).
            self._think.pop(key, None)
            self._ended = None
            return None
        return end
