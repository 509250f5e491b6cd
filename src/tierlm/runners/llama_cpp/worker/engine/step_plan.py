"""One decode step's plan, as a pure function (docs/design.md §4.7 (the step plan)).

vLLM v1's scheduler answers each step with one ``SchedulerOutput``; llama.cpp's
server fills one batch per step from its slots. Here ``plan_step`` answers,
from what the engine knows of each running generation (``SlotState``), which
slots decode a token this step, which prompt chunks are evaluated and in what
order, and which slots end because their context is full (``StepPlan``). The
engine (``batch.py``) only executes it, so the rules are testable without
llama.cpp:

- every slot that is decoding and within its run-ahead bound decodes one
  token (stall-free: a prompt never pauses the running streams, as
  Sarathi-Serve's and vLLM v1's token budgets);
- the step's prompt budget (``chunk`` tokens, within ``n_batch``, while any
  slot decodes; the whole ``n_batch`` when none does: no stream to keep
  flowing, and prompts that arrive together, as llama-server's, are read in
  one step, not one chunk a step) goes to a person's prompts first (T0, T1:
  what a person waits for is their first token), then background prompts,
  each group in admission order;
- rows go in slot order: with a KV stream per slot llama.cpp puts in one
  ubatch only slots whose ids follow each other (``split_equal``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["SlotState", "StepPlan", "plan_step"]


@dataclass(frozen=True, slots=True)
class SlotState:
    """What the step plan reads of one running generation."""

    slot: int
    """Its KV slot (``kv_slots.py``: llama.cpp's sequence id)."""
    admitted: int
    """Its place in admission order (earlier: smaller)."""
    person: bool
    """A person waits on it (T0 or T1): its prompt is evaluated first."""
    pending: int
    """Prompt tokens still to evaluate (0: it is decoding)."""
    may_step: bool
    """Decoding within its run-ahead bound (its reader keeps up)."""
    n_past: int
    """Positions its KV slot holds."""


@dataclass(frozen=True, slots=True)
class StepPlan:
    decode: tuple[int, ...] = ()
    """Slots that decode one token, in slot order."""
    prefill: tuple[tuple[int, int], ...] = ()
    """(slot, prompt tokens) evaluated, in order; a slot whose chunk is the
    rest of its prompt samples its first token this step."""
    context_full: tuple[int, ...] = ()
    """Slots that end: their context has no position left."""

    @property
    def tokens(self) -> int:
        return len(self.decode) + sum(n for _slot, n in self.prefill)


def plan_step(slots: Iterable[SlotState], *, n_batch: int, chunk: int, n_ctx: int) -> StepPlan:
    """The plan of the module docstring. ``n_batch``: the batch's rows;
    ``chunk``: prompt tokens a step may evaluate; ``n_ctx``: a slot's context."""
    decode: list[int] = []
    full: list[int] = []
    prompts: list[SlotState] = []
    for state in slots:
        if state.pending > 0:
            prompts.append(state)
        elif state.may_step:
            (full if state.n_past >= n_ctx else decode).append(state.slot)
    decode.sort()
    budget = min(chunk, n_batch - len(decode)) if decode else n_batch
    prefill: list[tuple[int, int]] = []
    for state in sorted(prompts, key=lambda s: (not s.person, s.admitted)):
        if budget <= 0:
            break
        take = min(budget, state.pending)
        prefill.append((state.slot, take))
        budget -= take
    return StepPlan(tuple(decode), tuple(prefill), tuple(sorted(full)))
