"""Reading a JSON request body within the size limit."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from tierlm.server.errors import APIError

__all__ = ["read_json"]


async def read_json(request: Request, limit: int) -> Any:
    """The parsed body; 413 past ``limit`` bytes (checked before reading when the
    client announces its length, and while reading otherwise), 400 if not JSON."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise _too_large(int(length), limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _too_large(None, limit)
    if not body.strip():
        raise APIError(
            400,
            "request body: empty; expected a JSON object",
            code="invalid_json",
            reason="invalid_json",
        )
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise APIError(
            400,
            f"request body: not valid JSON: {exc}",
            code="invalid_json",
            reason="invalid_json",
        ) from None


def _too_large(length: int | None, limit: int) -> APIError:
    size = f" ({length} bytes)" if length is not None else ""
    return APIError(
        413,
        f"request body: larger than the limit of {limit} bytes{size} (limits.max_body_bytes)",
        code="body_too_large",
        reason="body_too_large",
    )
