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
    "CallToken",
    "CancelReason",
    "CancelToken",
    "Cancellable",
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
    "wait_cancelled",
]

Message = Mapping[str, Any]
"""An OpenAI-style chat message: ``{"role": "user", "content": "hi"}``."""


class CancelReason(enum.Enum):
    """Why a job was told to stop (docs/design.md §4 preemption kinds).

    ``YIELD`` and ``PREEMPTED`` are the two kinds of preemption: both re-queue
    a re-queueable job, but only ``PREEMPTED`` (a person is waiting) may cut a
    prompt evaluation short (``CancelToken.aborts_prompt``).
    """

    YIELD = "yielded"
    """The job yields the device for fairness (its slice, the pool floor,
    overdue work, any tier below a person's): it stops at its next token
    boundary, but a prompt evaluation under way runs to its first token
    first; the job may be re-queued (one that is not ends as ``PREEMPTED``:
    to its caller, the kinds are alike)."""
    PREEMPTED = "preempted"
    """A person is waiting (a chat, the foreground): the job stops at its next
    token boundary, a prompt evaluation at once; the job may be re-queued."""
    CALLER = "cancelled by caller"
    """The submitter called ``JobHandle.cancel()`` (or stopped reading a stream)."""
    SHUTDOWN = "shutdown"
    """The scheduler is closing."""


# A stronger reason replaces a weaker one (CancelToken.cancel); the first of
# two equal ones is kept.
_STRENGTH = {
    CancelReason.YIELD: 0,
    CancelReason.PREEMPTED: 1,
    CancelReason.CALLER: 2,
    CancelReason.SHUTDOWN: 2,
}


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


class Cancellable(Protocol):
    """What ``tierlm.runners.cancel_scope`` races an await against: a
    ``CancelToken``, or a generation call's view of one (``CallToken``)."""

    @property
    def cancelled(self) -> bool: ...

    def add_callback(self, callback: Callable[[CancelToken], None]) -> Callable[[], None]: ...


class CancelToken:
    """A level-triggered cancel flag with a reason, in the spirit of trio's scopes.

    Once cancelled it stays cancelled: every later check sees it, so a cancel is
    never lost, and cancelling again never counts twice. A stronger reason
    replaces a weaker one, never the reverse: ``YIELD`` < ``PREEMPTED`` <
    ``CALLER``, ``SHUTDOWN``. A job asked to yield for fairness and then
    needed by a person is preempted at once (``aborts_prompt`` turns true); a
    job that was being preempted when its caller gave up ends as cancelled,
    not re-queued.

    ``cancelled`` (stop at the next token boundary) and ``aborts_prompt`` (stop
    a prompt evaluation too) are plain attributes, safe to poll from a worker
    thread (a llama.cpp decode loop and its abort callback read them).
    """

    __slots__ = ("_callbacks", "aborts_prompt", "cancelled", "reason")

    def __init__(self) -> None:
        self.cancelled: bool = False
        self.aborts_prompt: bool = False
        """Cancelled for a reason that may cut a prompt evaluation short: any
        but ``YIELD`` (docs/design.md §4 preemption kinds)."""
        self.reason: CancelReason | None = None
        self._callbacks: list[Callable[[CancelToken], None]] = []

    def cancel(self, reason: CancelReason = CancelReason.CALLER) -> bool:
        """Cancel; return True if this call changed the token's state or reason."""
        if self.reason is not None and _STRENGTH[reason] <= _STRENGTH[self.reason]:
            return False
        self.reason = reason
        self.aborts_prompt = reason is not CancelReason.YIELD
        self.cancelled = True
        for callback in list(self._callbacks):
            callback(self)
        return True

    def add_callback(self, callback: Callable[[CancelToken], None]) -> Callable[[], None]:
        """Call ``callback(token)`` when cancelled (at once if already), and
        again each time a stronger reason replaces the token's reason.

        Returns a function that removes the callback.
        """
        self._callbacks.append(callback)
        if self.cancelled:
            callback(self)

        def remove() -> None:
            with contextlib.suppress(ValueError):  # removed twice
                self._callbacks.remove(callback)

        return remove

    def for_call(self, produced: Callable[[], int]) -> CallToken:
        """This token as one generation call sees it; ``produced()`` is the
        number of tokens the call has produced so far (``CallToken``)."""
        return CallToken(self, produced)

    def raise_if_cancelled(self) -> None:
        if self.cancelled:
            assert self.reason is not None
            raise Cancelled(self.reason)

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until cancelled or ``timeout`` seconds pass; return ``cancelled``."""
        return await wait_cancelled(self, timeout)

    def __repr__(self) -> str:
        state = f"cancelled ({self.reason.value})" if self.reason else "active"
        return f"<CancelToken {state}>"


class CallToken:
    """One generation call's view of its job's ``CancelToken``: when the call
    must stop (docs/design.md §4 preemption kinds).

    ``cancelled`` is true, at a token boundary or while the prompt is
    evaluated, once the token ``aborts_prompt`` (a person is waiting, the
    caller gave up, shutdown); and for a ``YIELD``, once the call has produced
    a token: a yield never cuts a prompt evaluation, it lets the call finish
    it and produce its first token, then stops it at the next boundary. A call
    that begins with its token already cancelled, for any reason, starts
    nothing (no evaluation is under way to protect). Runners check it before
    each token and while evaluating; ``cancel_scope`` races awaits against it.
    """

    __slots__ = ("_early", "_produced", "token")

    def __init__(self, token: CancelToken, produced: Callable[[], int]) -> None:
        self.token = token
        self._produced = produced
        self._early = token.cancelled

    @property
    def cancelled(self) -> bool:
        token = self.token
        return token.cancelled and (token.aborts_prompt or self._early or self._produced() > 0)

    @property
    def reason(self) -> CancelReason | None:
        return self.token.reason

    def add_callback(self, callback: Callable[[CancelToken], None]) -> Callable[[], None]:
        """Call ``callback(token)`` when the call must stop, as
        ``CancelToken.add_callback`` (checked at every change of the token:
        a yield before the first token calls nothing, its upgrade does)."""

        def check(token: CancelToken) -> None:
            if self.cancelled:
                callback(token)

        return self.token.add_callback(check)

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until the call must stop or ``timeout`` seconds pass; return ``cancelled``."""
        return await wait_cancelled(self, timeout)


async def wait_cancelled(cancel: Cancellable, timeout: float | None = None) -> bool:
    """Wait until ``cancel.cancelled`` or ``timeout`` seconds pass; return it."""
    if cancel.cancelled:
        return True
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    def wake(_: CancelToken) -> None:
        if not fut.done():
            fut.set_result(None)

    remove = cancel.add_callback(wake)
    try:
        await asyncio.wait_for(asyncio.shield(fut), timeout)
    except TimeoutError:
        pass
    finally:
        remove()
    return cancel.cancelled


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
    token to know why it ended). A prompt evaluation is aborted only for a
    reason that ``aborts_prompt``; a yield stops the call once it has produced
    a token (``cancel.for_call``, docs/design.md §4 preemption kinds).
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
