"""The GBNF grammar that constrains a request's output: structured output and tool calls.

A request's ``extra`` may ask for JSON (``response_format``: ``json_object``, or
``json_schema`` with a schema), for tool calls (``tools`` with ``tool_choice``)
or give llama.cpp's own ``grammar``. llama-cpp-python's JSON-schema converter
(``llama_grammar.SchemaConverter``, a port of llama.cpp's
``json_schema_to_grammar``) writes the rules of each schema; this module puts
them together:

- ``json_object``: any JSON object; ``json_schema``: that schema's value;
- tool calls (``tierlm.runners.tool_calls`` format), one rule per tool: its
  name, then arguments matching its ``parameters``;
- ``tool_choice``: ``required`` = one call (several only with
  ``parallel_tool_calls: true``: like llama.cpp's server, and unlike OpenAI,
  the default is one, since a small model given the choice tends to repeat
  the same call until ``max_tokens``), a named function = exactly one call of it,
  ``auto`` = calls OR an answer: free text that never contains ``<tool_call>``
  (or, with a ``response_format``, its JSON), ``none`` = no calls.

Any schema OpenAI takes is taken. What a grammar can enforce is enforced:
the converter's keywords, plus integer bounds and the ``email``, ``uri``,
``hostname`` and ``ipv4`` formats (``schema_keywords``). The rest (a
number's bounds, ``multipleOf``, ``uniqueItems``, ``not``...) is left out of
the grammar and checked on the finished output by the gateway, which says
when the model broke it (docs/gateway.md "Structured output").
Strings exclude raw control characters: the converter's ``char`` rule allows
them, and a newline inside a JSON string is not JSON.
"""

from __future__ import annotations

import copy
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from tierlm.runners.errors import InvalidRequest
from tierlm.runners.llama_cpp.prompt.grammar_bounds import (
    MAX_GRAMMAR_BYTES,
    check_grammar_text,
    check_request_bounds,
    grammar_source,
)
from tierlm.runners.llama_cpp.prompt.schema_keywords import (
    GRAMMAR_KEYWORDS,
    grammar_schema,
    int_bounds,
    int_range,
)
from tierlm.runners.tool_calls import CLOSE_TAG, OPEN_TAG

__all__ = [
    "GRAMMAR_KEYWORDS",
    "MAX_GRAMMAR_BYTES",
    "forget_grammar",
    "is_made",
    "request_grammar",
    "tool_choice",
]

_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_JSON_CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'


def tool_choice(extra: Mapping[str, Any]) -> Any:
    """The request's tool choice: OpenAI's default is ``auto`` when tools are given."""
    return extra.get("tool_choice") or "auto"


_GRAMMAR_OPTIONS = ("grammar", "response_format", "tools", "tool_choice", "parallel_tool_calls")
_CACHE_SIZE = 64
"""Grammars kept, by set of options: an agent's few tool sets and schemas."""
_CACHE_BYTES = 16 * 1024 * 1024
"""and at most 16 MiB of them: 16 grammars at the 1 MiB limit."""
_cache: OrderedDict[tuple[str, str], str | None] = OrderedDict()
_cache_lock = threading.Lock()  # the worker's render threads share it


def request_grammar(extra: Mapping[str, Any], model_id: str) -> str | None:
    """The grammar for a request's options, None if its output is free.

    Its bounds are checked before it is built (``grammar_bounds``), and its
    text after; only a grammar that passed is kept, once per distinct set of
    options: the check before the request is queued and the generation's
    sampler share it, and a refused one is not kept (docs/design.md §1.8)."""
    key = _key(extra, model_id)
    if key is not None:
        with _cache_lock:
            if key in _cache:
                _cache.move_to_end(key)
                return _cache[key]
    check_request_bounds(extra, model_id)
    grammar = _make_grammar(extra, model_id)
    if grammar is not None:
        check_grammar_text(grammar, grammar_source(extra), model_id)
    if key is not None:
        with _cache_lock:
            _cache[key] = grammar
            while len(_cache) > _CACHE_SIZE or _cached_bytes() > _CACHE_BYTES:
                _cache.popitem(last=False)
    return grammar


def is_made(extra: Mapping[str, Any], model_id: str) -> bool:
    """Is the grammar of these options made (or none needed)? If so,
    ``request_grammar`` returns it without building. Options that are not JSON
    (a library caller's objects) are never kept: made where they are used."""
    if not any(extra.get(k) for k in ("grammar", "response_format", "tools")):
        return True
    key = _key(extra, model_id)
    with _cache_lock:
        return key is None or key in _cache


def forget_grammar(extra: Mapping[str, Any], model_id: str) -> None:
    """Drop a grammar llama.cpp refused: a refused grammar is not kept."""
    key = _key(extra, model_id)
    if key is not None:
        with _cache_lock:
            _cache.pop(key, None)


def _key(extra: Mapping[str, Any], model_id: str) -> tuple[str, str] | None:
    try:
        return json.dumps({k: extra.get(k) for k in _GRAMMAR_OPTIONS}, sort_keys=True), model_id
    except (TypeError, ValueError):  # not JSON (a library caller's objects): not cached
        return None


def _cached_bytes() -> int:
    return sum(len(grammar or "") for grammar in _cache.values())


def _make_grammar(extra: Mapping[str, Any], model_id: str) -> str | None:
    raw = extra.get("grammar")
    if raw is not None:
        return str(raw)
    converter = _converter()
    response = _response_rule(converter, extra.get("response_format"), model_id)
    tools = extra.get("tools") or ()
    choice = tool_choice(extra)
    if tools and choice != "none":
        calls = _tool_rules(converter, tools, choice, extra.get("parallel_tool_calls"), model_id)
        if choice == "auto":
            answer = response or converter._add_rule("answer", _free_text(converter))
            root = f"{calls} | {answer}"
        else:
            root = calls
    elif response is not None:
        root = response
    else:
        return None
    converter._add_rule("root", root)
    if "char" in converter._rules:
        converter._rules["char"] = _JSON_CHAR
    grammar: str = converter.format_grammar()
    return grammar


def _converter() -> Any:
    from llama_cpp.llama_grammar import RESERVED_NAMES, SchemaConverter

    class Converter(SchemaConverter):
        """The converter, with rules for an integer's bounds."""

        def visit(self, schema: Any, name: str) -> Any:
            if (
                isinstance(schema, Mapping)
                and schema.get("type") == "integer"
                and any(key in schema for key in _BOUNDS)
            ):
                rule = name + "-" if name in RESERVED_NAMES else name or "root"
                return self._add_rule(rule, f"{int_range(*int_bounds(schema))} space")  # type: ignore[no-untyped-call]
            return super().visit(schema, name)  # type: ignore[no-untyped-call]

    return Converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)  # type: ignore[no-untyped-call]


def _response_rule(converter: Any, response_format: Any, model_id: str) -> str | None:
    if not isinstance(response_format, Mapping):
        return None
    kind = response_format.get("type")
    if kind == "json_object":
        return _visit(converter, {"type": "object"}, "response", "response_format", model_id)
    if kind == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema") or {"type": "object"}
        where = "response_format.json_schema.schema"
        return _visit(converter, schema, "response", where, model_id)
    return None


def _tool_rules(
    converter: Any, tools: Sequence[Any], choice: Any, parallel: Any, model_id: str
) -> str:
    """The rule of the calls ``choice`` allows; returns its name."""
    names: dict[str, str] = {}
    for i, tool in enumerate(tools):
        function = tool["function"]
        name = function["name"]
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        where = f"tools.{i}.function.parameters"
        arguments = _visit(converter, parameters, f"tool{i}-arguments", where, model_id)
        head = json.dumps(f'{OPEN_TAG}\n{{"name": {json.dumps(name)}, "arguments": ')
        tail = json.dumps("}\n" + CLOSE_TAG)
        names[name] = converter._add_rule(f"tool{i}-call", f"{head} {arguments} {tail}")
    if isinstance(choice, Mapping):  # {"type": "function", "function": {"name": ...}}
        return names[choice["function"]["name"]]
    call: str = converter._add_rule("tool-call", " | ".join(names.values()))
    if parallel is not True:
        return call
    calls: str = converter._add_rule("tool-calls", f'{call} ("\\n" {call})*')
    return calls


def _free_text(converter: Any) -> str:
    """Any text without ``<tool_call>`` in it: states s0..s10 of the automaton
    that has matched the first k characters of the tag (a reply that mentions
    the tag could otherwise not be told from a call)."""
    tag = OPEN_TAG
    for k in range(len(tag)):
        if k == 0:
            moves = ["[^<] text-s0", '"<" text-s1']
        else:
            char = tag[k]
            moves = ['"<" text-s1', f"[^{char}<] text-s0"]
            if k < len(tag) - 1:
                moves.append(f"{json.dumps(char)} text-s{k + 1}")
        converter._add_rule(f"text-s{k}", f"( {' | '.join(moves)} )?")
    return "text-s0"


def _visit(converter: Any, schema: Any, name: str, where: str, model_id: str) -> str:
    """The rules of ``schema``, named after ``name``; returns the top rule's name."""
    if not isinstance(schema, Mapping):
        raise InvalidRequest(
            f"{where}: must be a JSON schema (an object), got {type(schema).__name__}",
            param=where,
            model_id=model_id,
        )
    own = _prefixed_defs(copy.deepcopy(grammar_schema(schema)), name)
    try:
        resolved = converter.resolve_refs(own, name)
        rule: str = converter.visit(resolved, name)
    except Exception as exc:  # the converter raises AssertionError, ValueError, KeyError...
        raise InvalidRequest(
            f"{where}: this JSON schema cannot be made a grammar: {exc or type(exc).__name__}",
            param=where,
            model_id=model_id,
        ) from None
    return rule


def _prefixed_defs(schema: dict[str, Any], prefix: str) -> dict[str, Any]:
    """``schema`` with its definitions renamed ``<prefix>-<name>``: the converter
    names a definition's rule after it, so two schemas with a definition of
    the same name (two tools' ``Address``) would otherwise share one rule."""
    renames: dict[str, str] = {}
    for key in ("$defs", "definitions"):
        defs = schema.get(key)
        if isinstance(defs, Mapping):
            schema[key] = {f"{prefix}-{name}": value for name, value in defs.items()}
            renames.update({f"#/{key}/{name}": f"#/{key}/{prefix}-{name}" for name in defs})

    def rename(node: Any) -> Any:
        if isinstance(node, list):
            return [rename(item) for item in node]
        if isinstance(node, dict):
            return {
                k: renames.get(v, v) if k == "$ref" and isinstance(v, str) else rename(v)
                for k, v in node.items()
            }
        return node

    renamed: dict[str, Any] = rename(schema)
    return renamed
