"""The raw batched-decode curve: k sequences in one ``llama_batch``, llama.cpp's
low-level API, no tierlm in the loop (bench/batched_decode.py's reference).

The context is the one ``LlamaCppRunner(slots=k)`` decodes in (``open_model``
with ``slots=k``: n_seq_max = k, a KV stream per sequence), so the comparison
is the runner's own overhead and nothing else.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tierlm.runners.llama_cpp.worker.loader import open_model

if TYPE_CHECKING:
    from tierlm.runners.llama_cpp.model.spec import LlamaModelSpec

__all__ = ["eog_tokens", "raw_rate"]


def eog_tokens(llm: Any) -> list[int]:
    """Every end-of-generation token of the model (banned, so every stream
    decodes its full length)."""
    import llama_cpp

    vocab = llm._model.vocab
    return [t for t in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, t)]


def raw_rate(
    spec: LlamaModelSpec, k: int, threads: int, prompts: list[list[int]], steps: int
) -> float:
    """Aggregate decode tokens/s of ``k`` greedy sequences decoded together for
    ``steps`` steps after their prompts (evaluated first, untimed)."""
    import llama_cpp

    model = open_model("raw", replace(spec, n_threads=threads), slots=k)
    try:
        llm = model.llm
        ctx = llm._ctx.ctx
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
        banned = eog_tokens(llm)
        capacity = max(max(len(p) for p in prompts[:k]), k)
        batch = llama_cpp.llama_batch_init(capacity, 0, 1)
        samplers = []
        for _ in range(k):
            chain = llama_cpp.llama_sampler_chain_init(
                llama_cpp.llama_sampler_chain_default_params()
            )
            bias = (llama_cpp.llama_logit_bias * len(banned))()
            for i, token in enumerate(banned):
                bias[i].token, bias[i].bias = token, float("-inf")
            llama_cpp.llama_sampler_chain_add(
                chain, llama_cpp.llama_sampler_init_logit_bias(llm.n_vocab(), len(banned), bias)
            )
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
            samplers.append(chain)
        try:
            # Each prompt but its last token alone (k prompts together can pass
            # n_batch), then the k last tokens in one batch, for their logits.
            for seq in range(k):
                head = prompts[seq][:-1]
                for pos, token in enumerate(head):
                    _add(batch, pos, token, pos, seq, False)
                batch.n_tokens = len(head)
                if head and llama_cpp.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed on a prompt")
            for seq in range(k):
                _add(batch, seq, prompts[seq][-1], len(prompts[seq]) - 1, seq, True)
            rows = list(range(k))
            batch.n_tokens = k
            if llama_cpp.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed on the prompts")
            past = [len(prompts[seq]) for seq in range(k)]
            started = time.perf_counter()
            for _ in range(steps):
                tokens = [
                    llama_cpp.llama_sampler_sample(samplers[seq], ctx, rows[seq])
                    for seq in range(k)
                ]
                for seq in range(k):
                    _add(batch, seq, tokens[seq], past[seq], seq, True)
                    past[seq] += 1
                    rows[seq] = seq
                batch.n_tokens = k
                if llama_cpp.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed")
            return k * steps / (time.perf_counter() - started)
        finally:
            for chain in samplers:
                llama_cpp.llama_sampler_free(chain)
            llama_cpp.llama_batch_free(batch)
    finally:
        model.close()


def _add(batch: Any, i: int, token: int, pos: int, seq: int, logits: bool) -> None:
    batch.token[i] = token
    batch.pos[i] = pos
    batch.n_seq_id[i] = 1
    batch.seq_id[i][0] = seq
    batch.logits[i] = logits
