"""Who is a person: judged by how an identity paces its requests
(docs/design.md §4.11).

Every promise tierlm makes is about a person, and the chat latency guard
spends the device on them (§4.7). A request that names no class is not
therefore a person's: agent frameworks, LiteLLM, scripts send no header
either. What tells them apart is pacing. A person reads an answer before
they send the next message, and typing even "ok" takes seconds; a program
sends its next request the moment the answer ends, or many at once.

Per identity (an API key, with the ``user`` field, the producer header, a
session header or the client's User-Agent where given: the gateway's
``people`` module) the judge keeps how many of its requests are in flight,
when its last answer ended, and whether each of its last ``WINDOW`` gaps was
short (a request sent less than ``reading_gap`` after the last answer ended,
or while another was in flight). A request is a person's when

- it is the identity's first (no evidence yet: a person's first message must
  never wait), or
- it follows a reading gap (nothing in flight, ``reading_gap`` or more since
  the last answer ended) and fewer than ``PROGRAM_AT`` of the identity's last
  ``WINDOW`` gaps were short.

A first request is a program's after all when its *client* (the identity
without its name or session: the key and the User-Agent) sent mostly first
requests lately: ``NEW_NAMES_AT`` of its last ``CLIENT_WINDOW`` requests
were new names' first ones. A client that invents a ``user`` for each
request would otherwise make every request a "first" and hold the chat
guard with all of them; a front-end's people mostly send follow-ups, and
only a burst of more than ``NEW_NAMES_AT`` newcomers with hardly a
follow-up between trips it (bench/people.py measures both).

Otherwise it is a program's: sent back to back, alongside another, carrying
a tool's result (the gap before it was the tool running, not someone
reading: an agent's tool call takes 0.5-10 s, which pacing alone mistook for
reading 18.7 % of the time), or by an identity that paces like a program
(then a long gap is a tool call). A
program that starts reading again is a person again after
``WINDOW - PROGRAM_AT + 1`` reading gaps. Everything is O(1) per request:
the window is a bit mask, the table of identities bounded (least recently
seen forgotten first).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from enum import Enum

__all__ = [
    "CLIENT_WINDOW",
    "NEW_NAMES_AT",
    "PROGRAM_AT",
    "READING_GAP",
    "REMEMBERED",
    "WINDOW",
    "Pacing",
    "PeopleJudge",
    "Verdict",
    "Why",
]

READING_GAP = 1.0
"""Seconds from an answer's end under which the next request is no
person's. The keystroke-level model (Card, Moran and Newell, 1980) gives a
person 1.35 s to decide what to type and 0.2-0.28 s a keystroke: "ok" and
Enter take 1.95 s at the fastest, "continue" 3.9 s, before any reading. An
agent framework's next call follows in milliseconds (bench/people.py)."""

WINDOW = 4
"""Gaps remembered per identity (docs/design.md §4.11)."""

PROGRAM_AT = 3
"""Short gaps among the last ``WINDOW`` that make an identity pace like a
program. A chat front-end that sends one automatic follow-up (a title, tags,
suggested replies) after each answer has half its gaps short and stays a
person; an agent with one tool call among three quick calls stays a program."""

CLIENT_WINDOW = 16
"""A client's requests remembered, as new names' or not (module docstring)."""

NEW_NAMES_AT = 12
"""New names' first requests among a client's last ``CLIENT_WINDOW`` that make
its next new name a program's: a client inventing a name per request has
its first 12 served as persons', then none; a front-end's people, arriving
at people's pace among their own follow-ups, never come near it."""

REMEMBERED = 4096
"""Identities remembered, most recently seen kept (as ``persons_in_turn.REMEMBERED``):
a bounded table whoever invents names; a forgotten one starts afresh."""

FORGET_AFTER = 300.0
"""Seconds after which an identity's pacing is forgotten: a person back
after five minutes away is a newcomer (the fair pool's ``idle_reset``)."""


class Why(Enum):
    """Why a request was judged as it was (the ``X-Tierlm-Served-As`` reason)."""

    FIRST = "first-request"
    READS = "reads-between-requests"
    BACK_TO_BACK = "back-to-back"
    TOOL_RESULT = "after-a-tool-call"
    ALONGSIDE = "alongside-another"
    NEW_NAMES = "a-new-name-each-request"
    PACES_LIKE_PROGRAM = "paces-like-a-program"
    PINNED_PERSON = "key-says-person"
    PINNED_PROGRAM = "key-says-program"
    CLASS_NAMED = "class-named"


@dataclass(frozen=True, slots=True)
class Verdict:
    person: bool
    why: Why

    @property
    def served_as(self) -> str:
        return "person" if self.person else "program"


@dataclass(slots=True)
class Pacing:
    """One identity's pacing."""

    in_flight: int = 0
    last_end: float | None = None
    last_seen: float = 0.0
    short: int = 0
    """The last ``WINDOW`` gaps as bits, newest lowest: 1 for a short one."""
    gaps: int = 0
    """Gaps seen, up to ``WINDOW``."""
    person: bool = True
    """How its latest request was judged."""
    why: Why = Why.FIRST

    @property
    def short_gaps(self) -> int:
        return self.short.bit_count()

    def paces_like_program(self) -> bool:
        return self.short_gaps >= PROGRAM_AT


class PeopleJudge:
    """Judges each request's identity person or program (module docstring).

    Time is passed in (sans-I/O, docs/design.md §1.1)."""

    __slots__ = ("_clients", "_table", "forget_after", "reading_gap", "remembered")

    def __init__(
        self,
        reading_gap: float = READING_GAP,
        remembered: int = REMEMBERED,
        forget_after: float = FORGET_AFTER,
    ) -> None:
        if reading_gap < 0:
            raise ValueError(f"reading_gap: must be >= 0 seconds, got {reading_gap!r}")
        self.reading_gap = reading_gap
        self.remembered = remembered
        self.forget_after = forget_after
        self._table: OrderedDict[str, Pacing] = OrderedDict()
        self._clients: OrderedDict[str, tuple[int, float]] = OrderedDict()
        """Per client, its last ``CLIENT_WINDOW`` requests as bits, newest
        lowest (1 for a new name's first request, module docstring), and
        when it was last seen. Bounded, and forgotten, as identities are."""

    def arrived(
        self,
        identity: str,
        now: float,
        *,
        tool_result: bool = False,
        client: str | None = None,
    ) -> Verdict:
        """A request of ``identity`` arrives at ``now``: a person's or a
        program's. ``tool_result``: it carries a tool's result as its last
        message (the program goes on after its tool call; a short gap
        whatever its length). ``client``: the identity without its name
        and session, whose new names are counted (module docstring). Call
        ``ended`` when its answer ends."""
        pacing = self._pacing(identity, now)
        first = pacing.in_flight == 0 and pacing.last_end is None
        invents_names = client is not None and self._new_name(client, first, now)
        if pacing.in_flight > 0:
            verdict = self._gap(pacing, short=True, why=Why.ALONGSIDE)
        elif tool_result:
            verdict = self._gap(pacing, short=True, why=Why.TOOL_RESULT)
        elif pacing.last_end is None:  # its first request
            verdict = Verdict(not invents_names, Why.NEW_NAMES if invents_names else Why.FIRST)
        elif now - pacing.last_end < self.reading_gap:
            verdict = self._gap(pacing, short=True, why=Why.BACK_TO_BACK)
        else:
            verdict = self._gap(pacing, short=False, why=Why.READS)
        pacing.in_flight += 1
        pacing.last_seen = now
        pacing.person, pacing.why = verdict.person, verdict.why
        return verdict

    def ended(self, identity: str, now: float) -> None:
        """A request of ``identity`` ended (answered, failed or cancelled)."""
        pacing = self._table.get(identity)
        if pacing is None:
            return  # forgotten meanwhile
        pacing.in_flight = max(0, pacing.in_flight - 1)
        pacing.last_end = now
        pacing.last_seen = now

    def _new_name(self, client: str, first: bool, now: float) -> bool:
        """Count a request of ``client``, ``first`` if a new name's first:
        whether the client sent mostly first requests before this one."""
        mask, seen = self._clients.pop(client, (0, now))
        if now - seen >= self.forget_after:
            mask = 0  # away long enough: its record starts afresh
        self._clients[client] = (((mask << 1) | int(first)) & ((1 << CLIENT_WINDOW) - 1), now)
        while len(self._clients) > self.remembered:
            self._clients.popitem(last=False)
        return mask.bit_count() >= NEW_NAMES_AT

    @staticmethod
    def _gap(pacing: Pacing, *, short: bool, why: Why) -> Verdict:
        mask = (1 << WINDOW) - 1
        pacing.short = ((pacing.short << 1) | int(short)) & mask
        pacing.gaps = min(WINDOW, pacing.gaps + 1)
        if short:
            return Verdict(False, why)
        if pacing.paces_like_program():
            return Verdict(False, Why.PACES_LIKE_PROGRAM)
        return Verdict(True, why)

    def _pacing(self, identity: str, now: float) -> Pacing:
        pacing = self._table.get(identity)
        if (
            pacing is not None
            and pacing.in_flight == 0
            and (now - pacing.last_seen >= self.forget_after)
        ):
            pacing = None  # away long enough: a newcomer
        if pacing is None:
            pacing = self._table[identity] = Pacing(last_seen=now)
            while len(self._table) > self.remembered:
                oldest, old = next(iter(self._table.items()))
                if old.in_flight:
                    break  # never forget one with work in flight (its end is due)
                del self._table[oldest]
        self._table.move_to_end(identity)
        return pacing

    def identities(self) -> list[tuple[str, Pacing]]:
        """Every remembered identity, most recently seen first (the dashboard)."""
        return list(reversed(self._table.items()))

    def __len__(self) -> int:
        return len(self._table)
