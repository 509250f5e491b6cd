"""Who is a person, at the gateway (docs/design.md §4.11): a request's
identity, the judge's verdict on it, and the request as served.

A request is judged only when it names no class (``X-Tierlm-Class``: naming
one is how an app says what it is) and its key's default class is a person's
(tier 0); the key's ``person`` setting (keyless: ``[people] keyless``) may
pin it. A request judged a program's is served in the fair pool
(``[people] program_class``) as a producer of its own under its key, so
programs share the pool with each other and with the producers that say so
by header, and never take the chat guard (§4.7).

An identity is the key, the client (its User-Agent's product), and the most
precise name the request gives of who is at the other end: the OpenAI
``user`` field or ``X-Tierlm-Producer``, and a session (``X-Tierlm-Session``,
or Open WebUI's forwarded user and chat ids).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from starlette.datastructures import Headers

from tierlm.core.classes import TaskClass, Tier
from tierlm.core.people import PeopleJudge, Verdict, Why
from tierlm.server.gateway.auth import Principal
from tierlm.server.gateway.metadata import CLASS_HEADER, PRODUCER_HEADER, JobMeta
from tierlm.server.settings.people import PeopleSettings

__all__ = ["SESSION_HEADERS", "People", "identity_of"]

SESSION_HEADERS = ("X-Tierlm-Session", "X-OpenWebUI-User-Id", "X-OpenWebUI-Chat-Id")
"""Headers naming who, or which conversation, a request is for: ours, and
what Open WebUI forwards (``ENABLE_FORWARD_USER_INFO_HEADERS``), so the
people behind one front-end are told apart."""

# Identities and producer names end up in metric labels and the dashboard:
# a client's own text is cut to this, the rest hashed.
_SHOWN = 48


def identity_of(principal: Principal, headers: Headers, user: str | None) -> str:
    """Who is at the other end of a request, as precisely as it says
    (module docstring)."""
    agent = headers.get("user-agent", "").split("/", 1)[0].strip()[:_SHOWN] or "-"
    named = headers.get(PRODUCER_HEADER) or user or ""
    session = "|".join(headers.get(h, "") for h in SESSION_HEADERS)
    return f"{principal.name or '-'}|{agent}|{named}|{session}"


def _producer_name(identity: str) -> str:
    """A program's own producer id within its key: the client and a short hash."""
    agent = identity.split("|", 2)[1]
    digest = hashlib.blake2s(identity.encode(), digest_size=4).hexdigest()
    return f"program:{agent}:{digest}"


@dataclass(frozen=True, slots=True)
class Served:
    """How a request is served: as asked, or judged."""

    meta: JobMeta
    identity: str | None
    """Its identity when it was judged (the judge must hear of its end)."""


class People:
    """The gateway's judge of persons (module docstring)."""

    def __init__(
        self,
        settings: PeopleSettings,
        program_class: str | None,
        classes: Mapping[str, TaskClass],
    ) -> None:
        self.judge = PeopleJudge(settings.reading_gap)
        self.program_class = program_class
        self._fair = sorted(c.name for c in classes.values() if c.fair)
        self.unproven: dict[str, list[Any]] = {}
        """Per identity, the jobs (``GatewayJob``) of its first request while
        it is in flight: served as a person's for want of evidence, and as a
        program's from the moment a request alongside shows it one
        (``intake.admit_prompts``). Bounded by the requests in flight."""

    def serve(
        self,
        meta: JobMeta,
        principal: Principal,
        headers: Headers,
        user: str | None,
        tier: int,
        now: float,
        *,
        tool_result: bool = False,
    ) -> Served:
        """``meta`` (of a class of ``tier``) as the request is served: a
        person's, or a program's in the fair pool; with the verdict and why
        (``JobMeta.served_as``)."""
        if tier != Tier.T0:
            return Served(replace(meta, served_as="background", why="class"), None)
        if headers.get(CLASS_HEADER) is not None:
            return Served(_as(meta, Verdict(True, Why.CLASS_NAMED)), None)
        mode = principal.person_mode
        if mode == "person":
            return Served(_as(meta, Verdict(True, Why.PINNED_PERSON)), None)
        identity = identity_of(principal, headers, user)
        if mode == "program":
            verdict = Verdict(False, Why.PINNED_PROGRAM)
            judged = None
        else:
            client = "|".join(identity.split("|", 2)[:2])  # the key and the User-Agent
            verdict = self.judge.arrived(identity, now, tool_result=tool_result, client=client)
            judged = identity
        if verdict.person:
            return Served(_as(meta, verdict), judged)
        pool = self._pool_class(principal)
        if pool is None:  # the key may use no fair class: a person's after all
            return Served(_as(meta, Verdict(True, verdict.why)), judged)
        named = headers.get(PRODUCER_HEADER) or user
        producer = principal.producer_path(named if named else _producer_name(identity))
        if principal.name is None and named:
            producer = f"program:{named}"[:200]
        program = replace(meta, class_name=pool, producer=producer, person=())
        return Served(_as(program, verdict), judged)

    def ended(self, identity: str, now: float) -> None:
        self.judge.ended(identity, now)

    def _pool_class(self, principal: Principal) -> str | None:
        if self.program_class is not None and self.program_class in principal.classes:
            return self.program_class
        return next((name for name in self._fair if name in principal.classes), None)

    def state(self, now: float, limit: int = 50) -> dict[str, Any]:
        """The identities seen, most recent first, as the state API shows them."""
        shown = []
        for identity, pacing in self.judge.identities()[:limit]:
            key, agent, named, session = identity.split("|", 3)
            shown.append(
                {
                    "key": None if key == "-" else key,
                    "client": agent,
                    "name": named[:_SHOWN] or None,
                    "session": bool(session.strip("|")),
                    "served_as": "person" if pacing.person else "program",
                    "why": pacing.why.value,
                    "in_flight": pacing.in_flight,
                    "short_gaps": pacing.short_gaps,
                    "gaps": pacing.gaps,
                    "idle_s": None if pacing.in_flight else round(now - pacing.last_seen, 1),
                }
            )
        return {
            "identities": shown,
            "remembered": len(self.judge),
            "reading_gap": self.judge.reading_gap,
            "program_class": self.program_class,
        }


def _as(meta: JobMeta, verdict: Verdict) -> JobMeta:
    return replace(meta, served_as=verdict.served_as, why=verdict.why.value)
