"""What the runner and its llama.cpp worker say to each other.

Commands go to the worker, events come back; over a pipe (pickled) when the
worker is a process, as plain calls when it is a thread of this process
(``isolation="thread"``). Every command carries a ``call_id`` that its reply
names; a generation is one ``Generate`` command, so its ``call_id`` is also
the generation's id: its ``Piece`` events name it, and its words in the shared
control block carry it (a cancel, the pieces taken: ``control.py``, no
message).

Generation (``Generate``): ``Piece`` events, one per token, then ``Reply`` with
the ``GenerationStats``, or ``Failed``. Load (``Load``): ``Reply`` with a
``LoadInfo``. Rendering and counting a prompt (``RenderPrompt``): ``Reply`` with
``(text, tokens)``; served at
once on the worker's command thread, also while a generation runs. So are
``Tokenize`` (``Reply`` with ``[(id, piece bytes), ...]``) and
``Detokenize`` (``Reply`` with the text).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tierlm.runners.requests import TokenLogprob

if TYPE_CHECKING:
    from tierlm.runners.llama_cpp.model.spec import LlamaModelSpec
    from tierlm.runners.llama_cpp.wire.faults import FaultInjection
    from tierlm.runners.requests import GenerationRequest

__all__ = [
    "Command",
    "Configure",
    "Detokenize",
    "Event",
    "Failed",
    "Generate",
    "GenerationStats",
    "InjectFault",
    "Load",
    "LoadInfo",
    "Log",
    "Piece",
    "PoolStats",
    "Progress",
    "RenderPrompt",
    "Reply",
    "Shutdown",
    "Step",
    "TokenLogprobs",
    "Tokenize",
    "Unload",
]


@dataclass(frozen=True, slots=True)
class PoolStats:
    """The pool as a gateway would show it."""

    limit_bytes: int
    state_bytes: int
    states: int
    snapshots: int
    saved: int
    """States saved since the worker started."""
    restored: int
    evicted: int
    """States dropped to stay within the limit."""


TokenLogprobs = tuple[TokenLogprob, tuple[TokenLogprob, ...]]
"""A sampled token's log-probability, and the most likely tokens'."""

Ended = Literal[
    "", "max_tokens", "eos", "stop", "cancelled", "prefill_aborted", "context_full", "error"
]
"""How one generation ended, its outcome (what OpenAI's ``finish_reason``
reports): its token budget, an end-of-sequence token, a stop string, a cancel
at a token boundary, a cancel inside the prompt evaluation, a full context, an
error; ``""`` while it runs. Not why it was told to stop: that is
``CancelReason`` (``tierlm.core.stop_reasons``, docs/design.md §2.9),
which a ``cancelled`` or ``prefill_aborted`` end has as its cause."""


@dataclass(slots=True)
class GenerationStats:
    """What one generation did; for tests, benchmarks and usage figures."""

    prompt_tokens: int = 0
    """Tokens of prompt + resume text (what the model continued from)."""
    tokens: int = 0
    """Tokens generated (pieces sent; one per token)."""
    evaluated_tokens: int = 0
    """Prompt tokens actually evaluated; the rest came from the KV cache (the
    context's own prefix or a restored snapshot)."""
    restored_tokens: int = 0
    """Tokens whose KV state was restored from the snapshot pool (docs/design.md
    §4.9)."""
    resumed_from: Literal["", "snapshot", "tokens", "text"] = ""
    """How a resume found its tokens: a KV snapshot, the exact tokens of the
    preempted run (re-evaluated), or the re-tokenized text."""
    saved_state_bytes: int = 0
    """Bytes of KV state saved when this generation was preempted."""
    save_seconds: float = 0.0
    """Time spent copying that state out of llama.cpp."""
    restore_seconds: float = 0.0
    """Time spent restoring a snapshot's state before this generation (and
    keeping the context's, if it was about to be overwritten)."""
    pool: PoolStats | None = None
    """The KV snapshot pool after this generation."""
    prefill_seconds: float = 0.0
    """From the start of the generation on the worker to its first token (or abort)."""
    decode_seconds: float = 0.0
    """From the first token to the end."""
    ended: Ended = ""
    decode_steps: int = 0
    """Batched decode (slots > 1): steps in which it decoded a token."""
    one_pass_steps: int = 0
    """Of those, the steps llama.cpp ran as one pass over the weights: it
    reused the step's compute graph (its own ``n_reused`` counter), which it
    can only for a batch it did not split into several ubatches."""


@dataclass(frozen=True, slots=True)
class LoadInfo:
    """What a load did, as the worker saw it."""

    model_id: str
    seconds: float
    n_ctx: int
    n_threads: int
    use_extra_bufts: bool
    probed: bool
    slots: int = 1
    """Sequence ids of the context; ``n_ctx`` is each one's."""

    def summary(self) -> dict[str, object]:
        """What llama.cpp applied, as a gateway shows it."""
        return {
            "n_ctx": self.n_ctx,
            "n_threads": self.n_threads,
            "use_extra_bufts": self.use_extra_bufts,
            "slots": self.slots,
            "load_seconds": round(self.seconds, 3),
        }


# -- commands -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Configure:
    """The worker's settings; sent first to every new worker."""

    call_id: int
    kv_pool_bytes: int
    slots: int = 1
    """Sequences decoded at once (docs/design.md §1.6):
    each later load makes a context with that many sequence ids."""


@dataclass(frozen=True, slots=True)
class Load:
    call_id: int
    model_id: str
    spec: LlamaModelSpec
    probe: bool
    """Run a tiny batched generation after loading (the start-up probe)."""


@dataclass(frozen=True, slots=True)
class Unload:
    call_id: int


@dataclass(frozen=True, slots=True)
class Generate:
    call_id: int
    """The command's id, and the generation's: its pieces and its reply name
    it, and its control block words carry it (its cancel, its pieces taken)."""
    request: GenerationRequest
    label: str
    """How errors name it: ``job 12`` or ``model 'm'``."""
    slot: int = 0
    """Which of the runner's slots it holds: its words in the control block
    (``control.py``). The runner's numbering: the KV slot the worker runs it
    in is the worker's choice (``worker/engine/kv_slots.py``)."""


@dataclass(frozen=True, slots=True)
class RenderPrompt:
    """The text a request's model continues (prompt or rendered chat, + resume
    text) and its length in tokens: ``Reply`` with ``(text, tokens)``."""

    call_id: int
    model_id: str
    spec: LlamaModelSpec
    request: GenerationRequest


@dataclass(frozen=True, slots=True)
class Tokenize:
    """``text`` as the model's tokens, each with its piece's bytes: ``Reply``
    with ``[(id, piece), ...]`` (``Tokenizer.tokenize``)."""

    call_id: int
    model_id: str
    spec: LlamaModelSpec
    text: str
    add_special: bool = False
    parse_special: bool = True


@dataclass(frozen=True, slots=True)
class Detokenize:
    """``tokens`` as text: ``Reply`` with the text (``Tokenizer.detokenize``)."""

    call_id: int
    model_id: str
    spec: LlamaModelSpec
    tokens: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class InjectFault:
    """Test-only: arm a deliberate crash (``faults.py``)."""

    call_id: int
    fault: FaultInjection


@dataclass(frozen=True, slots=True)
class Shutdown:
    call_id: int = 0


Command = (
    Configure
    | Load
    | Unload
    | Generate
    | RenderPrompt
    | Tokenize
    | Detokenize
    | InjectFault
    | Shutdown
)


# -- events -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Piece:
    call_id: int
    """The ``Generate`` it belongs to."""
    text: str
    logprobs: TokenLogprobs | None = None
    """The token's log-probabilities, when the request asked for them."""


@dataclass(frozen=True, slots=True)
class Reply:
    call_id: int
    value: Any = None


@dataclass(frozen=True, slots=True)
class Failed:
    call_id: int
    message: str
    model_id: str | None = None
    invalid: bool = False
    """The request's fault (``InvalidRequest``), not the worker's."""
    param: str | None = None


@dataclass(frozen=True, slots=True)
class Progress:
    """A long command reached a stage (``Load``: "probing"), so that a crash
    can be told apart by where it happened."""

    call_id: int
    stage: str


@dataclass(frozen=True, slots=True)
class Log:
    level: int
    message: str


@dataclass(frozen=True, slots=True)
class Step:
    """Everything one step of a batched decode sent (``batch.py``), in order, as
    one message: one pickle, one write and one wake-up of the runner's event
    loop a step, not one per sequence (k sequences make k pieces a step)."""

    events: tuple[Piece | Reply | Failed, ...]


Event = Piece | Reply | Failed | Progress | Log | Step
