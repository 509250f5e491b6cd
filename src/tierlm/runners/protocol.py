"""The runner protocol: what every inference backend implements (docs/design.md §2).

A runner knows how to produce tokens; it knows no policy. The scheduler tells it
which model to hold (`load`) and what to generate (`generate`), and stops it
through a `CancelToken`. The types it speaks in live beside it: ``requests`` (what to generate),
``cancellation`` (how to stop) and ``errors`` (how it fails); runners import
nothing of tierlm outside ``tierlm.runners`` but the error root
(docs/design.md §1.1).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from tierlm.runners.cancellation import CancelToken
    from tierlm.runners.requests import GenerationRequest

__all__ = [
    "Abilities",
    "Describes",
    "DescribesModels",
    "ModelLister",
    "PromptCounter",
    "Runner",
    "Tokenizer",
    "Unloadable",
    "abilities_of",
    "aclosing_stream",
]


@contextlib.asynccontextmanager
async def aclosing_stream(stream: AsyncIterator[str]) -> AsyncIterator[AsyncIterator[str]]:
    """Close a runner's stream when the reader stops, even early or on error.

    A reader that stops iterating must close the stream at once: until its
    generator is closed, a backend may hold the device (a llama.cpp worker
    thread decoding, an HTTP stream open) until garbage collection.
    """
    try:
        yield stream
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


@runtime_checkable
class Runner(Protocol):
    """What every backend implements (docs/design.md §2).

    ``loaded_model`` is the model the device holds now (None before any load).
    ``load`` is the swap; the scheduler never interrupts it. ``generate`` yields
    one text piece per token and, once ``cancel`` is cancelled, stops at the next
    token boundary (ending the iteration normally; the scheduler reads the
    token to know why it ended). A prompt evaluation is aborted only for a
    reason that ``aborts_prompt``; a yield stops the call once it has produced
    a token (``cancel.for_call``, docs/design.md §4.6).

    How the generation ended (``Finish``: the model's stop, ``max_tokens``,
    a full context, a cancel, an upstream's content filter) and its usage
    travel typed: tierlm's runners return a ``Stream`` (``runners/endings``)
    whose ``ending`` says it once iterated (docs/design.md §2.7);
    ``ending_of`` reads it, and infers it for a runner that returns a bare
    iterator of ``str``.

    What else a runner can do is declared here, once (docs/design.md §2.7):
    its figures as data, ``Abilities`` (``Describes``, read with
    ``abilities_of``: how many sequences it decodes at once, ``slots``, and
    the rest), and each optional operation as the one protocol that names it
    (``PromptCounter``, ``Tokenizer``, ``Unloadable``, ``DescribesModels``,
    ``ModelLister``).
    """

    loaded_model: str | None

    async def load(self, model_id: str) -> None: ...

    def generate(self, request: GenerationRequest, cancel: CancelToken) -> AsyncIterator[str]: ...


@dataclass(frozen=True, slots=True)
class Abilities:
    """What a runner can do, as the scheduler and the gateway plan with it
    (``Describes.abilities``; ``abilities_of`` for any runner)."""

    slots: int = 1
    """Sequences decoded at once (docs/design.md §2.3): the shell may run up
    to ``slots`` ``generate`` calls concurrently, and they decode together
    (one batch per step)."""
    step_cost: tuple[float, ...] = ()
    """A step's time with n = 1..slots sequences, relative to one: the chat
    latency guard reads it (docs/design.md §4.7); () = unknown (flat)."""
    swap_estimate: float | None = None
    """A swap's seconds before one is measured (docs/design.md §4.8)."""
    restores_kv: bool = False
    """A preempted generation resumes from its KV snapshot rather than
    re-evaluating: its slices need not stretch (docs/design.md §4.6)."""
    contexts: Mapping[str, int] = field(default_factory=dict)
    """Each model's context window in tokens, where the runner knows it."""

    def context(self, model_id: str) -> int | None:
        return self.contexts.get(model_id)


@runtime_checkable
class Describes(Protocol):
    """A runner that says what it can do. Not a member of ``Runner``, which is
    checked with ``isinstance``: one added there would refuse every runner
    written before it. A runner without it is one sequence at a time,
    nothing more known."""

    @property
    def abilities(self) -> Abilities: ...


def abilities_of(runner: object) -> Abilities:
    """What ``runner`` can do (read afresh: a context is known once its model
    is loaded)."""
    if isinstance(runner, Describes):
        return runner.abilities
    return Abilities()


@runtime_checkable
class PromptCounter(Protocol):
    """A runner that can count a request's prompt exactly, with its model's
    tokenizer and chat template (``usage.prompt_tokens``)."""

    async def count_prompt_tokens(self, request: GenerationRequest) -> int: ...


@runtime_checkable
class Tokenizer(Protocol):
    """A runner that can turn text into a model's tokens and tokens back into
    text, with the model's own tokenizer (llama-server's ``/tokenize`` and
    ``/detokenize``, a completion's prompt given as token ids). The model need
    not be loaded, and a running generation does not delay it (served as
    ``PromptCounter``'s counts are).

    ``tokenize`` gives each token as ``(id, piece)``, its piece the token's
    bytes (special tokens as their text); ``add_special`` adds what the model
    adds to a prompt (its BOS), ``parse_special`` reads special tokens'
    texts in ``text`` as those tokens. ``detokenize`` joins the pieces of
    ``tokens`` (special tokens as their text; bytes that are not UTF-8 as
    U+FFFD). Both raise ``InvalidRequest`` for what the model cannot take
    (an id outside its vocabulary)."""

    async def tokenize(
        self, model_id: str, text: str, *, add_special: bool = False, parse_special: bool = True
    ) -> list[tuple[int, bytes]]: ...

    async def detokenize(self, model_id: str, tokens: Sequence[int]) -> str: ...


@runtime_checkable
class Unloadable(Protocol):
    """A runner that can free its device: after ``unload``, ``loaded_model`` is
    None and the next ``load`` loads again. The scheduler calls it only while
    no job runs (``Scheduler.unload_model``)."""

    loaded_model: str | None

    async def unload(self) -> None: ...


@runtime_checkable
class DescribesModels(Protocol):
    """A runner that can tell a model's load options (its file, its context...:
    ``/v1/models``, the device's resources)."""

    def describe(self, model_id: str) -> dict[str, object]: ...


@runtime_checkable
class ModelLister(Protocol):
    """A runner that can ask its server which models it has."""

    async def list_models(self) -> list[str]: ...
