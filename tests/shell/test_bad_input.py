"""Bad input gets a clear error naming the field, and the scheduler keeps working."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import runner, work_for
from tests.payloads import MESSAGES
from tierlm import (
    Budget,
    JobContext,
    Scheduler,
    SchedulerClosedError,
    SchedulerConfig,
    TaskClass,
)
from tierlm.runners import SimulatedRunner


def _sync_work(ctx: JobContext) -> int:
    return 1


BAD_SUBMITS: list[tuple[str, Callable[[Scheduler], Any], type[Exception], str]] = [
    (
        "unknown class",
        lambda s: s.submit("chatt", "m1", work_for(1)),
        ValueError,
        r"unknown task class 'chatt'; known classes: chat, extract, gana, nataraj",
    ),
    ("empty model", lambda s: s.submit("gana", "", work_for(1)), ValueError, r"model_id"),
    ("model not str", lambda s: s.submit("gana", 3, work_for(1)), ValueError, r"model_id"),
    (
        "sync work",
        lambda s: s.submit("gana", "m1", _sync_work),
        TypeError,
        r"work: must be an async",
    ),
    ("not callable", lambda s: s.submit("gana", "m1", "work"), TypeError, r"work"),
    (
        "deadline string",
        lambda s: s.submit("gana", "m1", work_for(1), deadline="soon"),
        TypeError,
        r"deadline: must be seconds",
    ),
    (
        "deadline nan",
        lambda s: s.submit("gana", "m1", work_for(1), deadline=float("nan")),
        TypeError,
        r"deadline",
    ),
    (
        "empty producer",
        lambda s: s.submit("gana", "m1", work_for(1), producer=""),
        ValueError,
        r"producer",
    ),
    (
        "max_tokens zero",
        lambda s: s.generate("chat", "m1", MESSAGES, max_tokens=0),
        ValueError,
        r"max_tokens: must be > 0",
    ),
    (
        "max_tokens negative",
        lambda s: s.generate("chat", "m1", MESSAGES, max_tokens=-5),
        ValueError,
        r"max_tokens",
    ),
    (
        "max_tokens str",
        lambda s: s.generate("chat", "m1", MESSAGES, max_tokens="9"),
        TypeError,
        r"max_tokens",
    ),
    ("no prompt", lambda s: s.generate("chat", "m1", None), ValueError, r"prompt/messages"),
    (
        "generate unknown class",
        lambda s: s.generate("bogus", "m1", MESSAGES),
        ValueError,
        r"known classes",
    ),
    ("foreground unknown", lambda s: s.set_foreground("natraj"), ValueError, r"known classes"),
]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [pytest.param(c, e, m, id=name) for name, c, e, m in BAD_SUBMITS],
)
async def test_bad_input_is_rejected_clearly_and_scheduler_keeps_working(
    call: Callable[[Scheduler], Any], error: type[Exception], message: str
) -> None:
    async with Scheduler(runner()) as sched:
        with pytest.raises(error, match=message):
            call(sched)
        assert sched.snapshot().queue_depth == 0
        assert await sched.run("gana", "m1", work_for(1)) == 20


async def test_submit_after_aclose_is_a_clear_error() -> None:
    sched = Scheduler(runner())
    async with sched:
        pass
    with pytest.raises(SchedulerClosedError, match="closed"):
        sched.submit("gana", "m1", work_for(1))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TaskClass("x", tier=7), "tier must be one of 0, 1, 2, 3, 4"),
        (lambda: TaskClass("x", tier=4, fair=False), "fair pool is tier 4 only"),
        (lambda: TaskClass("x", tier=2, fair=True), "fair pool is tier 4 only"),
        (lambda: TaskClass("x", tier=0, requeue=True), "never re-queued"),
        (lambda: TaskClass("", tier=2), "name"),
        (lambda: Budget(1.5), r"budget.share: must be a fraction in \(0, 1\]"),
        (lambda: Budget(0.5, window=0), "budget.window"),
        (lambda: SchedulerConfig(chat_grace=-1), "chat_grace"),
        (lambda: SchedulerConfig(weights={"a": 0}), None),
        (lambda: SimulatedRunner(token_interval=-1), "token_interval"),
        (lambda: Scheduler(object()), "runner: must implement"),  # type: ignore[arg-type]
        (
            lambda: Scheduler(runner(), classes=[TaskClass("a", 2), TaskClass("a", 3)]),
            "duplicate class name",
        ),
    ],
)
async def test_bad_configuration_names_the_field(
    make: Callable[[], Any], message: str | None
) -> None:
    if message is None:
        # Weights are checked when the policy is built.
        with pytest.raises(ValueError, match="weight of producer 'a'"):
            Scheduler(runner(), config=make())
        return
    with pytest.raises((ValueError, TypeError), match=message):
        make()


async def test_custom_classes_work_end_to_end() -> None:
    classes = [
        TaskClass("voice", tier=0, requeue=False),
        TaskClass("indexer", tier=2, budget=Budget(0.3, window=60)),
        TaskClass("report", tier=3),
        TaskClass("bot", tier=4, fair=True),
    ]

    async with Scheduler(runner(), classes=classes) as sched:
        handles = [sched.submit(c.name, "m1", work_for(1)) for c in classes]
        assert await asyncio.gather(*handles) == [20, 20, 20, 20]
        with pytest.raises(ValueError, match="known classes: bot, indexer, report, voice"):
            sched.submit("chat", "m1", work_for(1))
