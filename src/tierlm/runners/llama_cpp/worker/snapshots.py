"""Which tokens a generation runs from.

docs/design.md §4.9. The text a model continues is the
prompt (or rendered chat) + ``resume_text``. A resume whose prompt and partial
output match a preempted snapshot takes that run's EXACT tokens (re-tokenizing
the text can split it differently, and then a greedy continuation differs);
otherwise the text is tokenized. Where their KV comes from (a KV slot's
own prefix, a snapshot of the pool) is ``engine/kv_slots.py``'s choice; a
preempted generation's tokens and what it sent for each (``TokenLog``) go to
the pool as its snapshot (``engine/batch.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from tierlm.runners.llama_cpp.worker.kv_pool import KvPool, Snapshot
    from tierlm.runners.llama_cpp.worker.loader import LoadedModel
    from tierlm.runners.requests import GenerationRequest

__all__ = ["MIN_GAIN", "MIN_STASH", "Plan", "TokenLog", "choose_tokens"]

MIN_GAIN = 32
"""Restore a snapshot only if it spares at least this many tokens of prompt
evaluation over the KV slot's own prefix (a restore copies the whole state)."""
MIN_STASH = 256
"""Keep a KV slot's KV in the pool before overwriting it when at least
this many of its tokens would be lost: a system prompt worth finding again."""


@dataclass(slots=True)
class Plan:
    """The tokens to generate from, and what the KV cache already holds of them."""

    tokens: list[int]
    prompt_tokens: int
    """Tokens of the prompt alone (before any resume text)."""
    prompt_text: str
    reused: int = 0
    """Leading tokens whose KV is in the context (not evaluated again)."""
    restored: int = 0
    """Of those, tokens restored from a snapshot."""
    resumed_from: Literal["", "snapshot", "tokens", "text"] = ""
    source: Snapshot | None = None
    """The preempted snapshot this resume continues."""
    carried: list[tuple[int, str, bool]] = field(default_factory=list)
    """The resume text's output segments (kept in the next snapshot)."""
    kv_seconds: float = 0.0
    """Spent placing it: keeping its KV slot's KV, restoring a snapshot's."""


def choose_tokens(model: LoadedModel, request: GenerationRequest, pool: KvPool | None) -> Plan:
    """The tokens ``request`` continues from (module docstring)."""
    resume = request.resume_text
    text, prompt = model.text.prompt_tokens(request)
    found = pool.find_resume(model.key, text, resume) if pool is not None and resume else None
    if found is not None:
        source, n = found
        carried: list[tuple[int, str, bool]] = []
        total = source.n_prompt
        for segment in source.segments:
            if total >= n:
                break
            carried.append(segment)
            total += segment[0]
        return Plan(
            source.tokens[:n], source.n_prompt, text, resumed_from="tokens", source=source,
            carried=carried,
        )  # fmt: skip
    if not resume:
        return Plan(prompt, len(prompt), text)
    _, tokens = model.text.prompt_tokens(request, resume)
    segment = (len(tokens) - len(prompt), resume, True)
    return Plan(tokens, len(prompt), text, resumed_from="text", carried=[segment])


class TokenLog:
    """The tokens a generation produced and what it sent for each: the exact
    tokens a resume continues from (its snapshot, ``engine/batch.py``)."""

    __slots__ = ("clean", "pieces", "tokens")

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.pieces: list[str] = []
        self.clean: list[bool] = []
        """After token i, was everything it decoded sent? (False while text is
        held back for a possible stop string or an unfinished UTF-8 character.)"""
