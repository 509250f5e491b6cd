"""One admission path for every surface (docs/design.md §0): who asks, in
which class, under which limits, the prompt counted, the jobs queued.

A surface (OpenAI's chat and completions, the Responses API, Ollama's API,
a Batch API line, the Ray ingress) only translates its wire format into an
``Ask`` and calls ``admit``; nothing of admission is written twice. The path
has two halves so that the Ray fleet, whose ingress and replicas are separate
processes, runs the same code: ``classify`` (who asks and as what: the key,
the ``X-Tierlm-*`` headers, the ``user`` field, person or program) where the
request arrives, and ``enqueue`` (the prompt counted against the model's
context, the key's and the class's queue limits, ``n`` jobs) where the device
is. ``admit`` is both, on one gateway.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from starlette.datastructures import Headers

from tierlm.core.classes import TaskClass
from tierlm.core.people import Why
from tierlm.runners.errors import InvalidRequest, RunnerError
from tierlm.runners.protocol import PromptCounter, abilities_of
from tierlm.runners.requests import GenerationRequest
from tierlm.server.gateway.auth import Principal
from tierlm.server.gateway.gateway import Gateway, GatewayJob
from tierlm.server.gateway.metadata import PRODUCER_HEADER, JobMeta, job_meta
from tierlm.server.gateway.people import People, Served

__all__ = ["Ask", "admit", "classify", "counted", "enqueue"]

logger = logging.getLogger("tierlm.server")


@dataclass(frozen=True, slots=True)
class Ask:
    """What a request asks of the device, whatever surface it came through."""

    request: GenerationRequest
    n: int = 1
    """Choices asked for: each is a job of its own (OpenAI's ``n``)."""
    default_max_tokens: bool = False
    """The client set no ``max_tokens``: the gateway chooses it (``counted``)."""
    user: str | None = None
    """OpenAI's ``user`` field: who is at the other end, when the client says."""


def classify(
    principal: Principal,
    headers: Headers,
    ask: Ask,
    classes: Mapping[str, TaskClass],
    people: People,
    now: float,
) -> Served:
    """Who asks and as what (``metadata.job_meta``); the ``user`` field names
    the producer (and the person, ``Principal.person``) when no
    ``X-Tierlm-Producer`` header does; then a person or a program
    (``people.People.serve``, docs/design.md §4.11). A judged request's
    ``identity`` must be told its end (``People.ended``)."""
    meta = job_meta(headers, principal, classes)
    if ask.user is not None and headers.get(PRODUCER_HEADER) is None:
        meta = replace(
            meta, producer=principal.producer_path(ask.user), person=principal.person(ask.user)
        )
    tier = classes[meta.class_name].tier
    messages = ask.request.messages
    # A tool's result as the last message: the program goes on after its tool
    # call (docs/design.md §4.11; Ollama's and OpenAI's role alike).
    tool_result = messages is not None and bool(messages) and messages[-1].get("role") == "tool"
    return people.serve(meta, principal, headers, ask.user, tier, now, tool_result=tool_result)


async def enqueue(gateway: Gateway, meta: JobMeta, ask: Ask) -> list[GatewayJob]:
    """The request's jobs, one per choice, its prompt counted first
    (``counted``): 400 past the model's context, 429 past a queue limit
    (``Admission``), 503 while shutting down. If one choice is refused, those
    already queued are cancelled: a request is queued whole or not at all."""
    request = await counted(gateway, ask.request, ask.default_max_tokens)
    jobs: list[GatewayJob] = []
    try:
        for _ in range(ask.n):
            jobs.append(await gateway.submit(meta, request))
    except BaseException:
        for job in jobs:
            job.disconnect()
        raise
    return jobs


async def admit(
    gateway: Gateway, principal: Principal, headers: Headers, ask: Ask
) -> list[GatewayJob]:
    """``classify`` then ``enqueue`` on this gateway, the model checked first
    (404 naming the models served). The judge hears when the request ends:
    its last job's end, or its refusal."""
    [jobs] = await admit_prompts(gateway, principal, headers, [ask])
    return jobs


async def admit_prompts(
    gateway: Gateway, principal: Principal, headers: Headers, asks: Sequence[Ask]
) -> list[list[GatewayJob]]:
    """``admit`` for a request of several prompts (legacy completions' list
    prompt): one request, so one verdict (classified once, by the first), each
    prompt's jobs queued, all or none."""
    gateway.check_model(asks[0].request.model_id)
    people, clock = gateway.people, gateway.scheduler.now
    served = classify(principal, headers, asks[0], gateway.settings.classes, people, clock())
    identity = served.identity
    groups: list[list[GatewayJob]] = []
    try:
        for ask in asks:
            groups.append(await enqueue(gateway, served.meta, ask))
    except BaseException:
        for jobs in groups:  # queued whole or not at all
            for job in jobs:
                job.disconnect()
        if identity is not None:
            people.ended(identity, clock())
        raise
    if identity is not None:
        mine = [job for jobs in groups for job in jobs]
        _settle_first(gateway, identity, served.meta, mine)
        left = [len(mine)]

        def one_ended() -> None:
            left[0] -= 1
            if left[0] == 0:
                people.ended(identity, clock())
                if people.unproven.get(identity) is mine:
                    del people.unproven[identity]

        for job in mine:
            job.add_end_hook(one_ended)
    return groups


def _settle_first(gateway: Gateway, identity: str, meta: JobMeta, jobs: list[GatewayJob]) -> None:
    """An identity's first request is a person's for want of evidence
    (docs/design.md §4.11); one sent alongside it is the evidence that it is
    a program's: from then on the first is served as this one is, in the
    fair pool (re-queued with its text kept if it runs, ``Scheduler.reclass``).
    A script's fan-out of eight had its first request hold the chat latency
    guard for its whole answer (keyless streams 0.72x producers')."""
    people = gateway.people
    if meta.why == Why.FIRST.value:
        people.unproven[identity] = jobs
    elif meta.why == Why.ALONGSIDE.value:
        for job in people.unproven.pop(identity, ()):
            gateway.scheduler.reclass(job.handle, meta.class_name, meta.producer, meta.person)


async def counted(
    gateway: Gateway, request: GenerationRequest, default_max_tokens: bool = False
) -> GenerationRequest:
    """``request`` with its exact prompt size, when the runner can count it; with
    ``default_max_tokens`` (the client set none), its ``max_tokens`` what the
    model's context leaves (``limits.context_max_tokens``)."""
    runner = gateway.runner
    if not isinstance(runner, PromptCounter):
        return request
    try:
        tokens = await runner.count_prompt_tokens(request)
    except InvalidRequest:
        raise  # the request's fault: answered by its hints (400, edge/errors.py)
    except RunnerError as exc:
        # Not the request's fault (a worker restarting): it is queued all the
        # same, with the estimate; the generation meets the error if it lasts.
        logger.warning("counting the prompt of a request failed: %s", exc)
        return request
    request = replace(request, prompt_tokens=tokens)
    limits = gateway.settings.limits
    context = abilities_of(runner).context(request.model_id)
    if default_max_tokens and limits.context_max_tokens and context is not None:
        room = max(1, min(limits.max_tokens_limit, context - tokens))
        request = replace(request, max_tokens=room)
    elif context is not None and 0 < context - tokens < request.max_tokens:
        # Cut where the context ends: the answer then ends with "length", not
        # "stop" (an agent must not take a truncated JSON for a whole one).
        request = replace(request, max_tokens=context - tokens)
    return request
