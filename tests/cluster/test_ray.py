"""tierlm.ray on a real local Ray (127.0.0.1 only): two replicas of the sim
backend behind TierlmRequestRouter and the OpenAI-compatible ingress.
Marked ``ray``; skipped without tierlm[ray]. One Ray for the module (its
start and teardown take ~30 s here); every request is bounded in time."""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from tierlm.ray.app import LOOPBACK_ENV

for _key, _value in LOOPBACK_ENV.items():  # before ray is first imported
    os.environ.setdefault(_key, _value)

ray = pytest.importorskip("ray", reason="needs tierlm[ray]")
serve = pytest.importorskip("ray.serve")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")

pytestmark = pytest.mark.ray

WAIT = 60.0
STATS_PERIOD = 0.5  # s between the router's reads of each replica's routing stats
SETTINGS: dict[str, Any] = {
    "backend": {
        "kind": "sim",
        "models": ["sim-a", "sim-b"],
        "token_interval": 0.01,
        "swap_seconds": 0.2,
    },
    "classes": {"gana": {"queue_limit": 1}},
    "server": {"sse_heartbeat": 60},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    from tierlm.ray import build, start_local

    port = free_port()
    start_local(port, num_cpus=2)
    try:
        serve.run(build(SETTINGS, replicas=2, stats_period_s=STATS_PERIOD), route_prefix="/")
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + WAIT
        while httpx.get(f"{base}/health", timeout=5).status_code != 200:
            assert time.monotonic() < deadline, "the ingress did not come up"
            time.sleep(0.2)
        yield base
    finally:
        serve.shutdown()
        ray.shutdown()


def client(url: str, class_name: str = "chat") -> Any:
    return openai.OpenAI(
        base_url=f"{url}/v1",
        api_key="unused",
        max_retries=0,
        timeout=WAIT,
        default_headers={"X-Tierlm-Class": class_name},
    )


def stream(
    url: str,
    model: str,
    class_name: str,
    tokens: int,
    on_replica: Callable[[str], None] | None = None,
) -> tuple[str | None, str, int]:
    """A streamed chat read raw: (the replica it queued on, its text, status).
    The replica is in the response's ``X-Tierlm-Replica`` header, and in the
    comment line of a waiting stream; ``on_replica`` is told it at once."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": tokens,
        "stream": True,
    }
    replica, text = None, ""
    with httpx.stream(
        "POST",
        f"{url}/v1/chat/completions",
        json=body,
        headers={"X-Tierlm-Class": class_name},
        timeout=WAIT,
    ) as response:
        if response.status_code != 200:
            response.read()
            return None, response.text, response.status_code
        replica = response.headers.get("x-tierlm-replica")
        assert replica, response.headers
        if on_replica is not None:
            on_replica(replica)
        for line in response.iter_lines():
            found = re.search(r"replica=(\S+)", line)
            assert found is None or found.group(1) == replica, (line, replica)
            text += line + "\n"
    return replica, text, 200


def test_a_chat_streamed_and_not(url: str) -> None:
    chat = client(url)
    raw = chat.chat.completions.with_raw_response.create(
        model="sim-a", messages=[{"role": "user", "content": "hi"}], max_tokens=5
    )
    assert raw.headers.get("x-tierlm-replica")  # which replica answered
    answer = raw.parse()
    assert answer.choices[0].message.content
    pieces = [
        c.choices[0].delta.content or ""
        for c in chat.chat.completions.create(
            model="sim-b", messages=[{"role": "user", "content": "hi"}], max_tokens=5, stream=True
        )
        if c.choices
    ]
    assert "".join(pieces)
    assert [m.id for m in chat.models.list()] == ["sim-a", "sim-b"]


def test_a_full_replica_sends_the_request_to_the_next_and_all_full_is_429(url: str) -> None:
    """gana holds 1 queued job per replica: with 2 replicas, 4 long requests
    fit (2 running, 2 queued), the 5th is refused by both: 429. (Sent 1 s
    apart: a job not started yet counts as queued, and a replica that served
    a chat holds its model up to 3 swaps before it swaps for background work.)"""
    with ThreadPoolExecutor(4) as pool:
        long = []
        for _ in range(4):  # each runs 7 s
            long.append(pool.submit(stream, url, "sim-a", "gana", 700))
            time.sleep(1.0)
        fifth, text, status = stream(url, "sim-a", "gana", 5)
        results = [f.result(timeout=WAIT) for f in long]
    placed = [(replica, status, text[:200]) for replica, text, status in results]
    assert status == 429, (fifth, placed)
    assert "every replica" in text
    assert [status for _, _, status in results] == [200] * 4
    assert all("[DONE]" in text for _, text, _ in results)


def test_a_request_queued_on_a_replica_that_dies_is_served_by_another(url: str) -> None:
    """A replica killed with a job queued (nothing streamed yet): that request
    is queued again on the other replica and completes; the one it was
    generating, which had streamed tokens, fails with 502. The other replica
    is kept busy longer, so that the second request queues behind the first
    (the ski rental would rather swap on an idle replica)."""
    with ThreadPoolExecutor(3) as pool:
        blocker: Future[str] = Future()
        other = pool.submit(stream, url, "sim-a", "extract", 1000, blocker.set_result)
        blocker.result(timeout=WAIT)
        time.sleep(1.0)
        first: Future[str] = Future()
        running = pool.submit(stream, url, "sim-b", "extract", 600, first.set_result)
        first.result(timeout=WAIT)  # generating on its replica
        # Until the router has read stats that show it there: on a loaded
        # machine a second after the start was not always enough, and the
        # queued request went to the other replica.
        time.sleep(3 * STATS_PERIOD)
        where: Future[str] = Future()
        queued = pool.submit(stream, url, "sim-b", "extract", 5, where.set_result)
        victim = where.result(timeout=WAIT)  # queued behind the first, same model
        assert victim == first.result(timeout=WAIT) != blocker.result()
        actors = [
            a["name"]
            for a in ray.util.list_named_actors(all_namespaces=True)
            if victim in a["name"]
        ]
        assert actors, victim
        ray.kill(ray.get_actor(actors[0], namespace="serve"), no_restart=True)
        _, queued_text, queued_status = queued.result(timeout=WAIT)
        _, running_text, _ = running.result(timeout=WAIT)
        assert other.result(timeout=WAIT)[2] == 200
    assert queued_status == 200 and "[DONE]" in queued_text, queued_text
    assert "w0" in queued_text  # its tokens came from the other replica
    assert "died" in running_text and "[DONE]" not in running_text


def wait_for_replicas(count: int) -> None:
    """Until Serve runs ``count`` tierlm replicas (one killed by the test
    before is replaced), then until the router has read their stats again."""
    deadline = time.monotonic() + WAIT
    while True:
        app = serve.status().applications.get("default")
        deployment = app.deployments.get("tierlm-replica") if app is not None else None
        states = deployment.replica_states if deployment is not None else {}
        if states.get("RUNNING", 0) == count and sum(states.values()) == count:
            break
        assert time.monotonic() < deadline, f"replicas: {states}"
        time.sleep(0.2)
    time.sleep(3 * STATS_PERIOD)


def test_stats_reach_the_router(url: str) -> None:
    """Each chat goes to the replica that holds its model, which the router
    knows from the replicas' routing stats: sim-b and sim-a alternate, and
    each keeps to its own replica. Without the stats every replica would cost
    the same swap, and the tie would send every chat to the same one.

    Both replicas hold sim-a from the start (preload), or one holds sim-b
    after an earlier test: the first sim-b chat goes to the one holding sim-b
    or, on a tie, to the first by name, which then holds it. One request at a
    time, each after the stats were read again (``stats_period_s`` 0.5): a
    placement the router made since a replica's stats counts as backlog there."""
    wait_for_replicas(2)
    where: dict[str, set[str]] = {"sim-a": set(), "sim-b": set()}
    for model in ["sim-b", "sim-a"] * 3:
        replica, text, status = stream(url, model, "nataraj", 3)
        assert status == 200, text
        assert replica is not None
        where[model].add(replica)
        time.sleep(3 * STATS_PERIOD)
    assert len(where["sim-a"]) == 1 and len(where["sim-b"]) == 1, where
    assert where["sim-a"] != where["sim-b"], where
