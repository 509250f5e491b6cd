"""The tool-call parser: text in tierlm's tool-call format, fed in any pieces,
gives the same answer text and calls, and streams them as it can."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlm.runners.tool_calls import ToolCallWriter, format_call
from tierlm.server.openai.tools import Arguments, Call, Content, ToolCallParser

TWO_CALLS = (
    format_call("get_weather", '{ "city": "Paris" } ')
    + "\n"
    + format_call("get_time", '{"zone": "Europe/Paris", "note": "a } inside"}')
)


def parse(pieces: list[str], cut: bool = False) -> tuple[ToolCallParser, list[object]]:
    parser = ToolCallParser()
    events: list[object] = []
    for piece in pieces:
        events += parser.feed(piece)
    events += parser.finish(cut)
    return parser, events


def cut(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(c, len(text)) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@given(st.lists(st.integers(min_value=0, max_value=len(TWO_CALLS)), max_size=40))
def test_any_split_gives_the_same_calls(cuts: list[int]) -> None:
    parser, events = parse(cut(TWO_CALLS, cuts))
    assert [(c.name, c.arguments, c.complete) for c in parser.calls] == [
        ("get_weather", '{ "city": "Paris" }', True),
        ("get_time", '{"zone": "Europe/Paris", "note": "a } inside"}', True),
    ]
    assert parser.content == ""  # the newline between the calls is not an answer
    # The streamed fragments of each call add up to its arguments.
    for call in parser.calls:
        fragments = [
            e.fragment for e in events if isinstance(e, Arguments) and e.index == call.index
        ]
        assert "".join(fragments) == call.arguments
    starts = [e for e in events if isinstance(e, Call)]
    assert [c.index for c in starts] == [0, 1] and all(c.id.startswith("call_") for c in starts)


@given(
    st.text(alphabet="ab <>/_tolc{}\n", max_size=60),
    st.lists(st.integers(min_value=0, max_value=60), max_size=20),
)
def test_text_without_a_call_is_all_answer(text: str, cuts: list[int]) -> None:
    """Whatever it holds (a lone tag, half a tag): if it is no call, it is the answer."""
    parser, events = parse(cut(text, cuts))
    if not parser.calls:  # (no quotes in the alphabet: never a call's head)
        assert parser.content == text
        assert "".join(e.text for e in events if isinstance(e, Content)) == parser.content


def test_a_call_is_announced_as_soon_as_its_name_is_known() -> None:
    parser = ToolCallParser()
    assert parser.feed('<tool_call>\n{"name": "get_wea') == []
    call, first = parser.feed('ther", "arguments": {"ci')
    assert isinstance(call, Call) and call.name == "get_weather"
    assert first == Arguments(0, '{"ci')
    # The closing brace may be the end of the call: held until that is known.
    assert parser.feed('ty": "Paris"}') == [Arguments(0, 'ty": "Paris"')]
    parser.feed("}\n</tool_call>")
    assert parser.calls[0].arguments == '{"city": "Paris"}' and parser.calls[0].complete


def test_text_then_a_call_and_a_call_cut_short() -> None:
    cut_short = '<tool_call>\n{"name": "g", "arguments": {"x": 1'
    parser, _ = parse(["Let me check. ", format_call("f", "{}"), "\n", cut_short])
    assert parser.content == "Let me check. "
    assert [(c.name, c.arguments, c.complete) for c in parser.calls] == [
        ("f", "{}", True),
        ("g", '{"x": 1', False),
    ]


def test_a_tag_before_the_name_is_text_unless_max_tokens_cut_it() -> None:
    parser, _ = parse(["<tool_call>\n{"])
    assert parser.calls == [] and parser.content == "<tool_call>\n{"
    parser, _ = parse(["<tool_call>\n{"], cut=True)
    assert parser.calls == [] and parser.content == ""


@pytest.mark.parametrize("arguments", ['{ "city": "Paris" }', '{"a": {"b": 1}}', "{}"])
def test_a_call_cut_anywhere_leaves_a_prefix_of_its_arguments_and_no_markup(
    arguments: str,
) -> None:
    """Issue 19 item 2: cut by max_tokens at any character, streamed (one
    character a piece) or not, a call's arguments are a prefix of what the
    model meant (all of it when only the closing markup was cut), never
    ``}\n</tool_call`` markup; before the name is whole, there is no call."""
    whole = format_call("get_weather", arguments)
    for cut in range(len(whole) + 1):
        for pieces in ([whole[:cut]], list(whole[:cut])):
            parser, _ = parse(pieces, cut=True)
            assert parser.content in ("", "<"), whole[:cut]
            for call in parser.calls:
                assert call.name == "get_weather"
                assert arguments.startswith(call.arguments), (whole[:cut], call.arguments)
            if cut >= len(whole) - len("}\n</tool_call>"):
                assert [c.arguments for c in parser.calls] == [arguments]


def test_the_writer_makes_what_the_parser_reads() -> None:
    """An upstream's streamed calls (index, name, argument fragments) as text."""
    writer = ToolCallWriter()
    text = writer.start(0, "get_weather") + '{"city": ' + '"Paris"}'
    text += writer.start(1, "get_time") + json.dumps({"zone": "UTC"}) + writer.close()
    parser, _ = parse([text])
    assert [(c.name, json.loads(c.arguments)) for c in parser.calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"zone": "UTC"}),
    ]
