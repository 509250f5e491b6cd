"""The asyncio shell around the policy (docs/design.md §1.1, §2.1).

``Scheduler`` is what callers use: it checks what they pass, turns it into jobs
and hands them to its ``Dispatcher`` (``tierlm.shell.dispatch``), which owns the
jobs, the running job, cancel tokens, the wake-up timer and the lifecycle, asks
the policy (``tierlm.core``) what to do at every event and does it. Neither
makes a scheduling decision itself.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any, TypeVar

from tierlm.core.classes import TaskClass, resolve_classes
from tierlm.core.config import SchedulerConfig
from tierlm.core.jobs import Foreground, Job, Person, Subject
from tierlm.core.policy import Policy
from tierlm.core.tiered import TieredPolicy
from tierlm.errors import TierlmError
from tierlm.runners.cancellation import CancelReason
from tierlm.runners.protocol import Runner
from tierlm.runners.requests import GenerationRequest, Message
from tierlm.shell import arguments
from tierlm.shell.dispatch import Dispatcher, Entry, Listener
from tierlm.shell.entries import Reclass
from tierlm.shell.events import ForegroundChanged
from tierlm.shell.handles import (
    GenerationHandle,
    GenerationRun,
    JobContext,
    JobHandle,
    ResumingGeneration,
)
from tierlm.shell.journal import Journal, JournalBudget
from tierlm.shell.snapshot import JobInfo, SchedulerSnapshot, SchedulerStats

__all__ = ["Scheduler", "SchedulerClosedError"]

T = TypeVar("T")
H = TypeVar("H", bound=JobHandle[Any])
Work = Callable[[JobContext], Awaitable[T]]
CancelFn = Callable[[JobHandle[T], CancelReason], bool]


class SchedulerClosedError(TierlmError, RuntimeError):
    """The scheduler was closed (``aclose()``); it accepts no new jobs."""

    status_hint = 503
    code = "shutting_down"


class Scheduler:
    """Share one device that holds one model between many producers (docs/design.md §2).

    ``runner`` is any :class:`tierlm.runners.Runner`. ``classes`` are the task
    classes (None: chat, extract, nataraj, gana; docs/design.md §3). ``policy`` replaces
    the tiered policy (the simulator passes baselines here).
    """

    def __init__(
        self,
        runner: Runner,
        classes: Iterable[TaskClass] | Mapping[str, TaskClass] | None = None,
        config: SchedulerConfig | None = None,
        *,
        policy: Policy | None = None,
    ) -> None:
        if not isinstance(runner, Runner):
            raise TypeError(
                f"runner: must implement tierlm.runners.Runner "
                f"(loaded_model, load, generate), got {type(runner).__name__}"
            )
        self.runner = runner
        self.config = config or SchedulerConfig()
        if policy is None:
            self.classes = resolve_classes(classes)
            self.policy: Policy = TieredPolicy(self.classes, self.config)
        else:
            self.classes = dict(policy.classes)
            self.policy = policy
        self._dispatch = Dispatcher(runner, self.policy, self.config)
        self._ids = itertools.count(1)
        self._journals = JournalBudget(
            self.config.journal_bytes_per_job, self.config.journal_bytes_total
        )
        self._positions: tuple[int, dict[int, tuple[int, int]]] = (-1, {})

    # -- lifecycle ------------------------------------------------------------

    async def __aenter__(self) -> Scheduler:
        self._bind_loop()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        bound = self._dispatch.loop
        if bound is None:
            self._dispatch.bind(loop)
        elif bound is not loop:
            raise RuntimeError("Scheduler: used from a different event loop than it started on")
        return loop

    @property
    def slots(self) -> int:
        """Sequences the device decodes at once (``Runner.slots``; docs/design.md §2.3)."""
        return self._dispatch.slots

    def now(self) -> float:
        """The scheduler's clock: the event loop's time, in seconds."""
        return self._bind_loop().time()

    async def aclose(self) -> None:
        """Resolve every handle (result, error or cancelled) and stop.

        Queued jobs end with ``Cancelled(SHUTDOWN)``; the running job is stopped
        at its next token boundary and ends the same way (a chat too: it yields
        only to its caller or to shutdown). Nothing hangs, nothing is dropped.
        """
        dispatch = self._dispatch
        if dispatch.loop is None:
            dispatch.closed = True
            return
        if not dispatch.closed:
            dispatch.close()
        tasks = {e.task for e in dispatch.running.values() if e.task is not None}
        if tasks:
            await asyncio.wait(tasks)

    async def pause(self) -> None:
        """The app went to the background (docs/design.md §4.10, seed scenario 8).

        Nothing new is dispatched; a running re-queueable job is preempted and
        re-queued; a running chat (or other non-re-queueable job) finishes.
        Queued work stays queued. Returns once the device is idle.
        """
        self._bind_loop()
        dispatch = self._dispatch
        if not dispatch.paused:
            dispatch.hold()
        await dispatch.idle()

    def reclass(
        self,
        handle: JobHandle[Any],
        class_name: str,
        producer: str | None = None,
        person: Sequence[str] = (),
    ) -> bool:
        """Serve ``handle``'s job from now as ``class_name``, for ``producer``
        (default: the class's name, as ``submit``) and ``person``'s turns: a
        request served as a person's before there was evidence, which the
        next ones show a program's (docs/design.md §4.11). Queued, it moves
        at once; running, it is preempted and re-queued as the new one, its
        text kept (§4.9). False if the job has ended or is being cancelled."""
        self._bind_loop()
        task_class = arguments.task_class(self.classes, class_name)
        producer = arguments.check_producer(producer, task_class.name)
        change = Reclass(task_class, producer, arguments.check_person(person))
        return self._dispatch.reclass(handle, change)

    def resume(self) -> None:
        """Undo ``pause()``: dispatch again."""
        self._bind_loop()
        dispatch = self._dispatch
        if dispatch.paused:
            dispatch.release()

    async def load_model(self, model_id: str, on_start: Callable[[], None] | None = None) -> None:
        """Load ``model_id`` now (an operator's preload), once no job runs.
        ``on_start`` is called when the load itself begins (after the wait):
        what a router's stats report as a swap under way."""
        self._bind_loop()
        arguments.check_model_id(model_id)

        async def load() -> None:
            if on_start is not None:
                on_start()
            await self.runner.load(model_id)

        await self._dispatch.exclusive(load)

    async def unload_model(self, model_id: str | None = None) -> str | None:
        """Free the device once no job runs: unload its model (only if it is
        ``model_id``, when given). Returns the model unloaded, or None."""
        self._bind_loop()
        return await self._dispatch.unload(model_id)

    @property
    def paused(self) -> bool:
        return self._dispatch.paused

    @property
    def closed(self) -> bool:
        return self._dispatch.closed

    @property
    def stats(self) -> SchedulerStats:
        return self._dispatch.stats

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event)`` for every scheduler event (``tierlm.shell.events``);
        returns a remover."""
        listeners = self._dispatch.listeners
        listeners.append(listener)
        return lambda: listeners.remove(listener)

    # -- submitting -----------------------------------------------------------

    def submit(
        self,
        class_name: str,
        model_id: str,
        work: Work[T],
        producer: str | None = None,
        subject: Subject | None = None,
        deadline: float | dt.datetime | None = None,
    ) -> JobHandle[T]:
        """Queue ``work`` (``async def work(ctx) -> T``) as a job of ``class_name``.

        ``deadline`` is in scheduler-clock seconds (``now()``) or a timezone-aware
        ``datetime``; a fair-pool job past it is promoted to T3 (docs/design.md §4).
        """
        arguments.check_work(work)
        make_handle: Callable[[Job, asyncio.Future[T], CancelFn[T]], JobHandle[T]] = JobHandle
        return self._submit(class_name, model_id, work, producer, subject, deadline, make_handle)

    def submit_generation(
        self,
        class_name: str,
        request: GenerationRequest,
        on_piece: Callable[[str], None],
        producer: str | None = None,
        subject: Subject | None = None,
        deadline: float | dt.datetime | None = None,
        *,
        on_run: Callable[[GenerationRun], None] | None = None,
        person: Sequence[str] = (),
    ) -> GenerationHandle:
        """Queue a streamed generation of ``request``: the one entry point for
        streaming (``generate`` and the gateway use it).

        Every piece (one per token) goes to ``on_piece`` once, as it is
        produced; a preempted generation RESUMES (docs/design.md §4.9,
        §6.8), so the pieces form one continuous stream however often it was
        preempted. ``on_run`` is told each run's token count and token times
        when the run ends (the gateway's metrics). The handle is returned at
        once; it also holds the pieces so far and the first token's time. Its
        result is the whole text. ``person``: whose turns a chat takes,
        ``(who,)`` or ``(who, name)`` (docs/design.md §4.2); empty: its producer's.
        """
        generation = ResumingGeneration(request, on_piece, on_run)

        def make_handle(
            job: Job, future: asyncio.Future[str], cancel: CancelFn[str]
        ) -> GenerationHandle:
            return GenerationHandle(job, future, cancel, generation)

        return self._submit(
            class_name,
            request.model_id,
            generation,
            producer,
            subject,
            deadline,
            make_handle,
            arguments.check_person(person),
        )

    def _submit(
        self,
        class_name: str,
        model_id: str,
        work: Work[T],
        producer: str | None,
        subject: Subject | None,
        deadline: float | dt.datetime | None,
        make_handle: Callable[[Job, asyncio.Future[T], CancelFn[T]], H],
        person: Person = (),
    ) -> H:
        loop = self._bind_loop()
        if self._dispatch.closed:
            raise SchedulerClosedError("submit: the scheduler is closed (aclose() was called)")
        task_class = arguments.task_class(self.classes, class_name)
        now = loop.time()
        job = Job(
            id=next(self._ids),
            task_class=task_class,
            model_id=arguments.check_model_id(model_id),
            producer=arguments.check_producer(producer, task_class.name),
            subject=arguments.check_subject(subject),
            deadline=arguments.deadline_at(deadline, now),
            submitted_at=now,
            person=person,
        )
        future: asyncio.Future[T] = loop.create_future()
        # A job whose caller never awaits it must not log "exception never retrieved".
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        handle = make_handle(job, future, self._dispatch.cancel)
        self._dispatch.add(Entry(job, work, future, handle, Journal(self._journals)), now)
        return handle

    async def run(
        self,
        class_name: str,
        model_id: str,
        work: Work[T],
        producer: str | None = None,
        subject: Subject | None = None,
        deadline: float | dt.datetime | None = None,
    ) -> T:
        """``await submit(...)``; if the awaiting task is cancelled, so is the job."""
        handle = self.submit(class_name, model_id, work, producer, subject, deadline)
        try:
            return await handle
        except asyncio.CancelledError:
            handle.cancel()
            raise

    def generate(
        self,
        class_name: str,
        model_id: str,
        messages: Sequence[Message] | None = None,
        max_tokens: int = 128,
        producer: str | None = None,
        subject: Subject | None = None,
        *,
        prompt: str | None = None,
        deadline: float | dt.datetime | None = None,
        **options: Any,
    ) -> AsyncIterator[str]:
        """Stream generated text as one job; the common case (docs/design.md §2).

        A preempted generation RESUMES (docs/design.md §4, §6.8): the text already
        produced is kept and streamed once, and the next run continues from
        prompt + partial output. The caller sees one continuous stream. Leaving
        the ``async for`` early cancels the job.
        """
        arguments.task_class(self.classes, class_name)
        # Validates model_id, prompt/messages and max_tokens now, not at first read.
        request = GenerationRequest(
            model_id=model_id, prompt=prompt, messages=messages, max_tokens=max_tokens, **options
        )
        return self._stream(class_name, request, producer, subject, deadline)

    async def _stream(
        self,
        class_name: str,
        request: GenerationRequest,
        producer: str | None,
        subject: Subject | None,
        deadline: float | dt.datetime | None,
    ) -> AsyncIterator[str]:
        pieces: asyncio.Queue[str | None] = asyncio.Queue()
        handle = self.submit_generation(
            class_name, request, pieces.put_nowait, producer, subject, deadline
        )
        handle.add_done_callback(lambda _: pieces.put_nowait(None))
        try:
            while (piece := await pieces.get()) is not None:
                yield piece
            handle.result()  # raise the job's error or Cancelled, if any
        finally:
            if not handle.done():
                handle.cancel()

    # -- foreground -----------------------------------------------------------

    def set_foreground(self, class_name: str | None, subject: Subject | None = None) -> None:
        """The person is looking at ``class_name`` (and ``subject``); None clears.

        Its jobs become T1 (docs/design.md §4.1 (rule 2), §6.2) and may preempt.
        """
        self._bind_loop()
        if class_name is None:
            foreground = None
        else:
            arguments.task_class(self.classes, class_name)
            foreground = Foreground(class_name, arguments.check_subject(subject))
        now = self.now()
        self.policy.set_foreground(foreground, now)
        self._dispatch.emit(ForegroundChanged(now, foreground))
        self._dispatch.reschedule()

    # -- observing --------------------------------------------------------------

    @property
    def loaded_model(self) -> str | None:
        return self._dispatch.model

    def queue_positions(self) -> Mapping[int, tuple[int, int]]:
        """{job id: (effective tier, position)} of every queued job; position 1
        runs next. The policy's real dispatch order (``Policy.queue_order``:
        tiers, each tier's order, affinity), cached until the next event."""
        version, positions = self._positions
        if version != self._dispatch.version:
            now = self.now()
            order = self.policy.queue_order(now, self._dispatch.model)
            tier = self.policy.tier
            positions = {job.id: (tier(job, now), i) for i, job in enumerate(order, 1)}
            self._positions = (self._dispatch.version, positions)
        return positions

    def _info(self, entry: Entry[Any], now: float, position: int | None = None) -> JobInfo:
        job = entry.job
        return JobInfo(
            id=job.id,
            class_name=job.class_name,
            model_id=job.model_id,
            producer=job.producer,
            subject=job.subject,
            deadline=job.deadline,
            tier=self.policy.tier(job, now),
            state=entry.handle.state.value,
            submitted_at=job.submitted_at,
            waited=now - job.submitted_at,
            preemptions=entry.preemptions,
            position=position,
        )

    def snapshot(self) -> SchedulerSnapshot:
        """The running job, queued jobs per tier in dispatch order, loaded model,
        vruntime per producer, budget share per class, counters (docs/design.md §2)."""
        now = self.now()
        dispatch = self._dispatch
        queued: dict[int, list[JobInfo]] = {tier: [] for tier in range(5)}
        for position, job in enumerate(self.policy.queue_order(now, dispatch.model), 1):
            entry = dispatch.entries.get(job.id)
            if entry is not None:
                info = self._info(entry, now, position)
                queued[info.tier].append(info)
        for entry in dispatch.survivors.held:  # docs/design.md §4.9: queued, outside the policy
            info = self._info(entry, now)
            queued[info.tier].append(info)
        # All slots, best-ranked first (by effective tier, then start order);
        # ``running`` stays the best-ranked one (docs/design.md §2.3).
        running = sorted(dispatch.running.values(), key=lambda e: self.policy.tier(e.job, now))
        caps = {name: c.budget.share for name, c in self.classes.items() if c.budget is not None}
        return SchedulerSnapshot(
            now=now,
            running=self._info(running[0], now) if running else None,
            running_since=running[0].started_at if running else None,
            running_jobs=[self._info(e, now) for e in running],
            slots=dispatch.slots,
            swapping_to=dispatch.swapping_to,
            loaded_model=dispatch.model,
            queued=queued,
            foreground=self.policy.foreground,
            paused=dispatch.paused,
            closed=dispatch.closed,
            vruntime=self.policy.vruntimes(now),
            budget_share=self.policy.budget_shares(now),
            budget_cap=caps,
            stats=replace(dispatch.stats),
            stuck=[self._info(e, now) for e in dispatch.stuck.values()],
            policy=self.policy.name,
            journal_bytes=self._journals.used,
        )
