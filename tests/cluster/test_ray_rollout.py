"""A rolling update keeps the model persons use loaded (``tierlm.ray.keeping``),
on a real local Ray (127.0.0.1 only): three replicas of the sim backend, a
person chatting on sim-a while background work on sim-b and sim-c keeps the
other replicas busy, and the application deployed again under that load
(Serve replaces every replica, one at a time: it stops an old replica, then
starts a new one; the ingress stays).

Counted in swaps, not in seconds: the replicas' own log says each swap and
the job it was for (``swapping model ... -> 'sim-a' for job N (chat)``), and
the fleet's routing stats, read through the ingress, say which replica holds
sim-a. Marked ``ray``; skipped without tierlm[ray].
"""

from __future__ import annotations

import datetime as dt
import random
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.local_ray import ray_fleet  # first: the environment Ray reads
from tests.helpers import wait_until_blocking

ray = pytest.importorskip("ray", reason="needs tierlm[ray]")
serve = pytest.importorskip("ray.serve")
httpx = pytest.importorskip("httpx")

pytestmark = pytest.mark.ray

WAIT = 90.0
REPLICAS = 3
TOKEN_S = 0.01
JOB_TOKENS = 40
SETTINGS: dict[str, Any] = {
    "backend": {
        "kind": "sim",
        "models": ["sim-a", "sim-b", "sim-c"],
        "token_interval": TOKEN_S,
        "swap_seconds": 1.0,
    },
    "classes": {"extract": {"queue_limit": 30}},
    "server": {"sse_heartbeat": 60},
}
ARGS: dict[str, Any] = {
    "settings": SETTINGS,
    "replicas": REPLICAS,
    "stats_period_s": 0.5,
    "health_check_timeout_s": 30.0,  # Serve's default: a niced replica answers late
    # Serve's wait for a stopping replica's (and ingress's) requests: at 60 s,
    # CI at load 24 saw Serve kill the old ingress with a stream under way.
    # The recipe's default (shutdown_grace + 300 s) lets every one finish.
    "graceful_shutdown_timeout_s": 330.0,
}
ROLLOUT_WAIT = 1800.0
"""A ceiling on the rolling update (a broken one fails rather than hangs):
beside CPU hogs on 2 cores a new replica took minutes to start."""
CHAT_EVERY = 1.5
"""Seconds between the person's messages: more than a swap (1 s), so that one
chat's swap is over when the next comes."""
LOAD = 0.5
"""Background, of the fleet's capacity, on sim-b and sim-c."""
SWAP_LINE = re.compile(
    r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}).*swapping model .* -> 'sim-a' for job \d+ \(chat\)"
)


SESSIONS: list[Path] = []


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    def ready(base: str) -> None:
        wait_until_blocking(
            lambda: routing(base),
            f"{REPLICAS} replicas answering",
            until=lambda answer: answer is not None and len(answer) == REPLICAS,
            timeout=600,
            every=0.5,
        )

    with ray_fleet(ARGS, ready) as fleet:
        SESSIONS.append(fleet.session)
        yield fleet.url


def routing(url: str) -> dict[str, Any] | None:
    """Every replica's routing stats through the ingress; None when one did
    not answer (a partial picture)."""
    try:
        answer = httpx.get(f"{url}/v1/scheduler/routing", timeout=WAIT)
    except httpx.HTTPError:
        return None
    if answer.status_code != 200:
        return None
    replicas = answer.json()["replicas"]
    if any(not isinstance(s, dict) or "loaded_model" not in s for s in replicas.values()):
        return None
    return dict(replicas)


def request(url: str, model: str, class_name: str, tokens: int, out: list[tuple[int, str]]) -> None:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "go"}],
        "max_tokens": tokens,
        "stream": True,
    }
    headers = {"X-Tierlm-Class": class_name}
    if class_name == "chat":
        headers["X-Tierlm-Session"] = "ann"
    text = ""
    try:
        with httpx.stream(
            "POST", f"{url}/v1/chat/completions", json=body, headers=headers, timeout=600
        ) as response:
            for line in response.iter_lines():
                text += line + "\n"
            out.append((response.status_code, text))
    except httpx.HTTPError as exc:
        out.append((0, f"{type(exc).__name__}: {exc}"))


def chat_swaps() -> list[dt.datetime]:
    """When a chat on sim-a waited for a swap to it, by the replicas' logs."""
    found = []
    for path in SESSIONS[-1].glob("session_latest/logs/serve/replica_*tierlm-replica*.log"):
        for line in path.read_text(errors="replace").splitlines():
            match = SWAP_LINE.search(line)
            if match:
                found.append(dt.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f"))
    return sorted(found)


def story(since: float) -> str:
    """The keeper's and the swaps' lines of Serve's logs after ``since``, in
    time order: what to read when the test fails."""
    start = dt.datetime.fromtimestamp(since)
    lines = []
    for path in SESSIONS[-1].glob("session_latest/logs/serve/replica_*.log"):
        for line in path.read_text(errors="replace").splitlines():
            if not re.search(r"keep|swapping model|loading|drained", line):
                continue
            stamp = re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", line)
            if stamp and dt.datetime.strptime(stamp.group(0), "%Y-%m-%d %H:%M:%S,%f") >= start:
                lines.append(line[line.index(stamp.group(0)) :][:220])
    return "\n".join(sorted(lines))


def test_a_rolling_update_keeps_the_persons_model_loaded(url: str) -> None:
    """A new replica keeps sim-a before the old holder stops, and new
    replicas take no background work that would swap it away: nothing
    fails, and at the end a new replica holds sim-a. The chats that waited
    for a swap are printed (a measurement: Serve may stop the holder first,
    and the ingress is replaced too, its successor's router starting
    without the replicas' stats). The looks (every 0.5 s) finding sim-a held or loaded
    nowhere are printed: a few around the holder's stop, when Serve stops it
    first."""
    from tierlm.ray import build

    before = routing(url)
    assert before is not None
    old = set(before)
    stop = threading.Event()
    results: list[tuple[int, str]] = []
    looks: list[tuple[float, dict[str, Any]]] = []

    def person() -> None:
        while not stop.is_set():
            request(url, "sim-a", "chat", 5, results)
            stop.wait(CHAT_EVERY)

    def background(pool: ThreadPoolExecutor) -> None:
        rng = random.Random(7)
        rate = LOAD * REPLICAS / (JOB_TOKENS * TOKEN_S)
        while not stop.wait(rng.expovariate(rate)):
            pool.submit(
                request, url, rng.choice(["sim-b", "sim-c"]), "extract", JOB_TOKENS, results
            )

    def watch() -> None:
        while not stop.is_set():
            seen = routing(url)
            if seen is not None:
                looks.append((time.time(), seen))
            stop.wait(0.5)

    with ThreadPoolExecutor(64) as pool:
        workers = [pool.submit(person), pool.submit(background, pool), pool.submit(watch)]
        try:
            time.sleep(15)  # steady: the person's model settles on a replica
            steady_swaps = len(chat_swaps())
            rolled_at = time.time()
            # A replica's own argument: Serve replaces the replicas, not the
            # ingress (bench/cluster.py --ray replaces both).
            serve.run(build({**ARGS, "stall_after_s": 121.0}), route_prefix="/")

            def all_new() -> bool:
                seen = routing(url)
                return seen is not None and len(seen) == REPLICAS and not set(seen) & old

            wait_until_blocking(all_new, "every replica replaced", timeout=ROLLOUT_WAIT, every=1)
            time.sleep(5)
        finally:
            stop.set()
        for worker in workers:
            worker.result(WAIT)
    failed = [text[-300:] for status, text in results if status != 200 or "[DONE]" not in text]
    assert not failed, failed
    told = story(rolled_at - 5)
    print(told)
    joined = min((at for at, seen in looks if set(seen) - old), default=None)
    assert joined is not None, "no look saw a new replica"
    nowhere = [
        round(at - rolled_at, 1)
        for at, seen in looks
        if at >= joined
        and not any("sim-a" in (s.get("loaded_model"), s.get("swapping_to")) for s in seen.values())
    ]
    swaps = chat_swaps()
    during = swaps[steady_swaps:]
    print(
        f"chats that waited for a swap to sim-a: {steady_swaps} in the steady 15 s, "
        f"{len(during)} during the rollout; looks (every 0.5 s) after the first new "
        f"replica joined ({round(joined - rolled_at, 1)} s in) finding sim-a nowhere: {nowhere}"
    )
    # How many chats waited for a swap during the rollout is a measurement
    # (bench/cluster.py --ray-phases rollout: 1-2 with keepers, 19-34 with
    # Ray's default router), not asserted here: it depends on when Serve
    # stops the holder and on how busy the machine is. What must hold
    # whatever the timing: nothing failed, every replica was replaced, and
    # the person's model is loaded on a new replica at the end (a keeper).
    last = routing(url)
    assert last is not None
    assert not set(last) & old, last  # every replica new
    assert any(s.get("loaded_model") == "sim-a" for s in last.values()), (last, told)
