"""Tools, past tool calls and tool results in a chat, as a template gets them
(``tierlm.runners.llama_cpp.prompt.chat_format``): through a template that knows
tools, or in the documented prompt format for one that does not."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from tests.runners.helpers import run
from tierlm.runners.llama_cpp.prompt.chat_format import TOOLS_INTRO, chat_for_template

if TYPE_CHECKING:
    from tests.runners.helpers import TinyModels

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


# A Hermes-style template that knows tools (Qwen2.5's, shortened): it lists the
# tools in the system message and prints past calls and results its own way.
TOOL_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n<tools>\n{%- for tool in tools %}"
    "{{ tool | tojson }}\n{%- endfor %}</tools><|im_end|>\n{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'tool' %}<|im_start|>user\n<tool_response>{{ m.content }}"
    "</tool_response><|im_end|>\n"
    "{%- elif m.tool_calls %}<|im_start|>assistant\n{%- for c in m.tool_calls %}"
    "<tool_call>{{ c.function | tojson }}</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endif %}"
    "{%- endfor %}<|im_start|>assistant\n"
)


@pytest.mark.llama
def test_a_model_whose_template_knows_tools_gets_them_through_it(tiny_models: TinyModels) -> None:
    """The prompt the worker renders (and counts) for a real model whose chat
    template takes tools: the template's own rendering, arguments as objects."""
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
    from tierlm.runners.llama_cpp import LlamaCppRunner, LlamaModelSpec
    from tierlm.runners.requests import GenerationRequest

    async def main() -> str:
        spec = LlamaModelSpec(tiny_models.a, n_threads=1, chat_template=TOOL_TEMPLATE)
        runner = LlamaCppRunner({"a": spec})
        try:
            request = GenerationRequest(model_id="a", messages=CHAT[1:], extra={"tools": [TOOL]})
            return await runner.prompt_text(request)
        finally:
            await runner.aclose()

    prompt = run(main())
    assert prompt.startswith("<|im_start|>system\n<tools>" + json.dumps(TOOL))
    assert (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>' in prompt
    )
    assert "<tool_response>sunny</tool_response>" in prompt
    assert "You can call functions" not in prompt  # not the documented format
