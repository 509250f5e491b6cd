"""The checks of what a caller passes to ``Scheduler``: clear errors naming the
field and what it accepts, raised at the call, not later inside a job."""

from __future__ import annotations

import datetime as dt
import inspect
import math
import time
from collections.abc import Mapping
from typing import Any

from tierlm.core.classes import TaskClass
from tierlm.core.jobs import Person, Subject

__all__ = [
    "check_model_id",
    "check_producer",
    "check_subject",
    "check_work",
    "deadline_at",
    "task_class",
]


def task_class(classes: Mapping[str, TaskClass], class_name: object) -> TaskClass:
    found = classes.get(class_name) if isinstance(class_name, str) else None
    if found is None:
        known = ", ".join(sorted(classes))
        raise ValueError(f"class: unknown task class {class_name!r}; known classes: {known}")
    return found


def check_model_id(model_id: object) -> str:
    if not isinstance(model_id, str) or not model_id:
        raise ValueError(f"model_id: must be a non-empty string, got {model_id!r}")
    return model_id


def check_work(work: Any) -> None:
    if not callable(work) or not (
        inspect.iscoroutinefunction(work)
        or inspect.iscoroutinefunction(getattr(work, "__call__", None))  # noqa: B004
    ):
        raise TypeError(f"work: must be an async function `async def work(ctx)`, got {work!r}")


def check_producer(producer: object, default: str) -> str:
    if producer is None:
        return default
    if not isinstance(producer, str) or not producer:
        raise ValueError(f"producer: must be a non-empty string or None, got {producer!r}")
    return producer


def check_person(person: object) -> Person:
    """A chat's person (docs/design.md §4.2): one or two non-empty strings, or
    none (its producer)."""
    if not isinstance(person, tuple | list) or len(person) > 2:
        raise ValueError(f"person: must be a tuple of one or two names, got {person!r}")
    if not all(isinstance(name, str) and name for name in person):
        raise ValueError(f"person: each name must be a non-empty string, got {person!r}")
    return tuple(person)


def check_subject(subject: object) -> Subject | None:
    if subject is not None and not isinstance(subject, str | int):
        raise TypeError(f"subject: must be a str, an int or None, got {type(subject).__name__}")
    return subject


def deadline_at(deadline: float | dt.datetime | None, now: float) -> float | None:
    """``deadline`` on the scheduler clock (``now`` is that clock's time)."""
    if deadline is None:
        return None
    if isinstance(deadline, dt.datetime):
        if deadline.tzinfo is None:
            raise ValueError("deadline: a datetime must be timezone-aware")
        # Map wall-clock time onto the loop clock (the shell may read clocks).
        return now + (deadline.timestamp() - time.time())
    if (
        isinstance(deadline, bool)
        or not isinstance(deadline, int | float)
        or not math.isfinite(deadline)
    ):
        raise TypeError(
            f"deadline: must be seconds on the scheduler clock (a finite number), "
            f"a timezone-aware datetime, or None; got {deadline!r}"
        )
    return float(deadline)
