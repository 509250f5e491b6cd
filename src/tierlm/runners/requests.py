"""What a runner is asked to generate, and what it yields: ``GenerationRequest``,
chat ``Message``s, and ``TokenPiece`` (a piece of text with its logprobs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FIM_FILES",
    "FIM_MIDDLE",
    "FIM_SUFFIX",
    "GenerationRequest",
    "Message",
    "TokenLogprob",
    "TokenPiece",
]

# Fill-in-the-middle, as ``GenerationRequest.extra`` keys (a prompt request:
# the prompt is the text before the gap). The text after the gap (OpenAI's
# ``suffix``, llama-server's ``input_suffix``): its presence asks for FIM;
# files of context before it (llama-server's ``input_extra``: a list of
# ``{"filename", "text"}``); the text after FIM_MID, the middle's start
# (llama-server's ``prompt`` on ``/infill``). A runner without FIM refuses
# them as any extra it cannot honour.
FIM_SUFFIX = "suffix"
FIM_FILES = "infill_extra"
FIM_MIDDLE = "infill_middle"

Message = Mapping[str, Any]
"""An OpenAI-style chat message: ``{"role": "user", "content": "hi"}``."""


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """A token and its log-probability under the model (before any sampling
    option changed the distribution)."""

    token: str
    logprob: float
    bytes: tuple[int, ...]
    """The token's UTF-8 bytes (a token may hold part of a character)."""


class TokenPiece(str):
    """A piece of generated text with its token's log-probability and the most
    likely tokens at its position (``top``, most likely first). Runners that
    can compute them yield these when a request asks (``extra["logprobs"]``);
    to everyone else it is the piece's text."""

    logprob: TokenLogprob
    top: tuple[TokenLogprob, ...]

    def __new__(
        cls, text: str, logprob: TokenLogprob, top: tuple[TokenLogprob, ...] = ()
    ) -> TokenPiece:
        piece = super().__new__(cls, text)
        piece.logprob = logprob
        piece.top = top
        return piece


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One generation: a prompt (completion) or messages (chat), not both.

    ``resume_text`` is output already produced by an earlier, preempted run of the
    same request (docs/design.md §4.9): the runner continues from prompt +
    ``resume_text`` (for chat, as a continued assistant message) and yields only
    the new text. ``max_tokens`` counts the new tokens only.

    Runners yield one text piece per generated token, so the number of pieces is
    the number of tokens.
    """

    model_id: str
    prompt: str | None = None
    messages: Sequence[Message] | None = None
    max_tokens: int = 128
    resume_text: str = ""
    temperature: float | None = None
    stop: Sequence[str] = ()
    prompt_tokens: int | None = None
    """Size of the prompt in tokens, when the caller knows it (the simulator does)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Options beyond the common ones, by their OpenAI names (``top_p``,
    ``seed``, ``logit_bias``, ``response_format``, ``tools``, ``tool_choice``,
    ``parallel_tool_calls``, ``logprobs``...) or a backend's own (llama.cpp's
    ``grammar``, ``top_k``, ``mirostat_mode``). A runner honours them, passes
    them on to its server, or raises ``InvalidRequest``; it never drops one."""
    person: bool = False
    """A person waits on it (its job is T0 or T1 when it starts): a batched
    runner evaluates its prompt before background prompts (docs/design.md
    §4.7 (the step plan)). The shell sets it; callers need not."""
    job_id: int | str | None = None
    """The scheduler job this generation belongs to, when known: a runner's
    errors name it (e.g. a crashed llama.cpp worker: "while generating for job 12")."""

    def __post_init__(self) -> None:
        if not self.model_id:
            raise ValueError("model_id: must be a non-empty string")
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("prompt/messages: give exactly one of them")
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool):
            raise TypeError(f"max_tokens: must be an int, got {type(self.max_tokens).__name__}")
        if self.max_tokens <= 0:
            raise ValueError(f"max_tokens: must be > 0, got {self.max_tokens}")

    def approx_prompt_tokens(self) -> int:
        """The prompt size in tokens: the given count, else ~4 characters a token."""
        if self.prompt_tokens is not None:
            return self.prompt_tokens
        if self.prompt is not None:
            text = self.prompt
        else:
            assert self.messages is not None
            text = "".join(str(m.get("content", "")) for m in self.messages)
        return max(1, (len(text) + len(self.resume_text) + 3) // 4)
