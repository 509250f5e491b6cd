"""Which sequence id a new generation takes, and where its KV comes from.

docs/design.md §1 runners, batched decode. A sequence id (a ``KvSeq``; not
llama.cpp's "cell", which is one KV position) keeps the KV of what ran in it
last. A new generation takes the free id that keeps the running ids
consecutive (llama.cpp puts only consecutive ids in one ubatch),
then its own paused KV, the longest shared prefix (llama-server's slot prompt
cache), the least recently used. What an id held before is not lost when it
is reused: a paused generation's KV moves to the snapshot pool
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
    load_seq_state,
    save_seq_state,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from tierlm.runners.llama_cpp.wire.faults import FaultInjection
    from tierlm.runners.llama_cpp.worker.kv_pool import KvPool

__all__ = ["KvSeq", "KvSeqs", "runs"]


def runs(ids: set[int]) -> int:
    """How many stretches of consecutive ids ``ids`` makes: the ubatches
    llama.cpp splits a step of those sequences into."""
    return sum(1 for i in ids if i - 1 not in ids)


@dataclass(slots=True)
class KvSeq:
    """One sequence id: the tokens its KV holds (positions 0..n-1)."""

    tokens: list[int] = field(default_factory=list)
    busy: bool = False
    used: int = 0
    """The step it was last released at (least recently used goes first)."""
    paused: Snapshot | None = None
    """The preempted generation this KV belongs to, until it resumes here."""


class KvSeqs:
    """The sequence ids of one context and the KV each holds."""

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
        self._kv_seqs = [KvSeq() for _ in range(slots)]
        llama_cpp.llama_memory_clear(self._mem, True)  # the probe's tokens are not a kv_seq's

    def __getitem__(self, seq: int) -> KvSeq:
        return self._kv_seqs[seq]

    def place(self, plan: snapshots.Plan) -> tuple[int, int]:
        """Take a free sequence id for ``plan`` (one exists: the runner runs at
        most ``slots`` generations); return it and how many of its tokens it
        holds."""
        import llama_cpp

        tokens = plan.tokens
        free = [i for i, kv_seq in enumerate(self._kv_seqs) if not kv_seq.busy]
        shared = {i: common_prefix(self._kv_seqs[i].tokens, tokens) for i in free}
        busy = {i for i, kv_seq in enumerate(self._kv_seqs) if kv_seq.busy}
        own = next((i for i in free if self._kv_seqs[i].paused is plan.source), None)
        pooled = self._pool.limit_bytes > 0
        # Its own paused KV first where the pool cannot carry it to another
        # id; then consecutive ids (``runs``: each gap costs a pass over the
        # weights every step); a paused generation's KV is kept while any
        # other id is free (its resume comes back for it); then the longest
        # prefix, then the LRU.
        seq = max(
            free,
            key=lambda i: (
                not pooled and i == own,
                -runs(busy | {i}),
                self._kv_seqs[i].paused in (None, plan.source),
                shared[i],
                -self._kv_seqs[i].used,
            ),
        )
        if own is not None and own != seq:
            # Its own KV waits in another id: through the pool to this one.
            self._move_out(own)
            self._kv_seqs[own].paused = None
        kv_seq, reused = self._kv_seqs[seq], shared[seq]
        if kv_seq.paused is not None and kv_seq.paused is not plan.source:
            self._move_out(seq)
        elif kv_seq.paused is None:
            self._stash(seq, reused)
        kv_seq.paused = None
        best = self._pool.best_prefix(self._key, tokens)
        # Its own paused KV comes back whatever it spares (a copy into one id
        # costs less than evaluating a token); another's only past MIN_GAIN.
        if best is not None and best[1] >= reused + (
            1 if best[0] is plan.source else snapshots.MIN_GAIN
        ):
            restored = self._restore(seq, best[0])
            if restored:
                reused = plan.restored = min(best[1], len(kv_seq.tokens))
                plan.resumed_from = "snapshot" if best[0] is plan.source else plan.resumed_from
        if reused == len(tokens):
            reused -= 1  # the last token again, for its logits
        llama_cpp.llama_memory_seq_rm(self._mem, seq, reused, -1)
        del kv_seq.tokens[reused:]
        plan.reused = reused
        plan.restored = min(plan.restored, reused)
        kv_seq.busy = True
        return seq, reused

    def release(self, seq: int, step: int, paused: Snapshot | None, *, forget: bool) -> None:
        """The generation in ``seq`` ended at ``step``: its KV stays for whoever
        shares its prefix next (``paused``: for its own resume), or is dropped
        (``forget``: a full context, whose KV nobody can extend)."""
        kv_seq = self._kv_seqs[seq]
        kv_seq.busy, kv_seq.used, kv_seq.paused = False, step, paused
        if forget:
            import llama_cpp

            llama_cpp.llama_memory_seq_rm(self._mem, seq, -1, -1)
            kv_seq.tokens = []

    def save_paused(self, seq: int) -> int:
        """A generation paused in ``seq``: when no other id is free (always, with
        one slot), the next generation takes this one, so its KV goes to the
        pool now (the preempted generation's stats say what it cost) rather
        than at that admission. Returns the bytes saved (0: none yet)."""
        if any(not kv_seq.busy for i, kv_seq in enumerate(self._kv_seqs) if i != seq):
            return 0
        snapshot = self._kv_seqs[seq].paused
        self._move_out(seq)
        return len(snapshot.state) if snapshot is not None and snapshot.state is not None else 0

    def clear(self) -> None:
        """Forget every kv_seq's KV (after a failed decode: its state is unknown)."""
        import llama_cpp

        llama_cpp.llama_memory_clear(self._mem, True)
        for kv_seq in self._kv_seqs:
            kv_seq.tokens, kv_seq.busy, kv_seq.paused = [], False, None

    def _move_out(self, seq: int) -> None:
        """Copy a paused generation's KV into the pool before its id is reused."""
        kv_seq = self._kv_seqs[seq]
        snapshot = kv_seq.paused
        if snapshot is None or self._pool.limit_bytes == 0 or not kv_seq.tokens:
            return
        if snapshot.state is not None:
            return  # moved already (``save_paused``); a paused KV does not change
        state = save_seq_state(self._ctx, seq)
        if state is not None:
            snapshot.state, snapshot.n_state = state, len(kv_seq.tokens)
            self._pool.add(snapshot)

    def _stash(self, seq: int, keep: int) -> None:
        """Keep a finished generation's KV in the pool before its id is reused
        past its first ``keep`` tokens, where that loses at least MIN_STASH of
        them (a conversation's history: its next turn restores it rather than
        evaluating it again)."""
        tokens = self._kv_seqs[seq].tokens
        if (
            self._pool.limit_bytes == 0
            or len(tokens) - keep < snapshots.MIN_STASH
            or self._pool.covers(self._key, tokens)
        ):
            return
        state = save_seq_state(self._ctx, seq)
        if state is not None:
            n = len(tokens)
            self._pool.add(Snapshot(self._key, "prefix", list(tokens), n, state=state, n_state=n))

    def _restore(self, seq: int, snapshot: Snapshot) -> bool:
        assert snapshot.state is not None
        fault = self._fault()
        if fault is not None:
            fault.fire()
        kv_seq = self._kv_seqs[seq]
        kv_seq.tokens = []
        if not load_seq_state(self._ctx, seq, snapshot.state):
            self._pool.remove(snapshot)
            return False
        kv_seq.tokens = snapshot.tokens[: snapshot.n_state]
        self._pool.touch(snapshot)
        self._pool.note_restored()
        return True
