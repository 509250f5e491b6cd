"""A request's scheduling metadata: its API key, then the X-Tierlm-* headers.

The key decides what is allowed (its classes, its default class and producer);
within that, the headers choose:

- ``X-Tierlm-Class``: the task class (403 if the key does not allow it);
- ``X-Tierlm-Producer``: the fair-pool producer. With keys it is namespaced
  under the key, ``<key name>/<header>`` (default: the key's producer or name),
  so one client's many ids share the key's part of the pool (docs/design.md §4.4); without keys,
  the header as sent (default: the class name, the
  scheduler's default). A chat's person, whose turns it takes, is the key
  (or a name within the key's turn, if the key ``names_persons``; §4.2);
  without keys, the producer;
- ``X-Tierlm-Subject``: what the job is about (a note id...), matched against the
  foreground's subject. Subjects are strings in the gateway: a foreground subject
  given as a JSON number is compared as its decimal text. The foreground itself
  is set through the scheduler API, with an admin key;
- ``X-Tierlm-Deadline``: seconds from now, or an RFC 3339 time; only for keys
  allowed to (``allow_deadline``, admin keys by default): a deadline is a loan of
  device time (docs/design.md §4.5).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Collection
from dataclasses import dataclass

from starlette.datastructures import Headers

from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.auth import Principal

__all__ = ["CLASS_HEADER", "JobMeta", "answer_headers", "job_meta", "parse_deadline"]

CLASS_HEADER = "X-Tierlm-Class"
PRODUCER_HEADER = "X-Tierlm-Producer"
SUBJECT_HEADER = "X-Tierlm-Subject"
DEADLINE_HEADER = "X-Tierlm-Deadline"
SERVED_AS_HEADER = "X-Tierlm-Served-As"
"""On every answer: person, program or background, and why (docs/design.md §4.11)."""
# Producer and subject names end up as metric labels and dashboard text: bounded.
MAX_NAME = 200


@dataclass(frozen=True, slots=True)
class JobMeta:
    class_name: str
    producer: str | None
    subject: str | None
    deadline: float | dt.datetime | None
    """Seconds from now (relative), or an aware datetime."""
    key: str | None
    """The API key's name, None without keys."""
    key_queue_limit: int | None = None
    """The key's jobs queued at most, over all classes (None: no cap of its own)."""
    person: tuple[str, ...] = ()
    """Whose turns its chat takes (``Principal.person``); (): its producer's."""
    served_as: str = "background"
    """"person", "program" (a request judged by its pacing, docs/design.md
    §4.11) or "background" (a class below a person's)."""
    why: str = "class"
    """Why it is served so (``core.people.Why``'s values, or "class")."""


def answer_headers(job_id: int, meta: JobMeta) -> dict[str, str]:
    """What every answer's headers say of how its request was served."""
    return {
        "X-Tierlm-Job-Id": str(job_id),
        CLASS_HEADER: meta.class_name,
        SERVED_AS_HEADER: f"{meta.served_as}; why={meta.why}",
    }


def job_meta(headers: Headers, principal: Principal, classes: Collection[str]) -> JobMeta:
    class_name = headers.get(CLASS_HEADER)
    if class_name is None:
        class_name = principal.default_class
    else:
        class_name = class_name.strip()
        if class_name not in classes:
            raise APIError(
                400,
                f"{CLASS_HEADER}: unknown task class {class_name!r} "
                f"(classes: {', '.join(sorted(classes))})",
                param=CLASS_HEADER,
                code="unknown_class",
            )
    principal.check_class(class_name)
    named = _name(headers, PRODUCER_HEADER)
    producer = principal.producer_path(named)
    subject = _name(headers, SUBJECT_HEADER)
    raw_deadline = headers.get(DEADLINE_HEADER)
    deadline = None
    if raw_deadline is not None:
        if not principal.allow_deadline:
            raise APIError(
                403,
                f"{DEADLINE_HEADER}: API key {principal.name!r} may not set deadlines "
                "(allow_deadline in its [[keys]] table)",
                param=DEADLINE_HEADER,
                code="deadline_not_allowed",
                reason="deadline_not_allowed",
            )
        deadline = parse_deadline(raw_deadline)
    return JobMeta(
        class_name,
        producer,
        subject,
        deadline,
        principal.name,
        principal.queue_limit,
        principal.person(named),
    )


def _name(headers: Headers, header: str) -> str | None:
    value = headers.get(header)
    if value is None:
        return None
    value = value.strip()
    if not value or len(value) > MAX_NAME or not value.isprintable():
        raise APIError(
            400,
            f"{header}: must be 1 to {MAX_NAME} printable characters, got {value[:40]!r}",
            param=header,
        )
    return value


def parse_deadline(text: str) -> float | dt.datetime:
    """``"30"`` / ``"2.5"`` (seconds from now) or ``"2030-01-01T12:00:00Z"``."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise APIError(
                400, f"{DEADLINE_HEADER}: must be finite, got {text!r}", param=DEADLINE_HEADER
            )
        return seconds
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise APIError(
            400,
            f"{DEADLINE_HEADER}: must be seconds from now (e.g. 30) or an RFC 3339 time "
            f"with a timezone (e.g. 2030-01-01T12:00:00Z), got {text[:60]!r}",
            param=DEADLINE_HEADER,
        )
    return when
