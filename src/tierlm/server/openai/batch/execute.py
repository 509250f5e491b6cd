"""One request of a batch, run as the endpoint would run it over HTTP: the same
parse and model check as ``/v1/chat/completions`` and ``/v1/completions``
(``pipeline.py``), the same queueing (``gateway/intake.enqueue``: the prompt
counted, the queue limits), the same
answer (``answers.Answer``) and the same errors (``job_errors``), but as a job
of the batch's class and producer (a background job like any other,
docs/design.md §4). An embeddings request goes to the embedding lane, as
``/v1/embeddings`` does (§5).

``run_request`` answers ``(status, body)``: what the HTTP response would have
been. ``Retry`` says the request should run again later and nothing be
written: a full queue (429) or a gateway shutting down; the batch keeps it
pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import replace
from typing import Any

from tierlm.embedding import EmbeddingFailed, LaneClosed, LaneFull
from tierlm.runners.cancellation import Cancelled, CancelReason
from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.embedding_lane import EmbeddingService
from tierlm.server.gateway.gateway import Gateway, GatewayJob
from tierlm.server.gateway.intake import enqueue
from tierlm.server.gateway.metadata import JobMeta
from tierlm.server.openai.answers import Answer, merged
from tierlm.server.openai.embeddings import _embedding_request, render
from tierlm.server.openai.job_errors import job_error
from tierlm.server.openai.pipeline import ask_of, parse_chat, parse_completion

__all__ = ["Retry", "run_request"]


class Retry(Exception):
    """Run this request again later (module docstring); ``after`` seconds."""

    def __init__(self, why: str, after: float) -> None:
        super().__init__(why)
        self.after = after


async def run_request(
    gateway: Gateway,
    embeddings: EmbeddingService | None,
    meta: JobMeta,
    endpoint: str,
    body: dict[str, Any],
) -> tuple[int, Any]:
    try:
        if endpoint == "/v1/embeddings":
            return 200, await _embed(embeddings, body)
        return 200, await _generate(gateway, meta, endpoint, body)
    except APIError as exc:
        if exc.status == 429 or exc.code == "shutting_down":
            retry = exc.headers.get("Retry-After", "1")
            raise Retry(exc.message, float(retry) if retry.isdigit() else 1.0) from None
        return exc.status, exc.body()


async def _generate(
    gateway: Gateway, meta: JobMeta, endpoint: str, body: dict[str, Any]
) -> dict[str, Any]:
    settings = gateway.settings
    parse = parse_chat if endpoint == "/v1/chat/completions" else parse_completion
    params = parse(body, settings.limits, settings.backend.kind)
    gateway.check_model(params.model)
    jobs = await enqueue(gateway, meta, ask_of(params))
    params = replace(params, request=jobs[0].request)
    try:
        await asyncio.wait([asyncio.ensure_future(_done(job)) for job in jobs])
    except asyncio.CancelledError:
        for job in jobs:
            job.disconnect()  # the batch was cancelled, or the gateway stops
        raise
    for job in jobs:
        _retry_if_stopped(job)
        error = job_error(job)
        if error is not None:
            raise error
    answers = [Answer(params, index=i) for i in range(len(jobs))]
    if len(jobs) == 1:
        return answers[0].render(jobs[0])
    for answer in answers[1:]:
        answer.id = answers[0].id
    return merged(answers, jobs)


async def _done(job: GatewayJob) -> None:
    with contextlib.suppress(Exception):  # the job's outcome is read by job_error
        await job.handle


def _retry_if_stopped(job: GatewayJob) -> None:
    """A job the gateway stopped (shutdown), or preempted in a class that is
    not re-queued, is not the request's fault: it runs again later."""
    try:
        job.handle.result()
    except Cancelled as exc:
        if exc.reason in (CancelReason.SHUTDOWN, CancelReason.PREEMPTED):
            raise Retry(f"job {job.id} was stopped ({exc.reason.value})", 1.0) from None
    except BaseException:
        return


async def _embed(service: EmbeddingService | None, body: dict[str, Any]) -> Any:
    if service is None:
        raise APIError(404, "embeddings are off on this gateway", code="embeddings_disabled")
    params = _embedding_request(body, service)
    lane = service.running_lane()
    try:
        vectors = await lane.embed_many(params.texts)
    except LaneFull:
        raise Retry("the embedding queue is full", 1.0) from None
    except LaneClosed:
        raise Retry("the embedding lane is closed", 1.0) from None
    except EmbeddingFailed:
        raise APIError(500, "the embedder failed on this request", code="backend_error") from None
    payload = await asyncio.to_thread(
        render, vectors, params, service.model, int(lane.embedder.max_input_tokens)
    )
    return json.loads(payload)
