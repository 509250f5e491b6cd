"""A batch's input file read into requests: each JSONL line checked on its own.

A line is ``{"custom_id": "...", "method": "POST", "url": "<the batch's
endpoint>", "body": {...}}`` (OpenAI's input format). A line that is not (not
JSON, a missing or repeated ``custom_id``, another ``url``, a body its endpoint
refuses, a model not served here) fails alone: it becomes a line of the error
file, in OpenAI's output shape with ``response: null`` and an ``error`` naming
the line and the field, and the batch runs the others. A file with no valid
line at all is refused when the batch is created (``NoValidLine``).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tierlm.server.edge.body import check_json
from tierlm.server.edge.errors import APIError
from tierlm.server.openai.batch.store import FileRecord, PendingRequest, RequestResult
from tierlm.server.openai.pipeline import parse_chat, parse_completion
from tierlm.server.settings.sections import LimitSettings

__all__ = [
    "ENDPOINTS",
    "Lines",
    "error_line",
    "new_file",
    "output_line",
    "read_lines",
    "request_id",
]

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")

# custom_id: bounded, as any name that ends up in a file a person reads.
MAX_CUSTOM_ID = 512


@dataclass(slots=True)
class Lines:
    """An input file's requests, as checked."""

    pending: list[PendingRequest] = field(default_factory=list)
    bad: list[RequestResult] = field(default_factory=list)
    first_error: str | None = None
    """The first bad line's message (the 400's when no line is valid)."""
    model: str | None = None
    """The first valid line's model (the batch's ``model``)."""

    @property
    def total(self) -> int:
        return len(self.pending) + len(self.bad)


def new_file(owner: str, filename: str, purpose: str, size: int) -> FileRecord:
    """A new file's record (OpenAI's ``file-...`` id)."""
    return FileRecord(
        f"file-{secrets.token_hex(12)}", owner, filename, purpose, size, int(time.time())
    )


def request_id() -> str:
    """A request's id in the output (OpenAI's ``batch_req_...``)."""
    return f"batch_req_{secrets.token_hex(12)}"


def output_line(custom_id: str | None, status: int, body: Any, req_id: str) -> str:
    """An output (or error) file line for a request that ran: its HTTP answer."""
    response = {"status_code": status, "request_id": req_id, "body": body}
    return json.dumps(
        {"id": request_id(), "custom_id": custom_id, "response": response, "error": None},
        separators=(",", ":"),
    )


def error_line(custom_id: str | None, code: str, message: str) -> str:
    """An error file line for a request that did not run (a bad line, expired, cancelled)."""
    error = {"code": code, "message": message}
    return json.dumps(
        {"id": request_id(), "custom_id": custom_id, "response": None, "error": error},
        separators=(",", ":"),
    )


def read_lines(
    content: bytes,
    endpoint: str,
    limits: LimitSettings,
    backend: str,
    check_model: Callable[[str], None],
) -> Lines:
    """Check every line of ``content`` (blank lines are skipped, not counted)."""
    lines = Lines()
    seen: set[str] = set()
    for number, raw in enumerate(content.splitlines(), start=1):
        if not raw.strip():
            continue
        custom_id: str | None = None
        try:
            item = _json(raw)
            given = item.get("custom_id")
            # The error line names it too, when it is one (a repeated one included).
            custom_id = given if isinstance(given, str) and len(given) <= MAX_CUSTOM_ID else None
            custom_id = _custom_id(item, seen)
            body = _body(item, endpoint, limits, backend, check_model)
        except _BadLine as exc:
            message = f"line {number}: {exc}"
            lines.first_error = lines.first_error or message
            lines.bad.append(
                RequestResult(number, custom_id, error_line(custom_id, exc.code, message), True)
            )
            continue
        seen.add(custom_id)
        lines.model = lines.model or body.get("model")
        lines.pending.append(PendingRequest(number, custom_id, body))
    return lines


class _BadLine(ValueError):
    def __init__(self, message: str, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.code = code


def _json(raw: bytes) -> dict[str, Any]:
    try:
        item = json.loads(raw)
        check_json(item)
    except APIError as exc:
        raise _BadLine(exc.message, "invalid_json") from None
    except (ValueError, RecursionError) as exc:
        raise _BadLine(f"not a JSON object ({exc})", "invalid_json") from None
    if not isinstance(item, dict):
        raise _BadLine(f"must be a JSON object, got {type(item).__name__}", "invalid_json")
    return item


def _custom_id(item: dict[str, Any], seen: set[str]) -> str:
    custom_id = item.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID:
        raise _BadLine(f"custom_id: must be a string of 1 to {MAX_CUSTOM_ID} characters")
    if custom_id in seen:
        raise _BadLine(f"custom_id: {custom_id!r} is used by an earlier line; each must be unique")
    return custom_id


def _body(
    item: dict[str, Any],
    endpoint: str,
    limits: LimitSettings,
    backend: str,
    check_model: Callable[[str], None],
) -> dict[str, Any]:
    unknown = sorted(set(item) - {"custom_id", "method", "url", "body"})
    if unknown:
        raise _BadLine(f"{unknown[0]}: unknown field (fields: custom_id, method, url, body)")
    if item.get("method", "POST") != "POST":
        raise _BadLine(f"method: must be 'POST', got {item.get('method')!r}")
    if item.get("url") != endpoint:
        raise _BadLine(f"url: must be the batch's endpoint {endpoint!r}, got {item.get('url')!r}")
    body = item.get("body")
    if not isinstance(body, dict):
        raise _BadLine("body: must be a JSON object (the request of the endpoint)")
    if body.get("stream"):
        raise _BadLine("body.stream: a batch's answers are written whole; remove stream")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _BadLine("body.model: must be a string naming a model")
    try:
        if endpoint != "/v1/embeddings":
            check_model(model)
            parse = parse_chat if endpoint == "/v1/chat/completions" else parse_completion
            parse(body, limits, backend)
    except APIError as exc:
        param = f"body.{exc.param}" if exc.param else "body"
        raise _BadLine(f"{param}: {exc.message}", exc.code or "invalid_request") from None
    return body
