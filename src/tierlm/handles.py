"""What a submitter holds: a job handle, and what a job's work receives: its context."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tierlm.runners.protocol import (
    CancelReason,
    CancelToken,
    GenerationRequest,
    Message,
    Runner,
    aclosing_stream,
)

if TYPE_CHECKING:
    from tierlm.core.jobs import Job

__all__ = ["JobContext", "JobHandle", "JobState", "resuming_work"]

T = TypeVar("T")


class JobState(enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class JobHandle(Generic[T]):
    """A submitted job: await it for its result; ``cancel()`` to give it up.

    Awaiting is shielded: if the task awaiting the handle is cancelled, the job
    goes on (call ``cancel()`` to stop it). ``Scheduler.run`` is the form that
    cancels the job with its caller.
    """

    __slots__ = ("_cancel", "_future", "job", "state")

    def __init__(
        self,
        job: Job,
        future: asyncio.Future[T],
        cancel: Callable[[JobHandle[T], CancelReason], bool],
    ) -> None:
        self.job = job
        self.state = JobState.QUEUED
        self._future = future
        self._cancel = cancel

    @property
    def id(self) -> int:
        return self.job.id

    @property
    def class_name(self) -> str:
        return self.job.class_name

    @property
    def model_id(self) -> str:
        return self.job.model_id

    @property
    def producer(self) -> str:
        return self.job.producer

    def cancel(self) -> bool:
        """Queued: removed at once. Running: stopped at its next token boundary.

        The job then ends with ``Cancelled(CancelReason.CALLER)``. Returns False
        if it had already ended (or was already being cancelled by its caller).
        """
        return self._cancel(self, CancelReason.CALLER)

    def done(self) -> bool:
        return self._future.done()

    def result(self) -> T:
        """The result of an ended job; raises its error, or ``Cancelled``."""
        return self._future.result()

    def add_done_callback(self, callback: Callable[[JobHandle[T]], None]) -> None:
        self._future.add_done_callback(lambda _: callback(self))

    def __await__(self) -> Generator[Any, None, T]:
        return asyncio.shield(self._future).__await__()

    def __repr__(self) -> str:
        return f"<JobHandle #{self.id} {self.class_name} {self.state.value}>"


class JobContext:
    """What ``work(ctx)`` receives: its cancel token, model and runner.

    ``runner`` already holds ``model_id`` when ``work`` starts.
    """

    __slots__ = ("attempt", "cancel", "job_id", "model_id", "runner")

    def __init__(
        self, job_id: int, model_id: str, runner: Runner, cancel: CancelToken, attempt: int
    ) -> None:
        self.job_id = job_id
        self.model_id = model_id
        self.runner = runner
        self.cancel = cancel
        self.attempt = attempt
        """1 on the first run, 2 after one preemption, and so on."""

    def checkpoint(self) -> None:
        """Raise ``Cancelled`` if the job was told to stop (call between steps)."""
        self.cancel.raise_if_cancelled()

    async def generate(
        self,
        prompt: str | None = None,
        messages: Sequence[Message] | None = None,
        max_tokens: int = 128,
        **options: Any,
    ) -> AsyncIterator[str]:
        """Stream text pieces from the runner with this job's model and token.

        Stops at the next token boundary once cancelled and then raises
        ``Cancelled``, so a preempted ``work`` ends without further code.
        """
        request = GenerationRequest(
            model_id=self.model_id,
            prompt=prompt,
            messages=messages,
            max_tokens=max_tokens,
            **options,
        )
        async with aclosing_stream(self.runner.generate(request, self.cancel)) as stream:
            async for piece in stream:
                yield piece
        self.cancel.raise_if_cancelled()


def resuming_work(
    request: GenerationRequest, on_piece: Callable[[str], None]
) -> Callable[[JobContext], Awaitable[str]]:
    """A job's ``work`` that generates ``request`` and RESUMES when re-run.

    docs/design.md §4 re-queue, §6.8: the text produced by earlier runs is kept; a
    re-run continues from prompt + that text (``resume_text``) for the tokens
    still due, and only new pieces reach ``on_piece``, so whoever reads them
    sees one continuous stream, however many times the job was preempted.
    Returns the whole text.
    """
    produced: list[str] = []

    async def work(ctx: JobContext) -> str:
        left = request.max_tokens - len(produced)
        if left > 0:
            resumed = replace(request, max_tokens=left, resume_text="".join(produced))
            async with aclosing_stream(ctx.runner.generate(resumed, ctx.cancel)) as stream:
                async for piece in stream:
                    produced.append(piece)
                    on_piece(piece)
            ctx.checkpoint()
        return "".join(produced)

    return work
