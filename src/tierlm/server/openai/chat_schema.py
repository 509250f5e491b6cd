"""The parts of a request that agents use: messages with tool calls and tool
results, ``tools``, ``tool_choice``, ``response_format`` and ``logit_bias``,
as pydantic models of OpenAI's shapes
(https://platform.openai.com/docs/api-reference/chat).

What they ask for reaches the runner in ``GenerationRequest.extra`` under
OpenAI's names (``ChatExtras.extra``), and each backend honours it, passes it
on, or the gateway refuses it with a 400 (``compat.py``).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from tierlm.server.settings.schema import Expect, FieldError, Schema

__all__ = [
    "CONTENT",
    "MAX_MESSAGES",
    "MAX_SCHEMA_BYTES",
    "MAX_SCHEMA_DEPTH",
    "FunctionCall",
    "LogitBias",
    "Message",
    "NamedToolChoice",
    "ResponseFormat",
    "TextPart",
    "Tool",
    "ToolCall",
    "ToolChoice",
]

# OpenAI's rule for function and schema names.
NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
_NAME = re.compile(NAME_PATTERN)


def _name(value: str) -> str:
    if not _NAME.match(value):
        raise FieldError(f"must be 1 to 64 letters, digits, underscores or dashes, got {value!r}")
    return value


FunctionName = Annotated[str, AfterValidator(_name)]

MAX_MESSAGES = 2048
"""OpenAI's own limit on ``messages``. Rendering and counting a chat costs
about 0.5 ms a message here (the template, then the tokenizer), work done
before the request is queued: 2 048 messages is about a second at most,
25 000 were minutes (docs/design.md §1.8)."""
MAX_SCHEMA_DEPTH = 32
"""JSON nesting of one schema (``response_format``'s, a tool's parameters): about
16 levels of subschemas (each a keyword's object or array, then the
subschema). Agent libraries' schemas (LangChain, instructor, pydantic models)
nest under 10 levels. A grammar is built from the schema on the worker
before the request is queued, and llama.cpp's converter can double its work
per level of nested alternatives (26 levels of ``anyOf`` took 21 s), time a
person's request would wait behind: docs/design.md §1.8."""
MAX_SCHEMA_BYTES = 64 * 1024
"""A schema's JSON text: 64 KiB, dozens of times the largest tool schema of the
agent frameworks we test, so that its grammar is built in milliseconds."""


def _bounded_schema(schema: dict[str, Any]) -> dict[str, Any]:
    def depth(node: Any) -> int:
        children = node.values() if isinstance(node, dict) else node
        if not isinstance(node, dict | list) or not children:
            return 0
        deepest = 0
        for child in children:
            deepest = max(deepest, depth(child))
            if deepest >= MAX_SCHEMA_DEPTH:
                break  # deep enough to refuse: look no further
        return deepest + 1

    if depth(schema) > MAX_SCHEMA_DEPTH:
        raise FieldError(
            f"nested deeper than {MAX_SCHEMA_DEPTH} levels of JSON (the grammar's cost "
            "grows with each level); flatten it, or use $defs and $ref"
        )
    size = len(json.dumps(schema, ensure_ascii=False))
    if size > MAX_SCHEMA_BYTES:
        raise FieldError(f"{size} bytes of JSON, over the limit of {MAX_SCHEMA_BYTES}")
    return schema


JsonSchema = Annotated[
    dict[str, Any], AfterValidator(_bounded_schema), Expect("a JSON schema (an object)")
]


class TextPart(Schema):
    """A text part of a message's content."""

    type: Literal["text"]
    text: str

    @model_validator(mode="before")
    @classmethod
    def _text_only(cls, value: Any) -> Any:
        if isinstance(value, dict) and value.get("type") != "text":
            kind = value.get("type")
            raise FieldError(f"only text parts are supported, got {kind!r}", code="unsupported")
        return value


def _parts(value: Any) -> Any:
    return [{"type": "text", "text": value}] if isinstance(value, str) else value


CONTENT = Expect("a string or an array of text parts")
Content = Annotated[
    list[Annotated[TextPart, Expect("a text part {type: text, text}")]] | None,
    BeforeValidator(_parts),
    CONTENT,
]


class FunctionCall(Schema):
    name: FunctionName
    arguments: str
    """The arguments, as JSON text (OpenAI sends a string)."""


class ToolCall(Schema):
    """A call the assistant made earlier in the chat."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(Schema):
    """A chat message: a role and text content; an assistant's may hold tool
    calls, a ``tool`` message answers one (``tool_call_id``)."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Content = None
    name: str | None = None
    """The participant's name (multi-agent frameworks name messages): accepted,
    and not shown to the model (no chat template tierlm runs reads it)."""
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _fits_the_role(self) -> Message:
        if self.content is None and self.role != "assistant":
            raise FieldError(f"must be {CONTENT.text}, got null", "content")
        if self.tool_calls is not None and self.role != "assistant":
            raise FieldError("only an assistant message has tool calls", "tool_calls")
        if (self.role == "tool") != (self.tool_call_id is not None):
            if self.role == "tool":
                raise FieldError(
                    "a tool message needs the id of the call it answers", "tool_call_id"
                )
            raise FieldError("only a tool message answers a tool call", "tool_call_id")
        return self

    def as_runner_message(self) -> dict[str, Any]:
        role = "system" if self.role == "developer" else self.role
        text = None if self.content is None else "".join(p.text for p in self.content)
        message: dict[str, Any] = {"role": role, "content": text}
        if self.tool_calls:
            message["tool_calls"] = [call.model_dump() for call in self.tool_calls]
        elif text is None:
            message["content"] = ""
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        return message


class Function(Schema):
    name: FunctionName
    description: str | None = None
    parameters: JsonSchema | None = None
    """The arguments' JSON schema (unset: no arguments)."""
    strict: bool | None = None
    """Accepted: the llama-cpp backend's calls always match the schema."""


class Tool(Schema):
    type: Literal["function"]
    function: Function


class ToolChoiceFunction(Schema):
    name: FunctionName


class NamedToolChoice(Schema):
    type: Literal["function"]
    function: ToolChoiceFunction


ToolChoice = Annotated[
    Literal["none", "auto", "required"] | NamedToolChoice,
    Expect('"none", "auto", "required" or {"type": "function", "function": {"name": ...}}'),
]


class JsonSchemaFormat(Schema):
    name: FunctionName
    description: str | None = None
    schema_: JsonSchema | None = Field(default=None, alias="schema")
    strict: bool | None = None
    """Accepted: on the llama-cpp backend the output always matches the schema."""


class TextFormat(Schema):
    type: Literal["text"]


class JsonObjectFormat(Schema):
    type: Literal["json_object"]


class JsonSchemaResponse(Schema):
    type: Literal["json_schema"]
    json_schema: JsonSchemaFormat


ResponseFormat = TextFormat | JsonObjectFormat | JsonSchemaResponse


MAX_TOKEN_ID = 2**31 - 1
"""The largest token id a ``logit_bias`` key may name: llama.cpp's token ids
are 32-bit, and no vocabulary comes near it (the model's own bound is checked
where the vocabulary is known, the runner)."""

_ACCEPTED = f"token ids, decimal integers from 0 to {MAX_TOKEN_ID} within the model's vocabulary"


def _token_ids(biases: dict[str, float] | None) -> dict[str, float] | None:
    for key in biases or {}:
        # str.isdigit() is true of "²" and "٣", which int() then takes or refuses
        # far from here: only ASCII digits are a token id.
        if not (key.isascii() and key.isdigit()):
            raise FieldError(f"keys must be {_ACCEPTED}, got {key!r}", key)
        # Bounded before int(): past 4 300 digits int() raises far from here
        # (in the runner, whose error then named another field).
        if len(key) > len(str(MAX_TOKEN_ID)) or int(key) > MAX_TOKEN_ID:
            shown = key if len(key) <= 20 else f"{key[:12]}... ({len(key)} digits)"
            raise FieldError(f"keys must be {_ACCEPTED}, got {shown}")
    return biases


LogitBias = Annotated[
    dict[str, Annotated[float, Field(ge=-100, le=100)]] | None,
    AfterValidator(_token_ids),
    Expect("an object of token id -> bias between -100 and 100"),
]
