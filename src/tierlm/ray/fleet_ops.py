"""The ingress's operations endpoints: each replica's, through one address.

- ``GET /metrics``: every replica's series, each sample labelled with its
  ``replica`` (``relabel``, ``merge``: one family's samples together, its
  ``HELP``/``TYPE`` once), so one scrape of the ingress sees the fleet;
- ``GET /health``: 200 while some replica is live (``status`` ``degraded``
  when some is not), with each replica's summary; 503 when none answers;
- ``GET /ready``: 200 while some replica can serve a request now, else 503
  with each replica's reason;
- the scheduler API, the models' admin API and the dashboard: to the replica
  named by the ``X-Tierlm-Replica`` header, a ``replica`` query parameter or
  (the dashboard's own requests) the ``tierlm_replica`` cookie; without one, a
  read of the scheduler API and every change (pause, foreground, load) goes to
  every replica (``{"replicas": {name: answer}}``), the dashboard and a
  model's card to the first replica.

The keys are checked by each replica, with the gateway's code: the request's
headers are forwarded as they came.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from tierlm.server.edge.errors import APIError

__all__ = ["FleetOps", "merge", "relabel"]

REPLICA_COOKIE = "tierlm_replica"
# Headers not passed back from a replica's answer (the ingress frames its own).
_HOP = {"content-length", "transfer-encoding", "connection"}
# Replicas enumerated at most, and how long a fan-out may take.
MAX_REPLICAS = 256
FANOUT_TIMEOUT_S = 10.0
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?(\s.*)$")


def relabel(text: str, replica: str) -> list[tuple[str, str]]:
    """The exposition's lines as (family, line), each sample with a
    ``replica`` label; comment lines keep their family (``# TYPE name``)."""
    out: list[tuple[str, str]] = []
    family = ""
    value = replica.replace("\\", "\\\\").replace('"', '\\"')
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split()
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                family = parts[2]
            out.append((family, line))
            continue
        found = _SAMPLE.match(line)
        if found is None:
            continue
        name, _, labels, rest = found.groups()
        inner = f'replica="{value}"' + (f",{labels}" if labels else "")
        out.append((family or name, f"{name}{{{inner}}}{rest}"))
    return out


def merge(texts: Mapping[str, str]) -> str:
    """One exposition of every replica's (``relabel``): each family's HELP and
    TYPE once, then its samples from every replica."""
    heads: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    for replica in sorted(texts):
        for family, line in relabel(texts[replica], replica):
            if line.startswith("#"):
                head = heads.setdefault(family, [])
                if line not in head:
                    head.append(line)
            else:
                heads.setdefault(family, [])
                samples.setdefault(family, []).append(line)
    lines: list[str] = []
    for family, head in heads.items():
        lines += head
        lines += samples.get(family, [])
    return "\n".join(lines) + "\n"


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


class FleetOps:
    """The operations endpoints over the replica deployment's handle."""

    def __init__(self, replicas: Any) -> None:
        self.replicas = replicas

    async def names(self) -> list[str]:
        """Every running replica, asked one by one: the router puts the ones
        already named last, so a name seen again (twice) means all were."""
        seen: list[str] = []
        repeats = 0
        for _ in range(MAX_REPLICAS):
            name = await self.replicas.whoami.remote(exclude=tuple(seen))
            if name not in seen:
                seen.append(name)
                repeats = 0
                continue
            # Serve skips a replica whose queue length it could not read in
            # time: a second repeat in a row, and all were named.
            repeats += 1
            if repeats >= 2:
                break
        return sorted(seen)

    async def _stream(
        self, replica: str, request: Request, body: bytes
    ) -> tuple[int, list[tuple[str, str]], AsyncIterator[dict[str, Any]], Any]:
        call = self.replicas.options(stream=True).ops.remote(
            replica=replica,
            method=request.method,
            path=request.url.path,
            query=request.url.query,
            headers=list(request.headers.items()),
            body=body,
        )
        it = call.__aiter__()
        first = await it.__anext__()
        if first.get("replica") != replica:
            call.cancel()
            raise APIError(404, f"replica {replica!r} is not running", code="replica_not_found")
        head = await it.__anext__()
        return int(head["status"]), list(head["headers"]), it, call

    async def _whole(self, replica: str, request: Request, body: bytes) -> tuple[int, bytes]:
        status, _, it, _ = await self._stream(replica, request, body)
        chunks = [item["body"] async for item in it if "body" in item]
        return status, b"".join(chunks)

    async def _each(self, request: Request, body: bytes) -> dict[str, tuple[int, bytes]]:
        names = await asyncio.wait_for(self.names(), FANOUT_TIMEOUT_S)

        async def each() -> dict[str, tuple[int, bytes]]:
            # One after the other: the calls made while serving one request
            # share its internal request id, and Serve's router matches the
            # replica it chose to the pending call by that id: calls made at
            # once all waited for the one that got it (Ray 2.60).
            return {name: await self._whole(name, request, body) for name in names}

        return await asyncio.wait_for(each(), FANOUT_TIMEOUT_S)

    async def handle(self, request: Request) -> Response:
        try:
            return await self._handle(request)
        except TimeoutError:
            raise APIError(
                504, f"the replicas did not answer within {FANOUT_TIMEOUT_S:g} s"
            ) from None

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
            names = await asyncio.wait_for(self.names(), FANOUT_TIMEOUT_S)
            target = names[0] if names else None
        if target is not None:
            return await self._proxy(target, request, body)
        return self._all(await self._each(request, body))

    async def _proxy(self, replica: str, request: Request, body: bytes) -> Response:
        status, headers, it, call = await self._stream(replica, request, body)
        kept = {k: v for k, v in headers if k.lower() not in _HOP and k.lower() != "set-cookie"}
        kept["X-Tierlm-Replica"] = replica

        async def content() -> AsyncIterator[bytes]:
            try:
                async for item in it:
                    if "body" in item:
                        yield item["body"]
            finally:
                call.cancel()

        response = StreamingResponse(content(), status_code=status, headers=kept)
        for key, value in headers:
            if key.lower() == "set-cookie":
                response.raw_headers.append((b"set-cookie", value.encode("latin-1")))
        if request.url.path.startswith("/dashboard"):
            # The page's own requests (state, events) then go to the same replica.
            response.set_cookie(REPLICA_COOKIE, replica, httponly=True, samesite="strict")
        return response

    @staticmethod
    def _all(answers: Mapping[str, tuple[int, bytes]]) -> Response:
        worst = max((status for status, _ in answers.values()), default=503)
        status = 200 if worst < 400 else worst
        return JSONResponse(
            {"replicas": {name: _decoded(body) for name, (_, body) in answers.items()}},
            status_code=status,
        )

    async def _metrics(self, request: Request, body: bytes) -> Response:
        answers = await self._each(request, body)
        refused = [(s, b) for s, b in answers.values() if s != 200]
        if refused:  # a key problem answers the same on every replica
            status, text = refused[0]
            return Response(text, status_code=status, media_type="application/json")
        texts = {name: text.decode("utf-8") for name, (_, text) in answers.items()}
        return Response(merge(texts), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def _health(self, request: Request, body: bytes, path: str) -> Response:
        try:
            answers = await self._each(request, body)
        except (TimeoutError, APIError) as exc:
            return JSONResponse({"status": "unavailable", "reason": str(exc)}, status_code=503)
        replicas = {name: _decoded(text) for name, (_, text) in answers.items()}
        good = [name for name, (status, _) in answers.items() if status == 200]
        if not good:
            reason = (
                "no replica runs"
                if not answers
                else "no replica is " + ("live" if path == "/health" else "ready")
            )
            return JSONResponse(
                {"status": "unavailable", "reason": reason, "replicas": replicas}, status_code=503
            )
        degraded = len(good) < len(answers) or any(
            isinstance(r, dict) and r.get("status") == "degraded" for r in replicas.values()
        )
        word, count = ("ok", "live_replicas") if path == "/health" else ("ready", "ready_replicas")
        return JSONResponse(
            {"status": "degraded" if degraded else word, count: len(good), "replicas": replicas}
        )


def _decoded(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")
