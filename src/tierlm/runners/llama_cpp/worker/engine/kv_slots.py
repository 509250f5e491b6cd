"""Which KV slot a new generation takes, and where its KV comes from.

docs/design.md §1.6. A KV slot (a ``KvSlot``) is one of
the context's ``slots`` KV streams: llama.cpp's sequence id, the ``seq_id``
argument of its ``llama_memory_seq_*`` and ``llama_state_seq_*`` calls, the
only place that name stays (not llama.cpp's "cell", which is one KV
position). A slot keeps the KV of what ran in it last. A new generation takes
the free slot that keeps the running slots consecutive (llama.cpp puts only
consecutive ids in one ubatch), then its own paused KV, the longest shared
prefix (llama-server's slot prompt cache), the least recently used. It is the
worker's choice, not the runner's slot of the control block (``Generate.slot``,
often another number). What a slot held before is not lost when it is
reused: a paused generation's KV moves to the snapshot pool
(``kv_pool.py``), and so does a finished one's long history (a prefix
snapshot, as the one-sequence worker keeps, so a conversation's next turn
restores it rather than evaluating it again).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tierlm.runners.llama_cpp.worker import snapshots
from tierlm.runners.llama_cpp.worker.kv_pool import (
    Snapshot,
    common_prefix,
    load_slot_state,
    save_slot_state,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from tierlm.runners.llama_cpp.wire.faults import FaultInjection
    from tierlm.runners.llama_cpp.worker.kv_pool import KvPool

__all__ = ["KvSlot", "KvSlots", "runs"]


def runs(ids: set[int]) -> int:
    """How many stretches of consecutive slots ``ids`` makes: the ubatches
    llama.cpp splits a step of those slots into."""
    return sum(1 for i in ids if i - 1 not in ids)


@dataclass(slots=True)
class KvSlot:
    """One KV slot: the tokens its KV holds (positions 0..n-1)."""

    tokens: list[int] = field(default_factory=list)
    busy: bool = False
    used: int = 0
    """The step it was last released at (least recently used goes first)."""
    paused: Snapshot | None = None
    """The preempted generation this KV belongs to, until it resumes here."""


class KvSlots:
    """The KV slots of one context and the KV each holds."""

    def __init__(
        self,
        ctx: Any,
        model_key: str,
        slots: int,
        pool: KvPool,
        fault: Callable[[], FaultInjection | None] = lambda: None,
    ) -> None:
        import llama_cpp

        self._ctx = ctx
        self._fault = fault
        """The ``restore`` fault point (``wire/faults.py``, tests only)."""
        self._mem = llama_cpp.llama_get_memory(ctx)
        self._key = model_key
        self._pool = pool
        self._slots = [KvSlot() for _ in range(slots)]
        llama_cpp.llama_memory_clear(self._mem, True)  # the probe's tokens are no slot's

    def __getitem__(self, slot: int) -> KvSlot:
        return self._slots[slot]

    def place(self, plan: snapshots.Plan) -> tuple[int, int]:
        """Take a free KV slot for ``plan`` (one exists: the runner runs at
        most ``slots`` generations); return it and how many of its tokens it
        holds."""
        import llama_cpp

        tokens = plan.tokens
        free = [i for i, kv_slot in enumerate(self._slots) if not kv_slot.busy]
        shared = {i: common_prefix(self._slots[i].tokens, tokens) for i in free}
        busy = {i for i, kv_slot in enumerate(self._slots) if kv_slot.busy}
        own = next((i for i in free if self._slots[i].paused is plan.source), None)
        pooled = self._pool.limit_bytes > 0
        # Its own paused KV first where the pool cannot carry it to another
        # slot; then consecutive slots (``runs``: each gap costs a pass over the
        # weights every step); a paused generation's KV is kept while any
        # other slot is free (its resume comes back for it); then the longest
        # prefix, then the LRU.
        slot = max(
            free,
            key=lambda i: (
                not pooled and i == own,
                -runs(busy | {i}),
                self._slots[i].paused in (None, plan.source),
                shared[i],
                -self._slots[i].used,
            ),
        )
        if own is not None and own != slot:
            # Its own KV waits in another slot: through the pool to this one.
            self._move_out(own)
            self._slots[own].paused = None
        kv_slot, reused = self._slots[slot], shared[slot]
        if kv_slot.paused is not None and kv_slot.paused is not plan.source:
            self._move_out(slot)
        elif kv_slot.paused is None:
            self._stash(slot, reused)
        kv_slot.paused = None
        best = self._pool.best_prefix(self._key, tokens)
        # Its own paused KV comes back whatever it spares (a copy into one slot
        # costs less than evaluating a token); another's only past MIN_GAIN.
        if best is not None and best[1] >= reused + (
            1 if best[0] is plan.source else snapshots.MIN_GAIN
        ):
            restored = self._restore(slot, best[0])
            if restored:
                reused = plan.restored = min(best[1], len(kv_slot.tokens))
                plan.resumed_from = "snapshot" if best[0] is plan.source else plan.resumed_from
        if reused == len(tokens):
            reused -= 1  # the last token again, for its logits
        llama_cpp.llama_memory_seq_rm(self._mem, slot, reused, -1)
        del kv_slot.tokens[reused:]
        plan.reused = reused
        plan.restored = min(plan.restored, reused)
        kv_slot.busy = True
        return slot, reused

    def release(self, slot: int, step: int, paused: Snapshot | None, *, forget: bool) -> None:
        """The generation in ``slot`` ended at ``step``: its KV stays for whoever
        shares its prefix next (``paused``: for its own resume), or is dropped
        (``forget``: a full context, whose KV nobody can extend)."""
        kv_slot = self._slots[slot]
        kv_slot.busy, kv_slot.used, kv_slot.paused = False, step, paused
        if forget:
            import llama_cpp

            llama_cpp.llama_memory_seq_rm(self._mem, slot, -1, -1)
            kv_slot.tokens = []

    def save_paused(self, slot: int) -> int:
        """A generation paused in ``slot``: when no other slot is free (always, with
        one slot), the next generation takes this one, so its KV goes to the
        pool now (the preempted generation's stats say what it cost) rather
        than at that admission. Returns the bytes saved (0: none yet)."""
        if any(not kv_slot.busy for i, kv_slot in enumerate(self._slots) if i != slot):
            return 0
        snapshot = self._slots[slot].paused
        self._move_out(slot)
        return len(snapshot.state) if snapshot is not None and snapshot.state is not None else 0

    def clear(self) -> None:
        """Forget every slot's KV (after a failed decode: its state is unknown)."""
        import llama_cpp

        llama_cpp.llama_memory_clear(self._mem, True)
        for kv_slot in self._slots:
            kv_slot.tokens, kv_slot.busy, kv_slot.paused = [], False, None

    def _move_out(self, slot: int) -> None:
        """Copy a paused generation's KV into the pool before its slot is reused."""
        kv_slot = self._slots[slot]
        snapshot = kv_slot.paused
        if snapshot is None or self._pool.limit_bytes == 0 or not kv_slot.tokens:
            return
        if snapshot.state is not None:
            return  # moved already (``save_paused``); a paused KV does not change
        state = save_slot_state(self._ctx, slot)
        if state is not None:
            snapshot.state, snapshot.n_state = state, len(kv_slot.tokens)
            self._pool.add(snapshot)

    def _stash(self, slot: int, keep: int) -> None:
        """Keep a finished generation's KV in the pool before its slot is reused
        past its first ``keep`` tokens, where that loses at least MIN_STASH of
        them (a conversation's history: its next turn restores it rather than
        evaluating it again)."""
        tokens = self._slots[slot].tokens
        if (
            self._pool.limit_bytes == 0
            or len(tokens) - keep < snapshots.MIN_STASH
            or self._pool.covers(self._key, tokens)
        ):
            return
        state = save_slot_state(self._ctx, slot)
        if state is not None:
            n = len(tokens)
            self._pool.add(Snapshot(self._key, "prefix", list(tokens), n, state=state, n_state=n))

    def _restore(self, slot: int, snapshot: Snapshot) -> bool:
        assert snapshot.state is not None
        fault = self._fault()
        if fault is not None:
            fault.fire()
        kv_slot = self._slots[slot]
        kv_slot.tokens = []
        if not load_slot_state(self._ctx, slot, snapshot.state):
            self._pool.remove(snapshot)
            return False
        kv_slot.tokens = snapshot.tokens[: snapshot.n_state]
        self._pool.touch(snapshot)
        self._pool.note_restored()
        return True
