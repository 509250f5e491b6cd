"""``tierlm demo --real`` prints each chat answer short, cut after a sentence or
a word, never inside one (the answers are cut at a token budget too)."""

from __future__ import annotations

import pytest

from tierlm.sim.real_demo import ANSWER_CHARS, _shortened


@pytest.mark.parametrize(
    ("answer", "printed"),
    [
        ("The capital of France is Paris.", "The capital of France is Paris."),
        # Cut by the token budget mid-sentence: the last whole words, then "...".
        (
            "The best way to celebrate a rainy day is to have a picnic or a beachsi",
            "The best way to celebrate a rainy day is to have a picnic or a ...",
        ),
        ("", ""),
    ],
)
def test_an_answer_is_cut_at_a_word(answer: str, printed: str) -> None:
    assert _shortened(answer) == printed


def test_a_long_answer_ends_after_its_last_whole_sentence_within_the_limit() -> None:
    answer = "Awesome! Just what I needed. " + "Can you help with a gift and more? " * 5
    shown = _shortened(answer)
    assert len(shown) <= ANSWER_CHARS
    assert shown.endswith("?")
    assert answer.startswith(shown)
