"""Loading and unloading by hand (``Scheduler.load_model``, ``unload_model``)
and the idle time to live (``server.keep_alive.KeepAlive``), in virtual time:
never under a running job, nothing starts meanwhile, and the next job loads
the model again."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers import SWAP, TOKEN, runner, work_for
from tierlm import JobStarted, RunnerError, Scheduler, SchedulerEvent
from tierlm.runners import OpenAIRunner
from tierlm.server.gateway.keep_alive import KeepAlive
from tierlm.server.settings.duration import parse_duration


async def test_unload_waits_for_the_running_job_and_starts_nothing_meanwhile() -> None:
    device = runner()
    async with Scheduler(device) as sched:
        events: list[SchedulerEvent] = []
        sched.add_listener(events.append)
        loop = asyncio.get_running_loop()
        running = sched.submit("gana", "m1", work_for(2.0))
        await asyncio.sleep(0.5)
        unloading = asyncio.ensure_future(sched.unload_model())
        await asyncio.sleep(0)
        queued = sched.submit("gana", "m1", work_for(1.0))
        assert await unloading == "m1"
        unloaded_at = loop.time()
        assert running.done() and not queued.done()
        assert unloaded_at == pytest.approx(2.0, abs=TOKEN)
        assert device.loaded_model is None  # (the queued job is loading it again)
        # The queued job started only after the unload, and loaded m1 again.
        starts = [e for e in events if isinstance(e, JobStarted)]
        assert [e.job.id for e in starts] == [running.id, queued.id]
        assert starts[1].time >= unloaded_at
        await queued
        assert loop.time() == pytest.approx(unloaded_at + SWAP + 1.0, abs=2 * TOKEN)
        assert device.loaded_model == "m1"


async def test_a_chat_still_preempts_while_an_unload_waits() -> None:
    """The unload holds new starts, not the tiers: a chat arriving preempts the
    background job at once, and runs right after the unload."""

    async with Scheduler(runner()) as sched:
        loop = asyncio.get_running_loop()
        background = sched.submit("gana", "m1", work_for(100.0))
        await asyncio.sleep(1.0)
        unloading = asyncio.ensure_future(sched.unload_model("m1"))
        await asyncio.sleep(0)
        chat = sched.submit("chat", "m1", work_for(0.5))
        assert await unloading == "m1"
        assert loop.time() < 1.5  # the background job was preempted, not awaited
        await chat
        assert not background.done()


async def test_load_and_unload_of_another_model() -> None:
    device = runner()
    async with Scheduler(device) as sched:
        assert await sched.unload_model("m2") is None  # not the loaded one
        assert device.loaded_model == "m1"
        await sched.load_model("m2")
        assert (device.loaded_model, sched.loaded_model) == ("m2", "m2")
        assert await sched.unload_model() == "m2"
        assert (device.loaded_model, sched.loaded_model) == (None, None)
        assert await sched.unload_model() is None  # nothing loaded


async def test_a_runner_that_cannot_unload_says_so() -> None:
    async with Scheduler(OpenAIRunner("http://127.0.0.1:9")) as sched:
        with pytest.raises(RunnerError, match="OpenAIRunner cannot unload its model"):
            await sched.unload_model()


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(90, 90.0), ("90s", 90.0), ("10m", 600.0), ("1.5h", 5400.0), ("250ms", 0.25), (-1, None)],
)
def test_durations(value: object, seconds: float | None) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["soon", "10 minutes", True, [1]])
def test_bad_durations(value: object) -> None:
    with pytest.raises(ValueError, match="must be seconds or a duration such as '10m'"):
        parse_duration(value)


async def test_keep_alive_unloads_after_the_idle_time_and_the_next_job_loads_again() -> None:
    device = runner()
    async with Scheduler(device) as sched:
        loop = asyncio.get_running_loop()
        keep_alive = KeepAlive(sched, {"m1": 300.0})
        keep_alive.start()
        await sched.run("gana", "m1", work_for(1.0))
        done = loop.time()
        assert keep_alive.expires_in("m1") == pytest.approx(300.0)
        await asyncio.sleep(299.0)  # idle, but not yet for 300 s
        assert device.loaded_model == "m1"
        # Work restarts the idle time.
        await sched.run("gana", "m1", work_for(1.0))
        busy_until = loop.time()
        await asyncio.sleep(299.0)
        assert device.loaded_model == "m1"
        await asyncio.sleep(2.0)
        assert device.loaded_model is None and keep_alive.unloads == 1
        assert busy_until - done == pytest.approx(300.0, abs=2 * TOKEN)
        assert keep_alive.expires_in("m1") is None
        # The next request pays the load, as a swap.
        started = loop.time()
        await sched.run("gana", "m1", work_for(1.0))
        assert loop.time() - started == pytest.approx(SWAP + 1.0, abs=2 * TOKEN)
        await keep_alive.aclose()


async def test_keep_alive_never_unloads_under_a_job_or_a_model_without_one() -> None:
    device = runner()
    async with Scheduler(device) as sched:
        keep_alive = KeepAlive(sched, {"m1": 10.0})
        keep_alive.start()
        # A 60 s job: idle time passes only once it ends.
        await sched.run("gana", "m1", work_for(60.0))
        assert device.loaded_model == "m1"
        await asyncio.sleep(11.0)
        assert device.loaded_model is None
        # m2 has no keep_alive: it stays.
        await sched.run("gana", "m2", work_for(1.0))
        await asyncio.sleep(3600.0)
        assert device.loaded_model == "m2" and keep_alive.unloads == 1
        await keep_alive.aclose()


async def test_generation_requests_still_run_after_an_unload() -> None:
    async with Scheduler(runner()) as sched:
        await sched.unload_model()
        stream = sched.generate("chat", "m1", [{"role": "user", "content": "x"}], 3)
        text = "".join([piece async for piece in stream])
        assert text == "w0 w1 w2 "
