"""The KV snapshot pool: saved KV slot states, bounded, least recently used out.

docs/design.md §4.9. When a generation is preempted, the
worker copies its KV slot's state out of llama.cpp (``llama_state_seq_*``:
the KV cells of its sequence id, ~23 KB a token on SmolLM2-135M) into this
pool, once its slot is needed by another generation (``engine/kv_slots.py``),
with the exact tokens it covers and what the generation sent for each of its
output tokens. A resume (the same prompt + the partial output as
``resume_text``) restores the state and continues decoding without evaluating
prompt and partial output again. A long context about to be overwritten is
kept too (a "prefix" snapshot), so an agent that repeats a long system prompt
finds it again.

The pool is bounded in bytes of state (default 512 MiB): adding past the bound
drops the states of the least recently used snapshots (their tokens stay: a
resume then re-evaluates the EXACT tokens of the preempted run, which
re-tokenizing the text would not always give back). Snapshots belong to a
model (its id and load options): a swap keeps the pool, and a snapshot is only
ever restored into the model it came from.
"""

from __future__ import annotations

import ctypes
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tierlm.runners.llama_cpp.model.capacity import DEFAULT_KV_POOL_BYTES
from tierlm.runners.llama_cpp.wire.messages import PoolStats

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "KvPool",
    "Snapshot",
    "load_slot_state",
    "save_slot_state",
]

logger = logging.getLogger("tierlm.runners.llama_cpp")

# Snapshots whose state was dropped still hold their tokens (4 bytes each):
# kept for exact re-evaluation, up to this many.
MAX_SNAPSHOTS = 256


@dataclass(eq=False, slots=True)
class Snapshot:
    """A generation's exact tokens, and (while the pool keeps it) its KV state."""

    model_key: str
    kind: Literal["preempted", "prefix"]
    tokens: list[int]
    """Prompt tokens, then output tokens."""
    n_prompt: int
    prompt_text: str = ""
    """The text the prompt tokens came from (preempted snapshots)."""
    segments: list[tuple[int, str, bool]] = field(default_factory=list)
    """The output, as (tokens, text sent, clean): clean when everything those
    tokens decoded to had been sent (no text held back for a stop string or
    an unfinished UTF-8 character)."""
    state: bytearray | None = None
    n_state: int = 0
    """Leading ``tokens`` whose KV the state holds."""

    def tokens_for(self, resume_text: str) -> int | None:
        """How many leading tokens are exactly prompt + ``resume_text``."""
        n, text = self.n_prompt, ""
        if not resume_text:
            return n
        for count, piece, clean in self.segments:
            n += count
            text += piece
            if clean and text == resume_text:
                return n
            if len(text) >= len(resume_text) or not resume_text.startswith(text):
                return None
        return None


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class KvPool:
    """Snapshots by recency; states within ``limit_bytes``."""

    def __init__(self, limit_bytes: int = DEFAULT_KV_POOL_BYTES) -> None:
        if limit_bytes < 0:
            raise ValueError(f"kv_pool_bytes: must be >= 0, got {limit_bytes}")
        self.limit_bytes = limit_bytes
        self._snapshots: OrderedDict[int, Snapshot] = OrderedDict()
        self._state_bytes = 0
        self._saved = self._restored = self._evicted = 0

    def stats(self) -> PoolStats:
        states = sum(1 for s in self._snapshots.values() if s.state is not None)
        return PoolStats(
            self.limit_bytes,
            self._state_bytes,
            states,
            len(self._snapshots),
            self._saved,
            self._restored,
            self._evicted,
        )

    def add(self, snapshot: Snapshot) -> None:
        """Keep ``snapshot`` (most recent), dropping old states to fit."""
        size = len(snapshot.state) if snapshot.state is not None else 0
        if size > self.limit_bytes:
            snapshot.state, snapshot.n_state, size = None, 0, 0  # never fits: tokens only
        self._snapshots[id(snapshot)] = snapshot
        if size:
            self._saved += 1
            self._state_bytes += size
            for old in list(self._snapshots.values()):
                if self._state_bytes <= self.limit_bytes:
                    break
                if old is not snapshot and old.state is not None:
                    self._drop_state(old)
                    self._evicted += 1
        while len(self._snapshots) > MAX_SNAPSHOTS:
            self.remove(next(iter(self._snapshots.values())))

    def _drop_state(self, snapshot: Snapshot) -> None:
        if snapshot.state is not None:
            self._state_bytes -= len(snapshot.state)
            snapshot.state, snapshot.n_state = None, 0

    def remove(self, snapshot: Snapshot) -> None:
        self._drop_state(snapshot)
        self._snapshots.pop(id(snapshot), None)

    def touch(self, snapshot: Snapshot) -> None:
        self._snapshots.move_to_end(id(snapshot))

    def find_resume(
        self, model_key: str, prompt_text: str, resume_text: str
    ) -> tuple[Snapshot, int] | None:
        """The newest preempted snapshot of this prompt whose output starts
        with exactly ``resume_text``, and how many tokens that is."""
        for snapshot in reversed(self._snapshots.values()):
            if (
                snapshot.kind == "preempted"
                and snapshot.model_key == model_key
                and snapshot.prompt_text == prompt_text
            ):
                n = snapshot.tokens_for(resume_text)
                if n is not None:
                    return snapshot, n
        return None

    def best_prefix(self, model_key: str, tokens: Sequence[int]) -> tuple[Snapshot, int] | None:
        """The snapshot with a state sharing the longest prefix with ``tokens``."""
        best: tuple[Snapshot, int] | None = None
        for snapshot in self._snapshots.values():
            if snapshot.state is None or snapshot.model_key != model_key:
                continue
            n = min(common_prefix(snapshot.tokens, tokens), snapshot.n_state)
            if n > 0 and (best is None or n > best[1]):
                best = (snapshot, n)
        return best

    def covers(self, model_key: str, tokens: Sequence[int]) -> bool:
        """Does a state already hold (nearly) all of ``tokens``?"""
        found = self.best_prefix(model_key, tokens)
        return found is not None and found[1] >= 0.9 * len(tokens)

    def note_restored(self) -> None:
        self._restored += 1


def save_slot_state(ctx: Any, slot: int) -> bytearray | None:
    """KV slot ``slot``'s state (llama.cpp's ``seq_id``), or None if llama.cpp
    copied nothing."""
    import llama_cpp

    size = llama_cpp.llama_state_seq_get_size(ctx, slot)
    buffer = bytearray(size)
    view = (ctypes.c_uint8 * size).from_buffer(buffer)
    written = llama_cpp.llama_state_seq_get_data(ctx, view, size, slot)
    del view
    if written == 0:
        return None
    del buffer[written:]
    return buffer


def load_slot_state(ctx: Any, slot: int, state: bytearray) -> bool:
    """Put ``state`` in KV slot ``slot`` (emptied first); False, and the
    slot left empty, if llama.cpp read nothing."""
    import llama_cpp

    memory = llama_cpp.llama_get_memory(ctx)
    llama_cpp.llama_memory_seq_rm(memory, slot, -1, -1)
    view = (ctypes.c_uint8 * len(state)).from_buffer(state)
    read = llama_cpp.llama_state_seq_set_data(ctx, view, len(state), slot)
    del view
    if read == 0:
        llama_cpp.llama_memory_seq_rm(memory, slot, -1, -1)
        return False
    return True
