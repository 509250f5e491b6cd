"""Ollama's requests, as pydantic models of the shapes in Ollama's docs/api.md
(named ``Ollama*``: /openapi.json lists them beside OpenAI's of the same name).

Validated as every gateway request is (``openai.requests.parse``): a request
that does not fit gets a 400 naming the field (``options.num_predict: ...``)
and what it must be. Unknown top-level fields are rejected, as on ``/v1``.
What Ollama defines and tierlm cannot do is declared and refused when a value
asks for it (``not_supported``): images, ``think``, a ``template`` or
``context`` of the caller's, log-probabilities. The load-time ``options``
(``num_gpu``, ``num_thread``, ``use_mmap``...) are accepted and not applied:
how a model is loaded is the operator's configuration (``[backend.models.ID]``),
not a request's, since one model serves every producer (docs/design.md §2).

``options`` is Ollama's bag of knobs, and Ollama ignores (and logs) the ones
it does not use: ``num_gqa``, ``rope_frequency_base``, ``tfs_z``,
``typical_p``... in its own documented examples. So do we
(``OllamaOptions.ignored``, logged by ``translate``): a client's stale option
must not fail its request. Those it knows are checked as on ``/v1``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from tierlm.server.openai.chat_schema import JsonSchema
from tierlm.server.openai.requests import not_supported
from tierlm.server.settings.schema import Expect, FieldError, Schema

__all__ = [
    "KeepAlive",
    "OllamaChatRequest",
    "OllamaEmbedRequest",
    "OllamaEmbeddingsRequest",
    "OllamaGenerateRequest",
    "OllamaMessage",
    "OllamaOptions",
    "OllamaShowRequest",
]

ModelName = Annotated[str, Field(min_length=1), Expect("a non-empty string naming a model")]
KeepAlive = Annotated[
    float | str | None, Expect("seconds, or a duration such as '5m' (0 unloads, negative: forever)")
]
Format = Annotated[
    Literal["", "json"] | JsonSchema | None, Expect('"json" or a JSON schema (an object)')
]

_NOTHING = "not supported by this gateway"


class OllamaOptions(Schema):
    """``options``: the sampling options tierlm honours (as on ``/v1``, through
    the same checks of the configured backend), the load options it accepts,
    and any other, ignored (module docstring)."""

    model_config = ConfigDict(extra="allow")

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    num_predict: int | None = None
    """Tokens to generate at most; -1 (endless) and -2 (fill the context):
    what the model's context leaves, as a request without ``max_tokens``."""
    stop: Annotated[list[str] | None, Expect("an array of strings")] = None
    repeat_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    mirostat: Literal[0, 1, 2] | None = None
    mirostat_tau: float | None = None
    mirostat_eta: float | None = None
    num_ctx: Annotated[int | None, Field(ge=1)] = None
    """Accepted: a model's context is set when it is loaded, by the operator
    (``n_ctx``); a prompt longer than it is a 400, as on ``/v1``."""
    # Load options: accepted, not applied (module docstring).
    numa: bool | None = None
    num_batch: int | None = None
    num_gpu: int | None = None
    main_gpu: int | None = None
    low_vram: bool | None = None
    f16_kv: bool | None = None
    logits_all: bool | None = None
    vocab_only: bool | None = None
    use_mmap: bool | None = None
    use_mlock: bool | None = None
    embedding_only: bool | None = None
    num_thread: int | None = None
    num_keep: int | None = None
    # Sampling options no backend of tierlm has (Ollama itself dropped tfs_z):
    # ignored, as Ollama ignores what it does not use.
    tfs_z: Any = None
    typical_p: Any = None
    repeat_last_n: int | None = None
    """Accepted: llama.cpp's penalties look back over its own window (64 tokens)."""
    penalize_newline: bool | None = None
    """Accepted: ignored by Ollama itself since 0.5."""

    def ignored(self) -> list[str]:
        """The options sent that do nothing here: unknown ones, and those no
        backend has."""
        extra = sorted(self.model_extra or {})
        return [*(n for n in ("tfs_z", "typical_p") if getattr(self, n) is not None), *extra]


class OllamaToolFunction(Schema):
    name: str
    arguments: Annotated[dict[str, Any], Expect("an object (Ollama's arguments are not text)")]
    index: int | None = None


class OllamaToolCall(Schema):
    """A call an assistant made earlier in the chat."""

    function: OllamaToolFunction
    id: str | None = None
    type: Literal["function"] | None = None


class OllamaMessage(Schema):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    images: Annotated[Any, not_supported("only text is supported (no vision model is served)")] = (
        None
    )
    tool_calls: list[OllamaToolCall] | None = None
    tool_name: str | None = None
    """The tool whose result a ``tool`` message holds."""
    thinking: str | None = None
    """A past answer's thinking: accepted, not shown to the model (no served
    model thinks apart from its answer)."""

    @model_validator(mode="after")
    def _fits_the_role(self) -> OllamaMessage:
        if self.tool_calls and self.role != "assistant":
            raise FieldError("only an assistant message has tool calls", "tool_calls")
        return self


class OllamaGeneration(Schema):
    """What ``/api/chat`` and ``/api/generate`` share."""

    model: ModelName
    format: Format = None
    options: OllamaOptions | None = None
    stream: bool = True
    """Ollama streams by default: NDJSON, one object a line."""
    keep_alive: KeepAlive = None
    think: Annotated[Any, not_supported("no served model thinks apart from its answer")] = None
    truncate: bool | None = None
    """Accepted: a prompt longer than the model's context is a 400 either way
    (Ollama's ``truncate: false``); nothing is cut from a conversation silently."""
    shift: bool | None = None
    """Accepted: an answer ends where the context does, ``done_reason: "length"``
    (Ollama's ``shift: false``); the context is never shifted."""
    logprobs: Annotated[Any, not_supported(_NOTHING)] = None
    top_logprobs: Annotated[Any, not_supported(_NOTHING)] = None


class OllamaChatRequest(OllamaGeneration):
    """``POST /api/chat``."""

    messages: Annotated[list[OllamaMessage], Expect("an array of messages")] = Field(
        default_factory=list
    )
    """Empty: load the model (``keep_alive: 0``: unload it), as Ollama does."""
    tools: Annotated[list[dict[str, Any]] | None, Expect("an array of tools")] = None
    """OpenAI's tool shape (``{"type": "function", "function": {...}}``), checked as on ``/v1``."""


class OllamaGenerateRequest(OllamaGeneration):
    """``POST /api/generate``."""

    prompt: str = ""
    """Empty: load the model (``keep_alive: 0``: unload it), as Ollama does."""
    system: str | None = None
    suffix: str | None = None
    raw: bool = False
    """The prompt as it is, without the model's chat template."""
    template: Annotated[Any, not_supported("the model's own chat template is used")] = None
    context: Annotated[Any, not_supported("send the conversation to /api/chat instead")] = None
    images: Annotated[Any, not_supported("only text is supported (no vision model is served)")] = (
        None
    )


class OllamaEmbedRequest(Schema):
    """``POST /api/embed``."""

    model: ModelName
    input: Annotated[str | list[str], Expect("a string or an array of strings")]
    truncate: bool = True
    """The embedder reads a text's first tokens, up to its input size, and
    ignores the rest (``true``, Ollama's default); ``false`` is accepted and
    does the same (a text over ``embeddings.max_chars`` is a 400 either way)."""
    dimensions: Annotated[int | None, Field(ge=1)] = None
    options: OllamaOptions | None = None
    keep_alive: KeepAlive = None
    """Accepted: the embedder stays loaded (it lives beside the scheduler)."""


class OllamaEmbeddingsRequest(Schema):
    """``POST /api/embeddings``: the legacy endpoint, one text."""

    model: ModelName
    prompt: str
    options: OllamaOptions | None = None
    keep_alive: KeepAlive = None


class OllamaShowRequest(Schema):
    """``POST /api/show``; ``name`` is the older clients' field."""

    model: str | None = None
    name: str | None = None
    verbose: bool | None = None

    @model_validator(mode="after")
    def _named(self) -> OllamaShowRequest:
        if not (self.model or self.name):
            raise FieldError("must be a non-empty string naming a model", "model")
        return self

    @property
    def model_name(self) -> str:
        return self.model or self.name or ""
