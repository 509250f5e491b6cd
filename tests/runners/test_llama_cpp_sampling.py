"""The sampler chain a request gets (``runners/llama_cpp/worker/sampling.py``), read
back from llama.cpp: each option is a sampler in it, in llama-cpp-python's
order, with logit_bias first; a resumed generation's partial output is fed
to the grammar first, and one the grammar refuses is an error, not an abort.
Over a generated tiny GGUF (its vocabulary: one token per byte)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tierlm.runners.errors import InvalidRequest, RunnerError
from tierlm.runners.requests import GenerationRequest

if TYPE_CHECKING:
    from tests.runners.helpers import TinyModels

pytestmark = pytest.mark.llama
llama_cpp = pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")

from tierlm.runners.llama_cpp.worker.sampling import build_sampler  # noqa: E402


@pytest.fixture(scope="module")
def llm(tiny_models: TinyModels) -> Any:
    return llama_cpp.Llama(model_path=str(tiny_models.a), n_ctx=256, n_threads=1, verbose=False)


def chain_of(llm: Any, resumed: list[int] | None = None, **fields: Any) -> list[str]:
    extra = fields.pop("extra", {})
    request = GenerationRequest(model_id="a", prompt="x", extra=extra, **fields)
    sampler = build_sampler(llm, request, resumed or [], seed=1)
    chain = sampler.sampler
    names = [
        llama_cpp.llama_sampler_name(llama_cpp.llama_sampler_chain_get(chain, i)).decode()
        for i in range(llama_cpp.llama_sampler_chain_n(chain))
    ]
    sampler.close()
    return names


# llama.cpp names a sampler that changes nothing with its options "?name".
DEFAULT = ["?penalties", "top-k", "?typical", "top-p", "min-p", "temp", "dist"]


def test_the_default_chain_is_llama_cpp_python_s(llm: Any) -> None:
    assert chain_of(llm) == DEFAULT
    assert chain_of(llm, temperature=0.0) == ["?penalties", "greedy"]


@pytest.mark.parametrize("penalty", ["repeat_penalty", "frequency_penalty", "presence_penalty"])
def test_a_penalty_turns_the_penalties_on(llm: Any, penalty: str) -> None:
    assert chain_of(llm, extra={penalty: 1.2}) == ["penalties", *DEFAULT[1:]]


def test_each_option_is_in_the_chain(llm: Any) -> None:
    assert chain_of(llm, extra={"logit_bias": {"65": -100}}) == ["logit-bias", *DEFAULT]
    assert chain_of(llm, extra={"grammar": 'root ::= "a"+'}) == [
        "?penalties", "grammar", *DEFAULT[1:]
    ]  # fmt: skip
    assert chain_of(llm, extra={"mirostat_mode": 2}) == ["?penalties", "temp", "mirostat-v2"]
    assert chain_of(llm, extra={"mirostat_mode": 1})[-1] == "mirostat"


def test_a_resumed_output_is_fed_to_the_grammar(llm: Any) -> None:
    grammar = {"grammar": 'root ::= "ab"+'}
    a, b = (llm.tokenize(c, add_bos=False) for c in (b"a", b"b"))
    assert chain_of(llm, [*a, *b, *a], extra=grammar)  # "aba": a prefix of the grammar's
    with pytest.raises(RunnerError, match="partial output of a resumed generation"):
        chain_of(llm, [*b], extra=grammar)  # "b" cannot start it: refused, no abort


def test_refusals_name_the_field(llm: Any) -> None:
    with pytest.raises(InvalidRequest) as info:
        chain_of(llm, extra={"logit_bias": {str(llm.n_vocab()): 1.0}})
    assert info.value.param == f"logit_bias.{llm.n_vocab()}"
    with pytest.raises(InvalidRequest) as info:
        chain_of(llm, extra={"grammar": "root ::= nothing"})
    assert info.value.param == "grammar"
