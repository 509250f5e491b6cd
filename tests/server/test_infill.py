"""Fill-in-the-middle (issue 56, item 9) on a generated GGUF that has FIM
tokens (``write_tiny_llama(fim=True)``): llama-server's ``/infill``
(``input_prefix``, ``input_suffix``, ``input_extra``, ``prompt``), streamed
and not, and OpenAI's ``suffix`` on ``/v1/completions``, laid out as
llama-server lays them (``<FIM_PRE>prefix<FIM_SUF>suffix<FIM_MID>``). The
sim backend, which has neither a tokenizer nor FIM, refuses each field by
name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server.helpers import Gateway, serve, sim_settings
from tierlm.server.settings.sources import settings_from_dict

MODEL = "coder"


@pytest.fixture(scope="module")
def fim_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gguf", reason="needs the gguf package to write test models")
    from tierlm.testing.gguf_model import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("fim") / "coder.gguf", seed=3, fim=True)


@pytest.fixture(scope="module")
def gw(fim_model: Path) -> Iterator[Gateway]:
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
    models = {MODEL: {"path": str(fim_model), "n_threads": 1}}
    with serve(settings_from_dict({"backend": {"kind": "llama-cpp", "models": models}})) as g:
        yield g


PREFIX = "def add(a, b):\n    return "
SUFFIX = "\n\nprint(add(1, 2))\n"


@pytest.mark.llama
def test_infill_answers_as_llama_server_does(gw: Gateway) -> None:
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 5, "temperature": 0}
    # llama.vim's own tuning fields are accepted and change nothing
    tuned = {**body, "cache_prompt": True, "t_max_predict_ms": 500, "samplers": ["top_k"]}
    answer = gw.http.post("/infill", json=tuned)
    assert answer.status_code == 200, answer.text
    got = answer.json()
    assert got["stop"] is True and got["tokens_predicted"] == 5 and got["stop_type"] == "limit"
    assert len(got["content"]) == 5  # the tiny model: one character a token
    # FIM_PRE + prefix + FIM_SUF + suffix + FIM_MID, one token a byte
    assert got["tokens_evaluated"] == len(PREFIX) + len(SUFFIX) + 3
    # the same gap through OpenAI's suffix: the same text
    fields = {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 5, "temperature": 0}
    completion = gw.http.post("/v1/completions", json={"model": MODEL, **fields}).json()
    assert completion["choices"][0]["text"] == got["content"]
    assert completion["usage"]["prompt_tokens"] == got["tokens_evaluated"]
    # a different suffix is a different prompt
    other = gw.http.post("/infill", json={**body, "input_suffix": "x"}).json()
    assert other["tokens_evaluated"] == len(PREFIX) + 1 + 3


@pytest.mark.llama
def test_infill_extra_files_and_the_middle_start(gw: Gateway) -> None:
    base = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 3, "temperature": 0}
    files = [{"filename": "util.py", "text": "X = 1\n"}]
    extra = gw.http.post("/infill", json={**base, "input_extra": files}).json()
    plain = gw.http.post("/infill", json=base).json()
    # no FIM_REP/FIM_SEP tokens: each file as "filename\ntext" before FIM_PRE
    assert extra["tokens_evaluated"] == plain["tokens_evaluated"] + len("util.py\nX = 1\n")
    middle = gw.http.post("/infill", json={**base, "prompt": "a +"}).json()
    assert middle["tokens_evaluated"] == plain["tokens_evaluated"] + 3


@pytest.mark.llama
def test_infill_streams_llama_server_events(gw: Gateway) -> None:
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 4, "stream": True}
    events = []
    with gw.http.stream("POST", "/infill", json=body) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[len("data: ") :]))
    pieces = [e for e in events if not e["stop"]]
    assert len(pieces) == 4 and events[-1]["stop"] is True
    assert events[-1]["tokens_predicted"] == 4


@pytest.mark.llama
def test_infill_refusals_name_the_infill_field(gw: Gateway) -> None:
    answer = gw.http.post("/infill", json={"input_prefix": "a", "n_predict": 0})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "n_predict"
    unknown = gw.http.post("/infill", json={"input_prefix": "a", "mystery": 1})
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "mystery"


@pytest.mark.llama
def test_tokenize_reads_the_fim_tokens(gw: Gateway) -> None:
    tokens = gw.http.post("/tokenize", json={"content": "<|fim_prefix|>ab", "model": MODEL})
    assert tokens.json()["tokens"][1:] == [ord("a"), ord("b")]
    back = gw.http.post("/detokenize", json={"tokens": tokens.json()["tokens"]}).json()
    assert back == {"content": "<|fim_prefix|>ab"}


def test_the_sim_backend_refuses_each_field_by_name() -> None:
    with serve(sim_settings()) as sim:
        refusals = {
            "/tokenize": ({"content": "hi"}, "content"),
            "/detokenize": ({"tokens": [1, 2]}, "tokens"),
            "/infill": ({"input_prefix": "a", "input_suffix": "b"}, "input_suffix"),
            "/v1/completions": ({"model": "sim-a", "prompt": [1, 2]}, "prompt"),
        }
        for path, (body, field) in refusals.items():
            answer = httpx.post(f"{sim.url}{path}", json=body)
            assert answer.status_code == 400, (path, answer.text)
            error = answer.json()["error"]
            assert error["param"] == field and error["code"] == "unsupported", (path, error)
        suffix = sim.http.post(
            "/v1/completions", json={"model": "sim-a", "prompt": "a", "suffix": "b"}
        ).json()["error"]
        assert suffix["param"] == "suffix" and "llama-cpp" in suffix["message"]
        # what sim can do: arrays of prompts and echo
        both = sim.http.post(
            "/v1/completions",
            json={"model": "sim-a", "prompt": ["ab", "cd"], "n": 2, "echo": True, "max_tokens": 2},
        ).json()
        assert [c["index"] for c in both["choices"]] == [0, 1, 2, 3]
        assert [c["text"][:2] for c in both["choices"]] == ["ab", "ab", "cd", "cd"]
