"""API keys: who may use which task classes, and who may steer the scheduler.

The operator decides who may be ``chat``: each key lists the classes
its requests may claim, the class they get when they claim none, and whether it
is an admin key (the scheduler API, the dashboard, ``/metrics``). Without keys
the gateway binds loopback only (``config``), and every request may do anything.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from starlette.requests import HTTPConnection

from tierlm.server.edge.errors import APIError
from tierlm.server.settings.access import ApiKey
from tierlm.server.settings.people import PersonMode

__all__ = ["DASHBOARD_COOKIE", "KeyRing", "Principal"]

# The dashboard's EventSource cannot send an Authorization header; after
# /dashboard?key=... the key travels in this cookie (HttpOnly, same site).
DASHBOARD_COOKIE = "tierlm_key"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who sent a request, as far as scheduling is concerned."""

    name: str | None
    """The key's name; None without keys."""
    classes: frozenset[str]
    default_class: str
    admin: bool
    producer: str | None
    """Default producer; None: the scheduler's default (the class name)."""
    allow_deadline: bool = True
    """May send ``X-Tierlm-Deadline`` (a deadline is a loan of device time,
    docs/design.md §4.5: the operator decides who may ask for one)."""
    queue_limit: int | None = None
    """Its jobs queued at most, over all classes (None: no cap of its own)."""
    names_persons: bool = False
    """Its producer names are persons, within the key's turn (``[[keys]] names_persons``)."""
    person_mode: PersonMode = "auto"
    """Its requests that name no class: judged by pacing, or pinned
    (``[[keys]] person``, ``[people] keyless``; docs/design.md §4.11)."""

    def person(self, name: str | None) -> tuple[str, ...]:
        """Whose turns a chat of this request takes (docs/design.md §4.2): with a key, the key's,
        so that inventing producer
        ids (``name``) gains no turn; a key allowed to name persons gives
        each name its own turn within the key's. Without keys, () : the
        producer, as sent (each keyless client is a person)."""
        if self.name is None:
            return ()
        if self.names_persons and name is not None:
            return (self.name, name)
        return (self.name,)

    def producer_path(self, header: str | None) -> str | None:
        """The fair-pool producer of a request: with a key, under the key's name
        (``<key name>/<producer>``), so that however many ids a client uses they
        share its part of the pool (docs/design.md §4.4: paths split at
        "/"); without keys, the header as sent."""
        if self.name is None:
            return header if header is not None else self.producer
        if header is not None:
            return f"{self.name}/{header}"
        return self.producer or self.name

    def check_class(self, class_name: str) -> None:
        if class_name not in self.classes:
            allowed = ", ".join(sorted(self.classes))
            raise APIError(
                403,
                f"X-Tierlm-Class: class {class_name!r} is not allowed for API key "
                f"{self.name!r} (allowed: {allowed})",
                param="X-Tierlm-Class",
                code="class_not_allowed",
                reason="class_not_allowed",
            )


class KeyRing:
    """The configured keys; authenticates requests."""

    def __init__(
        self,
        keys: Iterable[ApiKey],
        classes: Iterable[str],
        default_class: str,
        key_queue_limit: int | None = None,
        keyless: PersonMode = "auto",
    ) -> None:
        self._keys: Mapping[str, ApiKey] = {k.key: k for k in keys}
        self._anonymous = Principal(
            None, frozenset(classes), default_class, True, None, person_mode=keyless
        )
        self._key_queue_limit = key_queue_limit

    @property
    def configured(self) -> bool:
        return bool(self._keys)

    def queue_limit_of(self, name: str | None) -> int | None:
        """The jobs the key named ``name`` may have queued, over all classes
        (None: no cap of its own, or no such key): work queued on its behalf
        later (a batch's lines) counts against the same limit."""
        for entry in self._keys.values():
            if entry.name == name:
                return entry.queue_limit if entry.queue_limit is not None else self._key_queue_limit
        return None

    def lookup(self, token: str) -> ApiKey | None:
        # Compare against every key in constant time: no timing oracle on a key's prefix.
        found = None
        for key, entry in self._keys.items():
            if hmac.compare_digest(key.encode(), token.encode()):
                found = entry
        return found

    def authenticate(self, conn: HTTPConnection, *, admin: bool = False) -> Principal:
        """The principal of a request; 401 without a valid key, 403 if ``admin``
        is needed and the key is not an admin key."""
        if not self._keys:
            return self._anonymous
        token = _bearer(conn)
        if token is None and conn.url.path.startswith("/dashboard"):
            token = conn.cookies.get(DASHBOARD_COOKIE)
        if token is None:
            raise APIError(
                401,
                "Authorization: missing API key; send 'Authorization: Bearer <key>' "
                "(the OpenAI client's api_key)",
                param="Authorization",
                code="missing_api_key",
                reason="unauthorized",
            )
        entry = self.lookup(token)
        if entry is None:
            raise APIError(
                401,
                "Authorization: invalid API key",
                param="Authorization",
                code="invalid_api_key",
                reason="unauthorized",
            )
        if admin and not entry.admin:
            raise APIError(
                403,
                f"API key {entry.name!r} is not an admin key; this endpoint needs one",
                param="Authorization",
                code="admin_required",
                reason="admin_required",
            )
        return Principal(
            entry.name,
            entry.classes,
            entry.default_class,
            entry.admin,
            f"{entry.name}/{entry.producer}" if entry.producer else entry.name,
            entry.admin if entry.allow_deadline is None else entry.allow_deadline,
            entry.queue_limit if entry.queue_limit is not None else self._key_queue_limit,
            entry.names_persons,
            entry.person,
        )


def _bearer(conn: HTTPConnection) -> str | None:
    header = conn.headers.get("authorization")
    if header is not None:
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
        return header.strip() or None
    # Azure-style clients send the key in an api-key header.
    return conn.headers.get("api-key") or None
