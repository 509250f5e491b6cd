"""JSON-schema keywords llama-cpp-python's converter has no rules for, made rules here.

OpenAI accepts any JSON schema in ``tools`` and ``response_format``; so does
the llama-cpp backend. What a grammar can enforce, it enforces:

- integer ``minimum`` / ``maximum`` / ``exclusiveMinimum`` / ``exclusiveMaximum``:
  the decimal numbers of the range, digit by digit (``int_range``), as
  llama.cpp's own ``json_schema_to_grammar`` does;
- string ``format`` ``email``, ``uri``, ``hostname``, ``ipv4``: as patterns
  (``FORMAT_PATTERNS``), stricter than the RFCs (a plain address, no quoting),
  so what the model writes is valid.

The rest (a number's bounds, ``multipleOf``, ``uniqueItems``, ``not``,
``if``...) is left out of the grammar (``grammar_schema`` drops it) and
checked on the finished output instead (the gateway's ``schema_check``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

__all__ = ["FORMAT_PATTERNS", "GRAMMAR_KEYWORDS", "grammar_schema", "int_bounds", "int_range"]

# Keywords the converter turns into rules, and annotations that constrain nothing.
GRAMMAR_KEYWORDS = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "prefixItems",
        "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs",
        "definitions", "pattern", "minLength", "maxLength", "format",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
        "title", "description", "default", "examples", "$schema", "$id", "$comment",
        "deprecated", "readOnly", "writeOnly", "discriminator", "strict",
    }
)  # fmt: skip
# Formats the converter has rules for.
CONVERTER_FORMATS = frozenset(
    {"date", "time", "date-time", "uuid", *(f"uuid{n}" for n in range(1, 6))}
)
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
# Few {m,n} counts: the converter spells them as nested options.
FORMAT_PATTERNS = {
    # A plain address of bounded parts: a small model rambles in an unbounded one.
    "email": r"^[a-zA-Z0-9_+-]{1,24}([.][a-zA-Z0-9_+-]{1,24})?"
    r"@[a-zA-Z0-9-]{1,24}([.][a-zA-Z0-9-]{1,24})?[.][a-z]{2,6}$",
    "uri": r"^https?://[a-zA-Z0-9-]+([.][a-zA-Z0-9-]+)*(/[a-zA-Z0-9._~%-]*)*$",
    "hostname": r"^[a-zA-Z0-9-]+([.][a-zA-Z0-9-]+)*$",
    "ipv4": rf"^{_OCTET}([.]{_OCTET}){{3}}$",
}
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_BOUND_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
# The longest integer the grammar writes without an upper bound (as the converter's).
_MAX_DIGITS = 16


def grammar_schema(schema: Any) -> Any:
    """``schema`` with only what the grammar enforces: keywords it cannot are
    dropped (the finished output is checked against the whole schema), formats
    it has a pattern for become that pattern, a number's bounds are dropped
    (only an integer's are rules)."""
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key not in GRAMMAR_KEYWORDS:
            continue
        if key in _SUBSCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {name: grammar_schema(sub) for name, sub in value.items()}
        elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
            out[key] = [grammar_schema(sub) for sub in value]
        elif key in ("items", "additionalProperties") and isinstance(value, Mapping):
            out[key] = grammar_schema(value)
        elif key == "format":
            if value in FORMAT_PATTERNS and "pattern" not in schema:
                out["pattern"] = FORMAT_PATTERNS[value]
            elif value in CONVERTER_FORMATS:
                out[key] = value
        elif key in _BOUND_KEYWORDS:
            if schema.get("type") == "integer" and _number(value):
                out[key] = value
        else:
            out[key] = value
    return out


def int_bounds(schema: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """The inclusive bounds of an integer schema (None: unbounded)."""
    import math

    low: int | None = None
    high: int | None = None
    if _number(m := schema.get("minimum")):
        low = math.ceil(m)
    if _number(m := schema.get("exclusiveMinimum")):
        low = max(low if low is not None else math.floor(m) + 1, math.floor(m) + 1)
    if _number(m := schema.get("maximum")):
        high = math.floor(m)
    if _number(m := schema.get("exclusiveMaximum")):
        high = min(high if high is not None else math.ceil(m) - 1, math.ceil(m) - 1)
    # Beyond 16 digits a bound is no constraint the model meets by chance.
    low = None if low is not None and abs(low) >= 10**_MAX_DIGITS else low
    high = None if high is not None and abs(high) >= 10**_MAX_DIGITS else high
    return low, high


def _number(value: Any) -> TypeGuard[int | float]:
    # JSON numbers; draft-4's boolean exclusiveMinimum is not a bound.
    return isinstance(value, int | float) and not isinstance(value, bool)


def int_range(low: int | None, high: int | None) -> str:
    """A GBNF expression of the decimal integers in ``[low, high]`` (None:
    unbounded), without leading zeros; ``"-"`` before negatives."""
    if low is not None and high is not None and low > high:
        raise ValueError(f"no integer is between {low} and {high}")
    parts: list[str] = []
    if low is None or low < 0:
        # Negative part: -n for n in [max(1, -high), -low].
        top = None if low is None else -low
        bottom = 1 if high is None or high >= 0 else -high
        parts += [f'"-" {p}' for p in _naturals(bottom, top)]
    if high is None or high >= 0:
        parts += _naturals(max(0, low if low is not None else 0), high)
    return "(" + " | ".join(parts) + ")"


def _naturals(low: int, high: int | None) -> list[str]:
    """Alternatives matching the numbers in ``[low, high]`` (``low >= 0``)."""
    if high is None:
        digits = len(str(low))
        if digits >= _MAX_DIGITS:
            return [_literal(str(low))]
        more = f"[1-9] [0-9]{{{digits},{_MAX_DIGITS - 1}}}"
        return [*_naturals(low, 10**digits - 1), more]
    out: list[str] = []
    while low <= high:
        digits = len(str(low))
        top = min(high, 10**digits - 1)
        out += [" ".join(p) for p in _same_length(str(low), str(top))]
        low = top + 1
    return out


def _same_length(a: str, b: str) -> list[list[str]]:
    """Patterns (lists of GBNF atoms) of the strings from ``a`` to ``b``, of equal length."""
    if a == b:
        return [[_literal(a)]]
    prefix = 0
    while a[prefix] == b[prefix]:
        prefix += 1
    head = [_literal(a[:prefix])] if prefix else []
    a, b = a[prefix:], b[prefix:]
    rest = len(a) - 1
    if rest == 0:
        return [[*head, f"[{a}-{b}]"]]
    tail = [f"[0-9]{{{rest}}}"]
    if a[1:] == "0" * rest and b[1:] == "9" * rest:
        return [[*head, f"[{a[0]}-{b[0]}]", *tail]]
    out: list[list[str]] = []
    low_digit, high_digit = int(a[0]), int(b[0])
    if a[1:] == "0" * rest:
        first = low_digit
    else:
        out += [[*head, _literal(a[0]), *p] for p in _same_length(a[1:], "9" * rest)]
        first = low_digit + 1
    last = high_digit if b[1:] == "9" * rest else high_digit - 1
    if first <= last:
        out.append([*head, f"[{first}-{last}]", *tail])
    if last < high_digit:
        out += [[*head, _literal(b[0]), *p] for p in _same_length("0" * rest, b[1:])]
    return out


def _literal(text: str) -> str:
    return f'"{text}"'
