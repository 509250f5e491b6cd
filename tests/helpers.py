"""Shared helpers of the tests: the one bounded wait (``wait_until``), jobs that
spend simulated device time, and a recorder of who held the device when."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from tierlm import JobContext, JobHandle, JobStarted, RunEnded, Scheduler, SchedulerEvent
from tierlm.runners import GenerationRequest, SimulatedRunner

E = TypeVar("E")
T = TypeVar("T")

HANG_GUARD = 180.0
"""Seconds after which a wait that would otherwise hang fails: a bound on a
wait that the property under test ends, never a measure of speed (a real
model at load 25 on 2 cores answers a short chat in tens of seconds)."""


async def wait_until(
    probe: Callable[[], T | Awaitable[T]],
    what: str,
    *,
    until: Callable[[T], object] = bool,
    timeout: float = HANG_GUARD,
    every: float = 0.01,
) -> T:
    """Call ``probe()`` (a plain or an async function) every ``every`` seconds
    until ``until`` holds for what it returned (by default: until it returns
    something true); return that value. The one polling loop of the tests,
    for state that signals nothing (another thread's or process's).

    Seconds are the running loop's: virtual on the virtual-time loop, the
    wall clock's elsewhere. ``timeout`` is a hang guard, never a measure of
    speed: past it, an ``AssertionError`` naming ``what`` (what was awaited)
    and the last value the probe returned. ``probe`` may raise to end the
    wait early (a server process that exited)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if until(cast("T", value)):
            return cast("T", value)
        if loop.time() >= deadline:
            raise AssertionError(
                f"timed out after {timeout:g} s waiting for {what}; last: {value!r}"
            )
        await asyncio.sleep(every)


def wait_until_blocking(
    probe: Callable[[], T | Awaitable[T]],
    what: str,
    *,
    until: Callable[[T], object] = bool,
    timeout: float = HANG_GUARD,
    every: float = 0.01,
) -> T:
    """``wait_until`` for a test without an event loop of its own (a plain
    function watching a gateway in a thread or a process): the same wait,
    on a loop of its own; on a thread of its own where a loop already runs
    in this one (Playwright's sync API keeps one)."""
    wait = wait_until(probe, what, until=until, timeout=timeout, every=every)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait)
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, wait).result()


TOKEN = 0.05  # token interval of the tests' device: 20 tokens/s
SWAP = 10.0  # the seed's ~10 s swap


def runner(initial_model: str | None = "m1", **kw: Any) -> SimulatedRunner:
    kw.setdefault("swap_seconds", SWAP)
    return SimulatedRunner(token_interval=TOKEN, initial_model=initial_model, **kw)


def work_for(seconds: float) -> Callable[[JobContext], Awaitable[int]]:
    """A closure job that decodes for ``seconds`` (restarts from scratch if preempted)."""
    tokens = max(1, round(seconds / TOKEN))

    async def work(ctx: JobContext) -> int:
        sim = cast("SimulatedRunner", ctx.runner)
        request = GenerationRequest(ctx.model_id, prompt="x", max_tokens=tokens, prompt_tokens=1)
        outcome = await sim.complete(request, ctx.cancel)
        ctx.checkpoint()
        return outcome.tokens

    return work


def resumable_work_for(seconds: float) -> Callable[[JobContext], Awaitable[int]]:
    """A closure job that decodes for ``seconds`` and, re-run after a
    preemption, continues where it stopped instead of starting over (what a
    generation's resume, or a work function's journal, gives): slices inside
    the fair pool (docs/design.md §4) preempt long jobs, and only resuming
    work finishes under them."""
    tokens = max(1, round(seconds / TOKEN))
    done = [0]

    async def work(ctx: JobContext) -> int:
        # Through ctx.generate: the job's journal replays what earlier runs
        # produced and the interrupted call continues (docs/design.md §4).
        done[0] = 0
        async for _piece in ctx.generate(prompt="x", max_tokens=tokens, prompt_tokens=1):
            done[0] += 1
        return done[0]

    return work


@dataclass
class Run:
    job_id: int
    class_name: str
    producer: str
    model_id: str
    start: float
    end: float | None = None
    how: str | None = None  # completed / requeued / failed / cancelled


@dataclass
class Recorder:
    """Listens to a scheduler; keeps every run of every job, in order."""

    runs: list[Run] = field(default_factory=list)
    events: list[SchedulerEvent] = field(default_factory=list)
    open: dict[int, Run] = field(default_factory=dict)

    def __call__(self, event: SchedulerEvent) -> None:
        self.events.append(event)
        if isinstance(event, JobStarted):
            job = event.job
            run = Run(job.id, job.class_name, job.producer, job.model_id, event.time)
            self.runs.append(run)
            self.open[job.id] = run
        elif isinstance(event, RunEnded):
            run_or_none = self.open.pop(event.job.id, None)
            if run_or_none is not None:
                run_or_none.end = event.time
                run_or_none.how = event.outcome

    @classmethod
    def attach(cls, sched: Scheduler) -> Recorder:
        recorder = cls()
        sched.add_listener(recorder)
        return recorder

    def starts(self, job_id: int) -> list[float]:
        return [r.start for r in self.runs if r.job_id == job_id]

    def order(self) -> list[int]:
        return [r.job_id for r in self.runs]

    def kinds(self, kind: type[E]) -> list[E]:
        """The events of one type (``tierlm.shell.events``), in order."""
        return [e for e in self.events if isinstance(e, kind)]

    def busy_by_producer(self, start: float, end: float, now: float) -> dict[str, float]:
        """Device seconds each producer held within [start, end]."""
        return self._busy(start, end, now, lambda run: run.producer)

    def busy_by_class(self, start: float, end: float, now: float) -> dict[str, float]:
        """Device seconds each class held within [start, end]."""
        return self._busy(start, end, now, lambda run: run.class_name)

    def _busy(
        self, start: float, end: float, now: float, key: Callable[[Run], str]
    ) -> dict[str, float]:
        result: dict[str, float] = {}
        for run in self.runs:
            run_end = run.end if run.end is not None else now
            overlap = min(run_end, end) - max(run.start, start)
            if overlap > 0:
                result[key(run)] = result.get(key(run), 0.0) + overlap
        return result


async def first_token_time(stream: Any) -> tuple[float | None, str]:
    """Consume a generate() stream; return (time of first piece, full text)."""
    loop = asyncio.get_running_loop()
    first: float | None = None
    parts: list[str] = []
    async for piece in stream:
        if first is None:
            first = loop.time()
        parts.append(piece)
    return first, "".join(parts)


async def mixed_queue(sched: Scheduler, seconds: float = 1.0) -> list[JobHandle[int]]:
    """Every tier on two models (m1 loaded), queued while the scheduler is paused.

    T0: two chats; T1: the opened note's card; T2: two extractions; T3: two
    overdue Gana rounds (EDF: the later submit has the earlier deadline); T4:
    three fair-pool producers. Each job is ``seconds`` of decoding.
    """
    await asyncio.sleep(20)
    await sched.pause()
    sched.set_foreground("nataraj", subject=7)
    now = sched.now()
    jobs = [
        ("gana", "m1", {"producer": "g4"}),
        ("chat", "m2", {}),
        ("nataraj", "m1", {"producer": "n1"}),
        ("extract", "m1", {}),
        ("gana", "m1", {"producer": "g1", "deadline": now - 5}),
        ("chat", "m1", {}),
        ("nataraj", "m2", {"producer": "n7", "subject": 7}),
        ("gana", "m2", {"producer": "g2", "deadline": now - 10}),
        ("extract", "m2", {}),
        ("gana", "m2", {"producer": "g3"}),
    ]
    return [
        sched.submit(class_name, model, work_for(seconds), **kw) for class_name, model, kw in jobs
    ]
