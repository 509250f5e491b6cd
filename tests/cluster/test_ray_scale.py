"""Queued work follows the fleet as it changes (docs/distributed.md
"Autoscaling"), on a real local Ray bound to 127.0.0.1: one replica of the
sim backend holds a burst of long background requests (one runs, the rest
wait), then

- the application is deployed again (a rolling update: Serve starts new
  replicas and stops the old one once its requests end), or
- Serve's autoscaler adds replicas for the burst,

and the ingress moves the waiting requests to the new replicas
(``tierlm.ray.moves``): they run there, cancelled on the old one only once
another took them, and every stream ends whole.

Marked ``ray``; one Ray for the module, writing only in a temp dir of its
own (``local_ray``). Every wait is bounded (a hang guard), none timed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.cluster.local_ray import ray_fleet  # first: the environment Ray reads
from tests.helpers import wait_until_blocking

ray = pytest.importorskip("ray", reason="needs tierlm[ray]")
serve = pytest.importorskip("ray.serve")
httpx = pytest.importorskip("httpx")

pytestmark = pytest.mark.ray

WAIT = 600.0
"""A hang guard on each request and each wait, not a speed: on 2 cores
shared with other work Serve took minutes to start a replica."""
TOKENS = 800  # 8 s each on the simulated device
BURST = 8
SETTINGS: dict[str, Any] = {
    "backend": {"kind": "sim", "models": ["sim-a"], "token_interval": 0.01},
    "server": {"sse_heartbeat": 60},
}
ARGS: dict[str, Any] = {
    "settings": SETTINGS,
    "replicas": 1,
    "stats_period_s": 0.5,
    "health_check_timeout_s": 30.0,
    "graceful_shutdown_timeout_s": 120.0,
}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with ray_fleet(None) as fleet:  # each test deploys its own
        yield fleet.url


def stream(url: str, tokens: int) -> tuple[int, str]:
    """A streamed background request: its status and the text it carried."""
    body = {
        "model": "sim-a",
        "messages": [{"role": "user", "content": "go"}],
        "max_tokens": tokens,
        "stream": True,
    }
    text = ""
    with httpx.stream(
        "POST",
        f"{url}/v1/chat/completions",
        json=body,
        headers={"X-Tierlm-Class": "extract"},
        timeout=WAIT,
    ) as response:
        if response.status_code != 200:
            return response.status_code, response.read().decode()
        for line in response.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:]).get("choices", []):
                    text += choice.get("delta", {}).get("content") or ""
    return 200, text


def by_replica(url: str, family: str, label: str) -> dict[str, float]:
    """A counter's samples of class extract with ``label``, per replica."""
    found: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=WAIT).text.splitlines():
        ours = 'class="extract"' in line and label in line
        if line.startswith(family + "{") and ours:
            match = re.search(r'replica="([^"]+)"', line)
            assert match, line
            found[match.group(1)] = found.get(match.group(1), 0.0) + float(line.split()[-1])
    return found


def completed(url: str) -> dict[str, float]:
    return by_replica(url, "tierlm_jobs_total", 'outcome="completed"')


def moved_away(url: str) -> dict[str, float]:
    """Queued jobs whose request went away: a move cancels the old copy."""
    return by_replica(url, "tierlm_client_disconnects_total", 'state="queued"')


def held(url: str) -> int:
    """The requests the replicas hold, queued or running."""
    replicas = httpx.get(f"{url}/v1/scheduler/routing", timeout=WAIT).json()["replicas"]
    return sum(
        sum(s.get("queued_by_class", {}).values()) + sum(s.get("running", {}).values())
        for s in replicas.values()
    )


def burst(url: str, then: Any) -> None:
    """``BURST`` long requests on the one replica; ``then()`` once they wait
    there; every stream must end whole."""
    with ThreadPoolExecutor(BURST) as pool:
        futures = [pool.submit(stream, url, TOKENS) for _ in range(BURST)]
        wait_until_blocking(  # the burst waits on the one replica
            lambda: held(url) >= BURST, "the burst to arrive", timeout=WAIT, every=0.3
        )
        then()
        results = [f.result(WAIT) for f in futures]
    expected = "".join(f"w{i} " for i in range(TOKENS))
    assert [status for status, _ in results] == [200] * BURST, results
    assert all(text == expected for _, text in results)


def replicas_running() -> int:
    app = serve.status().applications.get("default")
    found = app.deployments.get("tierlm-replica") if app is not None else None
    return found.replica_states.get("RUNNING", 0) if found is not None else 0


def test_a_rolling_update_moves_the_old_replicas_queue_to_the_new_ones(url: str) -> None:
    """Deployed again from Python, Serve replaces the replica: its queue runs
    on the new ones (the old one's series leave /metrics with it)."""
    from tierlm.ray import build

    serve.run(build(ARGS), route_prefix="/")
    burst(url, lambda: serve.run(build({**ARGS, "replicas": 3}), route_prefix="/"))
    ran = completed(url)
    print(f"completed per new replica after a rolling update: {ran}")
    assert sum(ran.values()) >= BURST - 2, ran  # the old one ran 1 or 2
    assert len(ran) == 3, ran


def test_the_autoscaler_adds_replicas_and_queued_work_moves_to_them(url: str) -> None:
    """Serve's autoscaling (``FleetArgs.autoscaling``): the burst's requests
    per replica pass the target, Serve adds replicas, the waiting requests
    run on them; no replica is replaced (all of them count in /metrics)."""
    from tierlm.ray import build

    scaling = {
        "min_replicas": 1,
        "max_replicas": 3,
        "target_ongoing_requests": 2,
        "metrics_interval_s": 0.5,
        "look_back_period_s": 2.0,
        "upscale_delay_s": 1.0,
        "downscale_delay_s": 600.0,
    }
    serve.run(build({**ARGS, "autoscaling": scaling}), route_prefix="/")

    def grown() -> None:
        wait_until_blocking(
            lambda: replicas_running() >= 2, "Serve to add a replica", timeout=WAIT, every=0.3
        )

    burst(url, grown)
    ran = completed(url)
    print(f"completed per replica after Serve's autoscaling: {ran}; moved: {moved_away(url)}")
    assert sum(ran.values()) == BURST, ran
    assert len([n for n in ran.values() if n > 0]) >= 2, ran
    # Whether any of it was still queued (and so moved, not placed) when the
    # new replicas came up depends on the machine's speed: on a busy one the
    # first replica had started it all (a move takes only queued work). The
    # rolling update's test shows moves whatever the speed.
