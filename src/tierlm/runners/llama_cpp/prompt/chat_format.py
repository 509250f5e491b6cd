"""Tools, tool calls and tool results in a chat, as the model's template takes them.

A chat template either knows tools (it reads ``tools``, and messages'
``tool_calls`` and the ``tool`` role: Qwen2.5, Hermes, Llama 3.1...) or it
does not (SmolLM2, the embedded default model, and plain ChatML). With one
that does, the chat goes to the template as OpenAI sent it (the arguments of
past calls as objects, which such templates print with ``tojson``). With one
that does not, the gateway's documented prompt format (docs/gateway.md,
"Tool calls") stands in:

- the tools are described in the system message, with the call format;
- a past call is the assistant's text, in that format
  (``tierlm.runners.tool_calls``);
- a tool's result is a user message ``<tool_response>...</tool_response>``.

Either way the model's calls are held to that format by the grammar
(``grammars.py``), so they parse whatever the template taught.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from tierlm.runners.llama_cpp.prompt.grammars import tool_choice
from tierlm.runners.requests import Message
from tierlm.runners.tool_calls import format_call

__all__ = ["TOOLS_INTRO", "chat_for_template", "tools_instructions"]

TOOLS_INTRO = (
    "You can call functions. Here they are, as JSON schemas:\n<tools>\n{tools}\n</tools>\n"
    "To call a function, reply with its name and arguments, like this:\n"
    '<tool_call>\n{{"name": <function name>, "arguments": <arguments as a JSON object>}}\n'
    "</tool_call>"
)
_CHOICE = {
    "auto": "Call a function when it helps; otherwise answer in plain text.",
    "required": "You must call one of these functions.",
}


def tools_instructions(tools: Sequence[Any], choice: Any) -> str:
    """The system-message section describing ``tools`` (templates without tools)."""
    listed = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    if isinstance(choice, Mapping):
        rule = f"You must call the function {choice['function']['name']}."
    else:
        rule = _CHOICE.get(str(choice), "")
    return TOOLS_INTRO.format(tools=listed) + ("\n" + rule if rule else "")


def chat_for_template(
    messages: Sequence[Message], extra: Mapping[str, Any], template: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The messages and the extra template variables to render ``messages``
    with ``template`` (a system message, if the chat has one, is first)."""
    choice = tool_choice(extra)
    tools = list(extra.get("tools") or ()) if choice != "none" else []
    native_tools = "tools" in template
    native_calls = "tool_calls" in template
    rendered: list[dict[str, Any]] = []
    for message in messages:
        m = dict(message)
        role = m.get("role")
        calls = m.pop("tool_calls", None)
        if role == "assistant" and calls:
            if native_calls:
                m["tool_calls"] = [_with_object_arguments(call) for call in calls]
            else:
                text = "\n".join(
                    format_call(c["function"]["name"], c["function"]["arguments"]) for c in calls
                )
                m["content"] = "\n".join(part for part in (m.get("content"), text) if part)
        elif role == "tool" and not native_calls:
            result = m.get("content")
            m = {"role": "user", "content": f"<tool_response>\n{result}\n</tool_response>"}
        if m.get("content") is None:
            m["content"] = ""  # a null content (an assistant's call) is text to a template
        rendered.append(m)
    if not tools:
        return rendered, {}
    if native_tools:
        return rendered, {"tools": tools, "tool_choice": choice}
    section = tools_instructions(tools, choice)
    if rendered and rendered[0].get("role") == "system":
        rendered[0] = {**rendered[0], "content": f"{rendered[0]['content']}\n\n{section}"}
    else:
        rendered.insert(0, {"role": "system", "content": section})
    return rendered, {}


def _with_object_arguments(call: Mapping[str, Any]) -> dict[str, Any]:
    function = dict(call.get("function") or {})
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):  # not JSON: the template prints it as it came
            function["arguments"] = json.loads(arguments)
    return {**call, "function": function}
