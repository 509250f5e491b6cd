"""``CancelToken`` and a generation call's view of it (``CallToken``): level
triggered, a stronger reason replaces a weaker one, and a yield never cuts a
prompt evaluation (docs/design.md §2.9, §4.6)."""

from __future__ import annotations

import asyncio

import pytest

from tierlm.runners.cancel_scope import until_cancelled
from tierlm.runners.cancellation import CancelReason, CancelToken

pytestmark = pytest.mark.fast  # the inner loop: scripts/test --fast (tests/conftest.py)

YIELD, PREEMPTED = CancelReason.YIELD, CancelReason.PREEMPTED
CALLER, SHUTDOWN = CancelReason.CALLER, CancelReason.SHUTDOWN


@pytest.mark.parametrize(
    ("first", "then", "changed", "reason"),
    [
        (YIELD, PREEMPTED, True, PREEMPTED),
        (YIELD, CALLER, True, CALLER),
        (YIELD, SHUTDOWN, True, SHUTDOWN),
        (PREEMPTED, CALLER, True, CALLER),
        (PREEMPTED, SHUTDOWN, True, SHUTDOWN),
        (PREEMPTED, YIELD, False, PREEMPTED),  # a weaker reason never replaces
        (CALLER, PREEMPTED, False, CALLER),
        (CALLER, SHUTDOWN, False, CALLER),  # of two equal ones, the first is kept
        (SHUTDOWN, CALLER, False, SHUTDOWN),
        (YIELD, YIELD, False, YIELD),  # never counted twice
    ],
)
def test_a_stronger_reason_replaces_a_weaker_one(
    first: CancelReason, then: CancelReason, changed: bool, reason: CancelReason
) -> None:
    token = CancelToken()
    assert token.cancel(first)
    assert token.cancel(then) is changed
    assert token.cancelled and token.reason is reason
    assert token.aborts_prompt is (reason is not YIELD)


def test_callbacks_see_the_cancel_and_every_stronger_reason() -> None:
    token = CancelToken()
    seen: list[CancelReason | None] = []
    remove = token.add_callback(lambda t: seen.append(t.reason))
    token.cancel(YIELD)
    token.cancel(YIELD)  # no change: no call
    token.cancel(PREEMPTED)
    assert seen == [YIELD, PREEMPTED]
    late: list[CancelReason | None] = []
    token.add_callback(lambda t: late.append(t.reason))  # at once: already cancelled
    remove()
    token.cancel(CALLER)
    assert seen == [YIELD, PREEMPTED] and late == [PREEMPTED, CALLER]


def test_a_call_stops_for_a_yield_only_once_it_has_a_token() -> None:
    token = CancelToken()
    produced = 0
    call = token.for_call(lambda: produced)
    token.cancel(YIELD)
    assert token.cancelled and not call.cancelled  # the evaluation goes on
    produced = 1
    assert call.cancelled  # the first token's boundary
    assert call.reason is YIELD


def test_a_call_stops_at_once_for_a_person_and_when_a_yield_is_upgraded() -> None:
    token = CancelToken()
    call = token.for_call(lambda: 0)
    woken: list[CancelReason | None] = []
    call.add_callback(lambda t: woken.append(t.reason))
    token.cancel(YIELD)
    assert woken == [] and not call.cancelled
    token.cancel(PREEMPTED)
    assert woken == [PREEMPTED] and call.cancelled


def test_a_call_that_begins_after_a_yield_starts_nothing() -> None:
    """No evaluation is under way to protect: the job stops at this boundary."""
    token = CancelToken()
    token.cancel(YIELD)
    assert token.for_call(lambda: 0).cancelled


async def test_a_race_against_a_call_lets_a_yield_wait_and_an_upgrade_cut() -> None:
    loop = asyncio.get_running_loop()
    token = CancelToken()
    call = token.for_call(lambda: 0)
    loop.call_later(1, token.cancel, YIELD)
    # Awaiting the first token (an HTTP read, a prompt's evaluation):
    # the yield does not cut it.
    assert await until_cancelled(call, asyncio.sleep(3, result="first token")) == ("first token")
    assert loop.time() == 3
    loop.call_later(1, token.cancel, PREEMPTED)
    assert await until_cancelled(call, asyncio.sleep(10)) is None
    assert loop.time() == 4
    assert await call.wait(5) is True  # level-triggered: at once
