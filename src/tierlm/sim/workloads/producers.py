"""Producers shared by the workloads: the seed's four kinds of work, as jobs.

Sizes are tokens; on the default device (DeviceModel: 150 tokens/s prefill,
15 tokens/s decode) a prompt of 300 tokens takes 2 s and 30 output tokens 2 s.
No trace of the seed app exists, so the sizes below are assumptions, each
with its reason; workloads draw them from their own seeded random streams.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from tierlm.sim.context import SimContext
from tierlm.sim.device import DeviceModel
from tierlm.sim.jobspec import JobSpec

__all__ = [
    "CARD_OUTPUT",
    "CARD_PROMPT",
    "CHAT_OUTPUT",
    "EXTRACT_OUTPUT",
    "EXTRACT_PROMPT",
    "GANA_OUTPUT",
    "GANA_PROMPT",
    "Deck",
    "backlogged",
    "chat_session",
    "deck_filler",
    "extract_job",
    "extraction",
    "gana_cron",
    "output_for",
]

Range = tuple[int, int]

# A chat turn: a system prompt + the conversation so far + the new message;
# replies of 40-160 tokens (a few sentences; 3-11 s on the phone).
CHAT_SYSTEM = 120
CHAT_MESSAGE: Range = (15, 60)
CHAT_OUTPUT: Range = (40, 160)
# A Nataraj card: deck context and instructions in, a rich card out. 300-600
# tokens is 20-40 s on the phone: issue #118's "chat waits 30-110 s" behind
# Nataraj is then one to three cards, which is what a FIFO lane behind a
# sequential deck can produce.
CARD_PROMPT: Range = (350, 500)
CARD_OUTPUT: Range = (300, 600)
# Knowledge extraction of one note: the note in (200-500 tokens), a short list
# of entities and relations out.
EXTRACT_PROMPT: Range = (200, 500)
EXTRACT_OUTPUT: Range = (15, 45)
# A Gana round (one agent-loop step, seed §"Future work"): tools and context
# in, an action or a short text out.
GANA_PROMPT: Range = (400, 700)
GANA_OUTPUT: Range = (80, 200)


def _draw(rng: random.Random, size: Range) -> int:
    return rng.randint(size[0], size[1])


def output_for(device: DeviceModel, seconds: float, prompt: int) -> Range:
    """Output tokens that make a job of ``prompt`` tokens last ``seconds`` on
    ``device`` (within 10 % either way, so jobs are not all alike)."""
    decode = max(1.0, (seconds - device.prefill_seconds(prompt)) / device.token_interval)
    return max(1, round(0.9 * decode)), max(1, round(1.1 * decode))


@dataclass
class Deck:
    """Nataraj's deck: cards ready to show, refilled up to ``target``."""

    target: int
    ready: int = 0
    taken: asyncio.Event = field(default_factory=asyncio.Event)

    def take(self) -> bool:
        """The person swipes: one ready card is used (False if none was ready)."""
        if self.ready == 0:
            return False
        self.ready -= 1
        self.taken.set()
        return True


async def deck_filler(
    sim: SimContext, deck: Deck, *, model: str = "m1", producer: str = "nataraj:deck"
) -> None:
    """NatarajGenerator.fillBuffer: fills the deck card by card (sequential)."""
    rng = sim.rng(producer)
    while True:
        if deck.ready >= deck.target:
            deck.taken.clear()
            await deck.taken.wait()
            continue
        spec = JobSpec(
            "nataraj",
            model,
            prompt_tokens=_draw(rng, CARD_PROMPT),
            output_tokens=_draw(rng, CARD_OUTPUT),
            producer=producer,
            generation=True,  # a generated card (docs/design.md §4: generate resumes)
        )
        if await sim.run(spec):
            deck.ready += 1


async def chat_session(
    sim: SimContext,
    rng: random.Random,
    *,
    model: str = "m1",
    messages: int,
    first_delay: tuple[float, float] = (5.0, 15.0),
    think: tuple[float, float] = (8.0, 25.0),
    producer: str = "chat",
) -> None:
    """One conversation: the person types, waits for the reply, reads, types.

    The first message comes 5-15 s after the chat opens; between a reply and
    the next message, 8-25 s (reading a reply of ~100 tokens, typing a line).
    Each turn's prompt holds the conversation so far.
    """
    history = CHAT_SYSTEM
    await sim.sleep(rng.uniform(*first_delay))
    for turn in range(messages):
        history += _draw(rng, CHAT_MESSAGE)
        output = _draw(rng, CHAT_OUTPUT)
        spec = JobSpec(
            "chat",
            model,
            prompt_tokens=history,
            output_tokens=output,
            producer=producer,
            generation=True,
        )
        pause = rng.uniform(*think)
        await sim.run(spec)
        history += output
        if turn < messages - 1:
            await sim.sleep(pause)


async def extraction(
    sim: SimContext,
    *,
    notes: int,
    interval: float,
    start: float = 0.0,
    model: str = "m1",
    producer: str = "extract:backfill",
    prompt: Range = EXTRACT_PROMPT,
    output: Range = EXTRACT_OUTPUT,
    poisson: bool = False,
    first_note: int = 0,
) -> None:
    """ExtractKnowledgeUseCase, backfill loop: one note every ``interval`` s (open loop)."""
    rng = sim.rng(producer)
    await sim.sleep_until(start)
    for i in range(notes):
        sim.submit(
            extract_job(
                rng, first_note + i, model=model, producer=producer, prompt=prompt, output=output
            )
        )
        await sim.sleep(rng.expovariate(1.0 / interval) if poisson else interval)


def extract_job(
    rng: random.Random,
    note: int,
    *,
    model: str = "m1",
    producer: str = "extract:backfill",
    prompt: Range = EXTRACT_PROMPT,
    output: Range = EXTRACT_OUTPUT,
) -> JobSpec:
    """The extraction of note number ``note`` (its subject, docs/design.md §6.2)."""
    return JobSpec(
        "extract",
        model,
        prompt_tokens=_draw(rng, prompt),
        output_tokens=_draw(rng, output),
        producer=producer,
        subject=f"note-{note}",
    )


async def gana_cron(
    sim: SimContext,
    producer: str,
    *,
    model: str = "m1",
    period: float,
    first: float,
    slack: float,
    prompt: Range = GANA_PROMPT,
    output: Range = GANA_OUTPUT,
) -> None:
    """GanaEngine.processGana, cron fire: a tick every ``period`` s (open loop).

    The tick is due ``slack`` s after it fires (its deadline, docs/design.md §4.1 (rule 4)):
    until then it waits in the fair pool, after it is overdue.
    """
    rng = sim.rng(producer)
    fire = first
    while True:
        await sim.sleep_until(fire)
        sim.submit(
            JobSpec(
                "gana",
                model,
                prompt_tokens=_draw(rng, prompt),
                output_tokens=_draw(rng, output),
                producer=producer,
                subject=producer,
                deadline=fire + slack,
            )
        )
        fire += period


async def backlogged(
    sim: SimContext,
    producer: str,
    *,
    class_name: str = "gana",
    model: str = "m1",
    outstanding: int,
    prompt: Range,
    output: Range,
    start: float = 0.0,
    stop: float | None = None,
    generation: bool = False,
    calls: int = 1,
    deadline: float | None = None,
) -> None:
    """A producer that always has ``outstanding`` jobs queued or running.

    It submits them all at ``start`` (a burst, as a Gana with a batch of
    rounds), then one more each time one ends, until ``stop``. With
    ``outstanding=1`` it is a producer that submits one job at a time.
    ``deadline``: the absolute deadline of every job (one already past makes
    each job overdue on arrival).
    """
    rng = sim.rng(producer)
    await sim.sleep_until(start)
    slots = asyncio.Semaphore(outstanding)
    pending: set[asyncio.Task[bool]] = set()
    try:
        while stop is None or sim.now() < stop:
            await slots.acquire()
            if stop is not None and sim.now() >= stop:
                break
            spec = JobSpec(
                class_name,
                model,
                prompt_tokens=_draw(rng, prompt),
                output_tokens=_draw(rng, output),
                producer=producer,
                generation=generation,
                calls=calls,
                deadline=deadline,
            )
            task = asyncio.create_task(sim.run(spec))
            pending.add(task)

            def done(task: asyncio.Task[bool]) -> None:
                pending.discard(task)
                slots.release()

            task.add_done_callback(done)
    finally:
        for task in pending:
            task.cancel()
