"""The asyncio shell around the policy (docs/design.md §1 scheduler, §2 public API).

It owns the queue's jobs, the running job, cancel tokens, the wake-up timer and
the lifecycle; it asks the policy (`tierlm.core`) what to do at every event and
does it: dispatch, swap through the runner, stop a job at its next token
boundary, re-queue, resolve handles. It makes no scheduling decision itself.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import itertools
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any, Generic, TypeVar

from tierlm.core.classes import TaskClass, resolve_classes
from tierlm.core.config import SchedulerConfig
from tierlm.core.jobs import Foreground, Job, Subject
from tierlm.core.policy import Policy
from tierlm.core.tiered import TieredPolicy
from tierlm.handles import JobContext, JobHandle, JobState, resuming_work
from tierlm.runners.protocol import (
    Cancelled,
    CancelReason,
    CancelToken,
    GenerationRequest,
    Message,
    Runner,
    RunnerError,
)
from tierlm.snapshot import (
    EventKind,
    JobInfo,
    SchedulerEvent,
    SchedulerSnapshot,
    SchedulerStats,
)

__all__ = ["Scheduler", "SchedulerClosedError"]

logger = logging.getLogger("tierlm")

T = TypeVar("T")
Work = Callable[[JobContext], Awaitable[T]]
Listener = Callable[[SchedulerEvent], None]


class SchedulerClosedError(RuntimeError):
    """The scheduler was closed (``aclose()``); it accepts no new jobs."""


@dataclass(eq=False, slots=True)
class _Entry(Generic[T]):
    """The shell's side of a job: its work, future, handle and current run."""

    job: Job
    work: Work[T]
    future: asyncio.Future[T]
    handle: JobHandle[T]
    token: CancelToken | None = None
    task: asyncio.Task[None] | None = None
    attempts: int = 0
    preemptions: int = 0
    cancel_requested: CancelReason | None = None
    swapping: bool = False


_Outcome = tuple[str, Any]  # ("ok", value) | ("error", exc) | ("cancelled", reason)


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
        self.stats = SchedulerStats()
        self._ids = itertools.count(1)
        self._entries: dict[int, _Entry[Any]] = {}
        self._running: _Entry[Any] | None = None
        self._running_since: float | None = None
        self._model: str | None = runner.loaded_model
        self._swapping_to: str | None = None
        self._paused = False
        self._closed = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when: float | None = None
        self._idle: asyncio.Event | None = None
        self._stuck: dict[int, _Entry[Any]] = {}
        self._listeners: list[Listener] = []
        self._loop: asyncio.AbstractEventLoop | None = None

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
        if self._loop is None:
            self._loop = loop
            self._idle = asyncio.Event()
            self._idle.set()
        elif self._loop is not loop:
            raise RuntimeError("Scheduler: used from a different event loop than it started on")
        return loop

    def now(self) -> float:
        """The scheduler's clock: the event loop's time, in seconds."""
        return self._bind_loop().time()

    async def aclose(self) -> None:
        """Resolve every handle (result, error or cancelled) and stop.

        Queued jobs end with ``Cancelled(SHUTDOWN)``; the running job is stopped
        at its next token boundary and ends the same way (a chat too: it yields
        only to its caller or to shutdown). Nothing hangs, nothing is dropped.
        """
        if self._loop is None:
            self._closed = True
            return
        if not self._closed:
            self._closed = True
            self._cancel_timer()
            now = self.now()
            for entry in list(self._entries.values()):
                if entry is not self._running:
                    self.policy.remove(entry.job, now)
                    self._resolve(entry, ("cancelled", CancelReason.SHUTDOWN))
            if self._running is not None:
                self._stop_running(CancelReason.SHUTDOWN)
        running = self._running
        if running is not None and running.task is not None:
            await asyncio.wait({running.task})

    async def pause(self) -> None:
        """The app went to the background (docs/design.md §4 lifecycle, seed scenario 8).

        Nothing new is dispatched; a running re-queueable job is preempted and
        re-queued; a running chat (or other non-re-queueable job) finishes.
        Queued work stays queued. Returns once the device is idle.
        """
        self._bind_loop()
        if not self._paused:
            self._paused = True
            self._cancel_timer()
            self._emit(EventKind.PAUSED, None)
            running = self._running
            if running is not None and running.job.task_class.requeue:
                self._stop_running(CancelReason.PREEMPTED)
        assert self._idle is not None
        await self._idle.wait()

    def resume(self) -> None:
        """Undo ``pause()``: dispatch again."""
        self._bind_loop()
        if self._paused:
            self._paused = False
            self._emit(EventKind.RESUMED, None)
            self._reschedule()

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def closed(self) -> bool:
        return self._closed

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event)`` for every scheduler event; returns a remover."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

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
        loop = self._bind_loop()
        if self._closed:
            raise SchedulerClosedError("submit: the scheduler is closed (aclose() was called)")
        task_class = self._task_class(class_name)
        if not isinstance(model_id, str) or not model_id:
            raise ValueError(f"model_id: must be a non-empty string, got {model_id!r}")
        if not callable(work) or not (
            inspect.iscoroutinefunction(work)
            or inspect.iscoroutinefunction(getattr(work, "__call__", None))  # noqa: B004
        ):
            raise TypeError(f"work: must be an async function `async def work(ctx)`, got {work!r}")
        if producer is None:
            producer = task_class.name
        elif not isinstance(producer, str) or not producer:
            raise ValueError(f"producer: must be a non-empty string or None, got {producer!r}")
        if subject is not None and not isinstance(subject, str | int):
            raise TypeError(f"subject: must be a str, an int or None, got {type(subject).__name__}")
        now = loop.time()
        job = Job(
            id=next(self._ids),
            task_class=task_class,
            model_id=model_id,
            producer=producer,
            subject=subject,
            deadline=self._deadline(deadline, now),
            submitted_at=now,
        )
        future: asyncio.Future[T] = loop.create_future()
        # A job whose caller never awaits it must not log "exception never retrieved".
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        handle = JobHandle(job, future, self._cancel_handle)
        self._entries[job.id] = _Entry(job, work, future, handle)
        self.stats.submitted += 1
        self.policy.submit(job, now)
        self._emit(EventKind.SUBMITTED, job)
        self._reschedule()
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
        self._task_class(class_name)
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
        work = resuming_work(request, pieces.put_nowait)
        handle = self.submit(class_name, request.model_id, work, producer, subject, deadline)
        handle.add_done_callback(lambda _: pieces.put_nowait(None))
        try:
            while (piece := await pieces.get()) is not None:
                yield piece
            handle.result()  # raise the job's error or Cancelled, if any
        finally:
            if not handle.done():
                handle.cancel()

    def _task_class(self, class_name: str) -> TaskClass:
        task_class = self.classes.get(class_name) if isinstance(class_name, str) else None
        if task_class is None:
            known = ", ".join(sorted(self.classes))
            raise ValueError(f"class: unknown task class {class_name!r}; known classes: {known}")
        return task_class

    def _deadline(self, deadline: float | dt.datetime | None, now: float) -> float | None:
        if deadline is None:
            return None
        if isinstance(deadline, dt.datetime):
            if deadline.tzinfo is None:
                raise ValueError("deadline: a datetime must be timezone-aware")
            # Map wall-clock time onto the loop clock (the shell may read clocks).
            return now + (deadline.timestamp() - time.time())
        if (
            isinstance(deadline, bool)
            or not isinstance(deadline, int | float)
            or not math.isfinite(deadline)
        ):
            raise TypeError(
                f"deadline: must be seconds on the scheduler clock (a finite number), "
                f"a timezone-aware datetime, or None; got {deadline!r}"
            )
        return float(deadline)

    # -- foreground -----------------------------------------------------------

    def set_foreground(self, class_name: str | None, subject: Subject | None = None) -> None:
        """The person is looking at ``class_name`` (and ``subject``); None clears.

        Its jobs become T1 (docs/design.md §4 rule 2, §6.2) and may preempt.
        """
        self._bind_loop()
        if class_name is None:
            foreground = None
        else:
            self._task_class(class_name)
            if subject is not None and not isinstance(subject, str | int):
                raise TypeError(f"subject: must be a str, an int or None, got {subject!r}")
            foreground = Foreground(class_name, subject)
        self.policy.set_foreground(foreground, self.now())
        self._emit(EventKind.FOREGROUND, None, foreground=foreground)
        self._reschedule()

    # -- the decision point -----------------------------------------------------

    def _reschedule(self) -> None:
        """Ask the policy what to do now, and do it (docs/design.md §4 preemption)."""
        if self._closed or self._loop is None:
            return
        now = self._loop.time()
        running = self._running
        if running is not None:
            assert running.token is not None
            if not running.token.cancelled and self.policy.should_preempt(
                running.job, now, self._model
            ):
                self._stop_running(CancelReason.PREEMPTED)
        elif not self._paused:
            job = self.policy.pick(now, self._model)
            if job is not None:
                self._start(self._entries[job.id], now)
        self._arm_timer(now)

    def _arm_timer(self, now: float) -> None:
        when = None if self._paused else self.policy.next_wakeup(now)
        if when is not None and when <= now:
            # A policy must report future times only; waking at `now` again would
            # spin forever at one instant (a livelock on a virtual clock).
            when = None
        if when == self._timer_when:
            return
        self._cancel_timer()
        if when is not None:
            assert self._loop is not None
            self._timer_when = when
            self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = self._timer_when = None
        self._reschedule()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timer_when = None

    # -- running a job ----------------------------------------------------------

    def _start(self, entry: _Entry[Any], now: float) -> None:
        assert self._loop is not None and self._idle is not None
        entry.token = CancelToken()
        entry.attempts += 1
        entry.handle.state = JobState.RUNNING
        self._running = entry
        self._running_since = now
        self._idle.clear()
        self.policy.started(entry.job, now)
        self._emit(EventKind.STARTED, entry.job, attempt=entry.attempts)
        entry.task = self._loop.create_task(self._run(entry, entry.token))

    async def _run(self, entry: _Entry[Any], token: CancelToken) -> None:
        job = entry.job
        outcome: _Outcome
        try:
            if self._model != job.model_id or self.runner.loaded_model != job.model_id:
                await self._swap(entry, job.model_id)
            token.raise_if_cancelled()
            ctx = JobContext(job.id, job.model_id, self.runner, token, entry.attempts)
            outcome = ("ok", await entry.work(ctx))
        except Cancelled as exc:
            outcome = ("cancelled", token.reason or exc.reason)
        except asyncio.CancelledError:
            # Forced after cancel_grace (see _on_stuck), or the loop is closing.
            outcome = ("cancelled", token.reason or CancelReason.SHUTDOWN)
        except Exception as exc:
            # Level-triggered cancel: an error raised while stopping (a closed
            # stream, say) is the stop, not a failure of the job.
            outcome = ("cancelled", token.reason) if token.cancelled else ("error", exc)
        self._finish(entry, outcome)

    async def _swap(self, entry: _Entry[Any], model_id: str) -> None:
        """Load ``model_id``; not interruptible (docs/design.md §4), counted and timed."""
        assert self._loop is not None
        started = self._loop.time()
        previous = self._model
        self._swapping_to = model_id
        entry.swapping = True
        self._model = model_id
        self._emit(EventKind.SWAP_STARTED, entry.job, previous=previous)
        try:
            await self.runner.load(model_id)
        except asyncio.CancelledError:
            raise
        except RunnerError:
            self._model = self.runner.loaded_model
            raise
        except Exception as exc:
            self._model = self.runner.loaded_model
            raise RunnerError(
                f"model {model_id!r}: load failed: {type(exc).__name__}: {exc}", model_id=model_id
            ) from exc
        finally:
            entry.swapping = False
            self._swapping_to = None
        finished = self._loop.time()
        seconds = finished - started
        self.stats.swaps += 1
        self.stats.swap_seconds += seconds
        self.policy.swapped(model_id, seconds, finished)
        self._emit(EventKind.SWAP_FINISHED, entry.job, previous=previous, seconds=seconds)

    def _stop_running(self, reason: CancelReason) -> None:
        entry = self._running
        assert entry is not None and entry.token is not None and self._loop is not None
        if not entry.token.cancel(reason):
            return  # already stopping for this reason: never counted twice
        if reason is CancelReason.PREEMPTED:
            self.stats.preemptions += 1
            self._emit(EventKind.PREEMPTING, entry.job)
        self._loop.call_later(self.config.cancel_grace, self._on_stuck, entry, entry.token)

    def _on_stuck(self, entry: _Entry[Any], token: CancelToken) -> None:
        """A cancelled job did not stop within ``cancel_grace``: report, then force."""
        if self._running is not entry or entry.token is not token or entry.task is None:
            return
        assert self._loop is not None
        if entry.swapping:  # a swap is not interruptible; the grace starts after it
            self._loop.call_later(self.config.cancel_grace, self._on_stuck, entry, token)
            return
        self.stats.stuck += 1
        self._stuck[entry.job.id] = entry
        logger.warning(
            "job #%d (%s on %s) did not stop within %.1f s of its cancel (%s); cancelling its task",
            entry.job.id,
            entry.job.class_name,
            entry.job.model_id,
            self.config.cancel_grace,
            token.reason.value if token.reason else "?",
        )
        self._emit(EventKind.STUCK, entry.job)
        entry.task.cancel()

    def _finish(self, entry: _Entry[Any], outcome: _Outcome) -> None:
        assert self._loop is not None and self._idle is not None
        now = self._loop.time()
        job = entry.job
        self.policy.finished(job, now)
        self._running = None
        self._running_since = None
        self._stuck.pop(job.id, None)
        kind, value = outcome
        if kind == "cancelled":
            reason = entry.cancel_requested or value
            if reason is CancelReason.PREEMPTED and job.task_class.requeue and not self._closed:
                entry.preemptions += 1
                entry.handle.state = JobState.QUEUED
                self.stats.requeues += 1
                self.policy.requeue(job, now)
                self._emit(EventKind.REQUEUED, job)
            else:
                self._resolve(entry, ("cancelled", reason))
        else:
            self._resolve(entry, outcome)
        self._idle.set()
        self._reschedule()

    def _resolve(self, entry: _Entry[Any], outcome: _Outcome) -> None:
        """End a job for good: exactly once (docs/design.md §7 invariant)."""
        kind, value = outcome
        self._entries.pop(entry.job.id, None)
        if entry.future.done():
            return
        if kind == "ok":
            entry.handle.state = JobState.DONE
            self.stats.completed += 1
            entry.future.set_result(value)
            self._emit(EventKind.COMPLETED, entry.job)
        elif kind == "error":
            entry.handle.state = JobState.FAILED
            self.stats.failed += 1
            entry.future.set_exception(value)
            logger.info("job #%d (%s) failed: %r", entry.job.id, entry.job.class_name, value)
            self._emit(EventKind.FAILED, entry.job, error=repr(value))
        else:
            entry.handle.state = JobState.CANCELLED
            self.stats.cancelled += 1
            detail = ""
            if value is CancelReason.PREEMPTED:
                detail = f"{entry.job.class_name} jobs are not re-queued (class requeue=False)"
            entry.future.set_exception(Cancelled(value, detail))
            self._emit(EventKind.CANCELLED, entry.job, reason=value.value)

    def _cancel_handle(self, handle: JobHandle[Any], reason: CancelReason) -> bool:
        entry = self._entries.get(handle.id)
        if entry is None or entry.future.done():
            return False
        if entry is self._running:
            if entry.cancel_requested is not None:
                return False
            entry.cancel_requested = reason
            self._stop_running(reason)
            return True
        self.policy.remove(entry.job, self.now())
        self._resolve(entry, ("cancelled", reason))
        self._reschedule()
        return True

    # -- observing --------------------------------------------------------------

    def _emit(self, kind: EventKind, job: Job | None, **detail: Any) -> None:
        if not self._listeners:
            return
        assert self._loop is not None
        event = SchedulerEvent(kind, self._loop.time(), job, detail)
        for listener in list(self._listeners):
            listener(event)

    def _info(self, entry: _Entry[Any], now: float) -> JobInfo:
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
        )

    @property
    def loaded_model(self) -> str | None:
        return self._model

    def snapshot(self) -> SchedulerSnapshot:
        """The running job, queued jobs per tier, loaded model, vruntime per
        producer, budget share per class, counters (docs/design.md §2)."""
        now = self.now()
        queued: dict[int, list[JobInfo]] = {tier: [] for tier in range(5)}
        for job in self.policy.queued():
            entry = self._entries.get(job.id)
            if entry is not None:
                info = self._info(entry, now)
                queued[info.tier].append(info)
        for infos in queued.values():
            infos.sort(key=lambda info: info.id)
        running = self._running
        caps = {name: c.budget.share for name, c in self.classes.items() if c.budget is not None}
        return SchedulerSnapshot(
            now=now,
            running=self._info(running, now) if running is not None else None,
            running_since=self._running_since,
            swapping_to=self._swapping_to,
            loaded_model=self._model,
            queued=queued,
            foreground=getattr(self.policy, "foreground", None),
            paused=self._paused,
            closed=self._closed,
            vruntime=self.policy.vruntimes(now),
            budget_share=self.policy.budget_shares(now),
            budget_cap=caps,
            stats=replace(self.stats),
            stuck=[self._info(e, now) for e in self._stuck.values()],
            policy=self.policy.name,
        )
