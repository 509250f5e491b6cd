"""``tierlm_event_loop_lag_seconds``: a callback that blocks the gateway's event
loop shows in /metrics (server/gateway/loop_lag.py)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from tests.payloads import MESSAGES
from tests.server.helpers import WAIT, serve, sim_settings
from tierlm.runners.cancellation import CancelToken
from tierlm.runners.requests import GenerationRequest
from tierlm.runners.simulated import SimulatedRunner

BLOCK = 0.4


class BlockingRunner(SimulatedRunner):
    """A runner that does blocking I/O on the event loop before its first token
    (what a hand-written runner calling a synchronous client does)."""

    async def generate(self, request: GenerationRequest, cancel: CancelToken) -> AsyncIterator[str]:
        time.sleep(BLOCK)  # noqa: ASYNC251 - the fault under test
        async for piece in super().generate(request, cancel):
            yield piece


def test_a_blocked_loop_shows_as_lag() -> None:
    settings = sim_settings()
    runner = BlockingRunner(token_interval=0.001, swap_seconds=0.0, models=["sim-a", "sim-b"])
    with serve(settings, runner=runner) as gateway:
        for _ in range(100):  # the probe wakes every 100 ms
            if gateway.metric("tierlm_event_loop_lag_seconds_count") >= 3:
                break
            time.sleep(0.05)
        before = gateway.metric("tierlm_event_loop_lag_max_seconds")
        assert before < BLOCK / 2  # an idle loop is on time
        reply = gateway.openai().chat.completions.create(
            model="sim-a",
            messages=MESSAGES,
            max_tokens=2,  # type: ignore[arg-type]
        )
        assert reply.choices[0].message.content
        # The probe's next wake-up records it (polled: on a busy machine that
        # wake-up may come later than its 100 ms).
        deadline = time.monotonic() + WAIT
        while gateway.metric("tierlm_event_loop_lag_max_seconds") < BLOCK * 0.75:
            assert time.monotonic() < deadline, "the probe never recorded the blocked loop"
            time.sleep(0.05)
        slow = gateway.metric("tierlm_event_loop_lag_seconds_count") - gateway.metric(
            "tierlm_event_loop_lag_seconds_bucket", le="0.25"
        )
        assert slow >= 1
