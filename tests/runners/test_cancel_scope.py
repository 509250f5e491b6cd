"""``cancelled_by`` / ``until_cancelled``: the one primitive that races an await
against a ``CancelToken`` (level-triggered, any thread, a result never lost)."""

from __future__ import annotations

import asyncio
import threading
import warnings

import pytest

from tierlm.runners.cancel_scope import cancelled_by, until_cancelled
from tierlm.runners.cancellation import CancelReason, CancelToken

pytestmark = pytest.mark.fast  # the inner loop: scripts/test --fast (tests/conftest.py)


async def test_the_result_when_not_cancelled() -> None:
    token = CancelToken()
    assert await until_cancelled(token, asyncio.sleep(1, result="done")) == "done"
    assert not token.cancelled


async def test_a_cancel_stops_the_wait_and_the_token_keeps_the_reason() -> None:
    token = CancelToken()
    loop = asyncio.get_running_loop()
    loop.call_later(1, token.cancel, CancelReason.PREEMPTED)
    stopped = asyncio.Event()

    async def work() -> str:
        try:
            await asyncio.sleep(100)
        finally:
            stopped.set()
        return "never"

    assert await until_cancelled(token, work()) is None
    assert stopped.is_set()  # the work was cancelled where it waited
    assert loop.time() == 1
    assert token.reason is CancelReason.PREEMPTED


async def test_level_triggered_an_earlier_cancel_is_never_missed() -> None:
    token = CancelToken()
    token.cancel()
    started = False

    async def work() -> None:
        nonlocal started
        started = True

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine was never awaited"
        assert await until_cancelled(token, work()) is None
    assert not started
    # A scope entered after the cancel is cancelled at its first wait, every time.
    for _ in range(2):
        with cancelled_by(token) as scope:
            await asyncio.sleep(100)
        assert scope.cancelled_caught


def test_a_cancel_from_another_thread_wakes_the_loop() -> None:
    async def main() -> None:
        token = CancelToken()
        waiting = threading.Event()
        thread = threading.Thread(target=lambda: waiting.wait(5) and token.cancel())
        thread.start()
        asyncio.get_running_loop().call_soon(waiting.set)
        # Nothing on the loop would ever wake this but the other thread's cancel.
        assert await until_cancelled(token, asyncio.Event().wait()) is None
        thread.join()

    asyncio.run(main())


async def test_an_outer_cancel_is_not_swallowed() -> None:
    token = CancelToken()
    task = asyncio.ensure_future(until_cancelled(token, asyncio.sleep(100)))
    await asyncio.sleep(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not token.cancelled


async def test_the_callback_is_removed_when_the_scope_ends() -> None:
    token = CancelToken()
    for _ in range(3):
        assert await until_cancelled(token, asyncio.sleep(0, result=1)) == 1
    assert token._callbacks == []
