"""One generation on a loaded model: evaluate the prompt, sample token by token.

Runs on the worker's one decode thread (docs/design.md §1 runners). Stopping:

- between tokens, the loop reads the control block before every decode, so a
  generation stops within one token of a cancel;
- during a prompt evaluation (one ``llama_decode`` of up to the whole prompt,
  seconds for a long prompt on a small device), llama.cpp's abort callback
  (``llama_set_abort_callback``) polls the same word between graph nodes and
  aborts the decode; llama.cpp then removes the aborted batch from the KV cache
  and the context keeps working. The callback is installed only while a prompt
  is evaluated: it costs a Python call per graph node, and a single-token decode
  is short enough to wait for.

Where the tokens come from (prompt + resume text, a KV snapshot, the cached
prefix) is ``snapshots.py``'s job; this module only runs them.
"""

from __future__ import annotations

import codecs
import time
from typing import TYPE_CHECKING, Any

from tierlm.runners.llama_cpp.messages import GenerationStats, Piece
from tierlm.runners.protocol import RunnerError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from tierlm.runners.llama_cpp.control import ControlBlock
    from tierlm.runners.llama_cpp.faults import FaultInjection
    from tierlm.runners.llama_cpp.loader import LoadedModel
    from tierlm.runners.llama_cpp.snapshots import Plan, TokenLog
    from tierlm.runners.protocol import GenerationRequest

__all__ = ["RUN_AHEAD", "decode", "sampling_options"]

RUN_AHEAD = 8
"""Tokens the decode loop may produce beyond what its reader has taken.

Unbounded, a loop decoding thousands of tokens a second runs far ahead of a
busy event loop, and all of that is decoded after a cancel the reader would
have honoured at once. A few tokens of slack keep the loop from waiting on
the reader for every token."""
# How often a loop that is RUN_AHEAD tokens ahead checks its reader again.
_RUN_AHEAD_POLL = 0.001

# llama-cpp-python's generate() sampling defaults, used when a request leaves them open.
_SAMPLING_DEFAULTS: dict[str, Any] = {"temp": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
# GenerationRequest.extra keys passed to Llama.generate (OpenAI names -> llama-cpp names).
_SAMPLING_KEYS = {
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "typical_p": "typical_p",
    "repeat_penalty": "repeat_penalty",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "mirostat_mode": "mirostat_mode",
    "mirostat_tau": "mirostat_tau",
    "mirostat_eta": "mirostat_eta",
}
# Sampling options this runner will take but cannot apply yet: refused by name,
# never silently ignored (structured output adds them).
_NOT_YET = ("logit_bias",)


def sampling_options(request: GenerationRequest, llm: Any) -> dict[str, Any]:
    """``Llama.generate`` keyword arguments for ``request``.

    ``extra["grammar"]`` is a GBNF grammar (llama.cpp's) that constrains the
    output; keys this runner does not know are left to other backends.
    """
    model_id = request.model_id
    sampling = dict(_SAMPLING_DEFAULTS)
    if request.temperature is not None:
        sampling["temp"] = request.temperature
    for key, value in request.extra.items():
        if key in _SAMPLING_KEYS:
            sampling[_SAMPLING_KEYS[key]] = value
        elif key in _NOT_YET:
            raise RunnerError(
                f"model {model_id!r}: {key}: not supported by the llama-cpp runner yet",
                model_id=model_id,
            )
    grammar = request.extra.get("grammar")
    if grammar is not None:
        sampling["grammar"] = _grammar(str(grammar), llm, model_id)
    return sampling


def _grammar(text: str, llm: Any, model_id: str) -> Any:
    """A checked GBNF grammar: llama.cpp returns no sampler for a grammar it
    cannot parse, and llama-cpp-python would add that null to the sampler
    chain (a segfault), so it is parsed once here first."""
    import llama_cpp
    from llama_cpp.llama_grammar import LlamaGrammar

    grammar = LlamaGrammar.from_string(text, verbose=False)
    sampler = llama_cpp.llama_sampler_init_grammar(
        llm._model.vocab, text.encode("utf-8"), grammar._root.encode("utf-8")
    )
    if not sampler:
        raise RunnerError(
            f"model {model_id!r}: grammar: not a valid GBNF grammar (llama.cpp could not "
            "parse it; its message is in the worker's log)",
            model_id=model_id,
        )
    llama_cpp.llama_sampler_free(sampler)
    return grammar


def decode(
    model: LoadedModel,
    request: GenerationRequest,
    plan: Plan,
    *,
    gen_id: int,
    control: ControlBlock,
    send: Callable[[Piece], None],
    stats: GenerationStats,
    journal: TokenLog,
    fault: FaultInjection | None = None,
) -> None:
    """Generate from ``plan.tokens`` (already partly in the KV cache, as the
    plan arranged), sending one ``Piece`` per token; fill ``stats``."""
    import llama_cpp

    llm = model.llm
    started = time.perf_counter()

    def stop() -> bool:
        return control.stop_reason(gen_id) is not None

    def emit(text: str) -> bool:
        index = stats.tokens
        while index - control.consumed(gen_id) >= RUN_AHEAD:  # bounded run-ahead
            if stop():
                return False
            time.sleep(_RUN_AHEAD_POLL)
        stats.tokens += 1
        send(Piece(gen_id, text))
        return True

    sampling = sampling_options(request, llm)
    model_seed = llm._seed
    if "seed" in request.extra:  # for this request only; restored below
        llm.set_seed(int(request.extra["seed"]))
    vocab = llm._model.vocab
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    stops = [s for s in request.stop if s]
    held = ""  # text that may be the start of a stop string, not yet emitted
    ctx = llm._ctx.ctx
    null_cb = llama_cpp.ggml_abort_callback()
    n_ctx = llm.n_ctx()

    generator = llm.generate(plan.tokens, reset=True, **sampling)
    first_at: float | None = None
    try:
        for i in range(request.max_tokens):
            if stop():
                stats.ended = "cancelled"
                break
            if llm.n_tokens >= n_ctx:
                stats.ended = "context_full"
                break
            if fault is not None and fault.at == "token" and i == fault.after_tokens:
                fault.fire()
            if first_at is None:
                # The prompt evaluation: abortable between graph nodes.
                model.abort_check = stop
                llama_cpp.llama_set_abort_callback(ctx, model.abort_cb, None)
                try:
                    token = next(generator)
                except RuntimeError as exc:
                    if stop() and "returned 2" in str(exc):  # GGML_STATUS_ABORTED
                        stats.ended = "prefill_aborted"
                        stats.prefill_seconds = time.perf_counter() - started
                        # n_tokens counts only the batches that completed; the
                        # next eval drops the rest from the KV cache.
                        return
                    raise
                finally:
                    llama_cpp.llama_set_abort_callback(ctx, null_cb, None)
                    model.abort_check = None
                first_at = time.perf_counter()
                stats.prefill_seconds = first_at - started
            else:
                token = next(generator)
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                stats.ended = "eos"
                break
            piece = utf8.decode(llm.detokenize([token], special=False))
            if stops:
                held += piece
                hit = _find_stop(held, stops)
                if hit is not None:
                    _record(journal, token, held[:hit], clean=False)
                    emit(held[:hit])
                    held = ""
                    stats.ended = "stop"
                    break
                # Hold back what may start a stop string, but still one
                # piece per token (possibly empty), so pieces count tokens;
                # the last token releases everything.
                cut = len(held) if i == request.max_tokens - 1 else _safe_prefix(held, stops)
                piece, held = held[:cut], held[cut:]
            _record(journal, token, piece, clean=not held and not utf8.getstate()[0])
            if not emit(piece):
                stats.ended = "cancelled"
                break
        else:
            stats.ended = "max_tokens"
        if held and stats.ended in ("eos", "context_full"):
            # Text held back for a stop string that never came: the end
            # token's piece. (After a cancel it is dropped, so a resume
            # regenerates it: nothing is duplicated.)
            emit(held)
    finally:
        generator.close()
        llm.set_seed(model_seed)
        if first_at is not None:
            stats.decode_seconds = time.perf_counter() - first_at


def _record(journal: TokenLog, token: int, piece: str, *, clean: bool) -> None:
    journal.tokens.append(token)
    journal.pieces.append(piece)
    journal.clean.append(clean)


def _find_stop(text: str, stops: Sequence[str]) -> int | None:
    """Index of the earliest stop string in ``text``, None if there is none."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else None


def _safe_prefix(text: str, stops: Sequence[str]) -> int:
    """Length of the prefix of ``text`` that cannot be part of a stop string."""
    for start in range(len(text)):
        rest = text[start:]
        if any(s.startswith(rest) for s in stops):
            return start
    return len(text)
