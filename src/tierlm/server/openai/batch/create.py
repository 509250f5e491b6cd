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

The limits hold as for requests (docs/design.md §9): each line is checked as
its endpoint checks a request (``lines``; its size capped at
``limits.max_body_bytes``, its ``n`` at the places it can ever get), the file
is read until line
``max_requests + 1`` (``build``), an endpoint the gateway does not serve
(embeddings off) is refused here, and ``max_batches_per_key`` is checked in
the transaction that records the batch (``BatchStore.add_batch``): twelve
concurrent creates against a limit of two all passed an earlier count.
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
from tierlm.server.openai.batch.build import TooManyRequests, build_requests
from tierlm.server.openai.batch.lines import LineRules
from tierlm.server.openai.batch.service import BatchService
from tierlm.server.openai.batch.store import BatchLimitReached, BatchRecord
from tierlm.server.openai.embeddings import _embedding_request
from tierlm.server.openai.requests import parse
from tierlm.server.settings.embedders import off_message
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


def _batch_limit(running: int, most: int) -> APIError:
    return APIError(
        429,
        f"input_file_id: {running} batches of this key are unfinished, the limit is "
        f"{most} (batches.max_batches_per_key); wait for one to end",
        param="input_file_id",
        code="batch_limit_reached",
        reason="queue_full",
    )


def _rules(
    service: BatchService, principal: Principal, class_name: str, endpoint: str
) -> LineRules:
    """What each line is checked against; 400 for an endpoint this gateway
    does not serve (embeddings off: refused now, not line by line later)."""
    gateway = service.gateway
    settings = gateway.settings
    embeddings = None
    if endpoint == "/v1/embeddings":
        lane = service.embeddings
        if lane is None:
            raise APIError(
                400,
                f"endpoint: {endpoint} is off on this gateway, so every line would fail; "
                f"{off_message()}",
                param="endpoint",
                code="embeddings_disabled",
                reason="embeddings_disabled",
            )

        def embeddings(body: dict[str, Any]) -> None:
            _embedding_request(body, lane)

    return LineRules(
        endpoint,
        settings.limits,
        settings.backend.kind,
        gateway.check_model,
        _most_choices(service, principal, class_name),
        embeddings,
    )


def _most_choices(service: BatchService, principal: Principal, class_name: str) -> tuple[int, str]:
    """The most ``n`` a line may ask (docs/design.md §9): each choice is a job,
    so a line never asks more places than the batch feeds at once
    (``batches.in_flight``), the key may queue (its ``queue_limit``), or the
    class holds (its ``queue_limit``); more would wait for ever."""
    settings = service.gateway.settings
    limits = [
        (service.in_flight, "batches.in_flight"),
        (settings.queue_limit(class_name), f"the queue_limit of class {class_name!r}"),
    ]
    if principal.queue_limit is not None:
        limits.append((principal.queue_limit, f"the queue_limit of key {principal.name!r}"))
    return min(limits, key=lambda limit: limit[0])


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
    if running >= settings.max_batches_per_key:  # early; add_batch decides (no race)
        raise _batch_limit(running, settings.max_batches_per_key)
    rules = _rules(service, principal, class_name, create.endpoint)
    try:
        built = await service.call(
            build_requests, store, batch_id, file, rules, settings.max_requests
        )
    except TooManyRequests as exc:
        raise APIError(
            400,
            f"input_file_id: more than the limit of {settings.max_requests} requests "
            f"(batches.max_requests); reading stopped at line {exc.line}",
            param="input_file_id",
            code="too_many_requests",
        ) from None
    if built.failed == built.total:
        await service.call(store.drop_requests, batch_id)
        why = built.first_error or "the file holds no request"
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
        model=built.model,
        total=built.total,
        failed=built.failed,
    )
    try:
        await service.call(store.add_batch, record, settings.max_batches_per_key)
    except BatchLimitReached as exc:
        await service.call(store.drop_requests, batch_id)
        raise _batch_limit(exc.count, settings.max_batches_per_key) from None
    service.metrics.invalid_lines(built.failed)
    return record
