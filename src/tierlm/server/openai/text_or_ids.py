"""OpenAI's one-or-many field of texts or token ids: completions' ``prompt``,
embeddings' ``input``. A string; an array of strings; one text's token ids
(an array of integers); or an array of such arrays."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from tierlm.server.settings.schema import FieldError

__all__ = ["TokenIds", "many"]

TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def many(limit: int, noun: str, verb: str, hint: str = "") -> Callable[[Any], Any]:
    """A ``BeforeValidator``: an array holds at most ``limit`` ``noun``s, is
    not empty (there is nothing to ``verb``), and one text's token ids become
    a list of one; the rest is the schema's to check."""

    def check(value: Any) -> Any:
        if not isinstance(value, list):
            return value
        if not value:
            raise FieldError(f"must not be an empty array: there is nothing to {verb}")
        if len(value) > limit:
            raise FieldError(f"at most {limit} {noun} per request, got {len(value)}{hint}")
        if all(_is_id(v) for v in value):
            return [value]
        return value

    return check
