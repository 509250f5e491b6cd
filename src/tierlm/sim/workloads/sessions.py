"""``sessions``: several people chat in turn, each at their own heavy-tailed pace.

What the excursion bets of docs/design.md §4.8 (bets) are about: the device
leaves the person's model for background work only while they read, and its
bet loses when they write first. On ``azure-chat`` one person's gaps come from
the trace; here each person has their own:

- ``people`` persons (default 4) share the device. Person k's reading gap
  (from the end of a reply to their next message: reading it, thinking,
  typing) is lognormal: a median drawn log-uniformly in
  [``median_min``, ``median_max``] s (default 20-120 s) and a log-spread of
  ``sigma`` (default 1) times a factor in [0.8, 1.2] of their own. Sigma 1
  is heavy-tailed: one gap in ten is over 3.6 times the median, one in a
  hundred over 10 times. A gap is capped at 30 min (the page left open,
  the person gone).
- Sessions, in turn: a person other than the last opens the chat page
  (foreground ``chat``), writes the first message 5-15 s later, then
  ``messages_min``-``messages_max`` messages in all (default 5-40), closed
  loop: each after the reply to the last and one of their gaps. After the
  last reply and one more gap they close the page (foreground None) for
  ``away_min``-``away_max`` s (default 2-15 min) before the next session.
- Prompts grow with the conversation: a system prompt, then each message
  and reply (the sizes of ``producers.chat_session``), the oldest turns
  dropped beyond a 2 048-token window (a phone app's chat context).
- Background (``background=1``, default), as ``azure-chat``: Nataraj filling
  a 10-card deck nobody swipes, a 500-note extraction backfill at 1/s and
  then a new note every 60-180 s, and the Gana cron ticks of ``issue118``
  (``gana:digest`` and ``gana:inbox`` on the chat model ``m1``,
  ``gana:translate`` on a second model ``m2``).

Every draw is the seed's (``SimContext.rng``): the people, the sessions'
order and lengths, each person's gaps and message sizes are the same under
every policy; only when things happen changes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from tierlm.sim.context import SimContext
from tierlm.sim.jobspec import JobSpec
from tierlm.sim.workload import Workload
from tierlm.sim.workloads.issue118 import backfill_then_notes
from tierlm.sim.workloads.producers import (
    CHAT_MESSAGE,
    CHAT_OUTPUT,
    CHAT_SYSTEM,
    Deck,
    deck_filler,
    gana_cron,
)

__all__ = ["Person", "Sessions", "draw_people"]

CONTEXT_WINDOW = 2048
"""The most prompt tokens of a turn: older turns are dropped (the system
prompt stays)."""
GAP_CAP = 1800.0
"""The longest reading gap: 30 min with the page open is a person gone."""
SIGMA_SPREAD = (0.8, 1.2)
"""A person's own log-spread, as a factor of the workload's ``sigma``."""
FIRST_DELAY = (5.0, 15.0)
"""From opening the chat page to the first message: typing a line."""
DECK_CARDS = 10

DEFAULTS: dict[str, float] = {
    "people": 4,
    "median_min": 20.0,
    "median_max": 120.0,
    "sigma": 1.0,
    "messages_min": 5,
    "messages_max": 40,
    "away_min": 120.0,
    "away_max": 900.0,
    "background": 1,
}


@dataclass(frozen=True, slots=True)
class Person:
    """One person at the device: their name and reading-gap distribution."""

    name: str
    median: float
    """The median of their reading gaps, seconds."""
    sigma: float
    """The standard deviation of their gaps' logarithm."""

    def gap(self, rng: random.Random) -> float:
        """One reading gap, seconds (lognormal, capped at ``GAP_CAP``)."""
        return min(GAP_CAP, rng.lognormvariate(math.log(self.median), self.sigma))


class Sessions(Workload):
    name = "sessions"
    description = (
        "several people chat in turn, sessions of 5-40 messages each after a reading gap "
        "drawn from the person's own heavy-tailed (lognormal) distribution, the chat page "
        "closed between sessions; deck, extraction and cron (one on a second model) beside"
    )
    # Four hours: about eight sessions, each person back two or three times.
    default_duration = 4 * 3600.0
    parameters: ClassVar[Mapping[str, str]] = {
        "people": "persons taking turns at the device (default 4)",
        "median_min": "the least of the persons' median reading gaps, seconds (default 20)",
        "median_max": "the greatest of the persons' median reading gaps, seconds (default 120)",
        "sigma": "the log-spread of a person's gaps (lognormal sigma, default 1: heavy-tailed)",
        "messages_min": "the fewest messages in a session (default 5)",
        "messages_max": "the most messages in a session (default 40)",
        "away_min": "the shortest time the chat page stays closed between sessions, s "
        "(default 120)",
        "away_max": "the longest time the chat page stays closed between sessions, s (default 900)",
        "background": "1 (default): the deck, extraction and cron beside the sessions; "
        "0: the sessions alone",
    }

    def __init__(
        self,
        people: float = DEFAULTS["people"],
        median_min: float = DEFAULTS["median_min"],
        median_max: float = DEFAULTS["median_max"],
        sigma: float = DEFAULTS["sigma"],
        messages_min: float = DEFAULTS["messages_min"],
        messages_max: float = DEFAULTS["messages_max"],
        away_min: float = DEFAULTS["away_min"],
        away_max: float = DEFAULTS["away_max"],
        background: float = DEFAULTS["background"],
    ) -> None:
        self.people = _count("people", people)
        self.median_min = _positive("median_min", median_min)
        self.median_max = _positive("median_max", median_max)
        if self.median_max < self.median_min:
            raise ValueError(
                f"median_max: must be >= median_min ({median_min!r}), got {median_max!r}"
            )
        if not (math.isfinite(sigma) and 0 <= sigma <= 3):
            raise ValueError(f"sigma: must be a number in [0, 3], got {sigma!r}")
        self.sigma = float(sigma)
        self.messages_min = _count("messages_min", messages_min)
        self.messages_max = _count("messages_max", messages_max)
        if self.messages_max < self.messages_min:
            raise ValueError(
                f"messages_max: must be >= messages_min ({messages_min!r}), got {messages_max!r}"
            )
        if not (math.isfinite(away_min) and away_min >= 0):
            raise ValueError(f"away_min: must be a number of seconds >= 0, got {away_min!r}")
        self.away_min = float(away_min)
        if not (math.isfinite(away_max) and away_max >= away_min):
            raise ValueError(f"away_max: must be >= away_min ({away_min!r}), got {away_max!r}")
        self.away_max = float(away_max)
        if background not in (0, 1):
            raise ValueError(f"background: must be 0 or 1, got {background!r}")
        self.background = bool(background)

    def persons(self, seed: int) -> list[Person]:
        """The people of a run under ``seed`` (the same for every policy)."""
        rng = SimContext.random_stream(self.name, seed, "people")
        return draw_people(rng, self.people, (self.median_min, self.median_max), self.sigma)

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        chats = _sessions(sim, self, self.persons(sim.seed))
        if not self.background:
            return [chats]
        return [
            chats,
            deck_filler(sim, Deck(target=DECK_CARDS)),
            backfill_then_notes(sim),
            gana_cron(sim, "gana:digest", period=180.0, first=30.0, slack=60.0),
            gana_cron(sim, "gana:inbox", period=240.0, first=100.0, slack=60.0),
            gana_cron(sim, "gana:translate", model="m2", period=300.0, first=150.0, slack=120.0),
        ]

    def params(self) -> dict[str, Any]:
        return {
            "people": self.people,
            "median_min": self.median_min,
            "median_max": self.median_max,
            "sigma": self.sigma,
            "messages_min": self.messages_min,
            "messages_max": self.messages_max,
            "away_min": self.away_min,
            "away_max": self.away_max,
            "background": int(self.background),
            "context_window": CONTEXT_WINDOW,
            "gap_cap": GAP_CAP,
        }


def draw_people(
    rng: random.Random, count: int, medians: tuple[float, float], sigma: float
) -> list[Person]:
    """``count`` persons, each with a median gap log-uniform in ``medians``
    and a log-spread of ``sigma`` times a factor in ``SIGMA_SPREAD``."""
    low, high = math.log(medians[0]), math.log(medians[1])
    return [
        Person(
            f"person-{k + 1}",
            median=math.exp(rng.uniform(low, high)),
            sigma=sigma * rng.uniform(*SIGMA_SPREAD),
        )
        for k in range(count)
    ]


def _count(name: str, value: float) -> int:
    if not (math.isfinite(value) and value >= 1 and value == int(value)):
        raise ValueError(f"{name}: must be a whole number >= 1, got {value!r}")
    return int(value)


def _positive(name: str, value: float) -> float:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: must be a number of seconds > 0, got {value!r}")
    return float(value)


async def _sessions(sim: SimContext, spec: Sessions, people: list[Person]) -> None:
    """The sessions, one after another, each of a person other than the last."""
    order = sim.rng("sessions")
    streams = {p.name: sim.rng(f"chat:{p.name}") for p in people}
    last: Person | None = None
    while True:
        others = [p for p in people if p is not last] or people
        person = order.choice(others)
        messages = order.randint(spec.messages_min, spec.messages_max)
        away = order.uniform(spec.away_min, spec.away_max)
        sim.set_foreground("chat")
        await _conversation(sim, person, streams[person.name], messages)
        sim.set_foreground(None)
        await sim.sleep(away)
        last = person


async def _conversation(sim: SimContext, person: Person, rng: random.Random, messages: int) -> None:
    """One session: the first message after typing it, each next one a gap
    after the last reply; the page stays open for one more gap after the last."""
    producer = f"chat:{person.name}"
    turns: list[int] = []  # tokens of each message and reply, oldest first
    await sim.sleep(rng.uniform(*FIRST_DELAY))
    for _ in range(messages):
        turns.append(rng.randint(*CHAT_MESSAGE))
        output = rng.randint(*CHAT_OUTPUT)
        gap = person.gap(rng)
        spec = JobSpec(
            "chat",
            "m1",
            prompt_tokens=_window(turns),
            output_tokens=output,
            producer=producer,
            generation=True,
        )
        await sim.run(spec)
        turns.append(output)
        await sim.sleep(gap)


def _window(turns: list[int]) -> int:
    """The prompt: the system prompt and the latest turns within ``CONTEXT_WINDOW``."""
    prompt = CHAT_SYSTEM
    for tokens in reversed(turns):
        if prompt + tokens > CONTEXT_WINDOW:
            break
        prompt += tokens
    return prompt
