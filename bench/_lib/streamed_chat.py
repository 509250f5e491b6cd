"""One streamed chat completion read as a benchmark needs it: when it was
sent, when its first piece came, when it ended, its completion tokens (the
usage chunk) and how the gateway served it (``X-Tierlm-Served-As``, docs/design.md §4.11).
Times are ``time.perf_counter()``."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["Streamed", "read_chat"]


@dataclass(frozen=True)
class Streamed:
    sent: float
    first: float
    end: float
    tokens: int
    served_as: str
    """``person``, ``program``, ``background``, or ``?`` without the header."""


async def read_chat(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]
) -> Streamed:
    """Stream ``body`` to ``url``'s chat completions and read it to its end."""
    sent = time.perf_counter()
    first: float | None = None
    tokens = 0
    async with client.stream(
        "POST", f"{url}/v1/chat/completions", json=body, headers=headers
    ) as reply:
        reply.raise_for_status()
        served = reply.headers.get("x-tierlm-served-as", "?").split(";")[0]
        async for line in reply.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            elif chunk.get("choices") and first is None:
                first = time.perf_counter()
    end = time.perf_counter()
    if first is None:
        raise RuntimeError("the stream carried no piece")
    return Streamed(sent, first, end, tokens, served)
