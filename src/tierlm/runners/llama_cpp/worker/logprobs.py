"""Log-probabilities of generated tokens (``logprobs`` / ``top_logprobs``).

Read from the logits of the position the token was sampled at, which the
context still holds when ``Llama.generate`` yields the token (the next
``llama_decode`` comes only at the next step): the model's own distribution,
log-softmaxed, before any sampling option (temperature, bias, grammar)
changed it, as llama-cpp-python's own ``logprobs`` are. Runs where the model
lives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tierlm.runners.llama_cpp.wire.messages import TokenLogprobs
from tierlm.runners.requests import TokenLogprob

if TYPE_CHECKING:
    from tierlm.runners.requests import GenerationRequest

__all__ = ["Logprobs"]


@dataclass(slots=True)
class Logprobs:
    llm: Any
    top: int

    @classmethod
    def of(cls, request: GenerationRequest, llm: Any) -> Logprobs | None:
        """None unless ``request`` asks for log-probabilities."""
        if not request.extra.get("logprobs"):
            return None
        return cls(llm, int(request.extra.get("top_logprobs") or 0))

    def of_token(self, token: int, index: int = -1) -> TokenLogprobs:
        """``index``: the logits' row in the last batch (-1: its last row)."""
        import llama_cpp
        import numpy as np

        llm = self.llm
        n_vocab = llm.n_vocab()
        pointer = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, index)
        logits = np.ctypeslib.as_array(pointer, shape=(n_vocab,)).astype(np.float64)
        peak = logits.max()
        logprobs = logits - peak - np.log(np.exp(logits - peak).sum())
        best: list[int] = []
        if self.top:
            candidates = np.argpartition(-logprobs, self.top - 1)[: self.top]
            best = sorted(candidates.tolist(), key=lambda t: -logprobs[t])
        return self._entry(token, logprobs), tuple(self._entry(t, logprobs) for t in best)

    def _entry(self, token: int, logprobs: Any) -> TokenLogprob:
        raw: bytes = self.llm.detokenize([token], special=True)
        return TokenLogprob(
            raw.decode("utf-8", errors="replace"), float(logprobs[token]), tuple(raw)
        )
