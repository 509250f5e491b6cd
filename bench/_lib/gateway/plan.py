"""bench/gateway_load.py's load pattern: which clients send what, when, and what each saw.

Both variants (the gateway and the in-process scheduler) replay the same
``plan``: background requests of a few classes and producers, all released at
once, and chats spread over the run. A ``Record`` is one client's view of its
request; ``check`` marks it as an error unless its text is exactly the
``SimulatedRunner``'s ``w0 w1 ... w{n-1}``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

MODEL = "sim-a"
MESSAGES = [{"role": "user", "content": "Summarise the note in one sentence."}]
# Background classes and their share of the background requests, with how many
# producers each (the fair pool's vruntime is per producer: a few alternate).
MIX = {"gana": (0.40, 4), "nataraj": (0.35, 4), "extract": (0.25, 2)}
# Chats arrive between these fractions of the expected device time: after the
# start-up burst (500 connections accepted, ~2.5 s here) and before the queue
# drains, so every chat finds a background job running and preempts it.
CHAT_WINDOW = (0.1, 0.85)


@dataclass(frozen=True, slots=True)
class Spec:
    """One client: its class, producer and arrival (seconds after the release)."""

    index: int
    class_name: str
    producer: str
    offset: float


@dataclass(slots=True)
class Record:
    """What one client saw (times from ``time.perf_counter``)."""

    spec: Spec
    start: float | None = None
    headers_at: float | None = None
    running_at: float | None = None
    first: float | None = None
    end: float | None = None
    tokens: int = 0
    comments: int = 0
    """SSE comment lines (queue position, running) received."""
    text: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def ttft(self) -> float | None:
        if self.start is None or self.first is None:
            return None
        return self.first - self.start


def plan(background: int, chats: int, tokens: int, interval: float, seed: int) -> list[Spec]:
    """The load pattern both variants replay: background at 0, chats spread out."""
    rng = random.Random(seed)
    classes: list[tuple[str, str]] = []
    for name, (share, producers) in MIX.items():
        count = round(background * share)
        classes += [(name, f"{name}-{i % producers}") for i in range(count)]
    while len(classes) < background:  # rounding
        classes.append(("gana", "gana-0"))
    classes = classes[:background]
    # Interleaved: the burst's arrival order (and so the queue) mixes classes.
    rng.shuffle(classes)
    specs = [Spec(i, c, p, 0.0) for i, (c, p) in enumerate(classes)]
    expected = (background + chats) * tokens * interval
    lo, hi = (f * expected for f in CHAT_WINDOW)
    step = (hi - lo) / max(chats, 1)
    for k in range(chats):
        # A random point inside each slot, so arrivals fall anywhere in a token.
        offset = lo + step * (k + rng.random())
        specs.append(Spec(background + k, "chat", f"person-{k % 3}", offset))
    return specs


def expected_text(tokens: int) -> str:
    # SimulatedRunner's pieces: "w<i> ", numbered across preemptions.
    return "".join(f"w{i} " for i in range(tokens))


def check(record: Record, tokens: int) -> None:
    if record.error is not None:
        return
    if record.first is None:
        record.error = "no token"
    elif record.tokens != tokens:
        record.error = f"{record.tokens} of {tokens} tokens"
    elif "".join(record.text) != expected_text(tokens):
        record.error = "wrong text"
