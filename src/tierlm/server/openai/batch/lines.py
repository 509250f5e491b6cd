"""A batch's input file read into requests: each JSONL line checked on its own.

A line is ``{"custom_id": "...", "method": "POST", "url": "<the batch's
endpoint>", "body": {...}}`` (OpenAI's input format). A line that is not (not
JSON, a missing or repeated ``custom_id``, another ``url``, a body its endpoint
refuses, a model not served here) fails alone: it becomes a line of the error
file, in OpenAI's output shape with ``response: null`` and an ``error`` naming
the line and the field, and the batch runs the others. A file with no valid
line at all is refused when the batch is created. A line is read whole only
up to ``limits.max_body_bytes``, the size ``/v1/chat/completions`` takes
(``split_lines``); a longer one is a bad line, never held in memory.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tierlm.server.edge.body import check_json
from tierlm.server.edge.errors import APIError
from tierlm.server.openai.batch.store import FileRecord, PendingRequest, RequestResult
from tierlm.server.openai.pipeline import parse_chat, parse_completion
from tierlm.server.settings.sections import LimitSettings

__all__ = [
    "ENDPOINTS",
    "LineChecker",
    "LineRules",
    "error_line",
    "new_file",
    "output_line",
    "request_id",
    "split_lines",
]

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")

# custom_id: bounded, as any name that ends up in a file a person reads.
MAX_CUSTOM_ID = 512


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


def split_lines(chunks: Iterable[bytes], cap: int) -> Iterator[bytes | None]:
    """The lines of the content ``chunks`` make, without their ending (``\n``
    or ``\r\n``); None for a line longer than ``cap`` bytes, whose bytes are
    skipped, not kept: memory holds a chunk and one line at most
    (docs/design.md §9)."""
    line = bytearray()
    too_long = False
    for chunk in chunks:
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if not too_long:
                line += piece
                if len(line) > cap + 1:  # + 1: a "\r" before the "\n"
                    too_long = True
                    line.clear()
            if end < 0:
                break
            yield _ended(line, cap, too_long)
            line.clear()
            too_long = False
            start = end + 1
    if line or too_long:
        yield _ended(line, cap, too_long)


def _ended(line: bytearray, cap: int, too_long: bool) -> bytes | None:
    raw = bytes(line[:-1] if line.endswith(b"\r") else line)
    return None if too_long or len(raw) > cap else raw


@dataclass(frozen=True, slots=True)
class LineRules:
    """What a line is checked against: the batch's endpoint and the gateway's
    limits as they are when the batch is created."""

    endpoint: str
    limits: LimitSettings
    backend: str
    check_model: Callable[[str], None]
    most_choices: tuple[int, str]
    """The most ``n`` a line may ask, and the limit that sets it (a batch's
    line holds ``n`` queue places: never more than the batch or the key has)."""
    embeddings: Callable[[dict[str, Any]], None] | None = None
    """Checks an embeddings body (400s as ``/v1/embeddings`` answers them)."""


class LineChecker:
    """Each line checked on its own (module docstring); the ``custom_id``s seen."""

    def __init__(self, rules: LineRules) -> None:
        self.rules = rules
        self.seen: set[str] = set()
        self.model: str | None = None
        """The first valid line's model (the batch's ``model``)."""

    def check(self, number: int, raw: bytes | None) -> PendingRequest | RequestResult | None:
        """Line ``number`` (from 1; ``raw`` None: over the size cap) as a request
        to run or a bad line's error; None for a blank line (not counted)."""
        if raw is not None and not raw.strip():
            return None
        custom_id: str | None = None
        try:
            if raw is None:
                limit = self.rules.limits.max_body_bytes
                raise _BadLine(
                    f"larger than the limit of {limit} bytes (limits.max_body_bytes), as "
                    f"{self.rules.endpoint} refuses such a body",
                    "body_too_large",
                )
            item = _json(raw)
            given = item.get("custom_id")
            # The error line names it too, when it is one (a repeated one included).
            custom_id = given if isinstance(given, str) and len(given) <= MAX_CUSTOM_ID else None
            custom_id = _custom_id(item, self.seen)
            body = _body(item, self.rules)
        except _BadLine as exc:
            message = f"line {number}: {exc}"
            return RequestResult(number, custom_id, error_line(custom_id, exc.code, message), True)
        self.seen.add(custom_id)
        self.model = self.model or body.get("model")
        return PendingRequest(number, custom_id, body)


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


def _body(item: dict[str, Any], rules: LineRules) -> dict[str, Any]:
    unknown = sorted(set(item) - {"custom_id", "method", "url", "body"})
    if unknown:
        raise _BadLine(f"{unknown[0]}: unknown field (fields: custom_id, method, url, body)")
    if item.get("method", "POST") != "POST":
        raise _BadLine(f"method: must be 'POST', got {item.get('method')!r}")
    endpoint = rules.endpoint
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
        if endpoint == "/v1/embeddings":
            if rules.embeddings is not None:
                rules.embeddings(body)
            return body
        rules.check_model(model)
        parse = parse_chat if endpoint == "/v1/chat/completions" else parse_completion
        params = parse(body, rules.limits, rules.backend)
    except APIError as exc:
        param = f"body.{exc.param}" if exc.param else "body"
        raise _BadLine(f"{param}: {exc.message}", exc.code or "invalid_request") from None
    most, why = rules.most_choices
    if params.n > most:
        raise _BadLine(
            f"body.n: {params.n} choices, more than a batch line may ask ({most}, {why}): "
            "each choice holds a place in the queue",
            "too_many_choices",
        )
    return body
