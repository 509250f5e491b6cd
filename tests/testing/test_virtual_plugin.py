"""The virtual_time pytest plugin (tierlm.testing.pytest_plugin) really runs
``async def`` tests on the virtual-time loop."""

from __future__ import annotations

import asyncio

import pytest

from tierlm.testing import VirtualDeadlock, VirtualTimeLoop, run_virtual


async def test_an_async_test_runs_on_the_virtual_loop_an_hour_in_no_time() -> None:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualTimeLoop)
    start = loop.time()
    await asyncio.sleep(3600)
    assert loop.time() - start == pytest.approx(3600)


@pytest.fixture
def answer() -> int:
    return 42


async def test_fixtures_reach_an_async_test(answer: int) -> None:
    await asyncio.sleep(1)
    assert answer == 42


def test_a_test_whose_tasks_all_wait_forever_fails_instead_of_hanging() -> None:
    async def forever() -> None:
        await asyncio.get_running_loop().create_future()

    with pytest.raises(VirtualDeadlock):
        run_virtual(forever())


async def test_a_callback_that_holds_the_loop_makes_every_timer_late() -> None:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualTimeLoop)
    woke: list[float] = []
    loop.call_later(0.1, lambda: woke.append(loop.time()))
    loop.call_soon(loop.block, 0.4)  # a callback holding the loop 0.4 s
    await asyncio.sleep(0.05)
    assert loop.time() == pytest.approx(0.4)  # the 0.05 s sleep woke 0.35 s late
    await asyncio.sleep(0)
    assert woke == [pytest.approx(0.4)]
