"""What a submitter holds: a job handle, and what a job's work receives: its context.

Also the work of a streamed generation (``ResumingGeneration``), which resumes
after a preemption, and its handle (``GenerationHandle``).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Callable, Generator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tierlm.runners.cancellation import CancelReason, CancelToken
from tierlm.runners.endings import Ending, Finish, ending_of
from tierlm.runners.protocol import Runner, aclosing_stream
from tierlm.runners.requests import GenerationRequest, Message
from tierlm.shell.journal import Journal

if TYPE_CHECKING:
    from tierlm.core.jobs import Job

__all__ = [
    "GenerationHandle",
    "GenerationRun",
    "JobContext",
    "JobHandle",
    "JobState",
    "ResumingGeneration",
    "continued",
]

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


class GenerationHandle(JobHandle[str]):
    """The handle of a streamed generation (``Scheduler.submit_generation``):
    also what it has produced so far, across all its runs."""

    __slots__ = ("generation",)

    def __init__(
        self,
        job: Job,
        future: asyncio.Future[str],
        cancel: Callable[[JobHandle[str], CancelReason], bool],
        generation: ResumingGeneration,
    ) -> None:
        super().__init__(job, future, cancel)
        self.generation = generation

    @property
    def pieces(self) -> Sequence[str]:
        """The pieces produced so far (one per token), each streamed once."""
        return self.generation.pieces

    @property
    def first_token_at(self) -> float | None:
        """Scheduler-clock time of the first piece, None before it."""
        return self.generation.first_token_at

    @property
    def ending(self) -> Ending | None:
        """How it ended, once it completed (docs/design.md §2.7)."""
        return self.generation.ending


class JobContext:
    """What ``work(ctx)`` receives: its cancel token, model and runner.

    ``runner`` already holds ``model_id`` when ``work`` starts.
    """

    __slots__ = (
        "_journal",
        "_on_direct",
        "_runner",
        "attempt",
        "cancel",
        "first_live_at",
        "job_id",
        "model_id",
        "on_first_token",
        "person",
        "progress_at",
        "started_at",
    )

    def __init__(
        self,
        job_id: int,
        model_id: str,
        runner: Runner,
        cancel: CancelToken,
        attempt: int,
        journal: Journal | None = None,
        on_direct: Callable[[], None] | None = None,
    ) -> None:
        self.job_id = job_id
        self.model_id = model_id
        self._runner = runner
        self.cancel = cancel
        self.attempt = attempt
        """1 on the first run, 2 after one preemption, and so on."""
        self._journal = journal
        self._on_direct = on_direct
        self.started_at = asyncio.get_running_loop().time()
        """When this run's work began (after any swap)."""
        self.first_live_at: float | None = None
        """When the runner gave this run its first token (a journal replay's
        are not the runner's): its prompt is evaluated."""
        self.person = False
        """A person waits on this run (T0 or T1 when it started): its
        requests say so to the runner (docs/design.md §4.7 (the step plan))."""
        self.on_first_token: Callable[[], None] | None = None
        """Told once, at ``first_live_at`` (the shell decides again then)."""
        self.progress_at: float | None = None
        """When this run first went past what earlier runs of the job had
        produced: ``started_at`` to here is what the run redid (a prompt
        evaluated again, calls past the journal's bound generated again), what
        the next resume will redo as well (docs/design.md §4.6 (a slice worth its resume)). Without
        a journal every live token is new."""

    def _live(self, *, new: bool = True) -> None:
        """The runner produced a token for this run (``new``: past what earlier
        runs had produced)."""
        now = asyncio.get_running_loop().time()
        if new and self.progress_at is None:
            self.progress_at = now
        if self.first_live_at is None:
            self.first_live_at = now
            if self.on_first_token is not None:
                self.on_first_token()

    @property
    def runner(self) -> Runner:
        """The runner itself, for work that drives it directly.

        Such work is not replayed from the job's journal, so a preemption
        makes it start over: from the first use on, the job is no longer
        cut by the fair pool's slices or its floor, only by a higher tier
        (docs/design.md §4.6). ``ctx.generate`` keeps it
        zero-loss."""
        if self._on_direct is not None:
            self._on_direct()
            self._on_direct = None
        return self._runner

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

        Replay after preemption (docs/design.md §4.9): the job keeps a journal of its calls,
        numbered in the order
        ``work`` makes them. When a preempted job runs again, a call with the
        same request at the same position yields the output it produced before,
        at once and without the runner; the call that was interrupted yields its
        partial output and then continues live from it (prompt + that output,
        for the tokens still due); a call whose request differs from the one
        recorded at its position is generated live, and so is every call after
        it. So a ``work`` that makes the same calls in the same order gets the
        same text back and the device redoes nothing; one that does not is still
        correct. The journal is bounded (``SchedulerConfig.journal_bytes_per_job``
        and ``journal_bytes_total``): a call that does not fit is generated
        again. It is dropped when the job ends.
        """
        request = GenerationRequest(
            model_id=self.model_id,
            prompt=prompt,
            messages=messages,
            max_tokens=max_tokens,
            **options,
        )
        if request.job_id is None:  # so a runner's errors can name the job
            request = replace(request, job_id=self.job_id)
        if self.person:  # docs/design.md §4.7 (the step plan)
            request = replace(request, person=True)
        journal = self._journal
        if journal is None:
            async with aclosing_stream(self._runner.generate(request, self.cancel)) as stream:
                async for piece in stream:
                    self._live()
                    yield piece
            self.cancel.raise_if_cancelled()
            return
        record = journal.open(request)
        for piece in record.pieces[:]:  # replay: a copy, the live part appends
            self.cancel.raise_if_cancelled()  # a token boundary, as live
            journal.count()
            yield piece
        if not record.finished:
            live = continued(request, record.pieces)
            if live is not None:
                async with aclosing_stream(self._runner.generate(live, self.cancel)) as stream:
                    async for piece in stream:
                        self._live(new=journal.count())
                        journal.add(record, piece)
                        yield piece
            if not self.cancel.cancelled:
                journal.finish(record)
        self.cancel.raise_if_cancelled()


def continued(request: GenerationRequest, produced: Sequence[str]) -> GenerationRequest | None:
    """``request`` continued after ``produced`` (one piece per token), or None
    when no token is left (docs/design.md §4.9: resume)."""
    if not produced:
        return request
    left = request.max_tokens - len(produced)
    if left <= 0:
        return None
    return replace(request, max_tokens=left, resume_text=request.resume_text + "".join(produced))


@dataclass(frozen=True, slots=True)
class GenerationRun:
    """One run of a streamed generation, reported when it ends (completed,
    preempted, cancelled or failed): what the metrics count per run."""

    attempt: int
    tokens: int
    """Pieces this run produced (one per token)."""
    first_token_at: float | None
    last_token_at: float | None
    started_at: float | None = None
    """When the run was dispatched (scheduler clock): its prompt evaluation is
    ``started_at`` to ``first_token_at``; a job's wait, the first run's
    ``started_at`` less its submission."""
    ending: Ending | None = None
    """How the run's stream ended (None: it raised)."""

    @property
    def decode_seconds(self) -> float:
        """From this run's first token to its last."""
        if self.first_token_at is None or self.last_token_at is None:
            return 0.0
        return self.last_token_at - self.first_token_at


class ResumingGeneration:
    """A job's ``work`` that generates ``request`` and RESUMES when re-run.

    docs/design.md §4.9, §6.8: the text produced by earlier runs is kept;
    a re-run continues from prompt + that text (``resume_text``) for the tokens
    still due, and only new pieces reach ``on_piece``, so whoever reads them sees
    one continuous stream, however many times the job was preempted. Returns
    the whole text. ``on_run`` is told about every run when it ends.
    """

    __slots__ = ("_on_piece", "_on_run", "ending", "first_token_at", "pieces", "request")

    def __init__(
        self,
        request: GenerationRequest,
        on_piece: Callable[[str], None],
        on_run: Callable[[GenerationRun], None] | None = None,
    ) -> None:
        self.request = request
        self.pieces: list[str] = []
        self.first_token_at: float | None = None
        self.ending: Ending | None = None
        """How the generation ended: its last run's stream's end (docs/design.md
        §2.7); None until it completes."""
        self._on_piece = on_piece
        self._on_run = on_run

    async def __call__(self, ctx: JobContext) -> str:
        loop = asyncio.get_running_loop()
        tokens = 0
        first: float | None = None
        last: float | None = None
        ending: Ending | None = None
        try:
            request = self.request
            if request.job_id is None:  # so a runner's errors can name the job
                request = replace(request, job_id=ctx.job_id)
            if ctx.person != request.person:  # docs/design.md §4.7 (the step plan)
                request = replace(request, person=ctx.person)
            live = continued(request, self.pieces)
            if live is None:  # no token left: its max_tokens
                ending = Ending(Finish.LENGTH, 0)
            else:
                # ctx._runner: a generation resumes, it is not "direct" work.
                async with aclosing_stream(ctx._runner.generate(live, ctx.cancel)) as stream:
                    async for piece in stream:
                        last = loop.time()
                        ctx._live()
                        if first is None:
                            first = last
                            if self.first_token_at is None:
                                self.first_token_at = last
                        tokens += 1
                        self.pieces.append(piece)
                        self._on_piece(piece)
                ending = ending_of(stream, live, tokens, ctx.cancel)
                ctx.checkpoint()
            self.ending = ending
            return "".join(self.pieces)
        finally:
            if self._on_run is not None:
                run = GenerationRun(ctx.attempt, tokens, first, last, ctx.started_at, ending)
                self._on_run(run)
