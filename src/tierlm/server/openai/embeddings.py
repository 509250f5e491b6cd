"""``/v1/embeddings``: OpenAI's embeddings endpoint, served by the embedding lane.

Embeddings never go through the LLM scheduler (docs/design.md §5): the
gateway owns an :class:`~tierlm.embedding.EmbeddingLane` beside the scheduler,
with its own embedder and worker threads; a request's texts are queued in the
lane, batched with other requests' texts, and answered in order. The scheduler
never sees them: no job, no tier, no preemption, no effect on a chat's wait.

What the endpoint takes (OpenAI's fields):

- ``model``: the name the embedder is served as (``embeddings.model``); another
  name is 404, as for chats;
- ``input``: a string or an array of up to ``MAX_INPUTS`` strings, or token
  ids in the embedder's vocabulary, decoded with its tokenizer
  (``embedding_request``). Empty arrays, non-strings and empty or
  whitespace-only strings are 400 naming the item (``input[3]``). A text
  over ``embeddings.max_chars`` characters is 400 stating the limit (or cut
  there, ``overlong = "truncate"``); under it, the model reads its first
  ``max_input_tokens`` tokens (256 for MiniLM) and ignores the rest, as
  sentence-transformers and llama.cpp do;
- ``encoding_format``: ``float`` (default) or ``base64`` (little-endian float32,
  OpenAI's format; the official Python client asks for it by default);
- ``dimensions``: at most the model's; fewer keeps each vector's first
  ``dimensions`` values, renormalised to unit length (Matryoshka-style);
- ``user``: accepted; it changes no vector. Unknown fields are 400.

A full lane answers 429 with ``Retry-After`` at once (the lane's ``nowait``)
rather than holding the request: every held request would keep its texts in
memory outside the lane's bounded queue, so an HTTP flood would grow without
bound. A client that disconnects has its texts dropped from the queue.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from tierlm.embedding import (
    EmbeddingFailed,
    EmbeddingLane,
    LaneFull,
    Vector,
)
from tierlm.runners.cancel_scope import until_cancelled
from tierlm.server.edge.body import read_json
from tierlm.server.edge.disconnect import client_gone
from tierlm.server.edge.errors import APIError
from tierlm.server.edge.request_id import current_request_id
from tierlm.server.gateway.embedding_lane import EmbeddingService
from tierlm.server.gateway.gateway import Gateway
from tierlm.server.openai.embedding_request import MAX_INPUTS, EmbeddingRequest
from tierlm.server.openai.requests import parse
from tierlm.server.settings.embedders import LazyEmbedder, off_message

__all__ = ["CHARS_PER_TOKEN", "MAX_INPUTS", "Embedded", "embed_body", "render", "routes", "shorten"]

logger = logging.getLogger("tierlm.server")

# usage.prompt_tokens is an estimate, as for completions: ~4 characters a token.
CHARS_PER_TOKEN = 4
# Serialising to JSON costs ~1-2 µs per float (measured: a 384-d vector ~0.8 ms).
# Past this many floats (~10 ms) the answer is rendered in a worker thread, a
# vector per json.dumps call so the event loop (which runs the LLM scheduler)
# gets the GIL back between vectors.
RENDER_IN_THREAD_FLOATS = 8192


def _embedding_request(body: Any, service: EmbeddingService) -> EmbeddingRequest:
    """Validate a request against the served model and the lane's limits."""
    model = body.get("model") if isinstance(body, dict) else None
    if isinstance(model, str) and model and model != service.model:
        raise APIError(
            404,
            f"model {model!r}: not an embedding model of this gateway "
            f"(/v1/embeddings serves {service.model!r})",
            param="model",
            code="model_not_found",
            reason="unknown_model",
        )
    context = {"lane": service.running_lane(), "model": service.model}
    return parse(EmbeddingRequest, body, context)


# -- answers ------------------------------------------------------------------


def _encode(vector: Vector, encoding: str) -> str:
    if encoding == "base64":
        # OpenAI's format: the raw little-endian float32 values, base64-encoded.
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return json.dumps(vector, separators=(",", ":"))


def shorten(vector: Vector, dimensions: int) -> Vector:
    """The first ``dimensions`` values, at unit length again (Matryoshka-style)."""
    head = list(vector[:dimensions])
    norm = math.sqrt(sum(x * x for x in head))
    return [x / norm for x in head] if norm > 0 else head


def render(
    vectors: Sequence[Vector], params: EmbeddingRequest, model: str, max_tokens: int
) -> bytes:
    """OpenAI's embeddings response. Each vector is encoded by its own call, so that,
    run in a thread, the rendering lets the event loop in between vectors."""
    parts = []
    for index, vector in enumerate(vectors):
        if params.dimensions is not None and params.dimensions < len(vector):
            vector = shorten(vector, params.dimensions)
        encoded = _encode(vector, params.encoding_format or "float")
        if params.encoding_format == "base64":
            encoded = json.dumps(encoded)
        parts.append(f'{{"object":"embedding","index":{index},"embedding":{encoded}}}')
    tokens = sum(
        min(max_tokens, max(1, math.ceil(len(text) / CHARS_PER_TOKEN))) for text in params.texts
    )
    tail = json.dumps(
        {"model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}},
        separators=(",", ":"),
    )
    return f'{{"object":"list","data":[{",".join(parts)}],{tail[1:]}'.encode()


async def _embed(request: Request, lane: EmbeddingLane, texts: list[str]) -> list[Vector] | None:
    """The texts' vectors; None if the client went away first (its texts are then
    dropped from the queue, or their batch's result discarded)."""
    async with client_gone(request.receive) as gone:
        return await until_cancelled(gone, lane.embed_many(texts, nowait=True))


@dataclass(frozen=True, slots=True)
class Embedded:
    """A request's texts, embedded: the vectors in order, the request they
    answer, and the model and embedder's input size that made them."""

    vectors: list[Vector]
    params: EmbeddingRequest
    model: str
    max_tokens: int
    dim: int


async def embed_body(request: Request, body: Any) -> Embedded | None:
    """Embed the texts of ``body`` (an OpenAI embeddings request, parsed JSON)
    in the lane; None if the client went away first. Shared with Ollama's
    ``/api/embed`` (``server/ollama``): the same checks, limits and errors."""
    gateway: Gateway = request.app.state.gateway
    gateway.keys.authenticate(request)  # any key: embeddings are not a task class
    service: EmbeddingService | None = getattr(request.app.state, "embeddings", None)
    if service is None:
        raise APIError(
            404,
            off_message(),
            code="embeddings_disabled",
            reason="embeddings_disabled",
        )
    lane = service.running_lane()
    if isinstance(lane.embedder, LazyEmbedder) and not lane.embedder.loaded:
        # The default MiniLM loads on its first request (seconds: ONNX Runtime), in a
        # thread: token ids are read with its tokenizer before the lane runs.
        await _load(lane.embedder, service.model)
    params = _embedding_request(body, service)
    try:
        vectors = await _embed(request, lane, params.texts)
    except LaneFull:
        # Told in the gateway's words (its setting's name, its estimate of when
        # the queue has room); answered by its hints (429, edge/errors.py).
        stats = lane.stats()
        retry = service.retry_after(stats)
        full = LaneFull(
            f"embedding queue full: {stats.queue_depth} of {stats.max_queue} texts queued "
            f"(embeddings.max_queue), {len(params.texts)} offered; retry in about {retry} s"
        )
        full.retry_after = retry
        raise full from None
    except EmbeddingFailed as exc:
        raise _embedder_failed(exc, params, service.model) from None
    if vectors is None:
        return None
    max_tokens = int(lane.embedder.max_input_tokens)
    return Embedded(list(vectors), params, service.model, max_tokens, lane.dim)


async def create_embeddings(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    gateway.keys.authenticate(request)
    body = await read_json(request, gateway.settings.limits.max_body_bytes)
    done = await embed_body(request, body)
    if done is None:
        # Nobody reads this: the client is gone.
        return Response(status_code=499)
    vectors, params, model = done.vectors, done.params, done.model
    if len(vectors) * done.dim > RENDER_IN_THREAD_FLOATS:
        payload = await asyncio.to_thread(render, vectors, params, model, done.max_tokens)
    else:
        payload = render(vectors, params, model, done.max_tokens)
    return Response(payload, media_type="application/json")


async def _load(embedder: LazyEmbedder, model: str) -> None:
    try:
        await asyncio.to_thread(embedder.load)
    except Exception as exc:
        # The cause goes to the log, not to the client; the next request tries again.
        logger.error("embedder %r failed to load: %r", model, exc)
        raise APIError(
            500,
            f"embedder {model!r} failed to load; the gateway's log has the details "
            f"(request id {current_request_id()})",
            code="backend_error",
            type="server_error",
        ) from None


def _embedder_failed(exc: EmbeddingFailed, params: EmbeddingRequest, model: str) -> APIError:
    """500 naming the text the embedder failed on (alone: its batch-mates were
    retried without it), never the exception's text: that goes to the log."""
    index = exc.index or 0
    param = "input" if isinstance(params.input, str) else f"input[{index}]"
    logger.error("embedder %r failed on %s: %r", model, param, exc.__cause__ or exc)
    return APIError(
        500,
        f"{param}: embedder {model!r} failed on this text; the gateway's log has the "
        f"details (request id {current_request_id()})",
        param=param,
        code="backend_error",
        type="server_error",
    )


def routes() -> list[BaseRoute]:
    return [Route("/v1/embeddings", create_embeddings, methods=["POST"])]
