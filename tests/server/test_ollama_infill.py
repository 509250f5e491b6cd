"""Fill-in-the-middle through Ollama's ``/api/generate`` ``suffix`` (Ollama's
*insert*), with the official ``ollama`` client: on a real
gateway serving the generated GGUF that has FIM tokens (as test_infill.py),
the same gap as ``/v1/completions``' ``suffix``; a model without FIM tokens
a 400 naming ``suffix``. Then a second gateway whose ``ollama`` backend is
the first one's Ollama API: the runner sends ``suffix`` upstream (Ollama's own
field), and the upstream's refusal comes back as the same 400.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.server.helpers import WAIT, Gateway, serve
from tierlm.server.settings.sources import settings_from_dict

pytestmark = pytest.mark.llama
ollama = pytest.importorskip("ollama", reason="needs the ollama client (the dev extra)")

CODER, PLAIN = "coder", "plain"
PREFIX = "def add(a, b):\n    return "
SUFFIX = "\n\nprint(add(1, 2))\n"
GREEDY = {"num_predict": 5, "temperature": 0}


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    pytest.importorskip("gguf", reason="needs the gguf package to write test models")
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
    from tierlm.testing.gguf_model import write_tiny_llama

    folder = tmp_path_factory.mktemp("ollama-fim")
    models = {
        CODER: {"path": str(write_tiny_llama(folder / "coder.gguf", seed=3, fim=True))},
        PLAIN: {"path": str(write_tiny_llama(folder / "plain.gguf", seed=3))},
    }
    for model in models.values():
        model["n_threads"] = 1
    with serve(settings_from_dict({"backend": {"kind": "llama-cpp", "models": models}})) as g:
        yield g


def client(gw: Gateway) -> Any:
    return ollama.Client(host=gw.url, timeout=WAIT * 4)


def refusal(call: Any) -> Any:
    with pytest.raises(ollama.ResponseError) as info:
        call()
    return info.value


def openai_fim(gw: Gateway) -> dict[str, Any]:
    """The same gap through ``/v1/completions``' ``suffix``."""
    fields = {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 5, "temperature": 0}
    answer = gw.http.post("/v1/completions", json={"model": CODER, **fields})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_generate_with_suffix_fills_the_gap(gw: Gateway) -> None:
    expected = openai_fim(gw)
    text = expected["choices"][0]["text"]
    c = client(gw)
    answer = c.generate(model=CODER, prompt=PREFIX, suffix=SUFFIX, options=GREEDY)
    assert answer.response == text and len(text) == 5  # the tiny model: a character a token
    assert answer.done and answer.done_reason == "length" and answer.eval_count == 5
    # <FIM_PRE> prefix <FIM_SUF> suffix <FIM_MID>: one token a byte, as /v1's
    assert answer.prompt_eval_count == expected["usage"]["prompt_tokens"]
    assert answer.prompt_eval_count == len(PREFIX) + len(SUFFIX) + 3
    streamed = list(
        c.generate(
            model=f"{CODER}:latest", prompt=PREFIX, suffix=SUFFIX, options=GREEDY, stream=True
        )
    )
    assert "".join(part.response for part in streamed) == text and streamed[-1].done
    # raw changes nothing: the gap is laid out with the FIM tokens either way
    raw = c.generate(model=CODER, prompt=PREFIX, suffix=SUFFIX, options=GREEDY, raw=True)
    assert raw.response == text
    # a different suffix is a different prompt
    other = c.generate(model=CODER, prompt=PREFIX, suffix="x", options=GREEDY)
    assert other.prompt_eval_count == len(PREFIX) + 1 + 3
    assert gw.state()["gateway"]["recent"][0]["model"] == CODER


def test_generate_with_suffix_refusals_name_the_field(gw: Gateway) -> None:
    c = client(gw)
    plain = refusal(lambda: c.generate(model=PLAIN, prompt=PREFIX, suffix=SUFFIX, options=GREEDY))
    assert plain.status_code == 400 and plain.error.startswith("suffix: "), plain.error
    assert repr(PLAIN) in plain.error and "fill-in-the-middle" in plain.error
    system = refusal(lambda: c.generate(model=CODER, prompt="a", suffix="b", system="Be brief."))
    assert system.status_code == 400 and system.error.startswith("system: "), system.error
    schema = refusal(lambda: c.generate(model=CODER, prompt="a", suffix="b", format="json"))
    assert schema.status_code == 400 and schema.error.startswith("format: "), schema.error
    # an empty suffix is no gap: a plain generate (the model's template), as Ollama
    assert c.generate(model=PLAIN, prompt="hi", suffix="", options=GREEDY).done


def test_the_ollama_backend_sends_suffix_upstream(gw: Gateway) -> None:
    """A gateway whose ``ollama`` backend is ``gw``'s Ollama API."""
    text = openai_fim(gw)["choices"][0]["text"]
    backend = {"kind": "ollama", "url": gw.url, "models": [CODER, PLAIN]}
    with serve(settings_from_dict({"backend": backend})) as front:
        c = client(front)
        answer = c.generate(model=CODER, prompt=PREFIX, suffix=SUFFIX, options=GREEDY)
        assert answer.response == text
        assert gw.state()["gateway"]["recent"][0]["model"] == CODER  # run upstream
        # /v1/completions' suffix takes the same way upstream
        fields = {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 5, "temperature": 0}
        completion = front.http.post("/v1/completions", json={"model": CODER, **fields})
        assert completion.json()["choices"][0]["text"] == text
        plain = refusal(lambda: c.generate(model=PLAIN, prompt=PREFIX, suffix=SUFFIX))
        assert plain.status_code == 400 and plain.error.startswith("suffix: "), plain.error
        assert "does not support insert" in plain.error


def test_show_lists_insert_for_a_model_with_fim_tokens_only(gw: Gateway) -> None:
    # Editor plugins (Continue, llama.vscode over Ollama) ask /api/show for
    # `insert` before they send a suffix.
    assert "insert" in (client(gw).show(CODER).capabilities or [])
    assert "insert" not in (client(gw).show(PLAIN).capabilities or [])
