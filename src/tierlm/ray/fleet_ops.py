"""The ingress's operations endpoints: each replica's, through one address,
whatever request router the deployment runs.

Every call here reaches the replicas by broadcast (``tierlm.ray.reach``), not
through the router: a fleet on Ray's default router (or any) answers them
the same (docs/distributed.md "Operations"). Each replica's answer is
waited for on its own, so a frozen replica costs its timeout and no more.

- ``GET /health`` and ``GET /ready``: ``fleet_health``: 200 while one
  replica is live (``degraded`` when not all are), 503 when none is; each
  replica waited for ``timeout_s`` at most (``FleetArgs.ops_timeout_s``);
- ``GET /metrics``: every replica's series, labelled ``replica``
  (``exposition.merge``), with ``tierlm_fleet_replicas`` saying how many
  answered: a silent replica's series are missing, the scrape does not fail;
- the scheduler API, the models' admin API and the dashboard: to the replica
  named by the ``X-Tierlm-Replica`` header, a ``replica`` query parameter or
  (the dashboard's own requests) the ``tierlm_replica`` cookie; without one, a
  read of the scheduler API and every change (pause, foreground, load) goes to
  every replica (``{"replicas": {name: answer}}``; one that did not answer
  makes it 504), the dashboard and a model's card to the first replica by
  name. A streamed answer (the dashboard's events) comes by long polls of
  its replica (``ops_answers``).

The keys are checked by each replica, with the gateway's code: the request's
headers are forwarded as they came.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from tierlm.ray.exposition import fleet_lines, merge
from tierlm.ray.fleet_health import DEFAULT_OPS_TIMEOUT_S, fleet_health
from tierlm.ray.reach import Reach, each_replica, one_replica
from tierlm.ray.roster import Roster
from tierlm.server.edge.errors import APIError

__all__ = ["DEFAULT_OPS_TIMEOUT_S", "FleetOps"]

REPLICA_COOKIE = "tierlm_replica"
# Headers not passed back from a replica's answer (the ingress frames its own).
_HOP = {"content-length", "transfer-encoding", "connection"}
FANOUT_TIMEOUT_S = 10.0
"""The scheduler API, the dashboard: each replica's answer at most this."""
LOAD_TIMEOUT_S = 600.0
"""A model's load or unload by the admin API: a real load takes a while."""
POLL_S = 5.0
"""A stream's long poll: its replica answers once it has a piece, or after this."""


def _target(request: Request) -> str | None:
    return (
        request.headers.get("x-tierlm-replica")
        or request.query_params.get("replica")
        or (
            request.cookies.get(REPLICA_COOKIE)
            if request.url.path.startswith("/dashboard")
            else None
        )
    )


def _decoded(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")


def _with_pid(answer: Any, pid: Any) -> Any:
    """A replica's /health answer with its process id: the operator's handle
    on a replica that stops answering (the roster keeps it)."""
    return {**answer, "pid": pid} if isinstance(answer, dict) and pid is not None else answer


class FleetOps:
    """The operations endpoints over the replica deployment's handle;
    ``timeout_s`` bounds each replica's answer to /health, /ready, /metrics."""

    def __init__(self, replicas: Any, timeout_s: float = DEFAULT_OPS_TIMEOUT_S) -> None:
        self.replicas = replicas
        self.timeout_s = timeout_s
        self.roster = Roster()

    def _call(self, request: Request, body: bytes, replica: str = "") -> dict[str, Any]:
        return {
            "replica": replica,
            "method": request.method,
            "path": request.url.path,
            "query": request.url.query,
            "headers": list(request.headers.items()),
            "body": body,
        }

    async def _every(self, request: Request, body: bytes, timeout_s: float) -> Reach:
        reach = await each_replica(
            self.replicas, "ops_call", timeout_s, **self._call(request, body)
        )
        now = time.monotonic()
        for answer in reach.answers:
            self.roster.heard(str(answer["replica"]), now, answer.get("pid"))
        return reach

    def _missing(self, reach: Reach, timeout_s: float) -> list[tuple[str, str]]:
        """The replicas that gave no answer, named (``Roster``), with why."""
        answered = [str(a["replica"]) for a in reach.answers]
        names = self.roster.silent(answered, reach.silent + len(reach.failed))
        silent = f"not_answering: no answer within {timeout_s:g} s (frozen, or its loop is blocked)"
        whys = [silent] * reach.silent + [f"unreachable: {e}" for e in reach.failed]
        return list(zip(names, whys, strict=True))

    async def names(self) -> list[str]:
        """The running replicas that answer, by name."""
        reach = await each_replica(self.replicas, "whoami", self.timeout_s)
        return sorted(str(name) for name in reach.answers)

    async def handle(self, request: Request) -> Response:
        try:
            return await self._handle(request)
        except TimeoutError:
            raise APIError(504, "the replicas did not answer in time") from None

    async def _handle(self, request: Request) -> Response:
        path = request.url.path.rstrip("/") or "/"
        body = await request.body()
        if path == "/metrics":
            return await self._metrics(request, body)
        if path in ("/health", "/ready"):
            return await self._health(request, body, path)
        target = _target(request)
        if target is None and (
            path.startswith("/dashboard")
            or (request.method == "GET" and path.startswith("/v1/models/"))
        ):
            names = await self.names()
            target = names[0] if names else None
            if target is None:
                raise APIError(503, "no replica answers", code="no_replica")
        timeout = LOAD_TIMEOUT_S if path.endswith(("/load", "/unload")) else FANOUT_TIMEOUT_S
        if target is not None:
            return await self._proxy(target, request, body, timeout)
        return self._all(await self._every(request, body, timeout), timeout)

    async def _proxy(self, replica: str, request: Request, body: bytes, timeout: float) -> Response:
        def mine(answer: dict[str, Any]) -> bool:
            return answer.get("replica") == replica and "status" in answer

        call = self._call(request, body, replica)
        first = await one_replica(self.replicas, "ops_call", timeout, mine, **call)
        if first is None:
            raise APIError(
                404,
                f"replica {replica!r} is not running (or did not answer within {timeout:g} s)",
                code="replica_not_found",
            )
        headers: list[tuple[str, str]] = list(first["headers"])
        kept = {k: v for k, v in headers if k.lower() not in _HOP and k.lower() != "set-cookie"}
        kept["X-Tierlm-Replica"] = replica
        if first.get("stream") is None:
            response: Response = Response(first["body"], first["status"], headers=kept)
        else:
            stream = self._rest(replica, str(first["stream"]), first["body"])
            response = StreamingResponse(stream, first["status"], headers=kept)
        for key, value in headers:
            if key.lower() == "set-cookie":
                response.raw_headers.append((b"set-cookie", value.encode("latin-1")))
        if request.url.path.startswith("/dashboard"):
            # The page's own requests (state, events) then go to the same replica.
            response.set_cookie(REPLICA_COOKIE, replica, httponly=True, samesite="strict")
        return response

    async def _rest(self, replica: str, stream: str, first: bytes) -> AsyncIterator[bytes]:
        """A streamed answer's pieces, by long polls of its replica."""

        def mine(answer: dict[str, Any]) -> bool:
            return answer.get("replica") == replica and "end" in answer

        try:
            if first:
                yield first
            while True:
                more = await one_replica(
                    self.replicas,
                    "ops_more",
                    POLL_S + FANOUT_TIMEOUT_S,
                    mine,
                    replica=replica,
                    stream=stream,
                    wait_s=POLL_S,
                )
                if more is None:
                    return  # its replica is gone, or silent: the stream ends
                if more["body"]:
                    yield more["body"]
                if more["end"]:
                    return
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(
                    each_replica(
                        self.replicas, "ops_close", self.timeout_s, replica=replica, stream=stream
                    )
                )

    def _all(self, reach: Reach, timeout_s: float) -> Response:
        answers: dict[str, Any] = {}
        worst = 0
        for answer in reach.answers:
            if "status" in answer:
                answers[str(answer["replica"])] = _decoded(answer["body"])
                worst = max(worst, int(answer["status"]))
        for name, why in self._missing(reach, timeout_s):
            answers[name] = {"status": why.split(":", 1)[0], "reason": why}
            worst = max(worst, 504)
        if not answers:
            worst = 503
        status = 200 if worst < 400 else worst
        return JSONResponse({"replicas": answers}, status_code=status)

    async def _metrics(self, request: Request, body: bytes) -> Response:
        reach = await self._every(request, body, self.timeout_s)
        refused = [a for a in reach.answers if a.get("status") != 200]
        if refused:  # a key problem answers the same on every replica
            first = refused[0]
            return Response(first["body"], first["status"], media_type="application/json")
        texts = {str(a["replica"]): bytes(a["body"]).decode("utf-8") for a in reach.answers}
        self._missing(reach, self.timeout_s)  # the roster forgets replicas that left
        text = merge(texts) + fleet_lines(len(texts), reach.silent + len(reach.failed))
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    async def _health(self, request: Request, body: bytes, path: str) -> Response:
        try:
            reach = await self._every(request, body, self.timeout_s)
        except TimeoutError:  # Serve's router did not hand over its replicas
            reach = Reach()
        answers: Mapping[str, tuple[int, Any]] = {
            str(a["replica"]): (int(a["status"]), _with_pid(_decoded(a["body"]), a.get("pid")))
            for a in reach.answers
        }
        missing = self._missing(reach, self.timeout_s)
        status, answer = fleet_health(path, answers, missing, self.roster.seen, time.monotonic())
        return JSONResponse(answer, status_code=status)
