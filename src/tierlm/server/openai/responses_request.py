"""``POST /v1/responses``'s request, as OpenAI's Responses API defines it
(https://platform.openai.com/docs/api-reference/responses/create), turned
into the chat request it means (``chat_body``): one validation, one runner
path, one scheduler for both APIs.

``input`` is a string (a user message) or a list of items: messages (``role``
and ``content``: a string or ``input_text`` / ``output_text`` parts),
``function_call`` items (the model's earlier calls) and
``function_call_output`` items (their results). ``instructions`` become the
system message; ``text.format`` the ``response_format``; function ``tools``
(flat: ``{"type": "function", "name", "parameters"}``) the chat tools.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from tierlm.server.openai.chat_schema import MAX_MESSAGES
from tierlm.server.settings.schema import Expect, FieldError, Schema

__all__ = ["NamedTool", "ResponsesRequest", "chat_messages"]

ITEM = Expect("a message {role, content}, a function_call or a function_call_output item")


class ResponseTool(Schema):
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class NamedTool(Schema):
    type: Literal["function"]
    name: str


class TextFormatSpec(Schema):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextOptions(Schema):
    format: TextFormatSpec | None = None
    verbosity: str | None = None
    """Accepted and ignored, as in chat completions."""


def _nothing(value: Any) -> bool:
    return not value


class ResponsesRequest(Schema):
    """``POST /v1/responses``."""

    model: Annotated[str, Field(min_length=1), Expect("a non-empty string naming a model")]
    input: Annotated[str | list[dict[str, Any]], Expect("a string or an array of input items")]
    instructions: str | None = None
    """The system message of this turn (not carried by ``previous_response_id``)."""
    previous_response_id: str | None = None
    """Continue the conversation of a stored response (``limits.responses_store_bytes``)."""
    tools: list[ResponseTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedTool | None = None
    parallel_tool_calls: bool | None = None
    text: TextOptions | None = None
    max_output_tokens: int | None = None
    temperature: Annotated[float | None, Field(ge=0, le=2)] = None
    top_p: Annotated[float | None, Field(ge=0, le=1)] = None
    stream: bool | None = None
    store: bool | None = None
    """False: the response is not kept (it cannot be continued)."""
    metadata: dict[str, str] | None = None
    user: str | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    truncation: Literal["auto", "disabled"] | None = None
    """Accepted: a conversation longer than the context is a 400 either way."""
    reasoning: dict[str, Any] | None = None
    """Accepted and ignored (no served model reasons apart from its answer)."""
    include: list[str] | None = None
    """Accepted and ignored: there is nothing extra to include."""
    stream_options: dict[str, Any] | None = None
    background: Annotated[Any, Expect("false")] = None
    top_logprobs: Annotated[int | None, Expect("0")] = None
    conversation: Annotated[Any, Expect("null: use previous_response_id")] = None
    prompt: Annotated[Any, Expect("null: prompt templates are not stored here")] = None

    def chat_body(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        """The chat completion request this asks for, after ``history`` (the
        messages of ``previous_response_id``)."""
        for name in ("background", "top_logprobs", "conversation", "prompt"):
            if not _nothing(getattr(self, name)):
                raise FieldError("not supported by this gateway", name, code="unsupported")
        messages = list(history)
        if self.instructions:
            messages.insert(0, {"role": "system", "content": self.instructions})
        messages += chat_messages(self.input)
        if not messages:
            raise FieldError("must hold at least one item", "input")
        if len(messages) > MAX_MESSAGES:
            raise FieldError(f"at most {MAX_MESSAGES} messages, got {len(messages)}", "input")
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        optional = {
            "max_tokens": self.max_output_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "stream": self.stream,
            "user": self.user,
            "metadata": self.metadata,
            "parallel_tool_calls": self.parallel_tool_calls,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        if self.tools:
            body["tools"] = [
                {"type": "function", "function": t.model_dump(exclude={"type"}, exclude_none=True)}
                for t in self.tools
            ]
        choice = self.tool_choice
        if isinstance(choice, NamedTool):
            body["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
        elif choice is not None and (self.tools or choice != "auto"):
            body["tool_choice"] = choice
        spec = self.text.format if self.text is not None else None
        if spec is not None and spec.type == "json_schema":
            schema: dict[str, Any] = {"name": spec.name or "response", "schema": spec.schema_ or {}}
            if spec.strict is not None:
                schema["strict"] = spec.strict
            body["response_format"] = {"type": "json_schema", "json_schema": schema}
        elif spec is not None:
            body["response_format"] = {"type": spec.type}
        return body


def chat_messages(value: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``input`` as chat messages; a FieldError naming ``input[i]`` otherwise."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise FieldError(
                    f"role must be user, assistant, system or developer, got {role!r}",
                    "input",
                    i,
                    "role",
                )
            messages.append({"role": role, "content": _text(item.get("content"), i)})
        elif kind == "function_call":
            call = {
                "id": str(item.get("call_id") or item.get("id") or f"call_{i}"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments", "")},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and last.get("tool_calls"):
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            content = output if isinstance(output, str) else _text(output, i, "output")
            messages.append(
                {"role": "tool", "tool_call_id": str(item.get("call_id")), "content": content}
            )
        elif kind == "reasoning":
            continue  # none is ever produced here; a client may send one back
        else:
            raise FieldError(
                f"input items of type {kind!r} are not supported (message, function_call, "
                "function_call_output)",
                "input",
                i,
                "type",
                code="unsupported",
            )
    return messages


def _text(content: Any, i: int, field: str = "content") -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise FieldError("must be a string or an array of text parts", "input", i, field)
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in (
            "input_text",
            "output_text",
            "text",
        ):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise FieldError(
                f"only text parts are supported, got {kind!r}",
                "input",
                i,
                field,
                j,
                code="unsupported",
            )
        texts.append(str(part.get("text", "")))
    return "".join(texts)
