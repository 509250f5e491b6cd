"""What a grammar may cost, known before it is built (docs/design.md §1.8).

A few bytes of schema can ask for a grammar of gigabytes: llama-cpp-python's
converter spells every repetition out, ``minLength: N`` as N copies of the
``char`` rule and ``maxLength`` (``maxItems``, a pattern's ``{m,n}``) as that
many optional groups nested in one another. So the cost is estimated from the
schema, keyword by keyword, and a request over a bound is refused naming the
keyword, in milliseconds and before anything is built:

- the grammar's text, at most ``MAX_GRAMMAR_BYTES``;
- groups nested in one rule, at most ``MAX_GRAMMAR_NESTING``: llama.cpp parses
  them recursively and refuses more than 1 000 nested optional groups; past
  about 15 000 its parser overflows the thread's stack (a segfault).

The text that comes out (a raw ``grammar``, or the converter's) is checked
too (``check_grammar_text``): its size, its nesting, and every character it
requires. A character class that matches nothing (``[^\\x00-\\U0010FFFF]``, a
range from high to low) or a character no token can spell (NUL, past
U+10FFFF) leaves the sampler with no token to allow, and llama.cpp aborts the
process when that token is accepted: such a grammar is a 400 here, never a
crashed batch.

Pure Python: the runner checks a request with it before the worker is asked
(``host/runner.py``), and the worker again before it builds.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tierlm.runners.errors import InvalidRequest
from tierlm.runners.llama_cpp.prompt.schema_keywords import grammar_schema

__all__ = [
    "MAX_GRAMMAR_BYTES",
    "MAX_GRAMMAR_NESTING",
    "check_grammar_text",
    "check_request_bounds",
    "grammar_source",
]

MAX_GRAMMAR_BYTES = 1024 * 1024
"""A grammar's GBNF text (given, or made from a schema and tools): 1 MiB, far
beyond any schema within the gateway's limits (64 KiB of schema made ~200 kB
of grammar here), so that llama.cpp parses it in milliseconds (750 kB: 8-33 ms
measured here)."""
MAX_GRAMMAR_NESTING = 1000
"""Groups nested in one rule: llama.cpp's parser refuses more than 1 000 nested
optional groups (``maxLength`` 1 001 does not parse), and overflows its stack
past ~15 000 nested groups of any kind (measured: 10 000 parse, 20 000
segfault)."""
# Bytes the converter writes per repetition: "char " for each required
# character, "(char " + ")?" for each optional one; an array item its rule's
# name and '"," space ' (+ "-item" and "( )?"). Measured on llama-cpp-python
# 0.3's converter: 5, 8 and 18 bytes for an item of the rule "response".
_REQUIRED_CHAR = 5
_OPTIONAL_CHAR = 8
_ITEM_OVERHEAD = 12
# Everything else (enums, properties, rule names) is a few times the schema's
# text, plus the rules every grammar has (char, space, a tool call's markup).
_TEXT_FACTOR = 4
_FIXED = 4096
_SUBSCHEMA_KEYS = ("properties", "$defs", "definitions")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAX_CODE_POINT = 0x10FFFF


@dataclass(frozen=True)
class _Cost:
    param: str
    value: int
    size: int
    nesting: int


def grammar_source(extra: Mapping[str, Any]) -> str:
    """The request field a grammar comes from, for errors."""
    for key in ("grammar", "response_format", "tools"):
        if extra.get(key):
            return key
    return "grammar"


def check_request_bounds(extra: Mapping[str, Any], model_id: str | None = None) -> None:
    """Refuse a request whose grammar would be over a bound, naming the keyword,
    without building anything: the schemas' repetitions are estimated, a raw
    ``grammar`` is checked as it is."""
    raw = extra.get("grammar")
    if isinstance(raw, str):
        check_grammar_text(raw, "grammar", model_id)
        return
    costs: list[_Cost] = []
    base = _FIXED
    for where, rule, schema in _schemas(extra):
        # As the converter gets it: formats made patterns, keywords it cannot
        # enforce dropped; the paths are the request's own.
        _walk(grammar_schema(schema), where, rule, costs)
        with contextlib.suppress(TypeError, ValueError):  # not JSON: the converter refuses it
            base += _TEXT_FACTOR * len(json.dumps(schema))
    for cost in costs:
        if cost.nesting > MAX_GRAMMAR_NESTING:
            raise InvalidRequest(
                f"{cost.param}: {cost.value} nests {cost.nesting} optional repetitions in "
                f"the grammar, over the limit of {MAX_GRAMMAR_NESTING} (llama.cpp's); "
                "lower it, or ask for the length in the prompt",
                param=cost.param,
                model_id=model_id,
            )
    total = base + sum(cost.size for cost in costs)
    if total > MAX_GRAMMAR_BYTES and costs:
        worst = max(costs, key=lambda cost: cost.size)
        raise InvalidRequest(
            f"{worst.param}: {worst.value} repetitions make a grammar of about {total} bytes "
            f"(each is spelled out), over the limit of {MAX_GRAMMAR_BYTES} bytes; lower it",
            param=worst.param,
            model_id=model_id,
        )


def _schemas(extra: Mapping[str, Any]) -> list[tuple[str, str, Any]]:
    """Each schema of the request: its field, the converter's name for its rule, it."""
    out: list[tuple[str, str, Any]] = []
    response = extra.get("response_format")
    if isinstance(response, Mapping) and response.get("type") == "json_schema":
        spec = response.get("json_schema")
        if isinstance(spec, Mapping) and spec.get("schema") is not None:
            out.append(("response_format.json_schema.schema", "response", spec["schema"]))
    tools = extra.get("tools")
    if isinstance(tools, list | tuple):
        for i, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, Mapping) else None
            if isinstance(function, Mapping) and function.get("parameters") is not None:
                where = f"tools.{i}.function.parameters"
                out.append((where, f"tool{i}-arguments", function["parameters"]))
    return out


def _count(value: Any) -> int | None:
    """A JSON count: an int, or a float with no fraction (``2e8`` in JSON)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# Keywords the converter looks at before a string's or an array's repetitions:
# with one of them, it writes no repetition for the node (docs/design.md §1).
_FIRST = ("$ref", "anyOf", "oneOf", "const", "enum")


def _walk(node: Any, where: str, name: str, costs: list[_Cost]) -> None:
    """The costs of ``node``'s repetitions and its subschemas' (``name``: about
    the converter's rule name, whose length an array item repeats)."""
    if not isinstance(node, Mapping):
        return
    kind = node.get("type")
    # The branches of the converter's visit, in its order: a repetition it
    # never writes costs nothing (an array without items ignores maxItems).
    if not any(key in node for key in _FIRST) and not isinstance(kind, list):
        items = node.get("items")
        pattern = node.get("pattern")
        if kind in (None, "array") and isinstance(items, Mapping) and "properties" not in node:
            item = len(name) + _ITEM_OVERHEAD
            _repetition(node, where, "minItems", "maxItems", item, item, costs)
        elif kind in (None, "string") and isinstance(pattern, str):
            costs += _pattern_costs(pattern, f"{where}.pattern", len(name))
        elif kind == "string":
            low, high = "minLength", "maxLength"
            _repetition(node, where, low, high, _REQUIRED_CHAR, _OPTIONAL_CHAR, costs)
    for key in _SUBSCHEMA_KEYS:
        subs = node.get(key)
        if isinstance(subs, Mapping):
            for sub_name, sub in subs.items():
                _walk(sub, f"{where}.{key}.{sub_name}", f"{name}-{sub_name}", costs)
    for key in _SUBSCHEMA_LISTS:
        subs = node.get(key)
        if isinstance(subs, list):
            for i, sub in enumerate(subs):
                _walk(sub, f"{where}.{key}.{i}", f"{name}-{key}-{i}", costs)
    for key in ("items", "additionalProperties"):
        _walk(node.get(key), f"{where}.{key}", f"{name}-{key}", costs)


def _repetition(
    node: Mapping[str, Any],
    where: str,
    low_key: str,
    high_key: str,
    required: int,
    optional: int,
    costs: list[_Cost],
) -> None:
    low, high = _count(node.get(low_key)), _count(node.get(high_key))
    if low is None and high is None:
        return
    least = max(low or 0, 0)
    if high is not None and high > least:
        costs.append(_Cost(f"{where}.{high_key}", high, (high - least) * optional, high - least))
    if least:
        costs.append(_Cost(f"{where}.{low_key}", least, least * required, 0))


_QUANTIFIER = re.compile(r"\{\s*(\d*)\s*(,?)\s*(\d*)\s*\}")


def _pattern_costs(pattern: str, param: str, name: int) -> list[_Cost]:
    """The ``{m,n}`` quantifiers of a regular expression: the converter spells
    ``x{m,n}`` as m copies of x and n - m nested optional ones; a character's
    copy is itself, anything else's (a class, a group) the name of its rule."""
    costs: list[_Cost] = []
    rule = name + 4  # "<name>-<k> "
    atom = 1
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "{" and (match := _QUANTIFIER.match(pattern, i)):
            low = int(match.group(1) or 0)
            high = low if not match.group(2) else int(match.group(3)) if match.group(3) else None
            size = low * atom
            nesting = 0
            if high is not None and high > low:
                nesting = high - low
                size += nesting * (atom + 8)
            costs.append(_Cost(param, max(low, high or 0), size, nesting))
            i = match.end()
            continue
        if c == "[":  # to its end: a class's brackets and braces are its own
            i += 1
            while i < len(pattern) and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif c == "\\":
            i += 1
        atom = 1 if c.isalnum() or c in " _-,:;@/" else rule
        i += 1
    return costs


# -- the text -----------------------------------------------------------------------

_GBNF_TOKEN = re.compile(r'#[^\n]*|"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|[()]', re.DOTALL)
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)", re.DOTALL)
_SIMPLE_ESCAPES = {"t": 9, "r": 13, "n": 10}


def check_grammar_text(text: str, param: str, model_id: str | None = None) -> None:
    """Refuse a GBNF grammar over a bound or that requires a character no
    output can have (llama.cpp would abort on it); one pass over the text."""
    if len(text) > MAX_GRAMMAR_BYTES:
        raise InvalidRequest(
            f"{param}: the grammar is {len(text)} bytes, over the limit of "
            f"{MAX_GRAMMAR_BYTES}; simplify it",
            param=param,
            model_id=model_id,
        )
    depth = 0
    for match in _GBNF_TOKEN.finditer(text):
        token = match.group()
        if token == "(":
            depth += 1
            if depth > MAX_GRAMMAR_NESTING:
                raise InvalidRequest(
                    f"{param}: the grammar nests groups more than {MAX_GRAMMAR_NESTING} "
                    "deep, over llama.cpp's limit; use rules",
                    param=param,
                    model_id=model_id,
                )
        elif token == ")":
            depth = max(depth - 1, 0)
        elif token[0] == "[":
            if _plain_class(token):
                continue  # a few letters: it matches them
            if not _class_matches(token):
                raise InvalidRequest(
                    f"{param}: the character class {token[:80]} matches no character an "
                    "output can have, so nothing matches the grammar there; fix the class",
                    param=param,
                    model_id=model_id,
                )
        elif token[0] == '"' and ("\\" in token or "\x00" in token):
            for point in _code_points(token[1:-1]):
                if not 0 < point <= _MAX_CODE_POINT:
                    raise InvalidRequest(
                        f"{param}: the literal {token[:80]} has the character U+{point:04X}, "
                        "which no output can have; remove it",
                        param=param,
                        model_id=model_id,
                    )


def _code_points(body: str) -> list[int]:
    """The characters of a literal's or a class's body, escapes decoded as
    llama.cpp decodes them (an unknown escape is its parser's error)."""
    points: list[int] = []
    i = 0
    while i < len(body):
        match = _ESCAPE.match(body, i) if body[i] == "\\" else None
        if match is None:
            points.append(ord(body[i]))
            i += 1
            continue
        code = match.group(1)
        if code[0] in "xuU" and len(code) > 1:
            points.append(int(code[1:], 16))
        else:
            points.append(_SIMPLE_ESCAPES.get(code, ord(code)))
        i = match.end()
    return points


def _plain_class(token: str) -> bool:
    return token[1] != "^" and not any(c in token for c in "\\-\x00")


def _class_matches(token: str) -> bool:
    """Does the class ``[...]`` match a character an output can have (U+0001
    to U+10FFFF: NUL ends a token's text in llama.cpp)?"""
    negated = token.startswith("[^")
    points = _code_points(token[2 if negated else 1 : -1])
    if not points:
        return True  # [] is no character at all in llama.cpp: it matches the empty text
    ranges: list[tuple[int, int]] = []
    i = 0
    while i < len(points):
        if i + 2 < len(points) and points[i + 1] == ord("-"):
            ranges.append((points[i], points[i + 2]))
            i += 3
        else:
            ranges.append((points[i], points[i]))
            i += 1
    usable = [(max(lo, 1), min(hi, _MAX_CODE_POINT)) for lo, hi in ranges]
    usable = sorted((lo, hi) for lo, hi in usable if lo <= hi)
    if not negated:
        return bool(usable)
    covered = 0  # the highest code point the ranges cover from U+0001 on
    for lo, hi in usable:
        if lo > covered + 1:
            return True
        covered = max(covered, hi)
    return covered < _MAX_CODE_POINT
