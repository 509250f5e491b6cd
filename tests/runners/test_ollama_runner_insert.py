"""OllamaRunner's fill-in-the-middle body (``extra["suffix"]``): Ollama's own
``suffix`` on ``/api/generate``, never ``raw`` (which would skip the template
that lays out the gap), a resumed one's partial middle after the prefix; the
files of context llama-server's ``/infill`` takes have no field there. The
request goes to a real upstream in tests/server/test_ollama_infill.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tierlm.runners.errors import InvalidRequest
from tierlm.runners.ollama import OllamaRunner
from tierlm.runners.requests import FIM_FILES, FIM_MIDDLE, FIM_SUFFIX, GenerationRequest

pytestmark = pytest.mark.fast


def body(**extra: object) -> tuple[str, dict[str, object]]:
    request = GenerationRequest(
        model_id="coder", prompt="def f(", max_tokens=4, extra={FIM_SUFFIX: "):", **extra}
    )
    return OllamaRunner().request_body(request)


def test_suffix_is_ollama_s_own_field_on_generate() -> None:
    path, sent = body(raw=True, top_p=0.9)
    assert path == "/api/generate"
    assert (sent["prompt"], sent["suffix"]) == ("def f(", "):")
    assert "raw" not in sent and sent["options"] == {"num_predict": 4, "top_p": 0.9}
    # the start of the middle continues the text before the gap
    assert body(**{FIM_MIDDLE: "x"})[1]["prompt"] == "def f(x"


def test_a_resumed_insert_stays_an_insert() -> None:
    request = GenerationRequest(
        model_id="coder", prompt="def f(", max_tokens=4, extra={FIM_SUFFIX: "):"}
    )
    path, sent = OllamaRunner().request_body(replace(request, resume_text="a, b"))
    assert path == "/api/generate" and sent["prompt"] == "def f(a, b" and sent["suffix"] == "):"


def test_files_of_context_are_refused_by_name() -> None:
    with pytest.raises(InvalidRequest) as info:
        body(**{FIM_FILES: [{"filename": "a.py", "text": "X = 1"}]})
    assert info.value.param == FIM_FILES
