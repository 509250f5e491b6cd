"""The fleet's operations on Ray's own request router, and a frozen replica
(docs/distributed.md "Operations", "Health"), on a real local Ray bound to
127.0.0.1: two replicas of the sim backend behind the ingress, placed by
Ray's default router (power of two choices), which knows nothing of tierlm.

The operations (/health, /metrics, the scheduler API, the dashboard and its
event stream) reach each replica by broadcast, not through the router: they
answer on any router. A replica frozen by SIGSTOP (Serve counts it running
until its health checks fail) leaves /health at 200 ``degraded`` with the
live count and the frozen one ``not_answering``; /metrics still answers.

Marked ``ray``; one Ray for the module, writing only in a temp dir of its
own (``local_ray``). Every wait is bounded (a hang guard), none timed.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.local_ray import ray_fleet  # first: the environment Ray reads
from tests.helpers import wait_until_blocking
from tests.payloads import HI, chat_body

ray = pytest.importorskip("ray", reason="needs tierlm[ray]")
serve = pytest.importorskip("ray.serve")
httpx = pytest.importorskip("httpx")

pytestmark = pytest.mark.ray

REPLICAS = 2
WAIT = 120.0
START_WAIT = 600.0
"""A ceiling on Serve starting the replicas: a hang guard, not a speed (on 2
cores shared with other work a replica took minutes)."""
OPS_TIMEOUT = 3.0
SETTINGS: dict[str, Any] = {
    "backend": {"kind": "sim", "models": ["sim-a"], "token_interval": 0.01},
    "server": {"sse_heartbeat": 60},
}
ARGS: dict[str, Any] = {
    "settings": SETTINGS,
    "replicas": REPLICAS,
    "request_router": "ray-default",
    "ops_timeout_s": OPS_TIMEOUT,
    # A frozen replica must not be replaced during the test: Serve fails it
    # only after 3 checks of health_check_timeout_s each.
    "health_check_period_s": 2.0,
    "health_check_timeout_s": 120.0,
}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    def ready(base: str) -> None:
        wait_health(base, lambda b: b.get("live_replicas") == REPLICAS, START_WAIT)

    with ray_fleet(ARGS, ready) as fleet:
        yield fleet.url


def wait_health(url: str, done: Any, wait: float = WAIT) -> dict[str, Any]:

    def health() -> dict[str, Any]:
        try:
            return dict(httpx.get(f"{url}/health", timeout=WAIT).json())
        except httpx.HTTPError as exc:
            return {"error": str(exc)}

    return wait_until_blocking(health, "/health to answer so", until=done, timeout=wait, every=0.3)


def test_operations_answer_on_rays_default_router(url: str) -> None:
    """/health, /metrics, the scheduler API to one replica and to all, the
    dashboard (its page, its state and its event stream from one replica)
    all answer, every time: none goes through the router."""
    chat = httpx.post(
        f"{url}/v1/chat/completions",
        json=chat_body(max_tokens=3, messages=HI),
        timeout=WAIT,
    )
    assert chat.status_code == 200, chat.text
    names: set[str] = set()
    for _ in range(8):
        health = httpx.get(f"{url}/health", timeout=WAIT)
        assert health.status_code == 200, health.text
        names |= set(health.json()["replicas"])
        metrics = httpx.get(f"{url}/metrics", timeout=WAIT)
        assert metrics.status_code == 200, metrics.text
        assert 'tierlm_fleet_replicas{state="answered"} 2' in metrics.text, metrics.text[-400:]
    assert len(names) == REPLICAS
    routing = httpx.get(f"{url}/v1/scheduler/routing", timeout=WAIT)
    assert routing.status_code == 200 and set(routing.json()["replicas"]) == names
    for name in sorted(names):
        one = httpx.get(f"{url}/v1/scheduler/state?replica={name}", timeout=WAIT)
        assert one.status_code == 200, one.text
        assert one.headers["x-tierlm-replica"] == name
    assert httpx.get(f"{url}/v1/scheduler/state?replica=nope", timeout=WAIT).status_code == 404
    with httpx.Client(base_url=url, timeout=WAIT) as browser:
        page = browser.get("/dashboard")
        assert page.status_code == 200 and "<html" in page.text.lower()
        shown = page.headers["x-tierlm-replica"]
        state = browser.get("/dashboard/state")
        assert state.status_code == 200 and state.headers["x-tierlm-replica"] == shown
        with browser.stream("GET", "/dashboard/events") as events:
            assert events.status_code == 200
            assert events.headers["x-tierlm-replica"] == shown
            pushes = 0
            for line in events.iter_lines():
                pushes += line.startswith("event: state")
                if pushes == 2:  # the first, then one more by a long poll
                    break
                if pushes == 1:
                    httpx.post(
                        f"{url}/v1/scheduler/pause",
                        headers={"X-Tierlm-Replica": shown},
                        timeout=WAIT,
                    )
    resumed = httpx.post(f"{url}/v1/scheduler/resume", timeout=WAIT)  # every replica
    assert resumed.status_code == 200 and set(resumed.json()["replicas"]) == names


def replica_pids(url: str) -> dict[str, int]:
    body = wait_health(url, lambda b: b.get("live_replicas") == REPLICAS)
    return {name: int(entry["pid"]) for name, entry in body["replicas"].items()}


def test_a_frozen_replica_degrades_health_and_shows_as_such(url: str) -> None:
    """SIGSTOP one replica: /health answers 200 ``degraded`` with one live
    replica of two and the frozen one ``not_answering`` (named, its pid),
    each poll bounded by the ops timeout; /metrics answers with the live
    replica's series and says one was silent; a chat is still served.
    SIGCONT: ok again."""
    pids = replica_pids(url)
    victim, other = sorted(pids)
    os.kill(pids[victim], signal.SIGSTOP)
    polls: list[float] = []
    try:

        def degraded(body: dict[str, Any]) -> bool:
            entry = body.get("replicas", {}).get(victim, {})
            return body.get("status") == "degraded" and entry.get("status") == "not_answering"

        started = time.monotonic()
        body = wait_health(url, degraded)
        polls.append(time.monotonic() - started)
        assert body["live_replicas"] == 1 and body["replicas_total"] == REPLICAS
        assert body["replicas"][victim]["pid"] == pids[victim]
        assert body["replicas"][other]["status"] == "ok"
        for _ in range(3):
            started = time.monotonic()
            health = httpx.get(f"{url}/health", timeout=WAIT)
            polls.append(time.monotonic() - started)
            assert health.status_code == 200, health.text
        metrics = httpx.get(f"{url}/metrics", timeout=WAIT)
        assert metrics.status_code == 200
        assert f'tierlm_requests_waiting{{replica="{other}"}}' in metrics.text
        assert f'replica="{victim}"' not in metrics.text
        assert 'tierlm_fleet_replicas{state="silent"} 1' in metrics.text
        chat = httpx.post(
            f"{url}/v1/chat/completions",
            json=chat_body(max_tokens=3, messages=HI),
            timeout=WAIT,
        )
        assert chat.status_code == 200 and chat.headers["x-tierlm-replica"] == other
    finally:
        os.kill(pids[victim], signal.SIGCONT)
    print(f"/health polls with a frozen replica: {[round(p, 2) for p in polls]} s")
    wait_health(url, lambda b: b.get("status") == "ok" and b.get("live_replicas") == REPLICAS)
