"""``TierlmReplica``: one tierlm (a Gateway: its Scheduler, runner, admission)
per device, as a Ray Serve deployment's replica.

Async methods only: Ray runs a sync method in a thread pool, where there is
no event loop for the scheduler (a sync ``record_routing_stats`` could not
read it). The gateway is made and started on the replica's own event loop at
the first call (``record_routing_stats`` comes within a stats period), with
the settings of its device: the shared ``settings``, with ``devices[rank]``
merged in (Serve's replica rank: 0 .. replicas - 1).

``generate`` is a streaming call: its first item says whether the replica
took the request (``{"accepted": name, "job": id}``) or refused it
(``{"refused": name, "status": 429, "error": body, "retry_after": s}``), so
the ingress can try the next replica before it answers anything; then the
pieces (``{"pieces": [...]}``) as they come, then ``{"done": True}`` or
``{"failed": status, "error": body, "headers": {...}}``.

``ops_call`` (and ``ops_more``, ``ops_close`` for a stream) answers the
replica's operations endpoints for the ingress (``tierlm.ray.ops``), which
calls every replica at once (``tierlm.ray.reach``), not through the router.
``keep`` holds a model persons use when the ingress asks (``tierlm.ray.keeping``;
the routing stats then say ``keeps``, and ``persons``: the models persons'
chats ran on here, ``generation``: the hash of the replica's arguments,
``born``: when its constructor ended, ``operator_model``: a model an
operator's load put here).
``check_health`` raises when the tierlm should be replaced
(``tierlm.ray.liveness``). Serve stops a replica by waiting for its requests
(up to the deployment's ``graceful_shutdown_timeout_s``), then calling
``__del__``: the gateway drains (``draining``, no new job) and closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from ray import serve
from starlette.applications import Starlette

from tierlm.ray.liveness import DEFAULT_STALL_AFTER_S, Liveness
from tierlm.ray.ops import call, ops_app
from tierlm.ray.ops_answers import OpenAnswers
from tierlm.ray.router import replica_name
from tierlm.ray.serve_log import join_serve_log
from tierlm.runners.requests import GenerationRequest
from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.gateway import Gateway
from tierlm.server.gateway.intake import Ask, enqueue
from tierlm.server.gateway.metadata import JobMeta
from tierlm.server.openai.job_errors import job_error
from tierlm.server.ops import routing
from tierlm.server.ops.routing import RoutingStats
from tierlm.server.settings.sources import settings_from_dict
from tierlm.shell.events import SchedulerEvent, SwapStarted

__all__ = ["TierlmReplica", "device_settings"]

logger = logging.getLogger("tierlm.ray")

STARTING_WAIT_S = 0.5
"""A /health of a replica whose gateway is starting waits this for it, then
answers "starting" (a model's preload takes longer than a probe)."""


def _json(status: int, answer: Mapping[str, Any]) -> dict[str, Any]:
    """An operations answer made here (``OpenAnswers.start``'s shape)."""
    headers = [("content-type", "application/json")]
    return {
        "status": status,
        "headers": headers,
        "body": json.dumps(answer).encode(),
        "stream": None,
    }


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            out[key] = _merged(old, value)
        else:
            out[key] = value
    return out


def device_settings(
    settings: Mapping[str, Any], devices: Sequence[Mapping[str, Any]], rank: int | None
) -> dict[str, Any]:
    """The settings of the replica of ``rank``: ``settings`` with ``devices[rank]``
    merged in, table by table (a replica past the list, or without a rank,
    runs ``settings`` as they are)."""
    if rank is None or not 0 <= rank < len(devices):
        return dict(settings)
    return _merged(settings, devices[rank])


def _generation(*args: Any) -> str:
    text = json.dumps(args, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class TierlmReplica:
    """One device's tierlm (module docstring). ``settings`` is the gateway's
    configuration as a dict (the TOML file's structure); ``devices`` each
    replica's own part of it, by rank; ``stall_after_s`` the liveness bound."""

    def __init__(
        self,
        settings: Mapping[str, Any],
        devices: Sequence[Mapping[str, Any]] = (),
        stall_after_s: float = DEFAULT_STALL_AFTER_S,
    ) -> None:
        self.raw_settings = dict(settings)
        self.devices = [dict(d) for d in devices]
        settings_from_dict(self.raw_settings)  # bad settings fail the deployment now
        for device in self.devices:
            settings_from_dict(_merged(self.raw_settings, device))
        self.liveness = Liveness(stall_after_s, time.monotonic())
        self.generation = _generation(self.raw_settings, self.devices, stall_after_s)
        """The arguments it was deployed with, hashed: replicas of two
        generations at once are a rolling update under way (``tierlm.ray.keeping``)."""
        join_serve_log()
        self._start: asyncio.Task[Gateway] | None = None
        self.gateway: Gateway | None = None
        self.stats: RoutingStats | None = None
        self.name = "local"
        """The replica's name in the router's ranking (its Serve replica id)."""
        self.rank: int | None = None
        self.failed: str | None = None
        """Why the health check failed, once it did (the replica is done)."""
        self.ops_app: Starlette | None = None
        self.answers = OpenAnswers()
        """The operations answers still streaming to the ingress."""
        self.persons: dict[str, float] = {}
        """Model -> when a person's chat on it last came here (monotonic)."""
        self.kept: tuple[str, float] | None = None
        """The model this replica keeps for persons, until when (``keep``)."""
        self._keeping: asyncio.Future[float] | None = None
        self._swap_since: float | None = None
        """When the swap (or load) under way began (Unix seconds): the stats
        say how far it is (``swap_elapsed_s``, ``tierlm.ray.progress``)."""
        self.operator_model: str | None = None
        """The model an operator's load (the admin API, not a keep) put on the
        device, until a job's swap: the keepers move no keep onto it."""
        self.born = time.time()
        """When the constructor ended (Unix seconds): about when Serve counts
        the replica running, the order a rolling update stops replicas in
        (``tierlm.ray.keeping``)."""

    async def _ready(self) -> Gateway:
        if self._start is None:
            self._start = asyncio.ensure_future(self._make())
        return await asyncio.shield(self._start)

    async def _make(self) -> Gateway:
        # The replica context is set once the replica runs, not in __init__.
        with contextlib.suppress(Exception):  # outside Ray Serve: "local", no rank
            context = serve.get_replica_context()
            self.name = replica_name(context.replica_id)
            self.rank = context.rank.rank if context.rank is not None else None
        settings = settings_from_dict(device_settings(self.raw_settings, self.devices, self.rank))
        gateway = Gateway(settings)
        self.stats = routing.mount(gateway)  # the stats, and the routers' series on /metrics
        gateway.listeners.append(self._on_event)
        gateway.load_watchers.append(self._on_load)
        self.ops_app = ops_app(gateway)
        await gateway.start()
        self.gateway = gateway
        return gateway

    def _on_event(self, event: SchedulerEvent) -> None:
        if isinstance(event, SwapStarted):
            self._swap_since = time.time()
            self.operator_model = None
        self._progress()

    def _on_load(self, model: str, seconds: float | None) -> None:
        if seconds is None:  # a load by the admin API (a keep's, or an operator's) begins
            self._swap_since = time.time()
            keeping = self._keeping is not None and not self._keeping.done()
            self.operator_model = None if keeping else model
        self._progress()

    def _progress(self) -> None:
        self.liveness.progress(time.monotonic())

    async def record_routing_stats(self) -> dict[str, Any]:
        """Ray Serve's hook: the routing stats ``TierlmRequestRouter`` ranks by."""
        await self._ready()
        assert self.stats is not None
        stats = self.stats.read()
        kept, left = self._kept_now(stats)
        now = time.monotonic()
        persons = {m: round(now - at, 1) for m, at in self.persons.items() if now - at < 3600}
        since = self._swap_since if stats.get("swapping_to") is not None else None
        return {
            **stats,
            "swap_elapsed_s": None if since is None else round(time.time() - since, 3),
            "replica": self.name,
            "rank": self.rank,
            "persons": persons,
            "keeps": kept,
            "keep_left_s": left,
            "generation": self.generation,
            "up_s": round(time.time() - self.born, 1),
            "born": self.born,
            "operator_model": self.operator_model,
        }

    def _kept_now(self, stats: Mapping[str, Any]) -> tuple[str | None, float | None]:
        """The model kept for persons and the seconds left, while the keep
        lasts and the device holds or loads it (its own scheduler may still
        swap it away: the keep ends then)."""
        if self.kept is None:
            return None, None
        model, until = self.kept
        left = until - time.monotonic()
        loading = self._keeping is not None and not self._keeping.done()
        holds = model in (stats.get("loaded_model"), stats.get("swapping_to"))
        if left <= 0 or not (loading or holds):
            self.kept = None
            return None, None
        return model, round(left, 1)

    async def keep(self, *, replica: str, model: str, for_s: float) -> dict[str, Any]:
        """The ingress asks the replica named ``replica`` (every replica gets
        the call, ``tierlm.ray.reach``) to hold ``model`` for persons for
        ``for_s`` seconds: it loads it now unless it holds it, and says
        ``keeps`` in its routing stats (``tierlm.ray.keeping``). ``for_s`` 0
        ends its keep of ``model``: another replica keeps it now."""
        gateway = await self._ready()
        me: dict[str, Any] = {"replica": self.name}
        if replica != self.name:
            return me
        if for_s <= 0:  # the keep moved to another replica: this one is free
            if self.kept is not None and self.kept[0] == model:
                self.kept = None
            return me
        if self.failed is not None or gateway.shutdown.draining:
            return me
        try:
            gateway.check_model(model)
        except APIError:
            return me
        self.kept = (model, time.monotonic() + max(0.0, for_s))
        loading = self._keeping is not None and not self._keeping.done()
        if gateway.scheduler.loaded_model != model and not loading:
            logger.info("replica %s: loading %s, a model persons use, to keep it", self.name, model)
            self._keeping = asyncio.ensure_future(gateway.load_model(model))
            self._keeping.add_done_callback(lambda f: f.cancelled() or f.exception())
        return {**me, "keeps": model}

    async def prompt_stats(self, *, replica: str) -> dict[str, Any]:
        """What this replica's last generation did with its prompt, when it is
        the replica named ``replica`` (every replica gets the call) and its
        runner says (the llama.cpp runner's ``last_stats``): the prompt's
        tokens, those evaluated, those restored from its KV snapshots. For
        measuring session affinity (bench/fleet_affinity.py)."""
        gateway = await self._ready()
        me: dict[str, Any] = {"replica": self.name}
        last = getattr(gateway.runner, "last_stats", None)
        if replica != self.name or last is None:
            return me
        fields = ("prompt_tokens", "evaluated_tokens", "restored_tokens", "tokens")
        return {**me, **{f: getattr(last, f, None) for f in fields}}

    async def whoami(self) -> str:
        """This replica's name (the ingress enumerates the replicas with it)."""
        await self._ready()
        return self.name

    def problem(self) -> str | None:
        """Why this replica should be replaced (``Liveness``), or None."""
        gateway = self.gateway
        if self.failed is not None or gateway is None:
            return self.failed
        snap = gateway.scheduler.snapshot()
        working = snap.running is not None or (snap.queue_depth > 0 and not snap.paused)
        restarts = gateway.runner_state().get("restarts", 0)
        return self.liveness.problem(
            time.monotonic(), working=working, restarts=restarts if isinstance(restarts, int) else 0
        )

    async def check_health(self) -> None:
        """Serve's health check: raises (Serve replaces the replica) when the
        scheduler stalled or the llama.cpp worker crash-loops."""
        await self._ready()
        problem = self.unwell()
        if problem is not None:
            raise RuntimeError(f"tierlm replica {self.name}: {problem}")

    def unwell(self) -> str | None:
        """``problem``, and once there is one, for good: the replica's jobs end
        now (``shutting_down``: the ingress continues each on another
        replica), so that Serve's graceful stop of this replica does not wait
        on a device that does nothing, and its health checks fail from now on."""
        problem = self.problem()
        if problem is not None and self.failed is None:
            self.failed = problem
            logger.warning("replica %s is unhealthy, ending its jobs: %s", self.name, problem)
            if self.gateway is not None:
                self.gateway.shutdown.now()
        return problem

    async def generate(
        self,
        *,
        model: str,
        class_name: str,
        meta: Mapping[str, Any],
        request: GenerationRequest,
        exclude: tuple[str, ...] = (),
        home: str | None = None,
        keeping: tuple[tuple[str, str], ...] = (),
        persons: tuple[str, ...] = (),
        default_max_tokens: bool = False,
    ) -> AsyncIterator[dict[str, Any]]:
        """Queue the request here and stream it (module docstring). ``model``,
        ``class_name``, ``exclude``, ``home``, ``keeping`` and ``persons`` are for
        the router."""
        gateway = await self._ready()
        if meta.get("served_as") == "person":  # persons use this model (tierlm.ray.keeping)
            self.persons[model] = time.monotonic()
        try:
            # The second half of the gateway's own admission (intake.enqueue):
            # the prompt counted, the limits, the job; the ingress classified it.
            ask = Ask(request, default_max_tokens=default_max_tokens)
            [job] = await enqueue(gateway, JobMeta(**meta), ask)
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
                    self._progress()
                    yield {"pieces": pieces, "first_token_at": job.first_token_at}
                if job.done:
                    break
                await job.wake.wait()
            failure = job_error(job)
            if failure is None:
                yield {"done": True, "ending": job.ending}  # docs/design.md §2.7
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

    async def ops_call(
        self,
        *,
        replica: str,
        method: str,
        path: str,
        query: str = "",
        headers: Sequence[tuple[str, str]] = (),
        body: bytes = b"",
    ) -> dict[str, Any]:
        """One operations request (``tierlm.ray.ops``) for the ingress, which
        sends it to every replica (``tierlm.ray.reach``): answered by the one
        named ``replica`` (every one for ""), the others say only who they
        are. A stream (the dashboard's events) continues by ``ops_more``."""
        me: dict[str, Any] = {"replica": self.name, "pid": os.getpid()}
        if self.gateway is None and path in ("/health", "/ready"):
            # Starting (a model preloads): say so now, not after the start.
            ready = asyncio.ensure_future(self._ready())
            await asyncio.wait([ready], timeout=STARTING_WAIT_S)
            if not ready.done():
                answer = {"status": "starting", "reason": "the gateway is starting"}
                return {**me, **_json(503, answer)}
        await self._ready()
        me["replica"] = self.name
        if replica not in ("", self.name) or self.ops_app is None:
            return me
        problem = self.unwell() if path in ("/health", "/ready") else None
        if problem is not None:  # what Serve's health check is told, the ingress too
            return {**me, **_json(503, {"status": "unhealthy", "reason": problem})}
        answered = call(self.ops_app, method, path, query, headers, body)
        return {**me, **await self.answers.start(answered)}

    async def ops_more(self, *, replica: str, stream: str, wait_s: float) -> dict[str, Any]:
        """The next pieces of a streamed operations answer (``ops_call``)."""
        await self._ready()
        if replica != self.name:
            return {"replica": self.name}
        return {"replica": self.name, **await self.answers.more(stream, wait_s)}

    async def ops_close(self, *, replica: str, stream: str) -> dict[str, Any]:
        """The ingress's client of a streamed answer went away."""
        await self._ready()
        if replica == self.name:
            self.answers.close(stream)
        return {"replica": self.name}

    async def shutdown(self, *, drain: bool = True) -> None:
        """Drain (no new job; the accepted ones get ``shutdown_grace``), then
        close. Serve calls it through ``__del__``; a replica Serve stops for
        failing its health check is closed at once."""
        self.answers.close_all()
        gateway = self.gateway
        if gateway is None:
            return
        if drain and self.failed is None:
            gateway.shutdown.drain()
            await gateway.shutdown.drained()
        else:
            gateway.shutdown.now()
        logger.info("replica %s: drained, closing", self.name)
        await gateway.aclose()

    async def __del__(self) -> None:
        # Serve awaits an async __del__ when it stops the replica, after its
        # requests ended or graceful_shutdown_timeout_s passed.
        await self.shutdown()
