"""``TierlmIngress``: the one OpenAI-compatible endpoint in front of the replicas.

It does what the gateway's own routes do before a request is queued, with
the gateway's code: the keys (``KeyRing``), the body and its limits
(``read_json``, ``parse_chat`` / ``parse_completion``), who asks and as what
(``gateway/intake.classify``); then it asks a replica to queue it (``TierlmReplica.generate``,
placed by ``TierlmRequestRouter``) and answers with the gateway's SSE and JSON
(``JobStream``, ``JobResult``, ``Answer``) over a ``RemoteJob`` fed by the
replica's stream.

- A person's turn (served as a person's, docs/design.md §4.11) names their
  home replica, the one their last turn ran on, where their KV is
  (``Homes``); the router puts it first while it is worth it
  (``tierlm.ray.affinity``).
- The models persons use stay loaded through a rolling update or a
  scale-down: when their holder leaves, or while the fleet changes, a
  replica is asked to keep each (``tierlm.ray.keeping``), and the router
  sends it no other model's background work.
- A request queued on a replica (nothing produced yet) moves to another
  when its replica leaves the fleet (a rolling update, a scale-down) or
  another would start it sooner (a scale-out): ``tierlm.ray.moves`` chooses,
  ``_move`` places it elsewhere first and cancels the old copy only then.
- A replica that refuses (429: its class is full; 503: it drains) sends the
  request to the next; when the router offers one already tried, every replica was: 429 with
  the smallest Retry-After.
- A replica that dies (or shuts down) while it holds the request loses
  nothing the client saw: the rest of the request is queued on another
  replica, continued after the text already produced (``continued``: the
  prompt plus that text, for the tokens still due, as a preempted job
  resumes, docs/design.md §4.9), and the client's stream goes on.
- The operations endpoints (``/metrics``, ``/health``, ``/ready``, the
  scheduler API, the models' admin API, the dashboard) are the replicas',
  through ``FleetOps``, which reaches them without the router.
- Its log lines (``tierlm.*``) go to Serve's log of the replica, as Serve's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import asdict
from typing import Any, cast

from ray import serve
from ray.exceptions import RayActorError
from ray.serve.exceptions import RayServeException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tierlm.ray.fleet_ops import DEFAULT_OPS_TIMEOUT_S, FleetOps
from tierlm.ray.homes import Homes
from tierlm.ray.keep_loop import keep_watch
from tierlm.ray.keeping import Keeper
from tierlm.ray.moves import MOVE_PERIOD_S, Mover, Waiting
from tierlm.ray.ops import is_ops_path
from tierlm.ray.reach import each_replica
from tierlm.ray.serve_log import join_serve_log
from tierlm.runners.endings import Ending, Finish
from tierlm.runners.requests import GenerationRequest
from tierlm.server.edge.body import read_json
from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.admission import RETRY_AFTER_MIN
from tierlm.server.gateway.auth import KeyRing
from tierlm.server.gateway.gateway import check_served
from tierlm.server.gateway.intake import classify
from tierlm.server.gateway.metadata import JobMeta
from tierlm.server.gateway.people import People, identity_of
from tierlm.server.openai.answers import Answer, Params
from tierlm.server.openai.pipeline import ask_of, parse_chat, parse_completion
from tierlm.server.openai.streaming import JobResult, JobStream
from tierlm.server.settings.sources import settings_from_dict
from tierlm.shell.handles import continued

__all__ = ["REPLICA_HEADER", "RemoteJob", "TierlmIngress"]

logger = logging.getLogger("tierlm.ray")


# Attempts at most per request (each a replica not tried before, or a retry
# after a replica died): a bound, whatever the cluster does.
MAX_ATTEMPTS = 16
# Moves at most per job while it waits (tierlm.ray.moves): no ping-pong.
MAX_MOVES = 3
# The response header naming the replica that took the request (docs/distributed.md).
REPLICA_HEADER = "X-Tierlm-Replica"


class _NoChanges:
    """The scheduler's change feed, which a remote job has not: its stream is
    woken by its own pieces only (no queue positions across the cluster)."""

    def watch(self, wake: asyncio.Event) -> None:
        pass

    def unwatch(self, wake: asyncio.Event) -> None:
        pass


class RemoteJob:
    """A request queued on a replica, as ``JobStream`` and ``Answer`` read a
    job (``AnsweredJob``): its pieces, how it ended, whether it is done; and
    its error."""

    def __init__(self, meta: JobMeta, default_max_tokens: bool = False) -> None:
        self.meta = meta
        self.default_max_tokens = default_max_tokens
        self.changes = _NoChanges()
        self.wake = asyncio.Event()
        self.id = 0
        self.replica: str | None = None
        self.produced: list[str] = []
        self.first_token_at: float | None = None
        self.ending: Ending | None = None
        """How it ended, as the replica's job did (docs/design.md §2.7)."""
        self.done = False
        self.error: APIError | None = None
        self.producer = meta.producer or meta.class_name
        self.submitted_at = time.time()
        self.feeding: asyncio.Task[None] | None = None
        self.on_end: Callable[[], None] | None = None
        """Told once when it ends (the ingress's judge of persons)."""
        self.person: str | None = None
        """Whose turn it is, when it is served as a person's (``Homes``)."""
        self.stream: Any = None
        """The replica's stream of it now (another after a move or a failover)."""
        self.move = asyncio.Event()
        """Set by the ingress's mover: place it elsewhere while it waits."""
        self.moves = 0
        self.queued_since = 0.0
        self.model = ""

    def note(self) -> str | None:
        if not self.produced and self.replica is not None:
            return f"tierlm queued job={self.id} replica={self.replica}"
        return None

    def disconnect(self) -> None:
        """The client went away: stop reading the replica (it cancels the job)."""
        if self.feeding is not None:
            self.feeding.cancel()

    def finish(self, error: APIError | None = None) -> None:
        if not self.done and self.on_end is not None:
            self.on_end()
        self.done = True
        self.error = error
        self.wake.set()


def _error_of(job: RemoteJob) -> APIError | None:
    return job.error


class TierlmIngress:
    """The OpenAI-compatible ingress (module docstring). ``replicas`` is the
    replica deployment's handle; ``settings`` the gateway's (keys, limits,
    classes, models)."""

    def __init__(
        self,
        replicas: Any,
        settings: Mapping[str, Any],
        ops_timeout_s: float = DEFAULT_OPS_TIMEOUT_S,
    ) -> None:
        self.replicas = replicas
        self.settings = settings_from_dict(dict(settings))
        s = self.settings
        self.keys = KeyRing(
            s.keys, s.classes, s.anonymous_class(), s.limits.key_queue_limit, s.people.keyless
        )
        # One judge for the fleet: every request passes this ingress
        # (docs/design.md §4.11).
        self.people = People(s.people, s.program_class, s.classes)
        self.homes = Homes()
        """Each person's home replica, where their KV is (``tierlm.ray.affinity``)."""
        self.ops_timeout_s = ops_timeout_s
        self.waiting: dict[int, RemoteJob] = {}
        """Jobs placed that have produced nothing yet (the mover's)."""
        self.mover = Mover()
        self._mover: asyncio.Future[None] | None = None
        self.keeper = Keeper(s.scheduler.chat_idle)
        """Keepers of the models persons use (``tierlm.ray.keeping``)."""
        self._keeper: asyncio.Future[None] | None = None
        self.models = s.backend.model_ids()
        self.fleet = FleetOps(replicas, ops_timeout_s)
        self.name = "local"
        with contextlib.suppress(Exception):  # outside Ray Serve
            self.name = str(serve.get_replica_context().replica_id.unique_id)
        join_serve_log()

    async def __call__(self, request: Request) -> Response:
        self._watch_keeping()
        try:
            return await self._route(request)
        except APIError as exc:
            return exc.response()

    async def _route(self, request: Request) -> Response:
        path = request.url.path.rstrip("/")
        if request.method == "GET" and path == "/v1/models":
            self.keys.authenticate(request)
            data = [{"id": m, "object": "model", "owned_by": "tierlm"} for m in self.models]
            return JSONResponse({"object": "list", "data": data})
        if is_ops_path(request.method, path):
            response = await self.fleet.handle(request)
            response.headers["X-Tierlm-Ingress"] = self.name
            return response
        if request.method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            return await self._generate(
                request, "chat" if path.endswith("chat/completions") else ""
            )
        raise APIError(404, f"{request.method} {path}: not served by the tierlm ingress")

    async def _generate(self, request: Request, endpoint: str) -> Response:
        principal = self.keys.authenticate(request)
        limits = self.settings.limits
        body = await read_json(request, limits.max_body_bytes)
        parse = parse_chat if endpoint == "chat" else parse_completion
        params = parse(body, limits, self.settings.backend.kind)
        check_served(params.model, self.models)
        if params.n > 1:
            # One request is one job on one replica: its choices would need
            # a replica each, and a failover would continue one of them only.
            raise APIError(
                400,
                f"n: the Ray fleet answers one choice per request (n = 1), got {params.n}; "
                "send n requests instead",
                param="n",
                code="unsupported_parameter",
            )
        ask = ask_of(params)
        now = time.monotonic()
        served = classify(principal, request.headers, ask, self.settings.classes, self.people, now)
        job = RemoteJob(served.meta, ask.default_max_tokens)
        job.model = params.model
        if served.meta.served_as == "person":
            job.person = identity_of(principal, request.headers, ask.user)
            self.keeper.chat(params.model, time.time())
        if served.identity is not None:
            identity = served.identity
            job.on_end = lambda: self.people.ended(identity, time.monotonic())
        try:
            stream = await self._place(job, params.request)
        except BaseException:
            job.finish()
            raise
        job.feeding = asyncio.ensure_future(self._feed(job, params, stream))
        answer = Answer(params)
        # Which replica took it, for the operator (and the tests): a request
        # re-queued after its replica died ran elsewhere, named in the stream.
        where = {REPLICA_HEADER: job.replica} if job.replica is not None else {}
        if params.stream:
            heartbeat = self.settings.server.sse_heartbeat
            return JobStream(job, answer, _error_of, heartbeat, headers=where)
        return JobResult(job, answer.render, _error_of, headers=where)

    def _call(self, request: GenerationRequest, job: RemoteJob, exclude: set[str]) -> Any:
        return self.replicas.options(stream=True).generate.remote(
            model=request.model_id,
            class_name=job.meta.class_name,
            meta=asdict(job.meta),
            request=request,
            exclude=tuple(sorted(exclude)),
            home=self.homes.of(job.person, time.monotonic()),
            keeping=tuple(sorted(self.keeper.reserved.items())),
            persons=tuple(sorted(self.keeper.in_use(time.time()))),
            # Continued elsewhere after a failover, the request's max_tokens
            # is what is left: the gateway chose it once (intake.counted).
            default_max_tokens=job.default_max_tokens and not job.produced,
        )

    async def _place(
        self, job: RemoteJob, request: GenerationRequest, exclude: set[str] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Queue the request on the best replica that takes it (none of
        ``exclude`` if another will); its stream."""
        tried: set[str] = set(exclude or ())
        retry_after: list[int] = []
        for _ in range(MAX_ATTEMPTS):
            stream = self._call(request, job, tried)
            try:
                first = await stream.__anext__()
            except (RayActorError, RayServeException) as exc:  # died first: another
                logger.warning("a replica died before it answered: %s", exc)
                continue
            replica = first.get("accepted") or first.get("refused")
            if "accepted" in first:
                job.replica, job.id = replica, int(first["job"])
                self.homes.set(job.person, replica, time.monotonic())
                return cast(AsyncIterator[dict[str, Any]], stream)
            if replica in tried:
                break  # the router offered one already tried: all were
            tried.add(replica)
            if first.get("status") not in (429, 503):  # full, or draining: the next
                raise _api_error(first["status"], first["error"], {})
            if first.get("retry_after") is not None:
                retry_after.append(int(first["retry_after"]))
        # No replica said when (they drained, or died): the least HTTP allows.
        retry = min(retry_after) if retry_after else RETRY_AFTER_MIN
        raise APIError(
            429,
            f"every replica's queue for class {job.meta.class_name!r} is full; "
            f"retry in about {retry} s",
            code="queue_full",
            reason="queue_full",
            headers={"Retry-After": str(retry)},
        )

    async def _feed(
        self, job: RemoteJob, params: Params, stream: AsyncIterator[dict[str, Any]]
    ) -> None:
        try:
            for _ in range(MAX_ATTEMPTS):
                try:
                    async for item in self._items(job, params, stream):
                        if "pieces" in item:
                            if job.first_token_at is None:
                                job.first_token_at = time.time()  # the clock of submitted_at
                            job.produced.extend(item["pieces"])
                            job.wake.set()
                        elif "failed" in item:
                            error = _api_error(item["failed"], item["error"], item["headers"])
                            if error.code != "shutting_down":
                                job.finish(error)
                                return
                            logger.warning("replica %s shut down under job %d", job.replica, job.id)
                            break  # its replica stops: the rest goes elsewhere
                        elif item.get("done"):
                            job.ending = item.get("ending")
                            job.finish()
                            return
                    else:
                        job.finish(APIError(502, "the replica ended the stream early"))
                        return
                except (RayActorError, RayServeException) as exc:
                    logger.warning(
                        "replica %s died under job %d after %d tokens: %s",
                        job.replica,
                        job.id,
                        len(job.produced),
                        type(exc).__name__,
                    )
                # The rest of the request, after the text the client has.
                rest = continued(params.request, job.produced)
                if rest is None:  # no token left: its max_tokens
                    job.ending = Ending(Finish.LENGTH, 0)
                    job.finish()
                    return
                gone = {job.replica} if job.replica is not None else set()
                stream = await self._place(job, rest, gone)
                logger.warning(
                    "job continued on replica %s after %d tokens", job.replica, len(job.produced)
                )
            job.finish(APIError(502, "the request's replicas kept dying"))
        except APIError as exc:
            job.finish(exc)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                cast(Any, job.stream or stream).cancel()  # the client left: the replica cancels it
            job.finish(APIError(499, "the client went away"))
            raise
        except Exception as exc:  # a stream never left open without an end
            logger.exception("job %d failed in the ingress", job.id)
            job.finish(APIError(502, f"the ingress failed: {type(exc).__name__}"))

    async def _items(
        self, job: RemoteJob, params: Params, stream: AsyncIterator[dict[str, Any]]
    ) -> AsyncIterator[dict[str, Any]]:
        """The job's items from its replica; while it has produced nothing, it
        may move to another replica (``_first``)."""
        job.stream = stream
        if not job.produced:
            first = await self._first(job, params)
            if first is None:
                return
            yield first
        async for item in job.stream:
            yield item

    async def _first(self, job: RemoteJob, params: Params) -> dict[str, Any] | None:
        """The first item of a queued job's stream (None: the stream ended);
        meanwhile the mover may ask it to move (``tierlm.ray.moves``)."""
        key = id(job)
        job.queued_since = time.monotonic()
        self.waiting[key] = job
        self._watch_waiting()
        nxt = asyncio.ensure_future(job.stream.__anext__())
        try:
            while True:
                job.move.clear()
                mover = asyncio.ensure_future(job.move.wait())
                try:
                    await asyncio.wait({nxt, mover}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    mover.cancel()
                if nxt.done():
                    try:
                        return cast(dict[str, Any], nxt.result())
                    except StopAsyncIteration:
                        return None
                moved = await self._move(job, params, nxt)
                if moved is not None:
                    job.stream = moved
                    nxt = asyncio.ensure_future(moved.__anext__())
        finally:
            self.waiting.pop(key, None)
            _drop(nxt)

    async def _move(
        self, job: RemoteJob, params: Params, nxt: asyncio.Future[Any]
    ) -> AsyncIterator[dict[str, Any]] | None:
        """Place the job on another replica, then cancel it on its own; or,
        if no other took it or it started meanwhile, keep it where it is."""
        old, old_replica, old_id = job.stream, job.replica, job.id
        try:
            new = await self._place(job, params.request, {old_replica} if old_replica else None)
        except APIError:
            return None  # every other replica refused: it stays
        died = nxt.done() and not nxt.cancelled() and nxt.exception() is not None
        if job.replica == old_replica or (nxt.done() and not died):
            with contextlib.suppress(Exception):
                cast(Any, new).cancel()
            job.replica, job.id = old_replica, old_id
            self.homes.set(job.person, old_replica, time.monotonic())
            return None
        _drop(nxt)
        with contextlib.suppress(Exception):
            old.cancel()  # the old replica drops it from its queue
        job.moves += 1
        logger.info("queued job moved from replica %s to %s", old_replica, job.replica)
        return new

    def _watch_waiting(self) -> None:
        if self._mover is None or self._mover.done():
            self._mover = asyncio.ensure_future(self._moving())

    async def _moving(self) -> None:
        """While jobs wait: look at the fleet every ``MOVE_PERIOD_S`` and ask
        the ones worth moving to move (``tierlm.ray.moves``)."""
        while self.waiting:
            await asyncio.sleep(MOVE_PERIOD_S)
            now = time.monotonic()
            ready = [
                job
                for job in self.waiting.values()
                if job.replica is not None
                and job.moves < MAX_MOVES
                and now - job.queued_since >= MOVE_PERIOD_S
            ]
            if not ready:
                continue
            try:
                timeout = self.ops_timeout_s
                reach = await each_replica(self.replicas, "record_routing_stats", timeout)
            except Exception as exc:  # no look this time
                logger.warning("the mover could not read the replicas' stats: %s", exc)
                continue
            stats = {str(a["replica"]): a for a in reach.answers if isinstance(a, dict)}
            waiting = [
                Waiting(id(job), str(job.replica), job.model, job.meta.class_name) for job in ready
            ]
            keeping, persons = dict(self.keeper.reserved), tuple(self.keeper.in_use(time.time()))
            for key, why in self.mover.choose(waiting, stats, time.time(), keeping, persons):
                found = self.waiting.get(key)
                if found is not None:
                    logger.info("moving queued job %d: %s", found.id, why)
                    found.move.set()

    def _watch_keeping(self) -> None:
        if self._keeper is None or self._keeper.done():
            watch = keep_watch(self.replicas, self.keeper, self.ops_timeout_s)
            self._keeper = asyncio.ensure_future(watch)


def _drop(pending: asyncio.Future[Any]) -> None:
    """Cancel a read of a stream nobody reads any more; what it ends with
    (the cancelled request's error) is read, not logged as never retrieved."""
    pending.cancel()
    pending.add_done_callback(lambda f: f.cancelled() or f.exception())


def _api_error(status: int, body: Mapping[str, Any], headers: Mapping[str, str]) -> APIError:
    error = body.get("error", {}) if isinstance(body, Mapping) else {}
    return APIError(
        int(status),
        str(error.get("message", "the replica failed")),
        param=error.get("param"),
        code=error.get("code"),
        headers=dict(headers),
    )


def ingress_deployment() -> Any:
    """The ingress as a Serve deployment class (``serve.deployment`` applied here,
    so that importing this module does not need a running Ray)."""
    return serve.deployment(TierlmIngress)
