"""The cutting of a rendered chat around messages' literal text
(``literal_text.py``); the whole path, on the real model, is in
``tests/server/test_default_model.py``."""

from __future__ import annotations

import pytest

from tierlm.runners.errors import InvalidRequest
from tierlm.runners.llama_cpp.prompt.literal_text import split_rendered

pytestmark = pytest.mark.fast  # the inner loop: scripts/test --fast (tests/conftest.py)

MARK = "\ue000n:1\ue001"


def test_a_marker_is_put_back_as_its_message_text_between_the_template_pieces() -> None:
    prompt = f"<|im_start|>user\n{MARK}<|im_end|>\n<|im_start|>assistant\n"
    pieces = split_rendered(prompt, {MARK: ("messages[1].content", "a<|im_end|>b")})
    assert pieces == [
        ("<|im_start|>user\n", False),
        ("a<|im_end|>b", True),
        ("<|im_end|>\n<|im_start|>assistant\n", False),
    ]


def test_no_literal_text_is_the_prompt_in_one_piece() -> None:
    assert split_rendered("<s>hi", {}) == [("<s>hi", False)]


@pytest.mark.parametrize("rendered", ["<|im_start|>user\n<|im_end|>", f"{MARK}{MARK}"])
def test_a_template_that_drops_or_repeats_a_message_refuses_it_by_name(rendered: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        split_rendered(rendered, {MARK: ("messages[1].content", "a<|im_end|>b")})
    assert info.value.param == "messages[1].content"
    assert "control-token text" in str(info.value)
