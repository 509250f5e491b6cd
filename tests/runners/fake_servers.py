"""A FAKE Ollama server and a misbehaving OpenAI-compatible server, for tests.

Ollama cannot be installed from the package registries here, so the Ollama
runner is tested against this fake, which follows Ollama's documented API
(https://github.com/ollama/ollama/blob/main/docs/api.md):

- ``POST /api/generate`` and ``POST /api/chat`` stream newline-delimited JSON
  objects, one per token (``{"response": ...}`` / ``{"message": {"role":
  "assistant", "content": ...}}``, ``"done": false``), then a final object with
  ``"done": true`` and a ``done_reason``;
- a generate request without a prompt loads the model (``done_reason: "load"``),
  or unloads it when ``keep_alive`` is 0 (``done_reason: "unload"``);
- an unknown model answers 404 ``{"error": "model \\"x\\" not found, try pulling
  it first"}``; an error after the stream started is a line ``{"error": ...}``.

The fake "model" writes words ``t0 t1 t2 ...``: token n is ``f"t{n} "``. It
continues the count of such words already in the text it continues (a final
assistant message, or a raw prompt), so a resumed generation can be checked for
lost or duplicated tokens. ``options.num_predict`` bounds the answer.

Model names select behaviour: ``caller`` answers a chat that has ``tools``
with a call of the first tool (``{"city": "Paris"}``), as Ollama sends calls:
whole, in one message's ``tool_calls``, arguments as an object; ``slow``
waits 0.5 s before each token; ``stuck`` sends its first token at once and
then none until the client leaves; ``mute`` waits 4 * 0.5 s before it even
answers (a server evaluating a long prompt before it sends its headers), and
``silent`` never answers at all (tests that count, not time, use these two
ends: a client that waited for the next token or for the headers would hang);
``broken`` sends 3 tokens and then drops the connection; ``erroring`` sends 2 tokens and an
error line; ``missing`` does not exist. Every other name is a fine model.

The same app serves ``/v1/chat/completions`` and ``/v1/completions`` (SSE) with
the same models, for the OpenAI runner's failure cases, plus ``nodone``: a
stream that just stops after half its ``max_tokens``, without ``finish_reason``
or ``[DONE]``; and ``flood``: one token, then a 64 MiB line without a newline.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from starlette.requests import Request

    from tests.runners.helpers import FakeState

SLOW_SECONDS = 0.5
_WORD = re.compile(r"t\d+ ")


def _start(text: str) -> int:
    return len(_WORD.findall(text))


def make_app(state: FakeState) -> Starlette:
    async def tokens(model: str, start: int, count: int) -> AsyncIterator[str]:
        try:
            for i in range(count):
                if model == "slow":
                    await asyncio.sleep(SLOW_SECONDS)
                elif model == "stuck" and i > 0:
                    await asyncio.Event().wait()  # until the client goes away
                else:
                    await asyncio.sleep(0)
                if model == "broken" and i == 3:
                    raise ConnectionAbortedError("fake: connection dropped mid-stream")
                yield f"t{start + i} "
        except (asyncio.CancelledError, GeneratorExit):
            state.disconnects.append(model)
            raise

    def missing(model: str) -> Response:
        return JSONResponse(
            {"error": f'model "{model}" not found, try pulling it first'}, status_code=404
        )

    async def ollama(request: Request) -> Response:
        body: dict[str, Any] = await request.json()
        chat = request.url.path == "/api/chat"
        state.requests.append((request.url.path, body))
        model = body.get("model", "")
        if model == "missing":
            return missing(model)
        if not chat and not body.get("prompt"):
            # Load, or unload with keep_alive 0.
            keep_alive = body.get("keep_alive", "5m")
            if keep_alive == 0:
                state.loaded.pop(model, None)
                reason = "unload"
            else:
                state.loaded[model] = keep_alive
                reason = "load"
            return JSONResponse(
                {"model": model, "response": "", "done": True, "done_reason": reason}
            )
        state.loaded[model] = body.get("keep_alive", "5m")
        if chat and model == "caller" and body.get("tools"):
            name = body["tools"][0]["function"]["name"]
            call = {"function": {"name": name, "arguments": {"city": "Paris"}}}
            message = {"role": "assistant", "content": "", "tool_calls": [call]}
            lines = [{"model": model, "message": message, "done": False}]
            lines.append({"model": model, "message": {"role": "assistant", "content": ""},
                          "done": True, "done_reason": "stop"})  # fmt: skip
            payload = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
            return Response(payload, media_type="application/x-ndjson")
        options = body.get("options") or {}
        count = int(options.get("num_predict", 128))
        if chat:
            messages = body.get("messages") or []
            last = messages[-1] if messages else {}
            start = _start(last.get("content", "")) if last.get("role") == "assistant" else 0
        else:
            start = _start(body["prompt"]) if body.get("raw") else 0

        async def stream() -> AsyncIterator[bytes]:
            i = 0
            async for text in tokens(model, start, count):
                if model == "erroring" and i == 2:
                    yield json.dumps({"error": "fake: the model runner crashed"}).encode() + b"\n"
                    return
                if chat:
                    chunk = {"model": model, "message": {"role": "assistant", "content": text}}
                else:
                    chunk = {"model": model, "response": text}
                yield json.dumps({**chunk, "done": False}).encode() + b"\n"
                i += 1
            final: dict[str, Any] = {"model": model, "done": True, "done_reason": "length"}
            if chat:
                final["message"] = {"role": "assistant", "content": ""}
            else:
                final["response"] = ""
            yield json.dumps(final).encode() + b"\n"

        return StreamingResponse(stream(), media_type="application/x-ndjson")

    async def openai(request: Request) -> Response:
        body: dict[str, Any] = await request.json()
        chat = request.url.path.endswith("/chat/completions")
        state.requests.append((request.url.path, body))
        model = body.get("model", "")
        if model == "mute":
            await asyncio.sleep(4 * SLOW_SECONDS)
        if model == "silent":
            while not await request.is_disconnected():  # noqa: ASYNC110 (no headers, ever)
                await asyncio.sleep(0.01)
            state.disconnects.append(model)
            return Response(status_code=499)
        if model == "missing":
            return JSONResponse(
                {"error": {"message": f"The model `{model}` does not exist", "code": 404}},
                status_code=404,
            )
        count = int(body.get("max_tokens", 16))
        if model == "nodone":
            count //= 2  # stops short (the runner stops at max_tokens itself)
        if chat:
            last = (body.get("messages") or [{}])[-1]
            start = _start(last.get("content", "")) if last.get("role") == "assistant" else 0
        else:
            start = _start(body.get("prompt", ""))

        def event(text: str | None, finish: str | None) -> bytes:
            if chat:
                choice: dict[str, Any] = {"index": 0, "delta": {"content": text} if text else {}}
            else:
                choice = {"index": 0, "text": text or ""}
            choice["finish_reason"] = finish
            return f"data: {json.dumps({'model': model, 'choices': [choice]})}\n\n".encode()

        async def stream() -> AsyncIterator[bytes]:
            if model == "flood":
                # One endless line: 64 MiB without a newline (a hostile upstream).
                yield event("t0 ", None)
                for _ in range(1024):
                    yield b"x" * (64 << 10)
                return
            i = 0
            async for text in tokens(model, start, count):
                if model == "erroring" and i == 2:
                    error = {"error": {"message": "fake: the model runner crashed"}}
                    yield f"data: {json.dumps(error)}\n\n".encode()
                    return
                yield event(text, None)
                i += 1
            if model == "nodone":
                return
            yield event(None, "length")
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/api/generate", ollama, methods=["POST"]),
            Route("/api/chat", ollama, methods=["POST"]),
            Route("/v1/chat/completions", openai, methods=["POST"]),
            Route("/v1/completions", openai, methods=["POST"]),
        ]
    )
