"""``tierlm_event_loop_lag_seconds``: a callback that blocks the gateway's event
loop shows in /metrics (server/gateway/loop_lag.py). The real app in virtual
time: a callback holding the loop is one during which the loop's clock moves
on and nothing else runs (``VirtualTimeLoop.block``), so the lag the probe
records is the block's, whatever the machine's speed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from tests.helpers import wait_until
from tests.payloads import chat_body
from tests.server.helpers import sample, samples, sim_settings, virtual_gateway
from tierlm.runners.cancellation import CancelToken
from tierlm.runners.requests import GenerationRequest
from tierlm.runners.simulated import SimulatedRunner
from tierlm.server.gateway.loop_lag import PERIOD
from tierlm.testing import VirtualTimeLoop

BLOCK = 0.4


class BlockingRunner(SimulatedRunner):
    """A runner that does blocking I/O on the event loop before its first token
    (what a hand-written runner calling a synchronous client does)."""

    async def generate(self, request: GenerationRequest, cancel: CancelToken) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        loop.block(BLOCK)  # the fault under test: time.sleep(BLOCK) on the loop
        async for piece in super().generate(request, cancel):
            yield piece


async def test_a_blocked_loop_shows_as_lag() -> None:
    runner = BlockingRunner(token_interval=0.001, swap_seconds=0.0, models=["sim-a", "sim-b"])
    async with virtual_gateway(sim_settings(), runner=runner) as client:

        async def metric(name: str, **labels: str) -> float:
            return sample(samples((await client.get("/metrics")).text), name, **labels)

        count = "tierlm_event_loop_lag_seconds_count"
        await wait_until(
            lambda: metric(count), "three probes", until=lambda n: n >= 3, every=PERIOD
        )
        before = await metric("tierlm_event_loop_lag_max_seconds")
        assert before < BLOCK / 2  # an idle loop is on time
        reply = await client.post("/v1/chat/completions", json=chat_body(max_tokens=2))
        assert reply.json()["choices"][0]["message"]["content"]
        # The probe's next wake-up records it: late by the block, less the
        # part of its period that had passed when the block began.
        lag = await wait_until(
            lambda: metric("tierlm_event_loop_lag_max_seconds"),
            "the probe to record the blocked loop",
            until=lambda seconds: seconds > BLOCK / 2,
            every=PERIOD,
        )
        assert BLOCK - PERIOD - 1e-9 <= lag <= BLOCK + 1e-9
        slow = await metric(count) - await metric("tierlm_event_loop_lag_seconds_bucket", le="0.25")
        assert slow >= 1


async def test_without_a_block_the_probe_records_no_lag() -> None:
    """The same chats on a runner that never holds the loop: no lag at all
    (the assertion above is the block's, not the probe's own)."""
    runner = SimulatedRunner(token_interval=0.001, swap_seconds=0.0, models=["sim-a", "sim-b"])
    async with virtual_gateway(sim_settings(), runner=runner) as client:
        for _ in range(3):
            reply = await client.post("/v1/chat/completions", json=chat_body(max_tokens=2))
            assert reply.status_code == 200
        await asyncio.sleep(10 * PERIOD)
        metrics = samples((await client.get("/metrics")).text)
        assert sample(metrics, "tierlm_event_loop_lag_seconds_count") >= 10
        assert sample(metrics, "tierlm_event_loop_lag_max_seconds") == 0.0
