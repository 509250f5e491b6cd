"""A model's idle time to live: unload it after ``keep_alive`` without work.

What Ollama's ``keep_alive`` and llama-swap's ``ttl`` do: a model nobody used
for that long gives its memory back. ``keep_alive`` is set per model in its
table (``[backend.models.ID] keep_alive = "10m"``); unset, or negative, keeps
the model loaded until a swap (tierlm's default: the scheduler decides).

The clock is the scheduler's, and the work is its events: every event (a job
submitted, started, ended) restarts the idle time. When the time is up and
the device is idle (no job running or queued), the model is unloaded through
the scheduler (``Scheduler.unload_model``: never under a running job); the
next request loads it again, as a swap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tierlm.runners.errors import RunnerError
from tierlm.runners.protocol import Unloadable

if TYPE_CHECKING:
    from tierlm.shell.events import SchedulerEvent
    from tierlm.shell.scheduler import Scheduler

__all__ = ["KeepAlive", "keep_alive_seconds"]

logger = logging.getLogger("tierlm.server")


def keep_alive_seconds(models: Mapping[str, Any]) -> dict[str, float]:
    """The idle time to live of each model that has one (its table's ``keep_alive``)."""
    ttls = {}
    for model_id, model in models.items():
        seconds = getattr(model, "keep_alive", None)
        if seconds is not None:
            ttls[model_id] = seconds
    return ttls


class KeepAlive:
    """Unloads the scheduler's model once it was idle for its time to live."""

    def __init__(self, scheduler: Scheduler, ttls: Mapping[str, float]) -> None:
        self.scheduler = scheduler
        self.ttls = dict(ttls)
        self.last_activity = 0.0
        self.unloads = 0
        """Models unloaded for being idle."""
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._remove: Any = None

    def start(self) -> None:
        if not self.ttls or not isinstance(self.scheduler.runner, Unloadable):
            return
        self._listen()

    def _listen(self) -> None:
        if self._remove is None:
            self._remove = self.scheduler.add_listener(self._on_event)
        self.touch()

    @property
    def can_unload(self) -> bool:
        """Whether the runner can unload models at all (an upstream's server holds them)."""
        return isinstance(self.scheduler.runner, Unloadable)

    def set_ttl(self, model_id: str, seconds: float | None) -> None:
        """A request's ``keep_alive`` for ``model_id`` (Ollama's, per request):
        unloaded after ``seconds`` idle from now on; None: kept until a swap."""
        if seconds is None:
            self.ttls.pop(model_id, None)
            return
        self.ttls[model_id] = seconds
        if self._timer is not None:  # armed for the previous time to live
            self._timer.cancel()
            self._timer = None
        if self.can_unload:
            self._listen()

    async def aclose(self) -> None:
        if self._remove is not None:
            self._remove()
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def expires_in(self, model_id: str) -> float | None:
        """Seconds until ``model_id`` is unloaded if nothing happens; None if never."""
        ttl = self.ttls.get(model_id)
        if ttl is None or self.scheduler.loaded_model != model_id or self._remove is None:
            return None
        return max(0.0, self.last_activity + ttl - self.scheduler.now())

    def touch(self) -> None:
        """Something happened on the device: the idle time starts again."""
        self.last_activity = self.scheduler.now()
        self._arm()

    def _on_event(self, _: SchedulerEvent) -> None:
        self.touch()

    def _arm(self) -> None:
        ttl = self.ttls.get(self.scheduler.loaded_model or "")
        if ttl is None or self._timer is not None:
            return  # a timer that fires early re-arms itself for the rest
        loop = asyncio.get_running_loop()
        self._timer = loop.call_at(self.last_activity + ttl, self._expire)

    def _expire(self) -> None:
        self._timer = None
        model = self.scheduler.loaded_model
        ttl = self.ttls.get(model or "")
        if model is None or ttl is None:
            return
        if self.scheduler.now() < self.last_activity + ttl:
            self._arm()
            return
        snap = self.scheduler.snapshot()
        if snap.running is not None or snap.queue_depth:
            return  # busy: the job's end is an event, which re-arms
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._unload(model, ttl))

    async def _unload(self, model: str, ttl: float) -> None:
        try:
            if await self.scheduler.unload_model(model) == model:
                self.unloads += 1
                logger.info("unloaded %s after %.0f s idle (keep_alive)", model, ttl)
        except RunnerError as exc:
            logger.warning("unloading %s after its keep_alive failed: %s", model, exc)
