"""The gateway's core: one runner, one Scheduler, and the requests' jobs.

``Gateway`` owns the runner and the scheduler for the app's lifetime (the app's
lifespan calls ``start`` and ``aclose``), fans scheduler events out to metrics,
the timeline and waiting streams, enforces the per-class queue limits, and
turns an OpenAI request into a ``GatewayJob``.

A ``GatewayJob`` is one generation submitted with ``Scheduler.submit``. Like
``Scheduler.generate`` it runs ``resuming_work`` (resume after preemption: the
text produced so far is kept and the next run continues from it), but it also
exposes its handle,
for its queue position and for cancelling it the moment its client goes away,
and times its first token for the metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from tierlm.events import (
    JobCancelled,
    JobEnded,
    JobEvent,
    JobFailed,
    JobStarted,
    JobSubmitted,
    Requeued,
    RunEnded,
    SchedulerEvent,
)
from tierlm.handles import JobContext, JobHandle, JobState, resuming_work
from tierlm.runners.protocol import GenerationRequest, Runner
from tierlm.scheduler import Scheduler
from tierlm.server.auth import KeyRing
from tierlm.server.backends import close_runner
from tierlm.server.config import ServerSettings
from tierlm.server.errors import APIError
from tierlm.server.metadata import JobMeta
from tierlm.server.metrics import Metrics
from tierlm.server.timeline import Timeline
from tierlm.snapshot import SchedulerSnapshot

__all__ = ["Gateway", "GatewayJob"]

logger = logging.getLogger("tierlm.server")

# Finished jobs kept for the state API and the dashboard ("what just happened").
RECENT_JOBS = 50
# Queue positions are recomputed on every scheduler event, and at least this
# often: a tier can change without an event (a deadline passing).
POSITION_MAX_AGE = 1.0
# How often, at most, waiting streams are told a new position: a person reading
# "waiting behind 3 jobs" needs a few updates a second, not one per event.
POSITION_INTERVAL = 0.25
# Positions up to this are shown exactly; beyond, rounded up (see shown_position).
EXACT_POSITIONS = 10
# Retry-After bounds (seconds): at least 1 (HTTP's unit), at most a minute, after
# which a client should look again rather than trust an old estimate.
RETRY_AFTER_MIN, RETRY_AFTER_MAX = 1, 60
# Weight of the newest run in a class's average run time (for Retry-After).
EWMA_ALPHA = 0.2

StateExtension = Callable[[], Mapping[str, Any]]


class Gateway:
    def __init__(self, settings: ServerSettings, runner: Runner | None = None) -> None:
        self.settings = settings
        self.runner = runner if runner is not None else settings.backend.make_runner()
        self._owns_runner = runner is None
        self.keys = KeyRing(settings.keys, settings.classes, settings.anonymous_class())
        self.metrics = Metrics(self._snapshot_or_none, settings.classes)
        self.timeline = Timeline(settings.server.dashboard_window)
        self.model_ids: list[str] = settings.backend.model_ids()
        self.passthrough = settings.backend.passthrough
        """An upstream backend without configured models: any name goes
        upstream, and /v1/models lists the upstream's."""
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_JOBS)
        self.extensions: dict[str, StateExtension] = {}
        """Extra sections of the state API and the dashboard, by name: a
        component mounted beside the scheduler (the embedding lane)
        registers a function returning its JSON-ready state here."""
        self.embedding_model: str | None = None
        """The name /v1/embeddings serves, if any: a chat naming it is told so."""
        self.listeners: list[Callable[[SchedulerEvent], None]] = [
            self.metrics.on_event,
            self.timeline.on_event,
        ]
        self.version = 0
        """Bumped on every scheduler event; live views wait for it to change."""
        self._changed = asyncio.Event()
        self._scheduler: Scheduler | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._jobs: dict[int, GatewayJob] = {}
        self._waiting: set[GatewayJob] = set()
        """Jobs in the queue whose responses show their position."""
        self._wake_pending = False
        self._queued: dict[str, set[int]] = {name: set() for name in settings.classes}
        self._run_started: dict[int, float] = {}
        self._run_ewma: dict[str, float] = {}
        self._positions: dict[int, tuple[int, int]] = {}
        self._positions_at: tuple[int, float] = (-1, -math.inf)
        self.started_at = time.time()
        self.closing = False
        """Shutting down: live views (the dashboard's streams) end."""
        self._shutdown_task: asyncio.Future[None] | None = None  # referenced until done

    # -- lifecycle ------------------------------------------------------------

    @property
    def scheduler(self) -> Scheduler:
        if self._scheduler is None:
            raise RuntimeError("the gateway is not started (the app's lifespan did not run)")
        return self._scheduler

    async def start(self) -> None:
        """Preload the first model (so the first request pays no swap), start the scheduler."""
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        backend = self.settings.backend
        if backend.preload and self.model_ids and self.runner.loaded_model is None:
            model = self.model_ids[0]
            started = time.perf_counter()
            try:
                await self.runner.load(model)
                logger.info("loaded %s in %.1f s", model, time.perf_counter() - started)
            except Exception as exc:
                # Not fatal: the scheduler loads it again on the first request,
                # which then gets the error (an upstream may come up later).
                logger.warning("preloading %s failed: %s", model, exc)
        if self.passthrough:
            self.model_ids = await backend.list_models(self.runner)
        # Created after the preload: the scheduler reads the loaded model once.
        scheduler = Scheduler(self.runner, self.settings.classes, self.settings.scheduler)
        scheduler.add_listener(self._on_event)
        self._scheduler = scheduler

    async def aclose(self) -> None:
        """End every job (shutdown), then free the runner."""
        self.closing = True
        self._changed.set()
        if self._scheduler is not None:
            await self._scheduler.aclose()
        if self._owns_runner:
            await close_runner(self.runner)

    def begin_shutdown(self) -> None:
        """End every job now and tell live views to stop, so open streams end at
        once instead of holding the server open (on a signal, before uvicorn
        waits for connections to close)."""
        if self.closing or self._scheduler is None:
            return
        self.closing = True
        self._changed.set()
        self._shutdown_task = asyncio.ensure_future(self._scheduler.aclose())

    def shutdown_soon(self) -> None:
        """``begin_shutdown`` from any thread (or a signal handler)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self.begin_shutdown)

    # -- models ---------------------------------------------------------------

    def check_model(self, model: str) -> None:
        if self.passthrough or model in self.model_ids:
            return
        if model == self.embedding_model:
            raise APIError(
                404,
                f"model {model!r}: an embedding model, served by /v1/embeddings only "
                f"(models here: {', '.join(self.model_ids)})",
                param="model",
                code="model_not_found",
                reason="unknown_model",
            )
        raise APIError(
            404,
            f"model {model!r}: not served by this gateway (models: {', '.join(self.model_ids)})",
            param="model",
            code="model_not_found",
            reason="unknown_model",
        )

    # -- events -----------------------------------------------------------------

    def _on_event(self, event: SchedulerEvent) -> None:
        # Called synchronously inside the scheduler: must not raise into it.
        try:
            self._track(event)
            for listener in self.listeners:
                listener(event)
        except Exception:
            logger.exception("handling scheduler event %s failed", type(event).__name__)
        self.version += 1
        self._changed.set()
        if self._waiting and not self._wake_pending and self._loop is not None:
            # Waiting streams are told their new positions at most every
            # POSITION_INTERVAL: with hundreds queued, every start moves them all,
            # and waking each per event costs O(queue^2) wake-ups and writes.
            # (A job that starts is woken at once, by _track.)
            self._wake_pending = True
            self._loop.call_later(POSITION_INTERVAL, self._wake_waiting)

    def _wake_waiting(self) -> None:
        self._wake_pending = False
        for job in self._waiting:
            job.wake.set()

    def _track(self, event: SchedulerEvent) -> None:
        if not isinstance(event, JobEvent):
            return
        job = event.job
        queued = self._queued.setdefault(job.class_name, set())
        gateway_job = self._jobs.get(job.id)
        if isinstance(event, JobSubmitted | Requeued):
            queued.add(job.id)
            if gateway_job is not None:  # back in the queue: its stream says where again
                self._waiting.add(gateway_job)
        elif isinstance(event, JobStarted):
            queued.discard(job.id)
            self._run_started[job.id] = event.time
            if gateway_job is not None:
                self._waiting.discard(gateway_job)
                gateway_job.wake.set()
        if isinstance(event, RunEnded):
            started = self._run_started.pop(job.id, None)
            if started is not None:
                seconds = event.time - started
                old = self._run_ewma.get(job.class_name)
                self._run_ewma[job.class_name] = (
                    seconds if old is None else old + EWMA_ALPHA * (seconds - old)
                )
        if isinstance(event, JobEnded):
            queued.discard(job.id)
            self._jobs.pop(job.id, None)
            entry: dict[str, Any] = {
                "id": job.id,
                "class": job.class_name,
                "producer": job.producer,
                "model": job.model_id,
                "outcome": event.outcome,
                "ended_at": event.time,
            }
            if gateway_job is not None:
                self._waiting.discard(gateway_job)
                entry["tokens"] = len(gateway_job.produced)
                if gateway_job.disconnected is not None:
                    entry["reason"] = f"client disconnected while {gateway_job.disconnected}"
            if isinstance(event, JobCancelled) and "reason" not in entry:
                entry["reason"] = event.reason.value
            if isinstance(event, JobFailed):
                entry["reason"] = repr(event.error)
            self.recent.appendleft(entry)

    async def changed(self, version: int, timeout: float) -> int:
        """Wait until an event after ``version`` (or ``timeout``); the new version."""
        if self.version == version and not self.closing:
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)
        return self.version

    # -- jobs -------------------------------------------------------------------

    def retry_after(self, class_name: str) -> int:
        """Seconds until a queue slot of ``class_name`` likely frees: one average run."""
        seconds = self._run_ewma.get(class_name, RETRY_AFTER_MIN)
        return int(min(RETRY_AFTER_MAX, max(RETRY_AFTER_MIN, math.ceil(seconds))))

    def submit(self, meta: JobMeta, request: GenerationRequest) -> GatewayJob:
        """Queue a generation for a request; 429 past its class's queue limit."""
        scheduler = self.scheduler
        limit = self.settings.queue_limit(meta.class_name)
        queued = len(self._queued.get(meta.class_name, ()))
        if queued >= limit:
            retry = self.retry_after(meta.class_name)
            raise APIError(
                429,
                f"class {meta.class_name!r}: {queued} jobs are queued, the limit "
                f"(queue_limit) is {limit}; retry in about {retry} s",
                code="queue_full",
                reason="queue_full",
                headers={"Retry-After": str(retry)},
            )
        deadline = meta.deadline
        if isinstance(deadline, int | float):
            deadline = scheduler.now() + deadline
        job = GatewayJob(self, meta, request)
        job.handle = scheduler.submit(
            meta.class_name, request.model_id, job.work, meta.producer, meta.subject, deadline
        )
        job.handle.add_done_callback(job.on_done)
        if not job.handle.done():
            self._jobs[job.id] = job
            if job.handle.state is JobState.QUEUED:
                self._waiting.add(job)
        return job

    def position(self, job_id: int) -> tuple[int, int] | None:
        """(effective tier, position) of a queued job; position 1 runs next.

        Position counts the queued jobs in better tiers and those submitted
        earlier in the same tier: exact for the FIFO tiers (T0-T2), an estimate
        in T3 (EDF) and T4 (fair pool), whose order is not submit order.
        """
        now = time.monotonic()
        version, at = self._positions_at
        if version != self.version or now - at > POSITION_MAX_AGE:
            snap = self.scheduler.snapshot()
            positions: dict[int, tuple[int, int]] = {}
            ahead = 0
            for tier in sorted(snap.queued):
                for info in snap.queued[tier]:
                    ahead += 1
                    positions[info.id] = (tier, ahead)
            self._positions = positions
            self._positions_at = (self.version, now)
        return self._positions.get(job_id)

    # -- state ------------------------------------------------------------------

    def _snapshot_or_none(self) -> SchedulerSnapshot | None:
        return self._scheduler.snapshot() if self._scheduler is not None else None

    def wall_offset(self) -> float:
        """Add to a scheduler time to get a Unix time."""
        return time.time() - self.scheduler.now()

    def state(self) -> dict[str, Any]:
        """The state API's answer: the snapshot, plus the gateway's own view."""
        snap = self.scheduler.snapshot()
        data = snap.to_dict()
        # As PUT /v1/scheduler/foreground takes it.
        fg = snap.foreground
        data["foreground"] = None if fg is None else {"class": fg.class_name, "subject": fg.subject}
        data["gateway"] = {
            "backend": self.settings.backend.kind,
            "models": list(self.model_ids),
            "keys_configured": self.keys.configured,
            "queue_limits": {c: self.settings.queue_limit(c) for c in self.settings.classes},
            "wall_offset": self.wall_offset(),
            "uptime": time.time() - self.started_at,
            "recent": list(self.recent),
        }
        for name, extension in self.extensions.items():
            data[name] = dict(extension())
        return data


class GatewayJob:
    """One request's generation, submitted to the scheduler."""

    def __init__(self, gateway: Gateway, meta: JobMeta, request: GenerationRequest) -> None:
        self.gateway = gateway
        self.meta = meta
        self.request = request
        self.produced: list[str] = []
        self._resuming = resuming_work(request, self._on_piece)
        self._run_tokens = 0
        self._run_first = self._run_last = 0.0
        self.wake = asyncio.Event()
        """Set on every new piece, state change and end: the response's loop waits on it."""
        self.handle: JobHandle[str]
        self.first_token_at: float | None = None
        self.disconnected: str | None = None
        """"queued" or "running" if the client went away before the end."""

    @property
    def id(self) -> int:
        return self.handle.id

    @property
    def done(self) -> bool:
        return self.handle.done()

    @property
    def state(self) -> JobState:
        return self.handle.state

    async def work(self, ctx: JobContext) -> str:
        """One run of the job: resumes from ``produced`` (docs/design.md §4 re-queue)."""
        self.wake.set()
        self._run_tokens = 0
        self._run_first = self._run_last = 0.0
        try:
            return await self._resuming(ctx)
        finally:
            self.gateway.metrics.generation(
                self.meta.class_name,
                self.request.model_id,
                self._run_tokens,
                self._run_last - self._run_first,
            )

    def _on_piece(self, piece: str) -> None:
        now = self.gateway.scheduler.now()
        if self._run_tokens == 0:
            self._run_first = now
        if self.first_token_at is None:
            self.first_token_at = now
            waited = now - self.handle.job.submitted_at
            self.gateway.metrics.first_token(self.meta.class_name, waited)
        self._run_tokens += 1
        self._run_last = now
        self.produced.append(piece)
        self.wake.set()

    def on_done(self, _: JobHandle[str]) -> None:
        self.wake.set()

    def disconnect(self) -> None:
        """The client went away: cancel the job now (queued: removed at once;
        running: stopped at its next token boundary)."""
        if self.handle.done() or self.disconnected is not None:
            return
        state = "running" if self.handle.state is JobState.RUNNING else "queued"
        self.disconnected = state
        self.gateway.metrics.disconnected(self.meta.class_name, state)
        logger.info(
            "job #%d (%s): client disconnected while %s; cancelling",
            self.id,
            self.meta.class_name,
            state,
        )
        self.handle.cancel()

    def note(self) -> str | None:
        """The SSE comment describing where the job is, None once it produces."""
        if self.handle.done() or self.produced:
            return None
        if self.handle.state is JobState.RUNNING:
            return f"tierlm running job={self.id}"
        where = self.gateway.position(self.id)
        if where is None:
            return None
        tier, position = where
        return f"tierlm queued job={self.id} tier=T{tier} position={shown_position(position)}"


def shown_position(position: int) -> int:
    """The queue position a waiting stream is told: exact up to
    EXACT_POSITIONS, then rounded up to a multiple of 10, and of 50 past 100.

    Every job that starts moves every waiting job up one place; with hundreds
    waiting, exact positions cost a write to every stream per start (the
    gateway benchmark's 500 streams read 46 000 such lines for 10 600 tokens).
    Far back in the queue, "about 120" says all a person needs.
    """
    if position <= EXACT_POSITIONS:
        return position
    step = 10 if position <= 100 else 50
    return -(-position // step) * step
