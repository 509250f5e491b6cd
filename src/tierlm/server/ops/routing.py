"""Routing stats: what a router in front of many tierlms needs to place a request.

``GET /v1/scheduler/routing`` (admin, like the rest of the scheduler API)
answers ``RoutingStats.read()``, the same dict a program gets in-process (the
Ray replica's ``record_routing_stats``). Versioned (``v``) and cheap: counters
kept from the scheduler's events and one pass over its queue, never the
dispatch-order replay of the snapshot (a router may poll every second). The
fields (docs/distributed.md "Routing stats"):

- ``v`` (1), ``at`` (when, on ``clock``: Unix seconds by default);
- ``loaded_model``, ``swapping_to``, ``busy`` (a job runs or a swap is under
  way), ``slots`` (generations the device runs at once);
- ``running`` and ``queued_by_class`` per class, ``queued_by_model`` per
  model, ``chat_queued`` (queued jobs of tier-0 classes, ``chat_classes``);
- ``backlog_s``: the measured average run of each queued job's class plus what
  the running job has left (the estimate ``Retry-After`` adds up, without its
  ordering); ``swap_s``: the measured swap (an average; None before any);
  ``chat_run_s`` and ``run_s`` (per class): the measured runs;
- ``full``: classes at their queue limit (a request of one gets 429 here);
  ``draining``, ``paused``.

``tierlm.cluster.rank`` reads it.
"""

from __future__ import annotations

import time
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tierlm.cluster import STATS_VERSION
from tierlm.server.gateway.gateway import Gateway
from tierlm.shell.events import JobStarted, RunEnded, SchedulerEvent, SwapFinished, SwapStarted
from tierlm.shell.scheduler import Scheduler

__all__ = ["RoutingStats", "mount", "routes", "routing_stats"]

# Each gateway's stats, made on first use (the gateway lives as long as its app).
_attached: weakref.WeakKeyDictionary[Gateway, RoutingStats] = weakref.WeakKeyDictionary()

# Weight of the newest swap in the measured swap time.
SWAP_ALPHA = 0.3


class RunEstimates(Protocol):
    """Measured runs per class (``tierlm.server.gateway.admission.RunTimes``)."""

    def of(self, class_name: str) -> float: ...

    def averages(self) -> dict[str, float]: ...


class RoutingStats:
    """Keeps the counters of one scheduler and reads them as the routing dict.

    Add ``on_event`` as a listener of the scheduler (``attach``)."""

    def __init__(
        self,
        scheduler: Callable[[], Scheduler],
        run_times: RunEstimates,
        queue_limit: Callable[[str], int],
        draining: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._scheduler = scheduler
        self._run_times = run_times
        self._queue_limit = queue_limit
        self._draining = draining
        self._clock = clock
        self._running: dict[int, tuple[str, float]] = {}
        """Running job id: (class, since) — JobStarted to RunEnded."""
        self._swapping: tuple[int, str] | None = None
        self._swap_s: float | None = None
        self._loading: str | None = None
        """The model the admin API loads now (``on_load``)."""

    def on_load(self, model: str, seconds: float | None) -> None:
        """A load by the admin API (``Gateway.load_watchers``): a swap like the
        scheduler's, busy and ``swapping_to`` while it runs, its time measured."""
        if seconds is None:
            self._loading = model
            return
        self._loading = None
        if seconds >= 0:
            self._measured(seconds)

    def _measured(self, seconds: float) -> None:
        old = self._swap_s
        self._swap_s = seconds if old is None else old + SWAP_ALPHA * (seconds - old)

    def on_event(self, event: SchedulerEvent) -> None:
        # Cheap: a dict update per event.
        if isinstance(event, JobStarted):
            self._running[event.job.id] = (event.job.class_name, event.time)
        elif isinstance(event, SwapStarted):
            self._swapping = (event.job.id, event.job.model_id)
        elif isinstance(event, SwapFinished):
            self._swapping = None
            self._measured(event.seconds)
        elif isinstance(event, RunEnded):
            self._running.pop(event.job.id, None)
            if self._swapping is not None and self._swapping[0] == event.job.id:
                self._swapping = None  # the swap failed

    @property
    def running_jobs(self) -> int:
        """Jobs on the device now."""
        return len(self._running)

    def seed(self, scheduler: Scheduler) -> None:
        """Start from the scheduler as it is (one snapshot): for a ``RoutingStats``
        attached to a scheduler that already runs."""
        snap = scheduler.snapshot()
        if snap.running is not None:
            since = snap.running_since if snap.running_since is not None else snap.now
            self._running[snap.running.id] = (snap.running.class_name, since)
            if snap.swapping_to is not None:
                self._swapping = (snap.running.id, snap.swapping_to)

    def read(self) -> dict[str, Any]:
        """The routing dict (module docstring)."""
        scheduler = self._scheduler()
        slots = scheduler.slots
        chat_classes = sorted(n for n, c in scheduler.classes.items() if c.tier == 0)
        by_class: Counter[str] = Counter()
        by_model: Counter[str] = Counter()
        for job in scheduler.policy.queued():
            by_class[job.class_name] += 1
            by_model[job.model_id] += 1
        run_of = self._run_times.of
        backlog = sum(run_of(name) * n for name, n in by_class.items())
        now = scheduler.now()
        running: Counter[str] = Counter()
        for class_name, since in self._running.values():
            running[class_name] += 1
            backlog += max(0.0, run_of(class_name) - (now - since))
        swapping_to = self._swapping[1] if self._swapping is not None else self._loading
        full = sorted(n for n in scheduler.classes if by_class[n] >= self._queue_limit(n))
        averages = self._run_times.averages()
        chat_runs = [averages[n] for n in chat_classes if n in averages]
        return {
            "v": STATS_VERSION,
            "at": self._clock(),
            "loaded_model": scheduler.loaded_model,
            "swapping_to": swapping_to,
            "busy": bool(self._running) or swapping_to is not None,
            "slots": slots,
            "running": dict(running),
            "chat_queued": sum(by_class[n] for n in chat_classes),
            "queued_by_model": dict(by_model),
            "queued_by_class": dict(by_class),
            "backlog_s": float(backlog),
            "swap_s": self._swap_s,
            "chat_run_s": _chat_run(chat_runs, chat_classes, run_of),
            "run_s": averages,
            "chat_classes": chat_classes,
            "full": full,
            "draining": self._draining(),
            "paused": scheduler.paused,
        }


def _chat_run(
    measured: list[float], chat_classes: list[str], run_of: Callable[[str], float]
) -> float | None:
    if measured:
        return sum(measured) / len(measured)
    return run_of(chat_classes[0]) if chat_classes else None


def routing_stats(gateway: Gateway) -> RoutingStats:
    """The gateway's ``RoutingStats`` (made and attached on first use)."""
    stats = _attached.get(gateway)
    if stats is None:
        stats = RoutingStats(
            lambda: gateway.scheduler,
            gateway.admission.run_times,
            gateway.settings.queue_limit,
            lambda: gateway.shutdown.draining,
        )
        gateway.listeners.append(stats.on_event)  # for a scheduler started later
        gateway.load_watchers.append(stats.on_load)
        try:
            scheduler = gateway.scheduler
        except RuntimeError:  # not started yet
            pass
        else:
            stats.seed(scheduler)
            scheduler.add_listener(stats.on_event)
        _attached[gateway] = stats
    return stats


def mount(gateway: Gateway) -> RoutingStats:
    """Keep the gateway's routing stats from its start, and serve the series
    routers read on ``/metrics`` from them (``Metrics.serve_routers``)."""
    stats = routing_stats(gateway)

    def read() -> dict[str, Any]:
        try:
            return stats.read()
        except RuntimeError:  # the gateway is not started: nothing to report
            return {}

    gateway.metrics.serve_routers(read, vllm_compat=gateway.settings.metrics.vllm_compat)
    return stats


async def get_routing(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    gateway.keys.authenticate(request, admin=True)
    return JSONResponse(routing_stats(gateway).read())


def routes() -> list[BaseRoute]:
    return [Route("/v1/scheduler/routing", get_routing, methods=["GET"])]
