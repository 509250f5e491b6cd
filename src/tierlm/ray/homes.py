"""Where each person's last turn ran: their *home* replica, which holds their KV.

The ingress remembers it per person (docs/design.md §4.11: a request served
as a person's; who they are is the request's identity: key, client, named
user and session, ``people.identity_of``) and sends it with the next turn,
for the router to place it there while that is worth it
(``tierlm.ray.affinity``). Bounded: the least recently used person is
forgotten past ``limit``, and a home not used for ``forget_after_s`` (its KV
long evicted by then) too. Pure: the clock is an argument.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["FORGET_AFTER_S", "HOMES_LIMIT", "Homes"]

HOMES_LIMIT = 10_000
FORGET_AFTER_S = 3600.0


class Homes:
    """Person -> home replica (module docstring)."""

    def __init__(self, limit: int = HOMES_LIMIT, forget_after_s: float = FORGET_AFTER_S) -> None:
        self.limit = limit
        self.forget_after_s = forget_after_s
        self._homes: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._homes)

    def of(self, person: str | None, now: float) -> str | None:
        """``person``'s home, if they have one still."""
        if person is None:
            return None
        found = self._homes.get(person)
        if found is None:
            return None
        replica, at = found
        if now - at > self.forget_after_s:
            del self._homes[person]
            return None
        return replica

    def set(self, person: str | None, replica: str | None, now: float) -> None:
        """``person``'s turn ran on ``replica``: their home from now on."""
        if person is None or replica is None:
            return
        self._homes[person] = (replica, now)
        self._homes.move_to_end(person)
        while len(self._homes) > self.limit:
            self._homes.popitem(last=False)
