"""The simulated device's KV snapshot pool: what a preempted sequence keeps.

Models the llama.cpp worker's pool (``runners/llama_cpp/worker/kv_pool.py``,
docs/design.md §4.9): per sequence, the tokens of its
context whose evaluation is kept, and whether their KV state is still in the
pool. States are bounded in bytes (``kv_bytes_per_token`` a token of context)
and evicted least recently saved first; an evicted state leaves its entry
behind, tokens only, as the real pool does: the resume then re-evaluates
them, and the simulator counts that as work redone. Entries are bounded in
number like the real pool's.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["KvEntry", "SequenceKey", "SimulatedKvPool"]

SequenceKey = tuple[str, str, str]
"""A sequence: model, prompt, and the output it holds so far."""

# As the llama.cpp worker's pool (kv_pool.MAX_SNAPSHOTS): entries whose
# state was dropped are kept for their tokens, up to this many.
MAX_ENTRIES = 256


@dataclass(slots=True)
class KvEntry:
    tokens: int
    """Leading tokens of the sequence's context whose evaluation is kept."""
    state: bool
    """Their KV state is in the pool (else only that they were evaluated)."""
    done: int
    """Leading tokens some run of the sequence evaluated and kept (>= ``tokens``
    after an eviction): evaluating them again redoes work."""


class SimulatedKvPool:
    """Entries by recency of saving; states within ``capacity`` bytes."""

    __slots__ = ("_entries", "bytes_per_token", "capacity", "used")

    def __init__(self, capacity: int, bytes_per_token: int) -> None:
        self.capacity = capacity
        self.bytes_per_token = bytes_per_token
        self.used = 0
        self._entries: OrderedDict[SequenceKey, KvEntry] = OrderedDict()

    def get(self, key: SequenceKey) -> KvEntry | None:
        return self._entries.get(key)

    def __contains__(self, key: SequenceKey) -> bool:
        """A state to restore for ``key``."""
        entry = self._entries.get(key)
        return entry is not None and entry.state

    def save(self, key: SequenceKey, tokens: int) -> None:
        """Keep the state of ``tokens`` evaluated tokens of ``key`` (most recent)."""
        previous = self._entries.get(key)
        done = max(tokens, previous.done) if previous is not None else tokens
        self.take(key)
        size = tokens * self.bytes_per_token
        state = tokens > 0 and size <= self.capacity
        if state:
            for old in self._entries.values():
                if self.used + size <= self.capacity:
                    break
                if old.state:
                    old.state = False
                    self.used -= old.tokens * self.bytes_per_token
            self.used += size
        self._entries[key] = KvEntry(tokens, state, done)
        while len(self._entries) > MAX_ENTRIES:
            self.take(next(iter(self._entries)))

    def take(self, key: SequenceKey) -> None:
        """Forget ``key`` (resumed and in the context again, or done)."""
        entry = self._entries.pop(key, None)
        if entry is not None and entry.state:
            self.used -= entry.tokens * self.bytes_per_token
