"""The shell's engine room: the jobs, the device, and doing what the policy says.

``Scheduler`` (the public API) checks what callers pass and hands jobs here. The
``Dispatcher`` owns the jobs, the running jobs (one per slot of the device) and
their cancel tokens, the loaded model, the wake-up timer and the lifecycle
flags; at every event it describes the device to the policy (``Device``), gets
one plan back (``Decision``) and applies it: start jobs, swap through the
runner, stop jobs at their next token boundary, re-queue, resolve handles, tell
listeners (docs/design.md §1.1, §2.2, §4). It makes no scheduling
decision itself. A job's state moves only in ``_transition`` (one table).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tierlm.core.classes import Tier
from tierlm.core.config import SchedulerConfig
from tierlm.core.policy import Policy
from tierlm.runners.cancellation import Cancelled, CancelReason, CancelToken
from tierlm.runners.errors import DeviceCrashed, RunnerError
from tierlm.runners.protocol import Runner, Unloadable, abilities_of
from tierlm.shell.decision_clock import DecisionClock
from tierlm.shell.device_view import describe
from tierlm.shell.entries import Entry, Outcome, Raised, Reclass, Returned, Stopped, transition
from tierlm.shell.events import (
    JobCancelled,
    JobCompleted,
    JobFailed,
    JobStarted,
    JobStuck,
    JobSubmitted,
    ModelReturned,
    Paused,
    Preempting,
    Requeued,
    Resumed,
    SchedulerEvent,
    SwapFinished,
    SwapStarted,
)
from tierlm.shell.handles import JobContext, JobHandle, JobState
from tierlm.shell.snapshot import SchedulerStats
from tierlm.shell.survivors import Survivors

__all__ = ["Dispatcher", "Entry", "Listener"]

logger = logging.getLogger("tierlm")

T = TypeVar("T")
Listener = Callable[[SchedulerEvent], None]


class Dispatcher:
    """Runs jobs on one device as the policy decides (module docstring)."""

    def __init__(self, runner: Runner, policy: Policy, config: SchedulerConfig) -> None:
        self.runner = runner
        self.policy = policy
        self.config = config
        self.stats = SchedulerStats()
        self.entries: dict[int, Entry[Any]] = {}
        self.running: dict[int, Entry[Any]] = {}
        """The jobs holding a slot, by id, in the order they started."""
        # What the runner can do (runners.protocol.Abilities): its slots, step
        # cost curve, swap estimate before one is measured (docs/design.md
        # §4.8), and whether it resumes from KV snapshots, so that its slices
        # need not stretch (§4.6 (a slice worth its resume)).
        abilities = abilities_of(runner)
        self.slots: int = abilities.slots
        self.step_cost: tuple[float, ...] = abilities.step_cost
        self.swap_estimate: float | None = abilities.swap_estimate
        self.restores_kv = abilities.restores_kv
        self.model: str | None = runner.loaded_model
        """The model the device holds, or is swapping to."""
        self.swapping_to: str | None = None
        self.paused = False
        self.held = 0
        """Device operations waiting for, or holding, the device: nothing new starts."""
        self.closed = False
        self.stuck: dict[int, Entry[Any]] = {}
        self.survivors = Survivors()
        self.listeners: list[Listener] = []
        self.version = 0
        """Bumped at every event and decision: caches of derived views key on it."""
        self.loop: asyncio.AbstractEventLoop | None = None
        self._idle: asyncio.Event | None = None
        self.clock = DecisionClock(self.reschedule)
        self._returning: asyncio.Task[None] | None = None  # a swap back (Decision.load)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = self.clock.loop = loop
        self._idle = asyncio.Event()
        self._idle.set()

    def now(self) -> float:
        assert self.loop is not None
        return self.loop.time()

    def emit(self, event: SchedulerEvent) -> None:
        """Tell every listener. Listeners run synchronously inside the
        scheduler's step: one that raises is logged and the rest still hear the
        event, so no listener can break the scheduler (docs/design.md §2.5)."""
        self.version += 1
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception:
                logger.exception("listener %r failed on %s", listener, type(event).__name__)

    # -- what the API asks ------------------------------------------------------

    def add(self, entry: Entry[Any], now: float) -> None:
        """A new job: into the queue, then decide (``_decide_this_instant``)."""
        self.entries[entry.job.id] = entry
        self.stats.submitted += 1
        self.policy.submit(entry.job, now)
        self.emit(JobSubmitted(now, entry.job))
        self._decide_this_instant()

    def cancel(self, handle: JobHandle[Any], reason: CancelReason) -> bool:
        """``JobHandle.cancel``: queued, removed at once; running, stopped."""
        entry = self.entries.get(handle.id)
        if entry is None or entry.future.done():
            return False
        if self.running.get(entry.job.id) is entry:
            if entry.cancel_requested is not None:
                return False
            entry.cancel_requested = reason
            self.stop_running(entry, reason)
            return True
        self.policy.remove(entry.job, self.now())
        self._resolve(entry, Stopped(reason))
        self.reschedule()
        return True

    def reclass(self, handle: JobHandle[Any], change: Reclass) -> bool:
        """``Scheduler.reclass``: queued, moved at once; running, preempted
        and re-queued as the new one when its run ends (``_finish``)."""
        entry = self.entries.get(handle.id)
        if entry is None or entry.future.done() or entry.cancel_requested is not None:
            return False
        if self.running.get(entry.job.id) is entry:
            entry.reclass = change
            self.stop_running(entry, CancelReason.PREEMPTED)
            return True
        now = self.now()
        queued = entry not in self.survivors.held  # a crash's survivor waits outside
        if queued:
            self.policy.remove(entry.job, now)
        change.apply(entry.job)
        if queued:
            self.policy.submit(entry.job, now)
            self.reschedule()
        return True

    def close(self) -> None:
        """Queued jobs end with ``Cancelled(SHUTDOWN)``; the running one is stopped."""
        self.closed = True
        self.clock.cancel()
        now = self.now()
        for entry in list(self.entries.values()):
            if entry.job.id not in self.running:
                self.policy.remove(entry.job, now)
                self._resolve(entry, Stopped(CancelReason.SHUTDOWN))
        for entry in list(self.running.values()):
            self.stop_running(entry, CancelReason.SHUTDOWN)

    def hold(self) -> None:
        """``pause()``: dispatch nothing; preempt a running re-queueable job."""
        self.paused = True
        self.clock.cancel()
        self.emit(Paused(self.now()))
        for entry in list(self.running.values()):
            if entry.job.task_class.requeue:
                # The app is leaving the device to its other user (seed scenario 8):
                # stopped at once, a prompt evaluation too, not yielded
                # (docs/design.md §4.6, §4.10).
                self.stop_running(entry, CancelReason.PREEMPTED)

    def release(self) -> None:
        """``resume()``: dispatch again."""
        self.paused = False
        self.emit(Resumed(self.now()))
        self.reschedule()

    async def idle(self) -> None:
        """Return once no job runs (on any slot)."""
        assert self._idle is not None
        await self._idle.wait()

    async def exclusive(self, operation: Callable[[], Awaitable[T]]) -> T:
        """Run ``operation`` (a load, an unload) on the device with no job on it:
        no job starts from now, and the running one (if any) ends first; it is
        still preempted for a better one, which then waits for the operation.
        The loaded model is the runner's afterwards."""
        self.held += 1
        try:
            while self.running or self._returning is not None:
                if self._returning is not None:
                    await asyncio.shield(self._returning)
                else:
                    await self.idle()
            return await operation()
        finally:
            self.held -= 1
            self.model = self.runner.loaded_model
            self.reschedule()

    async def unload(self, model_id: str | None) -> str | None:
        """``Scheduler.unload_model``: the runner's unload, run ``exclusive``."""
        runner = self.runner
        if not isinstance(runner, Unloadable):
            raise RunnerError(f"{type(runner).__name__} cannot unload its model")

        async def unload() -> str | None:
            loaded = runner.loaded_model
            if loaded is None or model_id not in (None, loaded):
                return None
            await runner.unload()
            return loaded

        return await self.exclusive(unload)

    # -- the decision point -----------------------------------------------------

    def reschedule(self) -> None:
        """Describe the device to the policy, apply its plan (docs/design.md §2.2)."""
        if self.closed or self.loop is None:
            return
        self.version += 1
        now = self.loop.time()
        survivor = self.survivors.next(lambda e: self.policy.tier(e.job, now))
        if survivor is not None:  # docs/design.md §4.9: back to the front of its tier
            self.policy.requeue(survivor.job, now)
        device = describe(
            now,
            self.model,
            self.slots,
            self.running,
            can_start=not (self.paused or self.held or self.swapping_to is not None),
            restores_kv=self.restores_kv,
            swap_estimate=self.swap_estimate,
            step_cost=self.step_cost,
        )
        decision = self.policy.decide(now, device)
        for job, reason in decision.stop:
            self.stop_running(self.running[job.id], reason)
        for job in decision.start:
            self._start(self.entries[job.id], now)
        if decision.load is not None and not self.running and self.swapping_to is None:
            self._return_to(decision.load)
        self.clock.arm(now, None if self.paused else decision.wake_at)

    # -- running a job ----------------------------------------------------------

    def _start(self, entry: Entry[Any], now: float) -> None:
        assert self.loop is not None and self._idle is not None
        entry.token = CancelToken()
        entry.attempts += 1
        transition(entry, JobState.RUNNING)
        self.running[entry.job.id] = entry
        entry.started_at = now
        entry.context = None  # the new run's, once its work begins
        if self.model != entry.job.model_id or self.runner.loaded_model != entry.job.model_id:
            # Its swap starts now: no other sequence joins until it is done
            # (a swap empties every slot, docs/design.md §4.7).
            self.swapping_to = entry.job.model_id
        self._idle.clear()
        self.emit(JobStarted(now, entry.job, entry.attempts))
        entry.task = self.loop.create_task(self._run(entry, entry.token))

    async def _run(self, entry: Entry[Any], token: CancelToken) -> None:
        job = entry.job
        outcome: Outcome
        try:
            if self.model != job.model_id or self.runner.loaded_model != job.model_id:
                await self._swap(entry, job.model_id)
            token.raise_if_cancelled()
            entry.journal.start_run()
            ctx = JobContext(
                job.id,
                job.model_id,
                self.runner,
                token,
                entry.attempts,
                entry.journal,
                on_direct=lambda: self._drives_runner(entry),
            )
            ctx.person = self.policy.tier(job, self.now()) <= Tier.T1
            entry.context = ctx
            if self.slots > 1:
                # docs/design.md §4.7: a person's first token ends the prompt
                # guard, and the sequences it cut may rejoin: decide again.
                ctx.on_first_token = self.clock.soon
            outcome = Returned(await entry.work(ctx))
        except Cancelled as exc:
            outcome = Stopped(token.reason or exc.reason)
        except asyncio.CancelledError:
            # Forced after cancel_grace (see _on_stuck), or the loop is closing.
            outcome = Stopped(token.reason or CancelReason.SHUTDOWN)
        except Exception as exc:
            # Level-triggered cancel: an error raised while stopping (a closed
            # stream, say) is the stop, not a failure of the job.
            outcome = Stopped(token.reason) if token.reason is not None else Raised(exc)
        self._finish(entry, outcome)

    async def _swap(self, entry: Entry[Any], model_id: str) -> None:
        """Load ``model_id`` for ``entry``'s job (docs/design.md §4)."""
        previous = self.model
        self.emit(SwapStarted(self.now(), entry.job, previous))
        seconds = await self._load(model_id)
        self.emit(SwapFinished(self.now(), entry.job, previous, seconds))
        self.reschedule()  # the other slots may fill now (docs/design.md §4.7)

    async def _load(self, model_id: str) -> float:
        """Load ``model_id``; not interruptible (docs/design.md §4), counted
        and timed: its seconds."""
        started = self.now()
        self.swapping_to = model_id
        self.model = model_id
        try:
            await self.runner.load(model_id)
        except asyncio.CancelledError:
            raise
        except RunnerError:
            self.model = self.runner.loaded_model
            raise
        except Exception as exc:
            self.model = self.runner.loaded_model
            raise RunnerError(
                f"model {model_id!r}: load failed: {type(exc).__name__}: {exc}", model_id=model_id
            ) from exc
        finally:
            self.swapping_to = None
        ended = self.now()
        self.stats.swaps += 1
        self.stats.swap_seconds += ended - started
        self.policy.swapped(model_id, ended - started, ended)
        return ended - started

    def _return_to(self, model_id: str) -> None:
        """Load ``model_id`` with no job (``Decision.load``, docs/design.md §4.8 (excursions)), a
        swap like any other; a chat arriving meanwhile waits
        only for its rest."""
        assert self.loop is not None
        self.swapping_to = model_id
        self._returning = self.loop.create_task(self._swap_back(model_id))

    async def _swap_back(self, model_id: str) -> None:
        previous = self.model
        try:
            seconds = await self._load(model_id)
        except RunnerError as exc:  # nobody waits on it: the next job's swap retries
            logger.warning("going back to %r failed: %s", model_id, exc)
        else:
            self.emit(ModelReturned(self.now(), model_id, previous, seconds))
        finally:
            self._returning = None
        self.reschedule()

    def _drives_runner(self, entry: Entry[Any]) -> None:
        """Its work uses ``ctx.runner`` itself: a preemption makes it start over
        (docs/design.md §4.6 (preemption kinds)). It keeps its one slot (§4.7):
        its calls are one sequence of the batch, like ``ctx.generate``'s."""
        if entry.job.resumable:
            entry.job.resumable = False
            self.reschedule()

    def stop_running(self, entry: Entry[Any], reason: CancelReason) -> None:
        assert entry.token is not None and self.loop is not None
        token = entry.token
        first = not token.cancelled
        aborted = token.aborts_prompt
        if not token.cancel(reason):
            return  # already stopping for this reason or a stronger one
        if first and reason.preempts:  # a yield cut short counts once
            self.stats.preemptions += 1
            self.emit(Preempting(self.loop.time(), entry.job, reason))
        # The grace runs from the first cancel that must stop the job within a
        # token. A yield lets a prompt evaluation finish first, however long it
        # takes (docs/design.md §4.6), so it starts none.
        if token.aborts_prompt and not aborted:
            self.loop.call_later(self.config.cancel_grace, self._on_stuck, entry, token)

    def _on_stuck(self, entry: Entry[Any], token: CancelToken) -> None:
        """A cancelled job did not stop within ``cancel_grace``: report, then force."""
        if self.running.get(entry.job.id) is not entry or entry.token is not token:
            return
        assert self.loop is not None and entry.task is not None
        if self.swapping_to is not None and self.swapping_to == entry.job.model_id:
            # A swap is not interruptible; the grace starts after it.
            self.loop.call_later(self.config.cancel_grace, self._on_stuck, entry, token)
            return
        self.stats.stuck += 1
        self.stuck[entry.job.id] = entry
        logger.warning(
            "job #%d (%s on %s) did not stop within %.1f s of its cancel (%s); cancelling its task",
            entry.job.id,
            entry.job.class_name,
            entry.job.model_id,
            self.config.cancel_grace,
            token.reason.value if token.reason else "?",
        )
        self.emit(JobStuck(self.loop.time(), entry.job))
        entry.task.cancel()

    def _finish(self, entry: Entry[Any], outcome: Outcome) -> None:
        assert self._idle is not None
        now = self.now()
        job = entry.job
        self.policy.finished(job, now)
        if entry.reclass is not None:  # docs/design.md §4.11: re-queued as the new one
            entry.reclass.apply(job)
            entry.reclass = None
        self.running.pop(job.id, None)
        reported = self.survivors.run_ended(entry)
        entry.started_at = None
        entry.context = None
        self.stuck.pop(job.id, None)
        if isinstance(outcome, Stopped):
            reason = entry.cancel_requested or outcome.reason
            # A person's chat is not re-queued, except when it yields its slot
            # to another person's turn (docs/design.md §4.7): it resumes.
            turn = reason is CancelReason.YIELD and job.task_class.tier == Tier.T0
            if reason.preempts and (job.task_class.requeue or turn) and not self.closed:
                entry.preemptions += 1
                transition(entry, JobState.QUEUED)
                self.stats.requeues += 1
                self.policy.requeue(job, now)
                self.emit(Requeued(now, job))
            else:
                # Its caller is told "preempted", whichever kind stopped it:
                # the difference is the device's, not the caller's.
                preempted = CancelReason.PREEMPTED if reason.preempts else reason
                self._resolve(entry, Stopped(preempted))
        elif isinstance(outcome, Raised) and isinstance(outcome.error, DeviceCrashed):
            # docs/design.md §4.9: held, then re-admitted one at a time
            # (survivors.py); the one that crashes it again alone fails.
            resumable = job.resumable and not self.closed
            error = self.survivors.crashed(entry, outcome.error, resumable, reported, self.running)
            if error is None:
                transition(entry, JobState.QUEUED)
                self.stats.requeues += 1
                logger.warning(
                    "job #%d (%s) held after a crash of the device", job.id, job.class_name
                )
                self.emit(Requeued(now, job))
            else:
                self._resolve(entry, Raised(error))
        else:
            self._resolve(entry, outcome)
        if not self.running:
            self._idle.set()
        self._decide_this_instant()

    def _decide_this_instant(self) -> None:
        """Decide now on one slot; on k, once the events of this instant are
        all in (docs/design.md §4.7 (persons in turn on slots): decided per
        event, the first person's five chats sent at once took five free
        slots before nine others' first chats were queued, and chats ending
        together were refilled one by one, each end a person's turn)."""
        if self.slots == 1:
            self.reschedule()
        else:
            self.clock.this_instant()

    def _resolve(self, entry: Entry[Any], outcome: Outcome) -> None:
        """End a job for good: exactly once (docs/design.md §7 (invariants))."""
        job = entry.job
        self.entries.pop(job.id, None)
        self.survivors.resolved(entry)
        entry.journal.clear()  # docs/design.md §4: a journal ends with its job
        if entry.future.done():
            return
        now = self.now()
        if isinstance(outcome, Returned):
            transition(entry, JobState.DONE)
            self.stats.completed += 1
            entry.future.set_result(outcome.value)
            self.emit(JobCompleted(now, job))
        elif isinstance(outcome, Raised):
            transition(entry, JobState.FAILED)
            self.stats.failed += 1
            entry.future.set_exception(outcome.error)
            logger.info("job #%d (%s) failed: %r", job.id, job.class_name, outcome.error)
            self.emit(JobFailed(now, job, outcome.error))
        else:
            transition(entry, JobState.CANCELLED)
            self.stats.cancelled += 1
            detail = ""
            if outcome.reason is CancelReason.PREEMPTED:
                detail = f"{job.class_name} jobs are not re-queued (class requeue=False)"
            entry.future.set_exception(Cancelled(outcome.reason, detail))
            self.emit(JobCancelled(now, job, outcome.reason))
