"""The runner's slots: which of its ``slots`` each generation in flight holds.

docs/design.md §1.6. A generation's slot is its pair of
words in the control block (cancel, pieces taken: ``control.py``; the KV slot
the worker runs it in is the worker's own choice, ``kv_slots.py``); the worker
decodes at most ``slots`` generations at once, so a generation beyond them
waits here for a slot (the shell runs at most ``slots``: this only keeps a
direct caller of the runner within the bound).
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["Slots"]


class Slots:
    """The runner's ``slots``, handed out lowest first; waiters are served in order."""

    def __init__(self, slots: int) -> None:
        self._free = list(range(slots))
        self._waiters: deque[asyncio.Future[int]] = deque()
        self.held: dict[int, int] = {}
        """A generation's call id -> its slot, while it is in flight."""

    async def acquire(self, call_id: int) -> int:
        if self._free and not self._waiters:
            slot = min(self._free)
            self._free.remove(slot)
        else:
            waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                slot = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._give(waiter.result())
                raise
        self.held[call_id] = slot
        return slot

    def release(self, call_id: int) -> None:
        slot = self.held.pop(call_id, None)
        if slot is not None:
            self._give(slot)

    def _give(self, slot: int) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(slot)
                return
        self._free.append(slot)
