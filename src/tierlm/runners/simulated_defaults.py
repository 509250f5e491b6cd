"""The simulated device's defaults, each with where its value comes from.

``SimulatedRunner`` (``runners/simulated.py``) re-exports them.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_KV_BYTES_PER_TOKEN",
    "DEFAULT_N_BATCH",
    "DEFAULT_RESTORE_SECONDS",
    "DEFAULT_SNAPSHOT_POOL_BYTES",
    "DEFAULT_SWAP_SECONDS",
    "DEFAULT_TOKEN_INTERVAL",
    "LLAMA_CPP_CPU_BATCH_COST",
]

# Defaults: a phone-class device of the seed (~20 tokens/s decode, ~10 s swap,
# "~10 s to unload + load on flutter_gemma 1.1.x").
DEFAULT_TOKEN_INTERVAL = 0.05
DEFAULT_SWAP_SECONDS = 10.0
# KV state per token of context: ~23 KB for SmolLM2-135M (bench/results/
# real_model.json, section "resume": 35 039 784 bytes for a 1 512-token
# context, as measured on these machines). Sizes the snapshots, and so how
# many fit the pool.
DEFAULT_KV_BYTES_PER_TOKEN = 23_000
# The KV snapshot pool of the llama.cpp runner: 512 MiB by default (its
# config; docs/design.md §4.9). ~23 000 tokens of context.
DEFAULT_SNAPSHOT_POOL_BYTES = 512 << 20
# Save + restore of one snapshot, measured on the llama.cpp worker with
# SmolLM2-135M on these machines (bench/results/real_model.json, section
# "resume", "kv restore", p50 of a 1 512-token context): save 25.1 ms +
# restore 4.6 ms. The resumed generation then evaluates one token, the step
# that produces its next token anyway, so nothing else is redone. For
# contrast, re-evaluating that context took 1.10x a fresh prompt evaluation
# (the same section, "re-evaluation"): what ``re-evaluate`` charges.
DEFAULT_RESTORE_SECONDS = 0.03
# Tokens per llama_decode of a prompt: llama-cpp-python's default n_batch, and
# the llama.cpp runner's (LlamaModelSpec.n_batch). An aborted evaluation keeps
# the batches it finished.
DEFAULT_N_BATCH = 512
# llama.cpp's batched-decode curve on 2 CPU cores (SmolLM2-135M Q4_1, k in one
# llama_batch: 33, 59, 96, 142, 192 tokens/s for k = 1..16 on 2 threads): a step
# of k costs 1 + c (k - 1) of one's, least-squares c = 0.12 (1 thread: 0.59).
# That curve was measured with OpenMP's passive waits, which made one sequence
# slow on 2 threads; with the worker's short spin (docs/design.md §1) one
# sequence runs at ~74 tokens/s and the CPU curve is 1.0, 1.6, 2.6, 4.0 for
# k = 1, 2, 4, 8 (the llama.cpp runner's CPU_STEP_COST, c ~ 0.43). The simulated
# device keeps 0.12: a batching device between that CPU and a GPU's flat curve,
# on which the demo's batched cases were set; pass ``batch_cost`` for another.
LLAMA_CPP_CPU_BATCH_COST = 0.12
