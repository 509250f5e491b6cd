"""``[people]``: how the gateway tells a person from a program
(docs/design.md §4.11; the rule itself is ``core/people``).

A request that names no class, from a key (or a keyless gateway) whose
default class is a person's, is judged by its identity's pacing: a person
reads between an answer and the next message, a program does not. A key can
pin it either way (``[[keys]] person``); keyless requests follow ``keyless``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import Field

from tierlm.core.classes import TaskClass
from tierlm.core.people import READING_GAP
from tierlm.server.settings.schema import Flag, Schema

__all__ = ["PROGRAM_CLASS", "PeopleSettings", "PersonMode", "program_class_of"]

PersonMode = Literal["auto", "person", "program"]
"""How a key's requests that name no class are served: judged by pacing,
always a person's (the chat guard), always a program's (the fair pool)."""

PROGRAM_CLASS = "gana"
"""The default class of a program's requests: the seed's agents' class, in
the fair pool (docs/design.md §3)."""


class PeopleSettings(Schema):
    """``[people]``: who is a person (docs/design.md §4.11)."""

    keyless: Annotated[PersonMode, Flag("--keyless-person", "MODE")] = "auto"
    """Keyless requests that name no class: ``auto`` judges each client by its
    pacing; ``person`` serves every one as a person (the rule before pacing was judged);
    ``program`` as background."""
    reading_gap: Annotated[float, Field(ge=0)] = READING_GAP
    """Seconds after an answer ends under which the next request of the same
    identity is no person's (a person reads, then types: "ok" and Enter take
    1.95 s at the fastest by the keystroke-level model)."""
    program_class: Annotated[str | None, Field(min_length=1)] = None
    """The fair-pool class a program's requests are served in (unset: ``gana``
    if it is a fair class here, else the first fair class). A key that may
    use none of it is served in the first fair class it may use; one that may
    use no fair class at all stays a person's."""


def program_class_of(settings: PeopleSettings, classes: Mapping[str, TaskClass]) -> str | None:
    """The class programs are served in (``program_class``), None if there is
    no fair class; ``ValueError`` naming the field for a class that is not one."""
    fair = [c.name for c in sorted(classes.values(), key=lambda c: c.name) if c.fair]
    if settings.program_class is not None:
        if settings.program_class not in fair:
            raise ValueError(
                f"people.program_class: {settings.program_class!r} is not a fair-pool class "
                f"(fair classes: {', '.join(fair) or 'none'})"
            )
        return settings.program_class
    if PROGRAM_CLASS in fair:
        return PROGRAM_CLASS
    return fair[0] if fair else None
