"""Tools, past tool calls and tool results in a chat, as a template gets them
(``tierlm.runners.llama_cpp.chat_format``): through a template that knows
tools, or in the documented prompt format for one that does not."""

from __future__ import annotations

import json

from tierlm.runners.llama_cpp.chat_format import TOOLS_INTRO, chat_for_template

TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object"}},
}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]
PLAIN = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
TOOLED = "{% if tools %}...{% endif %}{% for m in messages %}{{ m.tool_calls }}{% endfor %}"


def test_a_template_without_tools_gets_the_documented_format() -> None:
    messages, variables = chat_for_template(CHAT, {"tools": [TOOL]}, PLAIN)
    assert variables == {}
    system, user, assistant, result = messages
    assert user == CHAT[1]
    assert system["content"].startswith("Be brief.\n\n" + TOOLS_INTRO.split("{tools}")[0])
    assert json.dumps(TOOL) in system["content"]
    assert "Call a function when it helps" in system["content"]  # tool_choice auto
    assert assistant == {
        "role": "assistant",
        "content": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        "</tool_call>",
    }
    assert result == {"role": "user", "content": "<tool_response>\nsunny\n</tool_response>"}


def test_the_choice_is_said_and_none_describes_no_tools() -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    messages, _ = chat_for_template(CHAT[1:2], {"tools": [TOOL], "tool_choice": named}, PLAIN)
    assert messages[0]["role"] == "system"
    assert messages[0]["content"].endswith("You must call the function get_weather.")
    messages, _ = chat_for_template(CHAT[1:2], {"tools": [TOOL], "tool_choice": "none"}, PLAIN)
    assert messages == [CHAT[1]]


def test_a_template_with_tools_gets_them_as_they_came() -> None:
    messages, variables = chat_for_template(CHAT, {"tools": [TOOL]}, TOOLED)
    assert variables == {"tools": [TOOL], "tool_choice": "auto"}
    assert messages[0] == CHAT[0]
    # Such templates print the arguments with tojson: an object, not a string.
    assert messages[2]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert messages[2]["content"] == "" and messages[3] == CHAT[3]
