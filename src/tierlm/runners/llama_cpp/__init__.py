"""llama.cpp through llama-cpp-python, in a crash-isolated worker process.

- ``runner``: ``LlamaCppRunner``, the asyncio side (docs/design.md §1 runners);
- ``spec``: ``LlamaModelSpec``, typed and checked load options;
- ``default_model``: the embedded SmolLM2-135M-Instruct (``tierlm[local]``);
- ``transport``, ``worker``, ``calls``, ``control``, ``messages``: the worker
  process and how the runner talks to it;
- ``service``, ``loader``, ``decode``, ``snapshots``: what runs where the
  model lives (one decode thread, loading, the token loop, KV reuse);
- ``batch``, ``batch_seq``, ``lanes``, ``cpu_flags``: ``slots`` > 1, continuous
  batching (one ``llama_batch`` per step) and the AMX check it needs;
- ``capacity``, ``gguf_header``: how many slots when nobody says (the KV a
  token takes, read from the GGUF header, against the machine's memory);
- ``faults``: fault injection, for tests only.

Importing this package does not import llama_cpp: that happens where the
model is loaded.
"""

from tierlm.runners.llama_cpp.batch import DEFAULT_SLOTS, PREFILL_CHUNK
from tierlm.runners.llama_cpp.decode import RUN_AHEAD
from tierlm.runners.llama_cpp.default_model import (
    DEFAULT_CHAT_MODEL_ID,
    DEFAULT_SYSTEM_PROMPT,
    default_chat_model,
    default_chat_spec,
)
from tierlm.runners.llama_cpp.messages import GenerationStats, LoadInfo
from tierlm.runners.llama_cpp.runner import ISOLATIONS, Isolation, LlamaCppRunner
from tierlm.runners.llama_cpp.spec import (
    DEFAULT_N_BATCH,
    DEFAULT_N_CTX,
    LlamaModelSpec,
    default_threads,
    physical_cores,
)

__all__ = [
    "DEFAULT_CHAT_MODEL_ID",
    "DEFAULT_N_BATCH",
    "DEFAULT_N_CTX",
    "DEFAULT_SLOTS",
    "DEFAULT_SYSTEM_PROMPT",
    "ISOLATIONS",
    "PREFILL_CHUNK",
    "RUN_AHEAD",
    "GenerationStats",
    "Isolation",
    "LlamaCppRunner",
    "LlamaModelSpec",
    "LoadInfo",
    "default_chat_model",
    "default_chat_spec",
    "default_threads",
    "physical_cores",
]
