"""The gateway's core: one runner, one Scheduler, and the requests' jobs.

``Gateway`` owns the runner and the scheduler for the app's lifetime (the app's
lifespan calls ``start`` and ``aclose``), fans scheduler events out to its
listeners, and turns an OpenAI request into a ``GatewayJob`` (``jobs``). It
keeps no copy of the scheduler's state: queue counts, positions and the
snapshot are the scheduler's, asked when needed. The parts live in their own
objects: ``Admission`` (queue limits, Retry-After), ``RecentJobs``,
``Changes`` (what live views wait on), ``Shutdown``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tierlm.runners.protocol import Runner
from tierlm.runners.requests import GenerationRequest
from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.admission import RETRY_AFTER_MAX, RETRY_AFTER_MIN, Admission, RunTimes
from tierlm.server.gateway.auth import KeyRing
from tierlm.server.gateway.changes import Changes
from tierlm.server.gateway.jobs import GatewayJob, shown_position
from tierlm.server.gateway.metadata import JobMeta
from tierlm.server.gateway.metrics import Metrics
from tierlm.server.gateway.people import People
from tierlm.server.gateway.recent import RecentJobs
from tierlm.server.gateway.shutdown import Shutdown, shutting_down
from tierlm.server.gateway.throughput import Throughput
from tierlm.server.gateway.timeline import Timeline
from tierlm.server.settings.backends import close_runner
from tierlm.server.settings.sources import ServerSettings
from tierlm.shell.events import JobSubmitted, SchedulerEvent, SwapFinished, SwapStarted
from tierlm.shell.scheduler import Scheduler
from tierlm.shell.snapshot import SchedulerSnapshot

__all__ = [
    "RETRY_AFTER_MAX",
    "RETRY_AFTER_MIN",
    "Gateway",
    "GatewayJob",
    "check_served",
    "shown_position",
]

logger = logging.getLogger("tierlm.server")

StateExtension = Callable[[], Mapping[str, Any]]


def check_served(model: str, served: Sequence[str], embedding_model: str | None = None) -> None:
    """404 naming the models served, unless ``model`` is one of ``served``."""
    if model in served:
        return
    names = ", ".join(served)
    if model == embedding_model:
        message = (
            f"model {model!r}: an embedding model, served by /v1/embeddings only "
            f"(models here: {names})"
        )
    else:
        message = f"model {model!r}: not served by this gateway (models: {names})"
    raise APIError(404, message, param="model", code="model_not_found", reason="unknown_model")


class Gateway:
    def __init__(self, settings: ServerSettings, runner: Runner | None = None) -> None:
        self.settings = settings
        self.runner = runner if runner is not None else settings.backend.make_runner()
        self._owns_runner = runner is None
        self.keys = KeyRing(
            settings.keys,
            settings.classes,
            settings.anonymous_class(),
            settings.limits.key_queue_limit,
            settings.people.keyless,
        )
        self.people = People(settings.people, settings.program_class, settings.classes)
        """Who is a person (docs/design.md §4.11): ``intake.classify`` asks it."""
        self.metrics = Metrics(self._snapshot_or_none, settings.classes, self.runner_state)
        self.timeline = Timeline(settings.server.dashboard_window)
        self.model_ids: list[str] = settings.backend.model_ids()
        self.passthrough = settings.backend.passthrough
        """An upstream backend without configured models: any name goes
        upstream, and /v1/models lists the upstream's."""
        self.recent = RecentJobs()
        self.throughput = Throughput()
        """Tokens generated a second, over the last seconds (the dashboard)."""
        self.live: dict[int, GatewayJob] = {}
        """The requests' jobs not ended yet, by id: what the running ones hold
        in the KV cache (``resources``)."""
        self.changes = Changes()
        self.admission = Admission(lambda: self.scheduler, settings.queue_limit, RunTimes())
        self.shutdown = Shutdown(
            settings.server.shutdown_grace, self.changes, lambda: self._scheduler
        )
        self.extensions: dict[str, StateExtension] = {}
        """Extra sections of the state API and the dashboard, by name: a
        component mounted beside the scheduler (the embedding lane)
        registers a function returning its JSON-ready state here."""
        self.embedding_model: str | None = None
        """The name /v1/embeddings serves, if any: a chat naming it is told so."""
        # Each is the scheduler's listener (a raising one is logged there, not
        # raised into it: Dispatcher.emit).
        self.listeners: list[Callable[[SchedulerEvent], None]] = [
            self.metrics.on_event,
            self.timeline.on_event,
            self.admission.run_times.on_event,
            self.shutdown.on_event,
            self.changes.on_event,
            self._on_swap,
            self._explain_waits,
        ]
        self.load_watchers: list[Callable[[str, float | None], None]] = []
        """Told of a load by the admin API (``load_model``): ``(model, None)``
        when it begins, ``(model, seconds)`` when it ended, -1 if it failed."""
        self._waiting_for: set[str] = set()
        """Models that queued work waits for, already said in the log."""
        self._last_swap: float | None = None
        self.load_error: str | None = None
        """Why the first model did not load at startup, until a load succeeds."""
        self._scheduler: Scheduler | None = None
        self.started_at = time.time()

    # -- lifecycle ------------------------------------------------------------

    @property
    def scheduler(self) -> Scheduler:
        if self._scheduler is None:
            raise RuntimeError("the gateway is not started (the app's lifespan did not run)")
        return self._scheduler

    async def start(self) -> None:
        """Preload the first model (so the first request pays no swap), start the scheduler."""
        self.changes.start()
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
                self.load_error = backend.public(f"loading {model!r} failed: {exc}")
        if self.passthrough:
            self.model_ids = await backend.list_models(self.runner)
        # Created after the preload: the scheduler reads the loaded model once.
        scheduler = Scheduler(self.runner, self.settings.classes, self.settings.scheduler)
        for listener in self.listeners:
            scheduler.add_listener(listener)
        self._scheduler = scheduler

    async def aclose(self) -> None:
        """End every job (shutdown), then free the runner."""
        self.changes.close()
        if self._scheduler is not None:
            await self._scheduler.aclose()
        if self._owns_runner:
            await close_runner(self.runner)

    def shutdown_soon(self, *, drain: bool = False) -> None:
        """Begin the shutdown from any thread (or a signal handler): a drain
        (``Shutdown.drain``), or every job ended now."""
        loop = self.changes.loop
        if loop is None or loop.is_closed():
            return
        begin = self.shutdown.drain if drain else self.shutdown.now
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(begin)

    @property
    def closing(self) -> bool:
        """Shutting down: live views (the dashboard's streams) end."""
        return self.changes.closing

    @property
    def version(self) -> int:
        """Bumped on every scheduler event; live views wait for it to change."""
        return self.changes.version

    async def changed(self, version: int, timeout: float) -> int:
        """Wait until an event after ``version`` (or ``timeout``); the new version."""
        return await self.changes.changed(version, timeout)

    # -- models ---------------------------------------------------------------

    def check_model(self, model: str) -> None:
        if not self.passthrough:
            check_served(model, self.model_ids, self.embedding_model)

    async def load_model(self, model: str) -> float:
        """Load ``model`` now (the admin API), once no job runs; the seconds the
        load itself took. ``load_watchers`` are told when it begins and how it
        ended (the routing stats count it as a swap: busy, ``swapping_to``,
        and its time in ``swap_s``)."""
        began: list[float] = []

        def start() -> None:
            began.append(time.perf_counter())
            for watcher in self.load_watchers:
                watcher(model, None)

        try:
            await self.scheduler.load_model(model, on_start=start)
        except BaseException:
            if began:
                for watcher in self.load_watchers:
                    watcher(model, -1.0)
            raise
        seconds = time.perf_counter() - began[0] if began else 0.0
        self.load_error = None
        self._last_swap = seconds
        for watcher in self.load_watchers:
            watcher(model, seconds)
        return seconds

    # -- events -----------------------------------------------------------------

    # -- jobs -------------------------------------------------------------------

    async def submit(self, meta: JobMeta, request: GenerationRequest) -> GatewayJob:
        """Queue a generation for a request: 400 for a prompt longer than the
        model's context, 503 while shutting down, 429 past a queue limit
        (``Admission``). (Text no model can read, a lone surrogate, is refused
        when the body is read: ``body.read_json``.)"""
        problem = await self.settings.backend.prompt_problem(self.runner, request)
        if problem is not None:
            # As OpenAI answers it: a 400 the client does not retry.
            param = "prompt" if request.prompt is not None else "messages"
            raise APIError(
                400, f"{param}: {problem}; shorten it", param=param, code="context_length_exceeded"
            )
        if self.shutdown.draining:
            raise shutting_down("it accepts no new requests")
        self.admission.admit(meta)
        job = GatewayJob(self, meta, request)
        self.live[job.id] = job
        job.handle.add_done_callback(lambda _: self._ended(job.id))
        return job

    def _ended(self, job_id: int) -> None:
        self.live.pop(job_id, None)

    # -- state ------------------------------------------------------------------

    async def not_ready(self) -> str | None:
        """Why a request cannot be served now (``/ready``), None if it can: the
        gateway shuts down, the model failed to load (and none has loaded
        since), or the backend says so (an upstream that does not answer)."""
        if self.shutdown.draining:
            return "the gateway is shutting down"
        if self._scheduler is None:
            return "the gateway is starting"
        if self.runner.loaded_model is None and self.load_error is not None:
            return f"no model is loaded: {self.load_error}"
        return await self.settings.backend.readiness(self.runner)

    def _on_swap(self, event: SchedulerEvent) -> None:
        if isinstance(event, SwapFinished):
            self.load_error = None  # a load succeeded: the gateway serves again
            self._last_swap = event.seconds

    def _explain_waits(self, event: SchedulerEvent) -> None:
        """Say in the log, once per model until it is swapped in, why work for
        a model that is not loaded waits: the loaded model's work first, a chat
        hold (docs/design.md §4.8), then the swap. Otherwise a request
        that waits 40 s on the sim backend (30 s hold + 10 s swap) says nothing."""
        if isinstance(event, SwapStarted):
            self._waiting_for.discard(event.job.model_id)
            logger.info(
                "swapping model %r -> %r for job %d (%s)",
                event.previous,
                event.job.model_id,
                event.job.id,
                event.job.class_name,
            )
            return
        if not isinstance(event, JobSubmitted):
            return
        model, loaded = event.job.model_id, self.runner.loaded_model
        if loaded is None or model == loaded or model in self._waiting_for:
            return
        self._waiting_for.add(model)
        swap = "" if self._last_swap is None else f" (the last took {self._last_swap:.1f} s)"
        logger.info(
            "job %d (%s) needs model %r while %r is loaded: it waits for the work on %r, "
            "and for up to %g s after a chat (scheduler.chat_grace: the person may type "
            "again), then a swap%s",
            event.job.id,
            event.job.class_name,
            model,
            loaded,
            loaded,
            self.settings.scheduler.chat_grace,
            swap,
        )

    def runner_state(self) -> dict[str, Any]:
        """The runner's own state for the state API, /health and /metrics
        (``BackendSettings.runner_state``)."""
        return dict(self.settings.backend.runner_state(self.runner))

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
            # What Retry-After is computed from (Admission.wait_ahead).
            "run_seconds": self.admission.run_times.averages(),
            "wall_offset": self.wall_offset(),
            "uptime": time.time() - self.started_at,
            "draining": self.shutdown.draining,
            "runner": self.runner_state(),
            "recent": list(self.recent),
        }
        data["people"] = self.people.state(snap.now)
        for name, extension in self.extensions.items():
            data[name] = dict(extension())
        return data
