"""Which tokens a generation runs from, and how much of them the KV cache holds.

The text a model continues is the prompt (or rendered chat) + ``resume_text``.
llama-cpp-python's ``generate`` reuses the context's KV cache for the longest
prefix it shares with the previous generation, so a request that repeats the
last one's prefix evaluates only the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tierlm.runners.llama_cpp.loader import LoadedModel
    from tierlm.runners.protocol import GenerationRequest

__all__ = ["Plan", "common_prefix", "plan"]


@dataclass(slots=True)
class Plan:
    """The tokens to generate from, and what the KV cache already holds of them."""

    tokens: list[int]
    prompt_tokens: int
    """Tokens of the prompt alone (before any resume text)."""
    reused: int = 0
    """Leading tokens already in the context's KV cache (not evaluated again)."""
    restored: int = 0
    resumed_from: Literal["", "snapshot", "tokens", "text"] = ""


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def cached_prefix(model: LoadedModel, tokens: Sequence[int]) -> int:
    """How many leading ``tokens`` llama-cpp-python's ``generate`` will take
    from the context's KV cache instead of evaluating them."""
    llm = model.llm
    n = common_prefix(llm.input_ids[: llm.n_tokens].tolist(), tokens)
    # All of them cached: generate() evaluates the last one again, for its logits.
    return n - 1 if n == len(tokens) and n > 0 else n


def plan(model: LoadedModel, request: GenerationRequest) -> Plan:
    prompt_mode = request.prompt is not None
    text = model.text.prompt_text(request)
    prompt = model.text.tokenize(text, prompt=prompt_mode)
    if request.resume_text:
        tokens = model.text.tokenize(text + request.resume_text, prompt=prompt_mode)
        resumed: Literal["", "text"] = "text"
    else:
        tokens, resumed = prompt, ""
    return Plan(tokens, len(prompt), cached_prefix(model, tokens), resumed_from=resumed)
