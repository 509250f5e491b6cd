"""``TierlmReplica``: one tierlm (a Gateway: its Scheduler, runner, admission)
per device, as a Ray Serve deployment's replica.

Async methods only: Ray runs a sync method in a thread pool, where there is
no event loop for the scheduler (a sync ``record_routing_stats`` could not
read it). The gateway starts on the replica's own event loop at the first
call (``record_routing_stats`` comes within a stats period).

``generate`` is a streaming call: its first item says whether the replica
took the request (``{"accepted": name, "job": id}``) or refused it
(``{"refused": name, "status": 429, "error": body, "retry_after": s}``), so
the ingress can try the next replica before it answers anything; then the
pieces (``{"pieces": [...]}``) as they come, then ``{"done": True}`` or
``{"failed": status, "error": body, "headers": {...}}``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from ray import serve

from tierlm.ray.router import replica_name
from tierlm.runners.requests import GenerationRequest
from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.gateway import Gateway
from tierlm.server.gateway.metadata import JobMeta
from tierlm.server.openai.job_errors import job_error
from tierlm.server.openai.pipeline import counted
from tierlm.server.ops.routing import RoutingStats, routing_stats
from tierlm.server.settings.sources import settings_from_dict

__all__ = ["TierlmReplica"]


class TierlmReplica:
    """One device's tierlm (module docstring). ``settings`` is the gateway's
    configuration as a dict (the TOML file's structure)."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = settings_from_dict(dict(settings))
        self.gateway = Gateway(self.settings)
        self.stats: RoutingStats = routing_stats(self.gateway)
        self._start: asyncio.Task[None] | None = None
        self.name = "local"
        """The replica's name in the router's ranking (its Serve replica id)."""

    async def _ready(self) -> Gateway:
        if self._start is None:
            # The replica context is set once the replica runs, not in __init__.
            with contextlib.suppress(Exception):  # outside Ray Serve: "local"
                self.name = replica_name(serve.get_replica_context().replica_id)
            self._start = asyncio.ensure_future(self.gateway.start())
        await asyncio.shield(self._start)
        return self.gateway

    async def record_routing_stats(self) -> dict[str, Any]:
        """Ray Serve's hook: the routing stats ``TierlmRequestRouter`` ranks by."""
        await self._ready()
        return {**self.stats.read(), "replica": self.name}

    async def check_health(self) -> None:
        await self._ready()

    async def generate(
        self,
        *,
        model: str,
        class_name: str,
        meta: Mapping[str, Any],
        request: GenerationRequest,
        exclude: tuple[str, ...] = (),
    ) -> AsyncIterator[dict[str, Any]]:
        """Queue the request here and stream it (module docstring). ``model``,
        ``class_name`` and ``exclude`` are for the router."""
        gateway = await self._ready()
        try:
            # As the gateway's own route: the exact prompt size when the runner
            # counts it (a prompt its model cannot serve is a 400 now).
            request = await counted(gateway, request)
            job = await gateway.submit(JobMeta(**meta), request)
        except APIError as exc:
            retry = exc.headers.get("Retry-After")
            yield {
                "refused": self.name,
                "status": exc.status,
                "error": exc.body(),
                "retry_after": int(retry) if retry is not None else None,
            }
            return
        yield {"accepted": self.name, "job": job.id}
        sent = 0
        try:
            while True:
                job.wake.clear()
                if sent < len(job.produced):
                    pieces = list(job.produced[sent:])
                    sent += len(pieces)
                    yield {"pieces": pieces, "first_token_at": job.first_token_at}
                if job.done:
                    break
                await job.wake.wait()
            failure = job_error(job)
            if failure is None:
                yield {"done": True}
            else:
                yield {
                    "failed": failure.status,
                    "error": failure.body(),
                    "headers": dict(failure.headers),
                }
        finally:
            # The caller went away (its stream closed): so does the job.
            if not job.done:
                with contextlib.suppress(Exception):
                    job.disconnect()

    async def shutdown(self) -> None:
        """Drain: end every job, free the runner (Ray calls ``__del__``; tests call this)."""
        await self.gateway.aclose()
