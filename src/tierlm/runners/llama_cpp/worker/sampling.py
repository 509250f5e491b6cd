"""The sampler chain of one generation, built here rather than by llama-cpp-python.

``Llama.generate`` builds its own chain (``Llama._init_sampler``): it has no
logit bias, and its grammar starts at the grammar's root. A resumed generation
(prompt + partial output, docs/design.md §4.9) continues an output
that is already part-way through the grammar, so this builds the same chain
(same samplers, same order, same defaults) with:

- ``logit_bias`` first (llama.cpp's logit-bias sampler); -100 bans the token
  (its logit becomes -inf, as OpenAI documents -100: "should result in a ban");
- the grammar (``grammars.request_grammar``), checked to parse: llama.cpp
  returns no sampler for a grammar it cannot parse, and a null sampler in the
  chain is a segfault;
- the partial output of a resumed generation fed to the chain first
  (``llama_sampler_accept``): the grammar continues from where the output
  stopped, and the penalties count what the uninterrupted run would have.
  Each of those tokens is checked against the grammar before it is accepted,
  since a token the grammar refuses would abort llama.cpp.

Runs where the model lives (the worker's decode thread).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tierlm.runners.errors import InvalidRequest, RunnerError
from tierlm.runners.llama_cpp.prompt.grammar_bounds import grammar_source
from tierlm.runners.llama_cpp.prompt.grammars import forget_grammar, request_grammar
from tierlm.runners.requests import FIM_FILES, FIM_MIDDLE, FIM_SUFFIX

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tierlm.runners.llama_cpp.worker.snapshots import Plan
    from tierlm.runners.requests import GenerationRequest

__all__ = [
    "HONOURED_OPTIONS",
    "build_sampler",
    "check_grammar",
    "check_options",
    "logit_bias",
    "resumed_tokens",
]

# llama-cpp-python's generate() defaults, used when a request leaves them open.
_DEFAULTS: dict[str, Any] = {
    "temp": 0.8,
    "top_k": 40,
    "top_p": 0.95,
    "min_p": 0.05,
    "typical_p": 1.0,
    "repeat_penalty": 1.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "mirostat_mode": 0,
    "mirostat_tau": 5.0,
    "mirostat_eta": 0.1,
}
# GenerationRequest.extra keys that are sampling options, by llama-cpp-python's name.
_SAMPLING = {key: key for key in _DEFAULTS if key != "temp"}
# Mirostat's m (llama-cpp-python's value): tokens used to estimate s.
_MIROSTAT_M = 100
HONOURED_OPTIONS = frozenset(
    {
        *_SAMPLING, "seed", "logit_bias", "grammar", "response_format", "tools",
        "tool_choice", "parallel_tool_calls", "logprobs", "top_logprobs",
        FIM_SUFFIX, FIM_FILES, FIM_MIDDLE,  # fill-in-the-middle: the prompt's layout
    }
)  # fmt: skip
"""Every ``GenerationRequest.extra`` key this runner honours; others are refused."""


def check_grammar(
    llama_cpp: Any, vocab: Any, text: str, extra: Mapping[str, Any], model_id: str
) -> Any:
    """A grammar sampler for ``text`` (the caller frees it or hands it to a chain)."""
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, text.encode("utf-8"), b"root")
    if not sampler:
        # docs/design.md §1.8: a refused grammar is not kept.
        forget_grammar(extra, model_id)
        param = grammar_source(extra)
        raise InvalidRequest(
            f"{param}: not a valid GBNF grammar (llama.cpp could not parse it; its message "
            "is in the worker's log)"
            if param == "grammar"
            else f"{param}: the grammar made from it does not parse in llama.cpp",
            param=param,
        )
    return sampler


def logit_bias(extra: Mapping[str, Any], n_vocab: int) -> dict[int, float]:
    """``logit_bias`` (token id -> bias, OpenAI's -100..100) as llama.cpp takes it."""
    biases: dict[int, float] = {}
    for key, value in (extra.get("logit_bias") or {}).items():
        token = int(key)
        if not 0 <= token < n_vocab:
            raise InvalidRequest(
                f"logit_bias: token id {token} is not in this model's vocabulary "
                f"(0 to {n_vocab - 1})",
                param=f"logit_bias.{key}",
            )
        biases[token] = -math.inf if value <= -100 else float(value)
    return biases


def _check_keys(request: GenerationRequest) -> None:
    for key in request.extra:
        if key not in HONOURED_OPTIONS:
            raise InvalidRequest(
                f"{key}: not supported by the llama-cpp runner "
                f"(it takes: {', '.join(sorted(HONOURED_OPTIONS))})",
                param=key,
                model_id=request.model_id,
            )


def check_options(model: Any, request: GenerationRequest) -> None:
    """Raise what ``build_sampler`` would raise for ``request`` (``model``: a
    ``llama_cpp._internals.LlamaModel``, a tokenizer-only one will do)."""
    import llama_cpp

    _check_keys(request)
    logit_bias(request.extra, model.n_vocab())
    text = request_grammar(request.extra, request.model_id)
    if text is not None:
        sampler = check_grammar(llama_cpp, model.vocab, text, request.extra, request.model_id)
        llama_cpp.llama_sampler_free(sampler)


def build_sampler(llm: Any, request: GenerationRequest, resumed: Sequence[int], seed: int) -> Any:
    """The chain for ``request``, fed the ``resumed`` tokens of its partial output."""
    import llama_cpp
    from llama_cpp._internals import LlamaSampler

    extra = request.extra
    _check_keys(request)
    options = {**_DEFAULTS, **{_SAMPLING[k]: v for k, v in extra.items() if k in _SAMPLING}}
    if request.temperature is not None:
        options["temp"] = request.temperature
    n_vocab = llm.n_vocab()
    chain = LlamaSampler()  # type: ignore[no-untyped-call]
    biases = logit_bias(extra, n_vocab)
    if biases:
        chain.add_logit_bias(n_vocab, biases)
    chain.add_penalties(
        n_vocab=n_vocab,
        penalty_last_n=llm.last_n_tokens_size,
        penalty_repeat=options["repeat_penalty"],
        penalty_freq=options["frequency_penalty"],
        penalty_present=options["presence_penalty"],
    )
    grammar = None
    text = request_grammar(extra, request.model_id)
    if text is not None:
        grammar = check_grammar(llama_cpp, llm._model.vocab, text, extra, request.model_id)
        llama_cpp.llama_sampler_chain_add(chain.sampler, grammar)
    _add_final(chain, options, n_vocab, seed)
    for token in resumed:
        if grammar is not None and not _allows(llama_cpp, grammar, token):
            raise RunnerError(
                f"model {request.model_id!r}: the partial output of a resumed generation "
                "does not fit its grammar",
                model_id=request.model_id,
            )
        chain.accept(token)
    return chain


def _add_final(chain: Any, options: Mapping[str, Any], n_vocab: int, seed: int) -> None:
    """What picks the token, as llama-cpp-python's ``_init_sampler`` does, except
    that mirostat applies the temperature first (llama.cpp's own sampler does)."""
    temp = options["temp"]
    if temp == 0.0:
        chain.add_greedy()
        return
    mode = options["mirostat_mode"]
    if mode:
        chain.add_temp(temp)
        tau, eta = options["mirostat_tau"], options["mirostat_eta"]
        if mode == 1:
            chain.add_mirostat(n_vocab, seed, tau, eta, _MIROSTAT_M)
        else:
            chain.add_mirostat_v2(seed, tau, eta)
        return
    chain.add_top_k(options["top_k"])
    chain.add_typical(options["typical_p"], 1)
    chain.add_top_p(options["top_p"], 1)
    chain.add_min_p(options["min_p"], 1)
    chain.add_temp(temp)
    chain.add_dist(seed)


def _allows(llama_cpp: Any, grammar: Any, token: int) -> bool:
    """Would the grammar, in its current state, accept ``token`` next?"""
    data = (llama_cpp.llama_token_data * 1)()
    data[0].id, data[0].logit, data[0].p = token, 0.0, 0.0
    candidates = llama_cpp.llama_token_data_array(data=data, size=1, selected=-1, sorted=False)
    llama_cpp.llama_sampler_apply(grammar, ctypes.byref(candidates))
    return bool(data[0].logit != -math.inf)


def resumed_tokens(llm: Any, request: GenerationRequest, plan: Plan) -> list[int]:
    """The tokens of a resumed generation's partial output (``resume_text``):
    the plan's tokens after the prompt when they spell it exactly (the exact
    tokens of the preempted run, or the text re-tokenized with its prompt),
    else the text tokenized alone."""
    resume = request.resume_text
    if not resume:
        return []
    wanted = resume.encode("utf-8")
    after_prompt = plan.tokens[plan.prompt_tokens :]
    if llm.detokenize(after_prompt) == wanted:
        return after_prompt
    alone: list[int] = llm.tokenize(wanted, add_bos=False, special=False)
    return alone
