"""llama.cpp through llama-cpp-python, in a crash-isolated worker process.

Its rooms follow the process boundary (docs/design.md §1.2):

- ``host/``: the runner's process. ``LlamaCppRunner`` (the asyncio side), the
  worker's transport and supervisor, the calls in flight, the slots it hands out;
- ``worker/``: the worker process. Its main loop and decode service, the
  model loader, sampling, log-probabilities, KV snapshots and their pool, and
  ``engine/``, the decode loops (one generation, or a batch of them);
- ``wire/``: what crosses between them. Messages, the shared control block,
  fault injection (for tests only);
- ``model/``: what a model is and how big the device is, read without
  loading it. ``LlamaModelSpec``, the GGUF header, the CPU flags, the slots
  when nobody says, the embedded default model (``tierlm[local]``);
- ``prompt/``: the chat template's tools, literal message text, grammars.

``host/`` and ``worker/`` never import each other (``tests/test_architecture.py``),
but for the one door ``isolation="thread"`` needs. Importing this package does
not import llama_cpp: that happens where the model is loaded.
"""

from tierlm.runners.llama_cpp.host.runner import ISOLATIONS, Isolation, LlamaCppRunner
from tierlm.runners.llama_cpp.model.capacity import DEFAULT_SLOTS
from tierlm.runners.llama_cpp.model.default_model import (
    DEFAULT_CHAT_MODEL_ID,
    DEFAULT_SYSTEM_PROMPT,
    default_chat_model,
    default_chat_spec,
)
from tierlm.runners.llama_cpp.model.spec import (
    DEFAULT_N_BATCH,
    DEFAULT_N_CTX,
    LlamaModelSpec,
    default_threads,
    physical_cores,
)
from tierlm.runners.llama_cpp.wire.messages import GenerationStats, LoadInfo
from tierlm.runners.llama_cpp.worker.engine.batch import PREFILL_CHUNK
from tierlm.runners.llama_cpp.worker.engine.pieces import RUN_AHEAD

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
