"""``[classes.NAME]`` and ``[[keys]]``: which task classes exist, and which key
may claim which (docs/design.md §1.1, §3). The tables as written, and how they
resolve into the ``TaskClass`` and ``ApiKey`` objects the gateway runs with."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from tierlm.core.classes import DEFAULT_BUDGET_WINDOW, Budget, TaskClass, default_classes
from tierlm.server.settings.people import PersonMode
from tierlm.server.settings.schema import Expect, FieldError, Schema

__all__ = [
    "ApiKey",
    "BudgetSettings",
    "ClassSettings",
    "KeySettings",
    "resolve_classes",
    "resolve_keys",
]


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One configured key (``[[keys]]`` in the config file)."""

    key: str
    name: str
    classes: frozenset[str]
    """Classes its requests may claim with ``X-Tierlm-Class``."""
    default_class: str
    """The class of its requests that claim none."""
    admin: bool = False
    """May use the scheduler API, the dashboard and /metrics."""
    producer: str | None = None
    """Producer of its requests without ``X-Tierlm-Producer``, under the key's
    name; None: the key's name itself."""
    queue_limit: int | None = None
    """Its jobs queued at most, over all classes; None: ``limits.key_queue_limit``."""
    allow_deadline: bool | None = None
    """May send ``X-Tierlm-Deadline``; None: admin keys may, others not."""
    names_persons: bool = False
    """Its producer names are persons, who share the key's chat turns
    (docs/design.md §4.2); False: all its chats are one person's."""
    person: PersonMode = "auto"
    """Its requests that name no class, when its default class is a
    person's: judged by pacing, or pinned (docs/design.md §4.11)."""


NonEmpty = Annotated[str, Field(min_length=1)]


class BudgetSettings(Schema):
    """A cap on a class's share of busy device time over a rolling window."""

    share: Annotated[float, Field(gt=0, le=1), Expect("a fraction in (0, 1]")]
    """The largest share of busy device time."""
    window: Annotated[float, Field(gt=0)] = DEFAULT_BUDGET_WINDOW
    """The rolling window, in seconds (the seed's 5 minutes)."""


def _budget_or_off(value: Any) -> str:
    return "off" if value is False else "budget"


Budgets = Annotated[
    Annotated[BudgetSettings, Tag("budget")] | Annotated[Literal[False], Tag("off")],
    Discriminator(_budget_or_off),
    Expect("false or a table {share, window}"),
]


class ClassSettings(Schema):
    """``[classes.NAME]``: changes a default class, or defines a new one. Unset
    fields keep the default class's values."""

    tier: Annotated[int | None, Field(ge=0, le=4)] = None
    """The base tier, 0-4 (a new class needs one); tier 4 is the fair pool."""
    fair: bool | None = None
    """In the fair pool (unset: true for tier 4, as it must be)."""
    requeue: bool | None = None
    """A preempted job goes back to the queue (unset: all but tier 0)."""
    budget: Budgets | None = None
    """``{share, window}``: a cap on its share of busy time; ``false``: none."""
    queue_limit: Annotated[int | None, Field(ge=1)] = None
    """Queued jobs of this class beyond which requests get 429 (unset: ``limits.queue_limit``)."""

    def task_class(self, name: str, base: TaskClass | None) -> TaskClass:
        tier = self.tier if self.tier is not None else base.tier if base else 4
        fair = self.fair if self.fair is not None else base.fair if base else tier == 4
        requeue = self.requeue if self.requeue is not None else base.requeue if base else tier != 0
        budget = base.budget if base else None
        if self.budget is False:
            budget = None
        elif self.budget is not None:
            budget = Budget(self.budget.share, self.budget.window)
        return TaskClass(name, tier, fair=fair, requeue=requeue, budget=budget)


def resolve_classes(
    tables: Mapping[str, ClassSettings], defaults: bool
) -> tuple[dict[str, TaskClass], dict[str, int]]:
    """The classes in effect (``defaults``: the default ones, changed and
    extended by the tables) and the per-class queue limits set."""
    classes = default_classes() if defaults else {}
    queue_limits: dict[str, int] = {}
    for name, table in tables.items():
        base = classes.get(name)
        if base is None and table.tier is None:
            known = ", ".join(sorted(classes)) or "none"
            raise FieldError(
                f"a new class needs a tier (0-4); known classes: {known}", "classes", name, "tier"
            )
        try:
            classes[name] = table.task_class(name, base)
        except ValueError as exc:
            raise FieldError(str(exc), "classes", name) from None
        if table.queue_limit is not None:
            queue_limits[name] = table.queue_limit
    if not classes:
        raise FieldError(
            "is false and no [classes.NAME] is defined: no class to run",
            "scheduler",
            "default_classes",
        )
    return classes, queue_limits


class KeySettings(Schema):
    """``[[keys]]``: one API key, the classes its requests may claim, and whether
    it may steer the scheduler."""

    key: NonEmpty | None = None
    """The key itself (or ``key_env``)."""
    key_env: NonEmpty | None = None
    """The environment variable holding the key (the file then holds no secret)."""
    name: NonEmpty | None = None
    """A name for logs and errors (unset: ``key<i>``); the default producer."""
    classes: Annotated[tuple[NonEmpty, ...] | None, Field(strict=False)] = None
    """The classes its requests may claim with ``X-Tierlm-Class`` (unset: all)."""
    default_class: NonEmpty | None = None
    """The class of its requests that claim none (unset: the first of ``classes``)."""
    admin: bool = False
    """May use the scheduler API, the dashboard and /metrics."""
    producer: NonEmpty | None = None
    """The producer of its requests without ``X-Tierlm-Producer``, under the
    key's name (unset: ``name`` itself). Every producer of a key is
    ``<name>/...``: its ids share the key's part of the fair pool."""
    queue_limit: Annotated[int | None, Field(ge=1)] = None
    """Its jobs queued at most, over all classes; more get 429 (unset:
    ``limits.key_queue_limit``)."""
    allow_deadline: bool | None = None
    """May send ``X-Tierlm-Deadline`` (unset: admin keys may, others get 403):
    an overdue job is promoted, so a deadline is the operator's to grant."""
    names_persons: bool = False
    """Its chats' producer names (``X-Tierlm-Producer``, ``user``) are persons
    (a chat front end serving many people): they take turns among
    themselves, all of them within the key's own turn. Unset: every chat of
    the key is one person's, whatever producer ids it sends, so a client
    inventing ids takes no more turns than one person (docs/design.md §4.2)."""
    person: Annotated[bool | Literal["auto"], Expect('true, false or "auto"')] = "auto"
    """Whether its requests that name no class are a person's (when its default
    class is a person's): ``"auto"`` judges each identity behind the key by
    its pacing (a person reads between answers, a program does not,
    docs/design.md §4.11); ``true`` always a person's (an editor's
    autocomplete, a voice assistant: a person waits, though the pacing is a
    program's); ``false`` always a program's (a pipeline), served in the fair
    pool under the key's name."""

    @model_validator(mode="after")
    def _one_secret(self) -> KeySettings:
        if (self.key is None) == (self.key_env is None):
            raise FieldError("give exactly one of key or key_env", "key")
        if self.key_env is not None and not os.environ.get(self.key_env):
            raise FieldError(f"environment variable {self.key_env} is not set", "key_env")
        return self

    def secret(self) -> str:
        secret = self.key if self.key is not None else os.environ.get(self.key_env or "")
        assert secret, "checked by the validator"
        return secret


def _mode(person: bool | Literal["auto"]) -> PersonMode:
    if person == "auto":
        return "auto"
    return "person" if person else "program"


def _sendable(key: str) -> bool:
    return bool(key) and all("!" <= c <= "~" for c in key)


def resolve_keys(
    tables: Sequence[KeySettings], classes: Mapping[str, TaskClass]
) -> tuple[ApiKey, ...]:
    """The keys in effect; every class a key names must exist."""
    keys: list[ApiKey] = []
    seen: set[str] = set()
    names: set[str] = set()
    for i, table in enumerate(tables):
        secret = table.secret()
        if not _sendable(secret):
            # Sent as "Authorization: Bearer KEY": HTTP strips the value's
            # surrounding blanks, so a key with spaces or controls can never match.
            where = "key_env" if table.key_env else "key"
            raise FieldError(
                "must be printable ASCII without spaces (it is sent in the Authorization header)",
                "keys",
                i,
                where,
            )
        if secret in seen:
            raise FieldError("the same key is configured twice", "keys", i, "key")
        seen.add(secret)
        key_name = table.name or f"key{i}"
        # The name heads the key's producer paths: one name, one part of the pool.
        if "/" in key_name:
            raise FieldError(f"must not contain '/', got {key_name!r}", "keys", i, "name")
        if key_name in names:
            raise FieldError(f"{key_name!r} names another key too", "keys", i, "name")
        names.add(key_name)
        allowed = list(table.classes) if table.classes is not None else sorted(classes)
        for name in allowed:
            if name not in classes:
                raise FieldError(
                    f"unknown class {name!r} (classes: {', '.join(sorted(classes))})",
                    "keys",
                    i,
                    "classes",
                )
        if not allowed:
            raise FieldError("must allow at least one class", "keys", i, "classes")
        default = table.default_class or allowed[0]
        if default not in allowed:
            raise FieldError(
                f"{default!r} is not in this key's classes ({', '.join(allowed)})",
                "keys",
                i,
                "default_class",
            )
        keys.append(
            ApiKey(
                key=secret,
                name=key_name,
                classes=frozenset(allowed),
                default_class=default,
                admin=table.admin,
                producer=table.producer,
                queue_limit=table.queue_limit,
                allow_deadline=table.allow_deadline,
                names_persons=table.names_persons,
                person=_mode(table.person),
            )
        )
    return tuple(keys)
