"""R real Schedulers on SimulatedRunners in one virtual-time loop, behind a router.

The router is ``tierlm.cluster.rank`` on polled routing stats (as Ray Serve
polls ``record_routing_stats``, every ``period`` seconds) with the placements
made since each poll, or the baseline Ray Serve's default router is: power of
two choices on the live number of requests at each replica, which knows no
models. A replica that refuses (its class is full: the gateway's 429) sends
the request to the next; a request every replica refuses is refused (429).
``remove`` takes a replica away mid-run, as a killed Ray actor: its queue is
lost, nothing else.

Used by tests/cluster/test_virtual_cluster.py and bench/cluster.py (in the
package, so that the bench needs no path to the tests); needs the
``[server]`` extra (the gateway's admission and routing stats).
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tierlm.cluster import PlacementLog, rank
from tierlm.runners.cancellation import Cancelled
from tierlm.runners.requests import GenerationRequest
from tierlm.runners.simulated import SimulatedRunner
from tierlm.server.gateway.admission import RunTimes
from tierlm.server.ops.routing import RoutingStats
from tierlm.shell.handles import GenerationHandle
from tierlm.shell.scheduler import Scheduler

__all__ = ["Arrival", "ClusterResult", "Replica", "VirtualCluster", "run_cluster"]

Router = Literal["tierlm", "p2c"]


def _same(scheduler: Scheduler) -> Scheduler:
    return scheduler


@dataclass(slots=True)
class Replica:
    name: str
    scheduler: Scheduler
    stats: RoutingStats
    queue_limit: int
    alive: bool = True
    handles: list[GenerationHandle] = field(default_factory=list)

    def admits(self, class_name: str) -> bool:
        queued = sum(1 for j in self.scheduler.policy.queued() if j.class_name == class_name)
        return self.alive and queued < self.queue_limit

    def ongoing(self) -> int:
        return len(self.scheduler.policy) + self.stats.running_jobs


@dataclass(frozen=True, slots=True)
class Arrival:
    at: float
    model: str
    class_name: str
    tokens: int


@dataclass(slots=True)
class Placed:
    arrival: Arrival
    replica: str
    handle: GenerationHandle


@dataclass(slots=True)
class ClusterResult:
    swaps: int
    swaps_by_replica: dict[str, int]
    placed: list[Placed]
    refused: list[Arrival]
    refused_while_open: int
    """Refusals while some live replica still admitted the class (should be 0)."""
    lost: int
    """Jobs of the removed replica that did not complete."""
    lost_expected: int
    """Its queued and running jobs when it was removed."""
    others_failed: int
    """Jobs of the other replicas that ended without completing (should be 0)."""
    unfinished: int
    """Jobs still queued or running at the end."""

    def waits(self, class_name: str) -> list[float]:
        """First-token waits of the completed jobs of ``class_name``."""
        out = []
        for p in self.placed:
            first = p.handle.first_token_at
            if p.arrival.class_name == class_name and first is not None:
                out.append(first - p.arrival.at)
        return sorted(out)


class VirtualCluster:
    def __init__(
        self,
        replicas: int,
        router: Router,
        *,
        period: float = 10.0,
        queue_limit: int = 1000,
        swap_seconds: float = 10.0,
        token_interval: float = 0.05,
        seed: int = 1,
    ) -> None:
        self.router = router
        self.period = period
        self.random = random.Random(seed)
        self.replicas: dict[str, Replica] = {}
        for i in range(replicas):
            runner = SimulatedRunner(token_interval=token_interval, swap_seconds=swap_seconds)
            scheduler = Scheduler(runner)
            run_times = RunTimes()
            scheduler.add_listener(run_times.on_event)
            loop = asyncio.get_running_loop()
            stats = RoutingStats(
                functools.partial(_same, scheduler),
                run_times,
                lambda _: queue_limit,
                clock=loop.time,
            )
            scheduler.add_listener(stats.on_event)
            name = f"r{i}"
            self.replicas[name] = Replica(name, scheduler, stats, queue_limit)
        self.polled: dict[str, dict[str, Any]] = {}
        self.log = PlacementLog()
        self.placed: list[Placed] = []
        self.refused: list[Arrival] = []
        self.refused_while_open = 0
        self._poller: asyncio.Task[None] | None = None
        self.removed: tuple[str, int] | None = None

    async def __aenter__(self) -> VirtualCluster:
        self.poll()
        self._poller = asyncio.ensure_future(self._poll_forever())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._poller is not None:
            self._poller.cancel()
        for replica in self.replicas.values():
            await replica.scheduler.aclose()

    def poll(self) -> None:
        self.polled = {n: r.stats.read() for n, r in self.replicas.items() if r.alive}

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            self.poll()

    def _order(self, model: str, class_name: str, now: float) -> list[Replica]:
        alive = [r for r in self.replicas.values() if r.alive]
        if self.router == "p2c":
            # Ray Serve's default: two at random, the one with fewer requests first.
            pair = self.random.sample(alive, min(2, len(alive)))
            pair.sort(key=Replica.ongoing)
            rest = [r for r in alive if r not in pair]
            self.random.shuffle(rest)
            return pair + rest
        names = rank(self.polled, model, class_name, now, placed=self.log.since(self.polled))
        ranked = [self.replicas[n] for n in names if n in self.replicas]
        # The ranking leaves out replicas full at the last poll; they may have
        # room now, and ask before the request is refused.
        return ranked + [r for r in alive if r not in ranked]

    def submit(self, arrival: Arrival) -> GenerationHandle | None:
        now = asyncio.get_running_loop().time()
        for replica in self._order(arrival.model, arrival.class_name, now):
            if not replica.admits(arrival.class_name):
                continue  # its 429: the next
            request = GenerationRequest(
                model_id=arrival.model, prompt="p", max_tokens=arrival.tokens
            )
            handle = replica.scheduler.submit_generation(
                arrival.class_name, request, _ignore, producer=arrival.model
            )
            replica.handles.append(handle)
            self.log.record(replica.name, arrival.model, arrival.class_name, now)
            self.placed.append(Placed(arrival, replica.name, handle))
            return handle
        self.refused.append(arrival)
        if any(r.admits(arrival.class_name) for r in self.replicas.values()):
            self.refused_while_open += 1
        return None

    async def remove(self, name: str) -> None:
        """The replica dies: its queued and running jobs are lost."""
        replica = self.replicas[name]
        pending = sum(1 for h in replica.handles if not h.done())
        self.removed = (name, pending)
        replica.alive = False
        self.polled.pop(name, None)
        await replica.scheduler.aclose()

    def result(self) -> ClusterResult:
        by_replica = {n: r.scheduler.stats.swaps for n, r in self.replicas.items()}
        lost = others = 0
        for p in self.placed:
            if self.removed is not None and p.replica == self.removed[0]:
                lost += not _succeeded(p.handle)
            elif p.handle.done() and not _succeeded(p.handle):
                others += 1
        return ClusterResult(
            swaps=sum(by_replica.values()),
            swaps_by_replica=by_replica,
            placed=self.placed,
            refused=self.refused,
            refused_while_open=self.refused_while_open,
            lost=lost,
            lost_expected=self.removed[1] if self.removed is not None else 0,
            others_failed=others,
            unfinished=sum(1 for p in self.placed if not p.handle.done()),
        )


def _ignore(_: str) -> None:
    pass


def _succeeded(handle: GenerationHandle) -> bool:
    if not handle.done():
        return False
    try:
        handle.result()
    except (Cancelled, Exception):
        return False
    return True


async def run_cluster(
    arrivals: Sequence[Arrival],
    *,
    replicas: int,
    router: Router,
    until: float,
    remove: tuple[float, str] | None = None,
    on_start: Callable[[VirtualCluster], None] | None = None,
    **options: Any,
) -> ClusterResult:
    """Play ``arrivals`` into a fresh cluster, then let it drain until ``until``."""
    loop = asyncio.get_running_loop()
    async with VirtualCluster(replicas, router, **options) as cluster:
        if on_start is not None:
            on_start(cluster)
        removal = remove
        for arrival in sorted(arrivals, key=lambda a: a.at):
            if removal is not None and removal[0] <= arrival.at:
                await asyncio.sleep(max(0.0, removal[0] - loop.time()))
                await cluster.remove(removal[1])
                removal = None
            await asyncio.sleep(max(0.0, arrival.at - loop.time()))
            cluster.submit(arrival)
        await asyncio.sleep(max(0.0, until - loop.time()))
        return cluster.result()


def background(
    models: int,
    replicas: int,
    *,
    load: float,
    duration: float,
    tokens: int = 40,
    token_interval: float = 0.05,
    seed: int = 1,
    waves: bool = True,
    class_name: str = "gana",
) -> list[Arrival]:
    """Poisson background work on ``models`` models (``m0``...), ``load`` x the
    cluster's decode capacity, spread evenly over the models.

    With ``waves`` and more models than replicas, the models come in two waves
    (the first half of the models for the first half of the run, the rest for
    the second) so that no more models are active at once than there are
    devices: with more, any router must rotate models on some device, and the
    swaps grow with the run rather than with the models (bench/cluster.py
    measures that case too, ``waves=False``)."""
    rng = random.Random(seed)
    job_s = tokens * token_interval
    names = [f"m{i}" for i in range(models)]
    if waves and models > replicas:
        half = (models + 1) // 2
        windows = [(0.0, duration / 2)] * half + [(duration / 2, duration)] * (models - half)
        active = [half, models - half]
        per_model = [load * replicas / job_s / active[0 if i < half else 1] for i in range(models)]
    else:
        windows = [(0.0, duration)] * models
        per_model = [load * replicas / job_s / models] * models
    out = []
    for name, (start, end), rate in zip(names, windows, per_model, strict=True):
        t = start + rng.expovariate(rate)
        while t < end:
            out.append(Arrival(t, name, class_name, tokens))
            t += rng.expovariate(rate)
    return out


def chats(
    model: str, *, every: float, duration: float, tokens: int = 20, start: float = 5.0
) -> list[Arrival]:
    """A person's chat on ``model``: one message every ``every`` seconds."""
    out = []
    t = start
    while t < duration:
        out.append(Arrival(t, model, "chat", tokens))
        t += every
    return out
