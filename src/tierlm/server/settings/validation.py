"""Pydantic's validation errors told as the gateway tells every error: the field
as a reader writes it, what it must be (its bounds, its accepted values), and
what it got. One path for the settings (TOML's words: "a table", "the string
'80'") and for the requests (JSON's: "an object", "a string").
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from tierlm.server.settings.schema import (
    Expect,
    FieldError,
    Loc,
    Required,
    Site,
    is_member_root,
    literal_values,
    locate,
    members,
)

__all__ = [
    "JSON_WORDS",
    "TOML_WORDS",
    "Problem",
    "Wording",
    "dotted",
    "explain",
    "first_problem",
    "json_type",
]


def dotted(path: Sequence[str | int]) -> str:
    """``("keys", 0, "key")`` -> ``keys[0].key``."""
    out = ""
    for item in path:
        out += f"[{item}]" if isinstance(item, int) else (f".{item}" if out else str(item))
    return out


@dataclass(frozen=True, slots=True)
class Problem:
    """One invalid field."""

    path: Loc
    message: str
    code: str | None = None
    reason: str | None = None

    @property
    def where(self) -> str:
        return dotted(self.path)


@dataclass(frozen=True, slots=True)
class Wording:
    """How a kind of document names values and types."""

    describe: Callable[[Any], str]
    """An input value, for "got ...": ``the string '80'`` or ``a string``."""
    kinds: Mapping[str, str]
    """What a value must be, by kind: ``int`` -> ``an integer``."""
    field_list: str
    """How the known fields are introduced after an unknown one."""


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list | tuple):
        return "a list"
    return f"{type(value).__name__} {value!r}"


def json_type(value: Any) -> str:
    """A JSON value's type as JSON names it ("got a string")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


_KINDS = {"int": "an integer", "float": "a number", "str": "a string", "path": "a path (a string)"}
TOML_WORDS = Wording(
    _toml_value,
    {**_KINDS, "bool": "true or false", "dict": "a table", "list": "a list"},
    "known here",
)
JSON_WORDS = Wording(
    json_type,
    {**_KINDS, "bool": "a boolean", "dict": "an object", "list": "an array"},
    "fields",
)

# pydantic's error types of a value of the wrong type -> the kind expected.
_TYPE_ERRORS = {
    "int_type": "int",
    "int_parsing": "int",
    "int_from_float": "int",
    "float_type": "float",
    "float_parsing": "float",
    "bool_type": "bool",
    "bool_parsing": "bool",
    "string_type": "str",
    "dict_type": "dict",
    "mapping_type": "dict",
    "model_type": "dict",
    "model_attributes_type": "dict",
    "list_type": "list",
    "tuple_type": "list",
    "path_type": "path",
}
_BOUND_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def bounds(metadata: Sequence[Any]) -> str | None:
    """``between 0 and 65535``, ``>= 1``, ``in (0, 1]``... from a field's constraints."""
    lo: Any = None
    hi: Any = None
    lo_open = hi_open = False
    for m in metadata:
        if isinstance(m, annotated_types.Ge):
            lo, lo_open = m.ge, False
        elif isinstance(m, annotated_types.Gt):
            lo, lo_open = m.gt, True
        elif isinstance(m, annotated_types.Le):
            hi, hi_open = m.le, False
        elif isinstance(m, annotated_types.Lt):
            hi, hi_open = m.lt, True
    if lo is not None and hi is not None:
        if not lo_open and not hi_open:
            return f"between {_number(lo)} and {_number(hi)}"
        return f"in {'(' if lo_open else '['}{_number(lo)}, {_number(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {_number(lo)}"
    if hi is not None:
        return f"{'<' if hi_open else '<='} {_number(hi)}"
    return None


def _unknown(name: str | int, parent: Site, words: Wording) -> str:
    model = parent.type if isinstance(parent.type, type) else None
    fields = model.model_fields if model is not None and issubclass(model, BaseModel) else {}
    known = [field.alias or key for key, field in fields.items()]
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown field{hint} ({words.field_list}: {', '.join(known)})"


def explain(error: ErrorDetails, root: type[BaseModel], words: Wording) -> Problem:
    """One pydantic error about a ``root`` document, told as a reader understands it."""
    error_type = error["type"]
    loc = tuple(error["loc"])
    value = error.get("input")
    ctx = error.get("ctx") or {}
    site = locate(root, loc)
    path = site.path
    expect = site.marker(Expect)
    cause = ctx.get("error")
    if isinstance(cause, FieldError):
        return Problem(
            locate(root, (*loc, *cause.path)).path, cause.message, cause.code, cause.reason
        )
    if error_type in ("value_error", "assertion_error"):
        message = str(cause) if cause is not None else error["msg"]
    elif error_type == "extra_forbidden":
        message = _unknown(loc[-1], locate(root, loc[:-1]), words)
    elif error_type == "missing":
        required = site.marker(Required)
        if required is not None:
            message = required.text
        else:
            message = f"must be {expect.text}, got nothing" if expect else "required"
    elif error_type in ("union_tag_invalid", "union_tag_not_found"):
        tags = ", ".join(str(tag) for tag, _ in members(site))
        if site.discriminator is not None:
            path = (*path, site.discriminator)
        got = f"; got {ctx['tag']!r}" if "tag" in ctx else ""
        message = f"must be one of {tags}{got}"
    elif error_type == "literal_error":
        values = ", ".join(str(v) for v in literal_values(site.type)) or ctx.get("expected", "")
        got = repr(value) if isinstance(value, str) else words.describe(value)
        message = f"must be one of {values}; got {got}"
    elif error_type in _BOUND_ERRORS:
        limit = expect.text if expect else bounds(site.metadata)
        message = f"must be {limit}, got {_number(value)}"
    elif error_type == "string_too_short":
        message = f"must be {expect.text if expect else 'a non-empty string'}, got {value!r}"
    elif error_type == "too_short" and expect is not None:
        message = f"must be {expect.text}, got {words.describe(value)}"
    elif error_type == "too_long":
        message = f"at most {ctx.get('max_length')} items, got {ctx.get('actual_length')}"
    elif error_type == "finite_number":
        message = f"must be a finite number, got {value}"
    elif error_type in _TYPE_ERRORS:
        text = expect.text if expect else words.kinds[_TYPE_ERRORS[error_type]]
        message = f"must be {text}, got {words.describe(value)}"
    else:
        message = error["msg"]
    return Problem(path, message)


def first_problem(exc: ValidationError, root: type[BaseModel], words: Wording) -> Problem:
    """The first of ``exc``'s errors, explained. A union tries each member: an
    error saying the value is not some member's type is told only if no member
    got further (``["ok", 3]`` is about ``input[1]``, not "not a string")."""
    errors = exc.errors()
    deeper = [e for e in errors if not is_member_root(root, e["loc"])]
    return explain((deeper or errors)[0], root, words)
