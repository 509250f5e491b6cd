"""The Responses API's stored conversations: each owned by its API key, each
key with its own share of the bytes (docs/design.md §9).

A stored response is found only by the key that made it (``get`` with
another owner finds nothing: ``GET /v1/responses/{id}`` is a 404 and
``previous_response_id`` the same 400 as an id never stored), so no key reads
or continues another key's conversation (OWASP API1, broken object-level
authorization: any key could).

``limit`` bytes of JSON are shared fairly: past it, the owner holding the
most bytes forgets its oldest response first. A key that holds no more than
its share (``limit`` divided by the owners storing) therefore never loses a
response to another key's: one key storing 30 x 20 kB pushed out every other
key's conversations when the store was one pool, oldest first. Without keys
there is one owner, and this is the old oldest-first store.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

__all__ = ["ResponseStore", "Stored"]

Stored = tuple[dict[str, Any], list[dict[str, Any]]]
"""A response, and the conversation it ends (its messages, its answer last)."""


class ResponseStore:
    """Stored responses by owner (module docstring)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self._owned: dict[str, OrderedDict[str, tuple[Stored, int]]] = {}
        self._sizes: dict[str, int] = {}

    def put(self, owner: str, response: dict[str, Any], messages: list[dict[str, Any]]) -> None:
        size = len(json.dumps(response)) + len(json.dumps(messages))
        if size > self.limit:
            return
        self._owned.setdefault(owner, OrderedDict())[response["id"]] = ((response, messages), size)
        self._sizes[owner] = self._sizes.get(owner, 0) + size
        self.size += size
        while self.size > self.limit:
            self._forget_one()

    def _forget_one(self) -> None:
        """The oldest response of the owner holding the most bytes."""
        owner = max(self._sizes, key=self._sizes.__getitem__)
        items = self._owned[owner]
        _, (_, size) = items.popitem(last=False)
        self._sizes[owner] -= size
        self.size -= size
        if not items:
            del self._owned[owner], self._sizes[owner]

    def get(self, owner: str, response_id: str) -> Stored | None:
        items = self._owned.get(owner)
        item = None if items is None else items.get(response_id)
        return None if item is None else item[0]

    def held(self, owner: str) -> int:
        """The bytes ``owner``'s responses take."""
        return self._sizes.get(owner, 0)

    def __len__(self) -> int:
        return sum(len(items) for items in self._owned.values())
