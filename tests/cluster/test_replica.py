"""TierlmReplica's own lifecycle, in-process (Serve calls the same methods):
the drain Serve starts with ``__del__``, and a replica whose health check
failed. The real replica replaced by Serve is tests/cluster/test_ray.py's."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import asdict
from typing import Any

import pytest

pytest.importorskip("ray", reason="needs tierlm[ray]")

from tierlm.ray.replica import TierlmReplica
from tierlm.runners.endings import Finish
from tierlm.runners.requests import GenerationRequest
from tierlm.server.gateway.metadata import JobMeta

SETTINGS: dict[str, Any] = {
    "backend": {"kind": "sim", "models": ["sim-a"], "token_interval": 0.01},
    "server": {"shutdown_grace": 30},
}


def call(replica: TierlmReplica, tokens: int) -> Any:
    meta = JobMeta("extract", None, None, None, None)
    request = GenerationRequest(model_id="sim-a", prompt="hi", max_tokens=tokens)
    return replica.generate(model="sim-a", class_name="extract", meta=asdict(meta), request=request)


async def read(stream: Any) -> list[dict[str, Any]]:
    return [item async for item in stream]


def test_del_drains_the_running_job_and_refuses_new_ones() -> None:
    async def main() -> None:
        replica = TierlmReplica(SETTINGS)
        await replica.whoami()
        running = call(replica, 100)  # 1 s on the simulated device
        assert "accepted" in await running.__anext__()
        first = await running.__anext__()
        assert "pieces" in first
        rest = asyncio.ensure_future(read(running))
        closing = asyncio.ensure_future(replica.__del__())
        await asyncio.sleep(0.05)
        assert replica.stats is not None and replica.stats.read()["draining"] is True
        refused = await read(call(replica, 5))
        assert refused[0]["status"] == 503 and "shutting down" in json.dumps(refused[0])
        items = await asyncio.wait_for(rest, 30)
        pieces = first["pieces"] + [p for item in items for p in item.get("pieces", [])]
        # Not cut: every piece, and the run ended by its length (the typed ending).
        assert items[-1]["done"] is True and len(pieces) == 100
        assert items[-1]["ending"].finish is Finish.LENGTH
        await asyncio.wait_for(closing, 30)
        assert replica.gateway is not None and replica.gateway.scheduler.closed

    asyncio.run(main())


def test_an_unhealthy_replica_ends_its_jobs_at_once_and_stays_unhealthy() -> None:
    async def main() -> None:
        replica = TierlmReplica(SETTINGS, stall_after_s=0.2)
        await replica.whoami()
        running = call(replica, 10_000)
        assert "accepted" in await running.__anext__()
        await replica.check_health()  # tokens come: healthy
        replica.liveness.last_progress -= 1.0  # as if no token for a second
        with pytest.raises(RuntimeError, match="stalled"):
            await replica.check_health()
        items = await asyncio.wait_for(read(running), 10)
        assert items[-1]["failed"] == 503 and "shutting_down" in json.dumps(items[-1])
        with pytest.raises(RuntimeError, match="stalled"):
            await replica.check_health()  # for good
        await replica.shutdown()

    asyncio.run(main())


def ops(replica: TierlmReplica, path: str, target: str = "") -> Any:
    return replica.ops_call(replica=target, method="GET", path=path)


def test_ops_answer_whole_and_a_stream_by_long_polls() -> None:
    """The ingress reaches replicas by broadcast: a call for another replica
    is answered by its name only; a whole answer comes at once; the
    dashboard's events (a stream) by ``ops_more`` until closed."""

    async def main() -> None:
        replica = TierlmReplica(SETTINGS)
        name = await replica.whoami()
        assert await ops(replica, "/health", target="another") == {
            "replica": name,
            "pid": os.getpid(),
        }
        health = await ops(replica, "/health")
        assert health["status"] == 200 and health["stream"] is None
        assert json.loads(health["body"])["status"] == "ok"
        events = await ops(replica, "/dashboard/events", target=name)
        assert events["status"] == 200 and events["stream"] is not None
        assert b"event: state" in events["body"]
        stream = events["stream"]
        # A job makes the dashboard push again.
        running = call(replica, 5)
        assert "accepted" in await running.__anext__()
        more = await replica.ops_more(replica=name, stream=stream, wait_s=10)
        assert more["end"] is False and b"event: state" in more["body"]
        assert await replica.ops_more(replica="another", stream=stream, wait_s=10) == {
            "replica": name
        }
        await read(running)
        await replica.ops_close(replica=name, stream=stream)
        assert len(replica.answers) == 0
        gone = await replica.ops_more(replica=name, stream=stream, wait_s=10)
        assert gone == {"replica": name, "body": b"", "end": True}
        await replica.shutdown()

    asyncio.run(main())
