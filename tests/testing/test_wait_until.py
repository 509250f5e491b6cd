"""``wait_until`` (tests/helpers.py), the tests' one polling loop: it returns
what the condition returned, awaits an async condition, and past its hang
guard fails naming what it waited for."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers import wait_until, wait_until_blocking


async def test_it_returns_the_first_true_value_of_the_condition() -> None:
    loop = asyncio.get_running_loop()
    seen = await wait_until(lambda: loop.time() >= 5 and "five", "five seconds", every=1)
    assert seen == "five" and loop.time() == 5


async def test_an_async_condition_is_awaited() -> None:
    calls = []

    async def third() -> int:
        calls.append(1)
        return len(calls) if len(calls) == 3 else 0

    assert await wait_until(third, "the third call") == 3


async def test_past_the_hang_guard_it_names_what_was_awaited() -> None:
    loop = asyncio.get_running_loop()
    queue = [1, 2, 3, 4]
    with pytest.raises(
        AssertionError, match=r"after 60 s waiting for the queue to empty; last: \[1, 2, 3, 4\]"
    ):
        await wait_until(lambda: queue, "the queue to empty", until=lambda q: not q, timeout=60)
    assert loop.time() == pytest.approx(60, abs=0.02)


def test_the_blocking_form_waits_on_a_loop_of_its_own() -> None:
    values = iter([None, None, "up"])
    assert wait_until_blocking(lambda: next(values), "the third value", every=0) == "up"


async def test_the_blocking_form_works_where_a_loop_already_runs() -> None:
    # Playwright's sync API keeps a loop running in the test's thread.
    values = iter([None, "up"])
    assert wait_until_blocking(lambda: next(values), "the second value", every=0) == "up"
