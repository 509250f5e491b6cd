"""The OpenAI requests the gateway takes, as pydantic models: chat completions
and completions (embeddings: ``embedding_request``). One validation path: a
request that does not fit its model gets a 400 in OpenAI's format naming the
field (``param``) and what it must be (``validation.explain``).

Unknown fields are rejected, as vLLM's OpenAI server does: the gateway answers
only what it can honour. Fields OpenAI defines that no backend honours are
declared with ``not_supported``: any value that would ask for the feature is a
400 saying so (``code: "unsupported"``), and a value that asks for nothing
(``n: 1``, ``best_of: 1``) passes. The rest reach the runner in
``GenerationRequest.extra`` (``extras``), only when they ask for something;
whether the configured backend honours each is ``compat.py``'s table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from tierlm.server.edge.errors import APIError
from tierlm.server.openai.chat_schema import (
    MAX_MESSAGES,
    LogitBias,
    Message,
    NamedToolChoice,
    ResponseFormat,
    TextFormat,
    TextPart,
    Tool,
    ToolChoice,
)
from tierlm.server.openai.embedding_request import MAX_INPUTS, EmbeddingRequest
from tierlm.server.openai.text_or_ids import TokenIds, many
from tierlm.server.settings.schema import Expect, FieldError, Schema
from tierlm.server.settings.validation import JSON_WORDS, first_problem, json_type

__all__ = [
    "MAX_INPUTS",
    "MAX_PROMPTS",
    "ChatRequest",
    "CompletionRequest",
    "EmbeddingRequest",
    "Message",
    "TextOrIds",
    "TextPart",
    "not_supported",
    "parse",
]

# OpenAI's own limit on stop sequences.
MAX_STOP = 4
# Choices per request: each is a job, so n jobs of one request share the queue.
MAX_N = 16
# Prompts of one completion request (an array): each is queued with its n choices.
MAX_PROMPTS = 16

ModelName = Annotated[str, Field(min_length=1), Expect("a non-empty string naming a model")]


def _asks_for_nothing(value: Any) -> bool:
    # null, false, 0, "", [] and {} ask for no feature.
    return not value


def not_supported(
    message: str, harmless: Callable[[Any], bool] = _asks_for_nothing
) -> AfterValidator:
    """A field the gateway does not honour: a value that is not ``harmless`` is
    a 400 (``message``, formatted with ``value``)."""

    def refuse(value: Any) -> Any:
        if harmless(value):
            return value
        raise FieldError(message.format(value=value), code="unsupported")

    return AfterValidator(refuse)


def _one(value: Any) -> bool:
    return value is None or value == 1


def request_error(exc: ValidationError, model: type[BaseModel]) -> APIError:
    """A validation error as the 400 OpenAI's clients expect."""
    problem = first_problem(exc, model, JSON_WORDS)
    if not problem.path:  # the body itself
        return APIError(400, f"request body: {problem.message}", param=None)
    param = problem.where
    reason = problem.reason or ("unsupported" if problem.code == "unsupported" else None)
    return APIError(
        400, f"{param}: {problem.message}", param=param, code=problem.code, reason=reason
    )


RequestT = TypeVar("RequestT", bound=BaseModel)


def parse(model: type[RequestT], body: Any, context: dict[str, Any] | None = None) -> RequestT:
    """``body`` (parsed JSON) as ``model``; APIError 400 naming the field otherwise."""
    if not isinstance(body, dict):
        raise APIError(400, f"request body: must be a JSON object, got {json_type(body)}")
    try:
        return model.model_validate(body, context=context)
    except ValidationError as exc:
        raise request_error(exc, model) from None


# -- chat and completions -------------------------------------------------------


class StreamOptions(Schema):
    include_usage: bool = False
    """A last chunk with the usage (and no choices)."""


Probability = Annotated[float | None, Field(ge=0, le=1)]
Penalty = Annotated[float | None, Field(ge=-2, le=2)]


class GenerationFields(Schema):
    """What chat completions and completions share."""

    model: ModelName
    max_tokens: int | None = None
    """At most ``limits.max_tokens_limit``; unset: what the model's context leaves
    after the prompt (``limits.context_max_tokens``), else ``limits.default_max_tokens``."""
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    stop: Annotated[
        # max_length on the list, not on the optional: null is no stop (it was a 500).
        Annotated[list[Annotated[str, Field(min_length=1)]], Field(max_length=MAX_STOP)] | None,
        BeforeValidator(lambda v: [v] if isinstance(v, str) else v),
        Expect(f"a string or an array of up to {MAX_STOP} non-empty strings"),
    ] = None
    temperature: Annotated[float | None, Field(ge=0, le=2)] = None
    top_p: Probability = None
    presence_penalty: Penalty = None
    frequency_penalty: Penalty = None
    seed: int | None = None
    # llama.cpp's sampling options.
    top_k: Annotated[int | None, Field(ge=0)] = None
    min_p: Probability = None
    repeat_penalty: Annotated[float | None, Field(ge=0)] = None
    logit_bias: LogitBias = None
    """Token id -> bias added to its logit; -100 bans the token."""
    grammar: Annotated[str | None, Field(min_length=1)] = None
    """A GBNF grammar (llama.cpp's) the output must match."""
    mirostat_mode: Literal[0, 1, 2] | None = None
    mirostat_tau: Annotated[float | None, Field(gt=0)] = None
    mirostat_eta: Annotated[float | None, Field(gt=0)] = None
    user: str | None = None
    """An end user's id: the request's fair-pool producer when no
    ``X-Tierlm-Producer`` header names one (under the key's name with keys)."""
    n: Annotated[int | None, Field(ge=1, le=MAX_N)] = None
    """Choices: each is a job of its own, queued and run with the others."""
    # Accepted and ignored: OpenAI's platform features that change no output here.
    store: bool | None = None
    """OpenAI stores completions for its dashboard: ignored (tierlm stores none)."""
    metadata: Annotated[dict[str, str] | None, Expect("an object of string values")] = None
    """Tags: logged with the request (``request metadata`` line), else ignored."""
    service_tier: str | None = None
    """OpenAI's processing tier: ignored (the ``X-Tierlm-Class`` header picks one here)."""
    prompt_cache_key: str | None = None
    """OpenAI's cache routing hint: ignored (llama-cpp reuses a cached prefix anyway)."""
    safety_identifier: str | None = None
    """OpenAI's abuse-monitoring id: ignored."""

    @model_validator(mode="after")
    def _within_limits(self, info: ValidationInfo) -> GenerationFields:
        limit = (info.context or {}).get("max_tokens_limit")
        name, value = self.max_tokens_field()
        if value is not None and limit is not None and not 1 <= value <= limit:
            raise FieldError(
                f"must be between 1 and {limit} (limits.max_tokens_limit), got {value}",
                name,
                reason="max_tokens",
            )
        return self

    @model_validator(mode="after")
    def _mirostat(self) -> GenerationFields:
        if not self.mirostat_mode:
            for name in ("mirostat_tau", "mirostat_eta"):
                if getattr(self, name) is not None:
                    raise FieldError("has no effect without mirostat_mode 1 or 2", name)
        elif self.temperature == 0:
            raise FieldError(
                "mirostat samples: it needs a temperature above 0 (0 is greedy)", "mirostat_mode"
            )
        return self

    def max_tokens_field(self) -> tuple[str, int | None]:
        return "max_tokens", self.max_tokens

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def extras(self) -> dict[str, Any]:
        """What the runner gets beside max_tokens, temperature and stop
        (``GenerationRequest.extra``): each field that asks for something."""
        names = (
            "top_p", "presence_penalty", "frequency_penalty", "seed", "top_k", "min_p",
            "repeat_penalty", "grammar", "mirostat_mode", "mirostat_tau", "mirostat_eta",
        )  # fmt: skip
        extra = {name: getattr(self, name) for name in names}
        # Values that ask for nothing: mirostat off, no biases.
        extra["mirostat_mode"] = self.mirostat_mode or None
        extra["logit_bias"] = self.logit_bias or None
        return {name: value for name, value in extra.items() if value is not None}


def _text_only(value: Any) -> bool:
    return value is None or value == ["text"]


USE_TOOLS = "use tools and tool_choice (functions and function_call are deprecated)"


class ChatRequest(GenerationFields):
    """``POST /v1/chat/completions``."""

    messages: Annotated[
        list[Annotated[Message, Expect("an object with role and content")]],
        Field(min_length=1, max_length=MAX_MESSAGES),
        Expect(f"a non-empty array of up to {MAX_MESSAGES} messages"),
    ]
    max_completion_tokens: int | None = None
    """OpenAI's newer name for ``max_tokens``; it wins when both are given."""
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = Field(default=None, discriminator="type")
    logprobs: bool | None = None
    top_logprobs: Annotated[int | None, Field(ge=0, le=20)] = None
    functions: Annotated[Any, not_supported(USE_TOOLS)] = None
    function_call: Annotated[Any, not_supported(USE_TOOLS)] = None
    modalities: Annotated[Any, not_supported("only text is supported", _text_only)] = None
    reasoning_effort: str | None = None
    """For reasoning models: ignored (no served model reasons apart from its answer)."""
    verbosity: str | None = None
    """OpenAI's answer-length hint: ignored (``max_tokens`` bounds an answer here)."""
    audio: Annotated[Any, not_supported("audio output is not supported")] = None

    @model_validator(mode="after")
    def _consistent(self) -> ChatRequest:
        names = [tool.function.name for tool in self.tools or ()]
        choice = self.tool_choice
        if choice is not None and not names and choice != "none":
            raise FieldError("needs tools: there is nothing to call", "tool_choice")
        if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
            raise FieldError(
                f"no tool is named {choice.function.name!r} (tools: {', '.join(names)})",
                "tool_choice",
                "function",
                "name",
            )
        if len(set(names)) < len(names):
            raise FieldError("two tools have the same name", "tools")
        if self.top_logprobs and not self.logprobs:
            raise FieldError("needs logprobs: true", "top_logprobs")
        if self.logprobs and self.tools and self.tool_choice != "none":
            raise FieldError("not supported together with tools", "logprobs", code="unsupported")
        if self.grammar is not None and (self.tools or self._json_format):
            raise FieldError(
                "give either a grammar or response_format/tools: each is a grammar", "grammar"
            )
        return self

    @property
    def _json_format(self) -> bool:
        return self.response_format is not None and not isinstance(self.response_format, TextFormat)

    def extras(self) -> dict[str, Any]:
        extra = super().extras()
        if self._json_format:
            assert self.response_format is not None
            extra["response_format"] = self.response_format.model_dump(
                by_alias=True, exclude_none=True
            )
        if self.tools:
            extra["tools"] = [tool.model_dump(exclude_none=True) for tool in self.tools]
            choice = self.tool_choice
            if choice is not None:
                extra["tool_choice"] = (
                    choice.model_dump() if isinstance(choice, NamedToolChoice) else choice
                )
            if self.parallel_tool_calls is not None:
                extra["parallel_tool_calls"] = self.parallel_tool_calls
        if self.logprobs:
            extra["logprobs"] = True
            if self.top_logprobs:
                extra["top_logprobs"] = self.top_logprobs
        return extra

    def max_tokens_field(self) -> tuple[str, int | None]:
        if self.max_completion_tokens is not None:
            return "max_completion_tokens", self.max_completion_tokens
        return super().max_tokens_field()


TextOrIds = str | list[int]
"""One prompt: its text, or its token ids (the served model's: ``Tokenizer``)."""


class CompletionRequest(GenerationFields):
    """``POST /v1/completions``.

    ``prompt``: a string; an array of strings (one choice set per prompt,
    ``n`` choices each, indexed prompt by prompt, as OpenAI does); token ids,
    an array of integers or an array of such arrays, read in the served
    model's own vocabulary (decoded with its tokenizer, then completed as
    that text: ``routes``). ``echo`` puts the prompt before each choice's
    text; ``suffix`` is fill-in-the-middle (the text after the gap)."""

    prompt: Annotated[
        str | list[str] | list[TokenIds],
        BeforeValidator(many(MAX_PROMPTS, "prompts", "complete", "; split the request")),
        Expect(
            "a string, an array of strings, or token ids (an array of integers, "
            "or an array of such arrays)"
        ),
    ]
    logprobs: Annotated[int | None, Field(ge=0, le=5)] = None
    """Log-probabilities of each token and of the ``logprobs`` likeliest (0 to 5)."""
    echo: bool | None = None
    """The prompt before the completion, in each choice's text."""
    suffix: str | None = None
    """Fill-in-the-middle: the text after the completion (the prompt is the
    text before it); a model with FIM tokens only (``compat.py``)."""
    best_of: Annotated[Any, not_supported("only 1 is supported, got {value}", _one)] = None

    @model_validator(mode="after")
    def _echo(self) -> CompletionRequest:
        if not self.echo:
            return self
        if self.logprobs is not None:
            raise FieldError(
                "not supported together with logprobs: the prompt's tokens are evaluated without "
                "their log-probabilities here; drop one of them (logprobs alone scores the "
                "completion's tokens)",
                "echo",
                code="unsupported",
            )
        if self.suffix:
            raise FieldError(
                "not supported together with suffix (OpenAI refuses it too); put the prompt and "
                "the suffix around the completion yourself",
                "echo",
                code="unsupported",
            )
        return self

    @property
    def prompts(self) -> list[TextOrIds]:
        """Each prompt, as text or token ids."""
        if isinstance(self.prompt, str):
            return [self.prompt]
        return list(self.prompt)

    def extras(self) -> dict[str, Any]:
        extra = super().extras()
        if self.logprobs is not None:
            extra["logprobs"] = True
            if self.logprobs:
                extra["top_logprobs"] = self.logprobs
        if self.suffix:
            extra["suffix"] = self.suffix
        return extra
