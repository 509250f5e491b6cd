"""A request's generation: ``GatewayJob``, a ``Scheduler.submit_generation``
handle with what the response needs around it.

The scheduler streams the pieces, resumes after a preemption and keeps the
pieces and the first token's time (``GenerationHandle``); the job adds a wake-up
for the response's loop, the metrics of each run, the cancel when the client
goes away, and the SSE comment saying where it waits (from
``Scheduler.queue_positions``, the policy's real dispatch order).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from tierlm.runners.endings import Ending
from tierlm.runners.requests import GenerationRequest
from tierlm.server.gateway.admission import Admission
from tierlm.server.gateway.changes import EXACT_POSITIONS, Changes, JobWake, shown_position
from tierlm.server.gateway.metadata import JobMeta
from tierlm.server.gateway.metrics import Metrics
from tierlm.server.gateway.recent import RecentJobs
from tierlm.server.gateway.throughput import Throughput
from tierlm.server.settings.sections import ServerSettings
from tierlm.shell.handles import GenerationHandle, GenerationRun, JobHandle, JobState
from tierlm.shell.scheduler import Scheduler

__all__ = [
    "EXACT_POSITIONS",
    "AnsweredJob",
    "GatewayJob",
    "JobHost",
    "QueueWatch",
    "shown_position",
]

logger = logging.getLogger("tierlm.server")


class JobHost(Protocol):
    """What a job uses of the gateway that made it (``Gateway`` is one): its
    parts, not the gateway's module, so that this one does not import it."""

    @property
    def scheduler(self) -> Scheduler: ...

    @property
    def settings(self) -> ServerSettings: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def recent(self) -> RecentJobs: ...

    @property
    def changes(self) -> Changes: ...

    @property
    def admission(self) -> Admission: ...

    @property
    def throughput(self) -> Throughput: ...


class QueueWatch(Protocol):
    """What wakes a waiting stream when its place in the queue changes (``Changes``)."""

    def watch(self, wake: asyncio.Event) -> None: ...

    def unwatch(self, wake: asyncio.Event) -> None: ...


class AnsweredJob(Protocol):
    """What an answer (``openai/answers``) and its response (``openai/streaming``)
    read of a job: a ``GatewayJob``, or the Ray ingress's ``RemoteJob``, which a
    replica's stream feeds."""

    @property
    def id(self) -> int: ...

    @property
    def meta(self) -> JobMeta: ...

    @property
    def produced(self) -> Sequence[str]:
        """Its pieces so far, one per token."""

    @property
    def ending(self) -> Ending | None:
        """How it ended (docs/design.md §2.7), once it completed."""

    @property
    def done(self) -> bool: ...

    @property
    def producer(self) -> str: ...

    @property
    def submitted_at(self) -> float: ...

    @property
    def first_token_at(self) -> float | None:
        """On the clock of ``submitted_at``."""

    @property
    def wake(self) -> asyncio.Event:
        """Set at each new piece and at the end."""

    @property
    def changes(self) -> QueueWatch: ...

    def note(self) -> str | None:
        """Where it waits, for a streamed answer's comment lines."""

    def disconnect(self) -> None:
        """Its client went away."""


class GatewayJob:
    """One request's generation, submitted to the scheduler (``Gateway.submit``)."""

    def __init__(self, gateway: JobHost, meta: JobMeta, request: GenerationRequest) -> None:
        self.gateway = gateway
        self.meta = meta
        self.request = request
        self.wake = JobWake()
        """Set on every new piece and at the end (and, while its stream watches
        the queue, when the place it shows changes, ``Changes``): the
        response's loop waits on it."""
        self.disconnected: str | None = None
        """"queued" or "running" if the client went away before the end."""
        self._ended = False
        self._on_end: list[Callable[[], None]] = []
        self._last_piece_at: float | None = None
        """When the last piece reached the job (the inter-token latency)."""
        self.runs: list[GenerationRun] = []
        """Its runs so far, each told when it ends (a preempted job has several):
        its wait, prompt evaluation and decode times (Ollama's durations, the
        dashboard's finished jobs)."""
        self.handle: GenerationHandle = gateway.scheduler.submit_generation(
            meta.class_name,
            request,
            self._on_piece,
            meta.producer,
            meta.subject,
            _deadline(meta, gateway.scheduler.now()),
            on_run=self._on_run,
            person=meta.person,
        )
        self.handle.add_done_callback(self._on_done)
        self.wake.job_id = self.handle.id

    @property
    def id(self) -> int:
        return self.handle.id

    @property
    def done(self) -> bool:
        """Ended, and the gateway told of it (``on_end``): an answer is sent
        only after, so whatever it tells of the end holds when the client
        sends its next request."""
        return self._ended

    def add_end_hook(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` when the job ends, before its answer ends."""
        if self._ended:
            hook()
        else:
            self._on_end.append(hook)

    @property
    def state(self) -> JobState:
        return self.handle.state

    @property
    def produced(self) -> list[str]:
        """The pieces so far (one per token), across every run (the
        generation's own list: read it, never change it)."""
        return self.handle.generation.pieces

    @property
    def first_token_at(self) -> float | None:
        return self.handle.first_token_at

    @property
    def producer(self) -> str:
        return self.handle.job.producer

    @property
    def submitted_at(self) -> float:
        """When it was submitted (scheduler clock)."""
        return self.handle.job.submitted_at

    @property
    def changes(self) -> Changes:
        return self.gateway.changes

    @property
    def ending(self) -> Ending | None:
        """How its generation ended (None until it completed): the answer's
        ``finish_reason`` (``gateway/endings``, docs/design.md §2.7)."""
        return self.handle.ending

    def _on_piece(self, piece: str) -> None:
        now = self.gateway.scheduler.now()
        self.gateway.throughput.add(now)
        metrics = self.gateway.metrics
        if len(self.handle.pieces) == 1:
            first = self.handle.first_token_at
            assert first is not None
            waited = first - self.handle.job.submitted_at
            metrics.first_token(self.meta.class_name, waited, self.request.model_id)
        elif self._last_piece_at is not None:
            metrics.requests.token_gap(
                self.meta.class_name, self.request.model_id, now - self._last_piece_at
            )
        self._last_piece_at = now
        self.wake.set()

    def _on_run(self, run: GenerationRun) -> None:
        self.runs.append(run)
        self.gateway.metrics.generation(
            self.meta.class_name, self.request.model_id, run.tokens, run.decode_seconds
        )

    def _on_done(self, _: JobHandle[str]) -> None:
        self._ended = True
        now = self.gateway.scheduler.now()
        completed = self.handle.state is JobState.DONE
        self.gateway.metrics.requests.ended(
            self.meta.class_name,
            self.request.model_id,
            self.request.approx_prompt_tokens(),
            now - self.handle.job.submitted_at if completed else None,
        )
        for hook in self._on_end:
            hook()
        self.wake.set()
        self.gateway.recent.ended(self.handle, now, self.disconnected, self.runs)

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
        """The SSE comment describing where the job is: its tier and place in
        the queue (a preempted job back in it too), "running" until its first
        token; None once it produces."""
        state = self.handle.state
        if state is JobState.QUEUED:
            where = self.gateway.changes.position(
                self.id, self.wake, self.gateway.scheduler.queue_positions
            )
            if where is None:
                return None
            tier, position = where
            return f"tierlm queued job={self.id} tier=T{tier} position={shown_position(position)}"
        if state is JobState.RUNNING and not self.produced:
            return f"tierlm running job={self.id}"
        return None


def _deadline(meta: JobMeta, now: float) -> float | dt.datetime | None:
    # Relative seconds become scheduler-clock seconds; a datetime stays one.
    deadline = meta.deadline
    if isinstance(deadline, int | float):
        return now + deadline
    return deadline
