"""Reading a JSON request body: within the size limit, and only JSON that every
later step can handle.

Python's ``json`` accepts what the rest of the gateway cannot: ``NaN`` and
``Infinity`` (not JSON), nesting until the interpreter's recursion limit
(``RecursionError``), integers past CPython's 4 300-digit conversion limit
(``ValueError``), and ``"\\ud800"``, a lone UTF-16 surrogate, which is a
Python string that no encoder, tokenizer or embedder takes. Each is a 400
here, naming where it is, before any endpoint sees the body, so that a bad text
fails its own request only (never a batch it would have joined) and the
connection stays usable.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from starlette.requests import Request

from tierlm.server.edge.errors import APIError
from tierlm.server.settings.validation import dotted

__all__ = ["MAX_DEPTH", "SETTING", "body_too_large", "check_json", "parse_json", "read_json"]

# Far more nesting than any request has (a JSON schema in response_format nests
# about three levels per level of its objects), far less than the ~1000 frames
# that Python's recursion limit allows the parser and the validation after it.
MAX_DEPTH = 100
# The setting a body's size limit comes from, as a 413 names it.
SETTING = "limits.max_body_bytes"


async def read_json(request: Request, limit: int) -> Any:
    """The parsed body; 413 past ``limit`` bytes (checked before reading when the
    client announces its length, and while reading otherwise), 400 if it is not
    JSON the gateway can take (``parse_json``)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise body_too_large(limit, int(length))
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise body_too_large(limit)
    return parse_json(bytes(body))


def parse_json(body: bytes) -> Any:
    """``body`` as JSON, checked (``check_json``); APIError 400 otherwise."""
    if not body.strip():
        raise _invalid("empty; expected a JSON object")
    try:
        value = json.loads(body, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        raise _invalid(
            f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except UnicodeDecodeError as exc:
        raise _invalid(f"not valid JSON: not UTF-8 text (byte {exc.start})") from None
    except RecursionError:
        raise _invalid(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        # CPython refuses to convert an integer literal of more digits than this.
        if "integer string conversion" in str(exc):
            digits = sys.get_int_max_str_digits()
            raise _invalid(f"a number with more than {digits} digits") from None
        raise _invalid(f"not valid JSON: {exc}") from None
    check_json(value)
    return value


def check_json(value: Any) -> None:
    """400 for nesting deeper than ``MAX_DEPTH`` or a string (or key) holding
    a lone surrogate, naming where (``messages[0].content``)."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if len(path) > MAX_DEPTH:
            raise _invalid(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, str):
            _check_text(node, path)
        elif isinstance(node, dict):
            for key, item in node.items():
                _check_text(key, path)
                stack.append((item, (*path, key)))
        elif isinstance(node, list):
            stack.extend((item, (*path, i)) for i, item in enumerate(node))


def _check_text(text: str, path: tuple[str | int, ...]) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        where = dotted(path) or "request body"
        raise APIError(
            400,
            f"{where}: contains a lone UTF-16 surrogate ({text[exc.start]!r} at character "
            f"{exc.start}), which is not text; send valid Unicode",
            param=dotted(path) or None,
            code="invalid_text",
        ) from None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON value")


def _invalid(message: str) -> APIError:
    return APIError(400, f"request body: {message}", code="invalid_json", reason="invalid_json")


def body_too_large(limit: int, length: int | None = None, setting: str = SETTING) -> APIError:
    """413; the connection is closed after it (the rest of the body is not read)."""
    size = f" ({length} bytes)" if length is not None else ""
    return APIError(
        413,
        f"request body: larger than the limit of {limit} bytes{size} ({setting})",
        code="body_too_large",
        reason="body_too_large",
        headers={"Connection": "close"},
    )
