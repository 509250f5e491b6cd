"""A FAKE upstream that misbehaves on demand, for the gateway's stall and
max_tokens tests. No real server stalls when asked to, so this one is a fake;
it speaks OpenAI's streamed chat API (SSE) and Ollama's (NDJSON), as
``tests/runners/fake_servers.py`` does, with models named for what they do:

- ``ok``: ``max_tokens`` tokens (``t0 t1 ...``), then the end;
- ``stall-headers``: sends nothing at all, not even its headers, until the
  client leaves (a server stuck before its first byte);
- ``stall-mid``: 3 tokens, then nothing until the client leaves;
- ``runaway``: ignores ``max_tokens`` and streams ``RUNAWAY`` tokens (the
  upstream that sent 2 962 chunks for ``max_tokens=10``);
- ``filtered``: 2 tokens, then its content filter ends the answer
  (``finish_reason: "content_filter"``, as OpenAI and Azure say it).

Ollama's load and model list answer as Ollama's do. ``FakeLog`` records each
request's model and whether its client went away before the fake finished (the
stream was closed: the device is free again).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

RUNAWAY = 5000
FILTERED = 2  # tokens before the content filter ends the answer
# Longer than any test waits: "forever", bounded so a leaked task ends.
FOREVER = 60.0


@dataclass
class FakeLog:
    requests: list[str] = field(default_factory=list)
    """The model of each generation request, in order."""
    closed_early: list[str] = field(default_factory=list)
    """Models whose client closed the stream before the fake was done."""


def make_fake_upstream(log: FakeLog) -> Starlette:
    async def tokens(model: str, max_tokens: int) -> AsyncIterator[str]:
        count = RUNAWAY if model == "runaway" else max_tokens
        count = min(count, FILTERED) if model == "filtered" else count
        try:
            for i in range(count):
                if model == "stall-mid" and i == 3:
                    await asyncio.sleep(FOREVER)
                await asyncio.sleep(0)
                yield f"t{i} "
        except (asyncio.CancelledError, GeneratorExit):
            log.closed_early.append(model)
            raise

    async def stall_headers(request: Request, model: str) -> Response:
        # A plain handler is not cancelled when its client leaves: watch for it.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FOREVER
        while loop.time() < deadline:
            if await request.is_disconnected():
                log.closed_early.append(model)
                break
            await asyncio.sleep(0.02)
        return Response(status_code=500)

    async def openai_chat(request: Request) -> Response:
        body: dict[str, Any] = await request.json()
        model = str(body.get("model"))
        log.requests.append(model)
        if model == "stall-headers":
            return await stall_headers(request, model)

        def event(payload: dict[str, Any]) -> bytes:
            return f"data: {json.dumps(payload)}\n\n".encode()

        async def stream() -> AsyncIterator[bytes]:
            async for text in tokens(model, int(body.get("max_tokens", 16))):
                yield event({"choices": [{"index": 0, "delta": {"content": text}}]})
            reason = "content_filter" if model == "filtered" else "length"
            yield event({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def ollama_chat(request: Request) -> Response:
        body: dict[str, Any] = await request.json()
        model = str(body.get("model"))
        log.requests.append(model)
        if model == "stall-headers":
            return await stall_headers(request, model)
        num_predict = int((body.get("options") or {}).get("num_predict", 16))

        async def stream() -> AsyncIterator[bytes]:
            async for text in tokens(model, num_predict):
                chunk = {"message": {"role": "assistant", "content": text}, "done": False}
                yield json.dumps(chunk).encode() + b"\n"
            yield json.dumps({"done": True, "done_reason": "length"}).encode() + b"\n"

        return StreamingResponse(stream(), media_type="application/x-ndjson")

    names = ["ok", "stall-headers", "stall-mid", "runaway", "filtered"]

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": n} for n in names]})

    async def ollama_tags(request: Request) -> Response:
        return JSONResponse({"models": [{"name": n} for n in names]})

    async def ollama_load(request: Request) -> Response:
        # Ollama's load (or unload, keep_alive 0): a generate request without a prompt.
        body: dict[str, Any] = await request.json()
        reason = "unload" if body.get("keep_alive") == 0 else "load"
        return JSONResponse({"model": body.get("model"), "done": True, "done_reason": reason})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", openai_chat, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/api/chat", ollama_chat, methods=["POST"]),
            Route("/api/generate", ollama_load, methods=["POST"]),
            Route("/api/tags", ollama_tags, methods=["GET"]),
        ]
    )
