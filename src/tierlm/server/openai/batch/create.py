"""``POST /v1/batches``: a batch made from an uploaded file, checked, then stored.

What a batch is scheduled as (docs/design.md §4): its requests are background
jobs of one task class and producer, chosen once, when it is created:

- the class: ``metadata.tierlm_class``, else the ``X-Tierlm-Class`` header,
  else the key's default class unless that is a person's (tier 0), else the
  first fair-pool class the key may use. A key may only name its classes (403),
  and never a person's (tier 0: 400; docs/design.md §4.11, nobody waits on a
  batch line);
- the producer: ``metadata.tierlm_producer``, else ``X-Tierlm-Producer``,
  else ``batches/<batch id>``; with keys, under the key (``<key>/...``, §4.4);
- the deadline: ``completion_window`` is the batch's due time; from
  ``promote_fraction`` of the window before it (a quarter: the last 6 h of
  24 h) its requests are overdue, promoted as cron work is, on a loan of the
  producer's share (§4.5). Only for keys allowed deadlines (``allow_deadline``).
"""

from __future__ import annotations

import re
import secrets
import time
from typing import Annotated, Any, Literal

from pydantic import Field
from starlette.requests import Request

from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.auth import Principal
from tierlm.server.gateway.metadata import CLASS_HEADER, MAX_NAME, PRODUCER_HEADER
from tierlm.server.openai.batch.lines import read_lines
from tierlm.server.openai.batch.service import BatchService
from tierlm.server.openai.batch.store import BatchRecord
from tierlm.server.openai.requests import parse
from tierlm.server.settings.schema import Expect, Schema

__all__ = ["BatchCreate", "create_batch", "window_seconds"]

_WINDOW = re.compile(r"^([1-9]\d{0,6})(s|m|h|d)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MIN_WINDOW = 1  # seconds: short windows are for tests and demos
CLASS_KEY = "tierlm_class"
PRODUCER_KEY = "tierlm_producer"

MetaKey = Annotated[str, Field(max_length=64)]
MetaValue = Annotated[str, Field(max_length=512)]


class BatchCreate(Schema):
    """``POST /v1/batches``'s body (OpenAI's fields)."""

    input_file_id: Annotated[str, Field(min_length=1)]
    endpoint: Annotated[
        Literal["/v1/chat/completions", "/v1/completions", "/v1/embeddings"],
        Expect("one of /v1/chat/completions, /v1/completions, /v1/embeddings"),
    ]
    completion_window: Annotated[
        str, Expect("a duration such as '24h' (OpenAI's), or '30m', '2d', '600s'")
    ]
    metadata: Annotated[dict[MetaKey, MetaValue], Field(max_length=16)] | None = None
    output_expires_after: dict[str, Any] | None = None
    """Accepted for the client's sake; output files here stay until deleted."""


def window_seconds(window: str, most: float) -> int:
    """``completion_window`` in seconds: 400 naming it unless ``60s`` to ``most``."""
    match = _WINDOW.match(window.strip())
    seconds = int(match[1]) * _UNITS[match[2]] if match else None
    if seconds is None or not MIN_WINDOW <= seconds <= most:
        raise APIError(
            400,
            f"completion_window: must be a duration from {MIN_WINDOW}s to {int(most)}s "
            f"(batches.max_completion_window) such as '24h', '30m' or '2d', got {window!r}",
            param="completion_window",
        )
    return seconds


def _class(
    service: BatchService, request: Request, principal: Principal, meta: dict[str, str]
) -> str:
    classes = service.gateway.settings.classes
    named = meta.get(CLASS_KEY) or request.headers.get(CLASS_HEADER)
    param = f"metadata.{CLASS_KEY}" if meta.get(CLASS_KEY) else CLASS_HEADER
    if named is not None:
        named = named.strip()
        if named not in classes:
            raise APIError(
                400,
                f"{param}: unknown task class {named!r} (classes: {', '.join(sorted(classes))})",
                param=param,
                code="unknown_class",
            )
        principal.check_class(named)
        if classes[named].tier == 0:
            # docs/design.md §4.11: a batch line is never a person's. Nobody
            # waits on it, and served as one, a key's 12 lines became 12
            # "persons" that another key's person waited behind for 18-21 s.
            background = sorted(c.name for c in classes.values() if c.tier > 0)
            raise APIError(
                400,
                f"{param}: class {named!r} is a person's (tier 0), and nobody waits on a "
                f"batch's line; name a background class ({', '.join(background)}) or none "
                "(the key's first background class)",
                param=param,
                code="person_class_in_batch",
            )
        return named
    default = classes.get(principal.default_class)
    if default is not None and default.tier > 0:
        return default.name
    allowed = [c for c in classes.values() if c.name in principal.classes and c.tier > 0]
    allowed.sort(key=lambda c: (not c.fair, c.tier))
    if not allowed:
        raise APIError(
            403,
            f"metadata.{CLASS_KEY}: API key {principal.name!r} may use no background class "
            "for a batch (its classes are a person's)",
            param=f"metadata.{CLASS_KEY}",
            code="class_not_allowed",
        )
    return allowed[0].name


def _producer(request: Request, principal: Principal, meta: dict[str, str], batch: str) -> str:
    named = meta.get(PRODUCER_KEY) or request.headers.get(PRODUCER_HEADER)
    if named is not None:
        named = named.strip()
        if not named or len(named) > MAX_NAME or not named.isprintable():
            raise APIError(
                400,
                f"metadata.{PRODUCER_KEY}: must be 1 to {MAX_NAME} printable characters",
                param=f"metadata.{PRODUCER_KEY}",
            )
    path = principal.producer_path(named or f"batches/{batch}")
    assert path is not None
    return path


async def create_batch(
    service: BatchService, request: Request, principal: Principal, owner: str, body: Any
) -> BatchRecord:
    """The checked, stored batch (module docstring); 4xx naming the field otherwise."""
    settings = service.settings
    create = parse(BatchCreate, body)
    window = window_seconds(create.completion_window, settings.max_completion_window)
    meta = dict(create.metadata or {})
    batch_id = f"batch_{secrets.token_hex(12)}"
    class_name = _class(service, request, principal, meta)
    producer = _producer(request, principal, meta, batch_id)
    store = await service.store()
    file = await service.call(store.get_file, create.input_file_id, owner)
    if file is None:
        raise APIError(
            404,
            f"input_file_id: no file {create.input_file_id!r}",
            param="input_file_id",
            code="not_found",
        )
    if file.purpose != "batch":
        raise APIError(
            400,
            f"input_file_id: file {file.id!r} has purpose {file.purpose!r}; a batch's input "
            "is a file uploaded with purpose 'batch'",
            param="input_file_id",
        )
    running = await service.call(store.count_unfinished, owner)
    if running >= settings.max_batches_per_key:
        raise APIError(
            429,
            f"input_file_id: {running} batches of this key are unfinished, the limit is "
            f"{settings.max_batches_per_key} (batches.max_batches_per_key); wait for one to end",
            param="input_file_id",
            code="batch_limit_reached",
            reason="queue_full",
        )
    content = await service.call(store.file_content, file.id, owner)
    gateway = service.gateway
    lines = await service.call(
        read_lines,
        content or b"",
        create.endpoint,
        gateway.settings.limits,
        gateway.settings.backend.kind,
        gateway.check_model,
    )
    if lines.total > settings.max_requests:
        raise APIError(
            400,
            f"input_file_id: {lines.total} requests, more than the limit of "
            f"{settings.max_requests} (batches.max_requests)",
            param="input_file_id",
            code="too_many_requests",
        )
    if not lines.pending:
        why = lines.first_error or "the file holds no request"
        raise APIError(400, f"input_file_id: no valid request line ({why})", param="input_file_id")
    now = int(time.time())
    expires = now + window
    deadline = None
    if principal.allow_deadline and settings.promote_fraction > 0:
        deadline = expires - settings.promote_fraction * window
    record = BatchRecord(
        id=batch_id,
        owner=owner,
        input_file_id=file.id,
        endpoint=create.endpoint,
        completion_window=create.completion_window,
        created_at=now,
        expires_at=expires,
        status="validating",
        class_name=class_name,
        producer=producer,
        deadline=deadline,
        metadata=create.metadata,
        model=lines.model,
        total=lines.total,
        failed=len(lines.bad),
    )
    await service.call(store.add_batch, record, lines.pending, lines.bad)
    service.metrics.invalid_lines(len(lines.bad))
    return record
