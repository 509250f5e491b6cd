"""bench/cluster.py --ray: the cluster questions on a real local Ray Serve.

Three ``TierlmReplica`` of the sim backend (simulated devices: 0.02 s a
token, 2 s a swap, 40-token jobs, models m0..m2) behind the ingress, on Ray
bound to 127.0.0.1, with tierlm's router and then, in the same run, the same
deployments with Ray's default router as Ray ships it (``request_router =
"ray-default"``: the operations the bench reads through the ingress do not
go through the router, docs/distributed.md "Operations").
For each:

- **rollout**: a chat on m0 every second over background at 60 % load; after
  ``30 * scale`` s the application is deployed again (Serve replaces every
  replica: a rolling update) under that load: the chat's first token p95
  before and during it, and the requests that failed;
- **swaps**: background jobs at 60 % load over the 3 models for ``swaps_s``;
  swaps counted from ``tierlm_swaps_total`` on the ingress's /metrics (every
  replica's, labelled ``replica``), and the jobs' latency;
- **flood**: background at 170 % load (queues capped at 30 per class) with a
  streamed chat on m0 every 2 s: the chat's first token p50 / p95 at the
  client, and the requests refused;
- **rollout_after_kills** (tierlm's router only): the rollout, the replicas
  not keeping m0 killed a third of the way in, so that the keeper is the
  oldest, which a rolling update stops first, unless the keep moves
  (``tierlm.ray.keeping``); steady is the chats before the kills;
- **kill**: 100 % load; the busiest replica (most queued, by the routing
  stats through the ingress) killed with ``ray.kill`` a third of the way in:
  the requests it held, how many completed (their streams continued on
  another replica) and how many failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import importlib
import os
import random
import re
import shutil
import socket
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierlm.ray.app import LOOPBACK_ENV

TOKEN_S = 0.02
SWAP_S = 2.0
JOB_TOKENS = 40
MODELS = ("m0", "m1", "m2")
REPLICAS = 3
SETTINGS: dict[str, Any] = {
    "backend": {
        "kind": "sim",
        "models": list(MODELS),
        "token_interval": TOKEN_S,
        "swap_seconds": SWAP_S,
    },
    "classes": {"extract": {"queue_limit": 30}, "chat": {"queue_limit": 30}},
    "server": {"sse_heartbeat": 60},
}
ROUTERS = {"tierlm": None, "ray_default": "ray-default"}
ALL = frozenset(ROUTERS)
PHASES = frozenset({"rollout", "swaps", "flood", "kill", "rollout_after_kills"})
TIERLM_ONLY = frozenset({"rollout_after_kills"})  # with tierlm's router only
CHAT_SWAP = re.compile(
    r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}).*swapping model .* -> 'm0' for job \d+ \(chat\)"
)


@dataclass
class Outcome:
    class_name: str
    model: str
    sent: float
    status: int = 0
    replica: str | None = None
    first_token_s: float | None = None
    total_s: float | None = None
    done: bool = False
    text: str = ""


@dataclass
class Phase:
    outcomes: list[Outcome] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _request(http: Any, url: str, out: Outcome, tokens: int) -> None:
    body = {
        "model": out.model,
        "messages": [{"role": "user", "content": "go"}],
        "max_tokens": tokens,
        "stream": True,
    }
    try:
        async with http.stream(
            "POST",
            f"{url}/v1/chat/completions",
            json=body,
            headers={"X-Tierlm-Class": out.class_name},
        ) as response:
            out.status = response.status_code
            out.replica = response.headers.get("x-tierlm-replica")
            async for line in response.aiter_lines():
                if out.first_token_s is None and '"content":"w' in line:
                    out.first_token_s = time.monotonic() - out.sent
                if line.startswith("data: [DONE]"):
                    out.done = True
                elif line.startswith("data:") and '"error"' in line:
                    out.text = line[:300]
    except Exception as exc:  # a connection cut: counted as failed
        out.text = f"{type(exc).__name__}: {exc}"
    out.total_s = time.monotonic() - out.sent


async def _load(
    http: Any,
    url: str,
    seconds: float,
    load: float,
    seed: int,
    chat_every: float | None = None,
    at: list[tuple[float, Any]] | None = None,
    until: asyncio.Event | None = None,
) -> Phase:
    """Poisson background over the models at ``load`` (of the fleet's
    capacity), chats on m0 every ``chat_every``; ``at``: (time, coroutine
    factory) run during the phase; ``until``: it ends early when set."""
    rng = random.Random(seed)
    rate = load * REPLICAS / (JOB_TOKENS * TOKEN_S)
    phase = Phase()
    tasks: list[asyncio.Task[None]] = []
    start = time.monotonic()
    next_bg = rng.expovariate(rate)
    next_chat = chat_every if chat_every is not None else float("inf")
    events = sorted(at or [], key=lambda e: e[0])
    while True:
        now = time.monotonic() - start
        if now >= seconds or (until is not None and until.is_set()):
            break
        while events and events[0][0] <= now:
            tasks.append(asyncio.ensure_future(events.pop(0)[1]()))
        if next_bg <= now:
            out = Outcome("extract", rng.choice(MODELS), time.monotonic())
            phase.outcomes.append(out)
            tasks.append(asyncio.ensure_future(_request(http, url, out, JOB_TOKENS)))
            next_bg += rng.expovariate(rate)
            continue
        if next_chat <= now:
            out = Outcome("chat", "m0", time.monotonic())
            phase.outcomes.append(out)
            tasks.append(asyncio.ensure_future(_request(http, url, out, 10)))
            next_chat += chat_every or 0
            continue
        await asyncio.sleep(min(next_bg, next_chat, seconds, now + 0.5) - now)
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=600)
    return phase


async def _swaps(http: Any, url: str) -> int:
    text = (await http.get(f"{url}/metrics")).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("tierlm_swaps_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


async def _run_router(
    url: str,
    scale: float,
    seed: int,
    args: dict[str, Any],
    phases: frozenset[str] = PHASES,
    logs: str | None = None,
) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=400, max_keepalive_connections=400)
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:
        out: dict[str, Any] = {}
        for name in ("rollout", "rollout_after_kills"):
            if name in phases:
                kills = name != "rollout"
                out[name] = await _rollout(http, url, scale, seed + 3, args, logs, kills)
                await asyncio.sleep(5)  # its queues drain
        if phases - {"rollout", "rollout_after_kills"}:
            out.update(await _other_phases(http, url, scale, seed, phases))
        return out


async def _other_phases(
    http: Any, url: str, scale: float, seed: int, phases: frozenset[str]
) -> dict[str, Any]:
    import ray

    out: dict[str, Any] = {}
    if "swaps" in phases:
        before = await _swaps(http, url)
        phase = await _load(http, url, 60 * scale, 0.6, seed)
        after = await _swaps(http, url)
        bg = [o.total_s for o in phase.outcomes if o.done and o.total_s is not None]
        out["swaps"] = {
            "seconds": 60 * scale,
            "jobs": len(phase.outcomes),
            "swaps": after - before,
            "job_latency_p50_s": round(statistics.median(bg), 3) if bg else None,
            "failed": sum(1 for o in phase.outcomes if not o.done),
        }
    if "flood" in phases:
        phase = await _load(http, url, 40 * scale, 1.7, seed + 1, chat_every=2.0)
        chats = [o for o in phase.outcomes if o.class_name == "chat"]
        firsts = [o.first_token_s for o in chats if o.first_token_s is not None]
        out["flood"] = {
            "seconds": 40 * scale,
            "chats": len(chats),
            "chat_first_token_p50_s": _pct(firsts, 0.5),
            "chat_first_token_p95_s": _pct(firsts, 0.95),
            "chats_refused": sum(1 for o in chats if o.status == 429),
            "background_refused": sum(
                1 for o in phase.outcomes if o.class_name != "chat" and o.status == 429
            ),
        }
        await asyncio.sleep(5)  # the flood's queues drain
    if "kill" in phases:
        killed: dict[str, Any] = {}

        async def kill() -> None:
            routing = (await http.get(f"{url}/v1/scheduler/routing")).json()["replicas"]

            def held(stats: dict[str, Any]) -> int:
                return sum(stats.get("queued_by_class", {}).values()) + sum(
                    stats.get("running", {}).values()
                )

            victim = max(sorted(routing), key=lambda n: held(routing[n]))
            killed["replica"] = victim
            killed["held_then"] = held(routing[victim])
            for actor in ray.util.list_named_actors(all_namespaces=True):
                if victim in actor["name"]:
                    ray.kill(ray.get_actor(actor["name"], namespace="serve"), no_restart=True)

        seconds = 30 * scale
        phase = await _load(http, url, seconds, 1.0, seed + 2, at=[(seconds / 3, kill)])
        on_victim = [o for o in phase.outcomes if o.replica == killed.get("replica")]
        out["kill"] = {
            "seconds": seconds,
            "replica_held_when_killed": killed.get("held_then"),
            "requests_placed_on_it": len(on_victim),
            "of_those_completed": sum(1 for o in on_victim if o.done),
            "of_those_failed": sum(1 for o in on_victim if o.status == 200 and not o.done),
            "all_requests": len(phase.outcomes),
            "all_failed": sum(1 for o in phase.outcomes if o.status == 200 and not o.done),
            "all_refused": sum(1 for o in phase.outcomes if o.status == 429),
        }
    return out


async def _fleet() -> dict[str, dict[str, Any]]:
    """Every tierlm replica's routing stats, as the keepers read them."""
    from ray import serve

    from tierlm.ray.reach import each_replica

    handle = serve.get_deployment_handle("tierlm-replica", "default")
    reach = await each_replica(handle, "record_routing_stats", 10.0)
    return {str(a["replica"]): a for a in reach.answers if isinstance(a, dict)}


async def _rollout(
    http: Any,
    url: str,
    scale: float,
    seed: int,
    args: dict[str, Any],
    logs: str | None,
    kills: bool = False,
) -> dict[str, Any]:
    """Chats every second over background at 60 % load: ``30 * scale`` s
    steady, then the application deployed again (another swap time: Serve
    replaces every replica, a rolling update) while the load goes on, until
    the new replicas serve, then 5 s more. ``kills``: rollout_after_kills.
    Runs on an older tierlm too (a before-and-after run: no stop_order_of)."""
    import ray
    from ray import serve

    from tierlm.ray import build

    stop_order_of = getattr(importlib.import_module("tierlm.ray.keep_loop"), "stop_order_of", None)

    steady_s = 30 * scale
    done = asyncio.Event()
    marks: dict[str, float] = {"start_wall": time.time()}
    seen: dict[str, Any] = {"stopped": []}

    async def kill() -> None:
        marks["kill"] = time.monotonic()
        seen["killed"] = [n for n, s in (await _fleet()).items() if s.get("keeps") != "m0"]
        for actor in ray.util.list_named_actors(all_namespaces=True):
            if any(v in actor["name"] for v in seen["killed"]):
                ray.kill(ray.get_actor(actor["name"], namespace="serve"), no_restart=True)

    async def watch(before: set[str]) -> None:
        while not done.is_set():
            with contextlib.suppress(Exception):
                now = set(await _fleet())
                seen["stopped"] += [n for n in sorted(before - now) if n not in seen["stopped"]]
            await asyncio.sleep(0.3)

    async def redeploy() -> None:
        fleet = await _fleet()
        born = {n: float(s.get("born") or 0.0) for n, s in fleet.items()}
        seen["oldest_first"] = [(n, round(born[n] - min(born.values()), 2)) for n in born]
        seen["oldest_first"].sort(key=lambda item: item[1])
        seen["keeps"] = {n: s.get("keeps") for n, s in fleet.items()}
        handle = serve.get_deployment_handle("tierlm-replica", "default")
        if stop_order_of is not None:
            seen["serve_order"] = await stop_order_of(handle)  # what the keepers read
        watching = asyncio.ensure_future(watch(set(fleet)))
        marks.update({"from": time.monotonic(), "from_wall": time.time()})
        changed = {**SETTINGS, "backend": {**SETTINGS["backend"], "swap_seconds": SWAP_S * 1.1}}
        await asyncio.to_thread(serve.run, build({**args, "settings": changed}), route_prefix="/")
        await asyncio.to_thread(wait_live, url, REPLICAS)
        marks.update({"to": time.monotonic(), "to_wall": time.time()})
        await asyncio.sleep(5)
        done.set()
        await watching

    at = [(steady_s, redeploy)] + ([(steady_s / 3, kill)] if kills else [])
    phase = await _load(http, url, 3600, 0.6, seed, chat_every=1.0, at=at, until=done)
    chats = [o for o in phase.outcomes if o.class_name == "chat"]

    lo, hi = marks.get("from", 0.0), marks.get("to", 0.0)

    def firsts(inside: bool) -> list[float]:
        return [
            o.first_token_s
            for o in chats
            if o.first_token_s is not None
            and (lo <= o.sent <= hi) == inside
            and (inside or o.sent < marks.get("kill", float("inf")))
        ]

    steady, during = firsts(False), firsts(True)
    seen["chats_during_rollout"] = [  # when sent (s into it), first token (s), where
        (round(o.sent - lo, 1), o.first_token_s and round(o.first_token_s, 2), o.replica)
        for o in chats
        if lo <= o.sent <= hi
    ]
    seen["keeper"] = _keeper_lines(logs, marks["start_wall"])
    return {
        **seen,
        "steady_s": steady_s,
        "rollout_s": round(marks.get("to", 0.0) - marks.get("from", 0.0), 1),
        "chats": len(chats),
        "chat_first_token_p95_steady_s": _pct(steady, 0.95),
        "chat_first_token_p95_during_s": _pct(during, 0.95),
        "chat_first_token_max_during_s": _pct(during, 1.0),
        "chats_during": len(during),
        "chats_that_waited_for_a_swap_steady": _chat_swaps(
            logs, marks.get("start_wall", 0.0), marks.get("from_wall", 0.0)
        ),
        "chats_that_waited_for_a_swap_during": _chat_swaps(
            logs, marks.get("from_wall", 0.0), marks.get("to_wall", 0.0)
        ),
        "failed": sum(1 for o in phase.outcomes if o.status == 200 and not o.done),
        "not_200": sum(1 for o in phase.outcomes if o.status != 200),
    }


def wait_live(url: str, count: int, timeout: float = 180.0) -> None:
    """Until ``url``'s /health counts ``count`` live replicas (RuntimeError past ``timeout``)."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            body = httpx.get(f"{url}/health", timeout=30).json()
            if body.get("live_replicas") == count:
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the fleet did not come up: {url}")
        time.sleep(0.5)


def _keeper_lines(logs: str | None, lo: float) -> list[str]:
    """The ingresses' keeper lines (asks, releases) since ``lo`` (Unix seconds)."""
    start = dt.datetime.fromtimestamp(lo).strftime("%Y-%m-%d %H:%M:%S,%f")[:23]
    paths = Path(logs or "/nonexistent").glob("session_latest/logs/serve/*ingress*.log")
    lines = [line for path in paths for line in path.read_text(errors="replace").splitlines()]
    wanted = [t for t in lines if re.search(r"asking replica|no more: ", t) and t[5:28] >= start]
    return sorted(t[5:28] + " " + t[t.index(" -- ") + 4 :][:110] for t in wanted)


def _chat_swaps(logs: str | None, lo: float, hi: float) -> int | None:
    """Chats on m0 that waited for a swap to it between ``lo`` and ``hi``
    (Unix seconds), by the replicas' own log lines (Serve's logs)."""
    if logs is None:
        return None
    start, end = dt.datetime.fromtimestamp(lo), dt.datetime.fromtimestamp(hi)
    count = 0
    for path in Path(logs).glob("session_latest/logs/serve/replica_*tierlm-replica*.log"):
        for line in path.read_text(errors="replace").splitlines():
            match = CHAT_SWAP.search(line)
            if match:
                at = dt.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
                count += start <= at <= end
    return count


def run(
    scale: float, seed: int, phases: frozenset[str] = PHASES, routers: frozenset[str] = ALL
) -> dict[str, Any]:
    """Both routers (or ``routers``), one after the other, on one local Ray;
    ``phases``: which."""
    with local_serve("tierlm-bench-ray-") as (url, folder):
        return _run_routers(url, folder, scale, seed, phases, routers)


def _run_routers(
    url: str,
    folder: str,
    scale: float,
    seed: int,
    phases: frozenset[str],
    routers: frozenset[str] = ALL,
) -> dict[str, Any]:
    from ray import serve

    from tierlm.ray import build

    results: dict[str, Any] = {
        "device": {"token_interval_s": TOKEN_S, "swap_s": SWAP_S, "job_tokens": JOB_TOKENS},
        "replicas": REPLICAS,
        "models": len(MODELS),
        "scale": scale,
        "phases": sorted(phases),
    }
    for name, router in ROUTERS.items():
        if name not in routers or (router is not None and phases <= TIERLM_ONLY):
            continue
        args = {
            "settings": SETTINGS,
            "replicas": REPLICAS,
            "stats_period_s": 1.0,
            "request_router": router,
        }
        started = time.monotonic()
        serve.run(build(args), route_prefix="/")
        wait_live(url, REPLICAS)
        results[name] = asyncio.run(_run_router(url, scale, seed, args, phases, folder))
        results[name]["wall_s"] = round(time.monotonic() - started, 1)  # deploy and phases
        serve.delete("default")
    return results


@contextlib.contextmanager
def local_serve(prefix: str) -> Iterator[tuple[str, str]]:
    """A local Ray on 127.0.0.1 with Serve's proxy on a free port: its URL
    and Ray's session folder (named ``prefix``...); shut down and removed
    after."""
    for key, value in LOOPBACK_ENV.items():
        os.environ.setdefault(key, value)
    import ray
    from ray import serve

    from tierlm.ray import start_local

    port = free_port()
    folder = tempfile.mkdtemp(prefix=prefix, dir="/tmp")  # Ray's session
    start_local(port, num_cpus=2, temp_dir=folder)
    try:
        yield f"http://127.0.0.1:{port}", folder
    finally:
        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(folder, ignore_errors=True)
