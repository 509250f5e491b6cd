"""The runner protocol: what every inference backend implements (docs/design.md §2).

A runner knows how to produce tokens; it knows no policy. The scheduler tells it
which model to hold (`load`) and what to generate (`generate`), and stops it
through a `CancelToken`. This module holds every type a runner needs, so that
runners import nothing else from tierlm (docs/design.md §1 dependency rules).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "CancelReason",
    "CancelToken",
    "Cancelled",
    "GenerationRequest",
    "InvalidRequest",
    "Message",
    "PromptCounter",
    "Runner",
    "RunnerError",
    "TokenLogprob",
    "TokenPiece",
    "Unloadable",
    "aclosing_stream",
    "unknown_model",
]

Message = Mapping[str, Any]
"""An OpenAI-style chat message: ``{"role": "user", "content": "hi"}``."""


class CancelReason(enum.Enum):
    """Why a job was told to stop."""

    PREEMPTED = "preempted"
    """The scheduler needs the device for a higher tier; the job may be re-queued."""
    CALLER = "cancelled by caller"
    """The submitter called ``JobHandle.cancel()`` (or stopped reading a stream)."""
    SHUTDOWN = "shutdown"
    """The scheduler is closing."""


class Cancelled(Exception):
    """A job stopped because its cancel token was cancelled.

    Raised to the awaiter of a cancelled job, and inside ``work`` by the
    checkpoints of ``ctx`` once its token is cancelled. It is an ordinary
    ``Exception`` on purpose, not ``asyncio.CancelledError``: the task that awaits
    a job was not itself cancelled, only the job.
    """

    def __init__(self, reason: CancelReason, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        message = f"job {reason.value}"
        super().__init__(f"{message}: {detail}" if detail else message)


class RunnerError(Exception):
    """A backend failed: a model that cannot be loaded, a server that broke.

    The message names the model and the cause; it fails only the job that hit it.
    """

    def __init__(self, message: str, *, model_id: str | None = None) -> None:
        self.model_id = model_id
        super().__init__(message)


class InvalidRequest(RunnerError):
    """The request asks for something the runner cannot do as asked: a JSON
    schema its grammar cannot express, a token id its vocabulary does not have.
    The request's fault, not the backend's: the gateway answers 400 naming
    ``param`` (the request field, dotted: ``response_format.json_schema.schema``)."""

    def __init__(
        self, message: str, *, param: str | None = None, model_id: str | None = None
    ) -> None:
        self.param = param
        super().__init__(message, model_id=model_id)


def unknown_model(model_id: str, known: Iterable[str]) -> RunnerError:
    """The error every runner raises for a model id it was not configured with."""
    return RunnerError(
        f"model {model_id!r}: not configured on this runner (known: {', '.join(sorted(known))})",
        model_id=model_id,
    )


class CancelToken:
    """A level-triggered cancel flag with a reason, in the spirit of trio's scopes.

    Once cancelled it stays cancelled: every later check sees it, so a cancel is
    never lost, and cancelling again never counts twice. The first reason is
    kept, except that a stronger reason (a caller's cancel or shutdown) replaces
    ``PREEMPTED``: a job that was being preempted when its caller gave up must end
    as cancelled, not be re-queued.

    ``cancelled`` is a plain attribute, safe to poll from a worker thread (a
    llama.cpp decode loop reads it between tokens).
    """

    __slots__ = ("_callbacks", "cancelled", "reason")

    def __init__(self) -> None:
        self.cancelled: bool = False
        self.reason: CancelReason | None = None
        self._callbacks: list[Callable[[CancelToken], None]] = []

    def cancel(self, reason: CancelReason = CancelReason.CALLER) -> bool:
        """Cancel; return True if this call changed the token's state or reason."""
        if self.cancelled:
            if self.reason is CancelReason.PREEMPTED and reason is not CancelReason.PREEMPTED:
                self.reason = reason
                return True
            return False
        self.cancelled = True
        self.reason = reason
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)
        return True

    def add_callback(self, callback: Callable[[CancelToken], None]) -> Callable[[], None]:
        """Call ``callback(token)`` once when cancelled (at once if already).

        Returns a function that removes the callback.
        """
        if self.cancelled:
            callback(self)
            return lambda: None
        self._callbacks.append(callback)

        def remove() -> None:
            with contextlib.suppress(ValueError):  # already called, or removed twice
                self._callbacks.remove(callback)

        return remove

    def raise_if_cancelled(self) -> None:
        if self.cancelled:
            assert self.reason is not None
            raise Cancelled(self.reason)

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until cancelled or ``timeout`` seconds pass; return ``cancelled``."""
        if self.cancelled:
            return True
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()

        def wake(_: CancelToken) -> None:
            if not fut.done():
                fut.set_result(None)

        remove = self.add_callback(wake)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            pass
        finally:
            remove()
        return self.cancelled

    def __repr__(self) -> str:
        state = f"cancelled ({self.reason.value})" if self.reason else "active"
        return f"<CancelToken {state}>"


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """A token and its log-probability under the model (before any sampling
    option changed the distribution)."""

    token: str
    logprob: float
    bytes: tuple[int, ...]
    """The token's UTF-8 bytes (a token may hold part of a character)."""


class TokenPiece(str):
    """A piece of generated text with its token's log-probability and the most
    likely tokens at its position (``top``, most likely first). Runners that
    can compute them yield these when a request asks (``extra["logprobs"]``);
    to everyone else it is the piece's text."""

    logprob: TokenLogprob
    top: tuple[TokenLogprob, ...]

    def __new__(
        cls, text: str, logprob: TokenLogprob, top: tuple[TokenLogprob, ...] = ()
    ) -> TokenPiece:
        piece = super().__new__(cls, text)
        piece.logprob = logprob
        piece.top = top
        return piece


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One generation: a prompt (completion) or messages (chat), not both.

    ``resume_text`` is output already produced by an earlier, preempted run of the
    same request (docs/design.md §4 re-queue): the runner continues from prompt +
    ``resume_text`` (for chat, as a continued assistant message) and yields only
    the new text. ``max_tokens`` counts the new tokens only.

    Runners yield one text piece per generated token, so the number of pieces is
    the number of tokens.
    """

    model_id: str
    prompt: str | None = None
    messages: Sequence[Message] | None = None
    max_tokens: int = 128
    resume_text: str = ""
    temperature: float | None = None
    stop: Sequence[str] = ()
    prompt_tokens: int | None = None
    """Size of the prompt in tokens, when the caller knows it (the simulator does)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Options beyond the common ones, by their OpenAI names (``top_p``,
    ``seed``, ``logit_bias``, ``response_format``, ``tools``, ``tool_choice``,
    ``parallel_tool_calls``, ``logprobs``...) or a backend's own (llama.cpp's
    ``grammar``, ``top_k``, ``mirostat_mode``). A runner honours them, passes
    them on to its server, or raises ``InvalidRequest``; it never drops one."""
    job_id: int | str | None = None
    """The scheduler job this generation belongs to, when known: a runner's
    errors name it (e.g. a crashed llama.cpp worker: "while generating for job 12")."""

    def __post_init__(self) -> None:
        if not self.model_id:
            raise ValueError("model_id: must be a non-empty string")
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("prompt/messages: give exactly one of them")
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool):
            raise TypeError(f"max_tokens: must be an int, got {type(self.max_tokens).__name__}")
        if self.max_tokens <= 0:
            raise ValueError(f"max_tokens: must be > 0, got {self.max_tokens}")

    def approx_prompt_tokens(self) -> int:
        """The prompt size in tokens: the given count, else ~4 characters a token."""
        if self.prompt_tokens is not None:
            return self.prompt_tokens
        if self.prompt is not None:
            text = self.prompt
        else:
            assert self.messages is not None
            text = "".join(str(m.get("content", "")) for m in self.messages)
        return max(1, (len(text) + len(self.resume_text) + 3) // 4)


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
    token to know why it ended).
    """

    loaded_model: str | None

    async def load(self, model_id: str) -> None: ...

    def generate(self, request: GenerationRequest, cancel: CancelToken) -> AsyncIterator[str]: ...


@runtime_checkable
class PromptCounter(Protocol):
    """A runner that can count a request's prompt exactly, with its model's
    tokenizer and chat template (``usage.prompt_tokens``)."""

    async def count_prompt_tokens(self, request: GenerationRequest) -> int: ...


@runtime_checkable
class Unloadable(Protocol):
    """A runner that can free its device: after ``unload``, ``loaded_model`` is
    None and the next ``load`` loads again. The scheduler calls it only while
    no job runs (``Scheduler.unload_model``)."""

    loaded_model: str | None

    async def unload(self) -> None: ...
