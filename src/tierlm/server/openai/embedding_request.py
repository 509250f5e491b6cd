"""``POST /v1/embeddings``'s request, validated against the lane that will
embed it: its queue, its longest text, its model's dimension and tokenizer.

``input`` is a string, an array of strings, or token ids (an array of
integers, or an array of such arrays), as OpenAI takes it. Token ids are
read in **the embedder's own vocabulary** (MiniLM's WordPiece, a GGUF's
tokenizer): decoded to text with its tokenizer, then embedded as text. An id
outside that vocabulary is a 400 naming it, and an embedder without a
tokenizer (``sim``) answers 400 naming ``input``. (LangChain's
``OpenAIEmbeddings`` tokenizes with tiktoken unless told
``check_embedding_ctx_length=False``: those ids are OpenAI's vocabulary, not
the served model's.)

``dimensions`` below the model's shortens each vector to its first
``dimensions`` values and renormalises it to unit length (Matryoshka-style,
as OpenAI's text-embedding-3 models do); above it is a 400.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BeforeValidator, Field, PrivateAttr, ValidationInfo, model_validator

from tierlm.server.openai.text_or_ids import TokenIds, many
from tierlm.server.settings.schema import Expect, FieldError, Schema

if TYPE_CHECKING:
    from tierlm.embedding import EmbeddingLane

__all__ = ["MAX_INPUTS", "EmbeddingRequest", "token_decoder"]

# OpenAI's own limit on the inputs of one request.
MAX_INPUTS = 2048

Decoder = tuple[int, Callable[[Sequence[int]], str]]


def token_decoder(embedder: Any) -> Decoder | None:
    """The vocabulary size and decoder of ``embedder``'s tokenizer, if it has one:
    its own (``vocab_size`` and ``decode``: the ONNX MiniLM), a
    sentence-transformers model's (``_model.tokenizer``) or llama.cpp's (``_llm``)."""
    decode = getattr(embedder, "decode", None)
    if decode is not None and hasattr(embedder, "vocab_size"):
        return int(embedder.vocab_size), lambda ids: str(decode(ids))
    model = getattr(embedder, "_model", None)
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is not None:
        return len(tokenizer), lambda ids: str(
            tokenizer.decode(list(ids), skip_special_tokens=True)
        )
    llm = getattr(embedder, "_llm", None)
    if llm is not None:
        return int(llm.n_vocab()), lambda ids: bytes(llm.detokenize(list(ids))).decode(
            "utf-8", errors="replace"
        )
    return None


class EmbeddingRequest(Schema):
    """``POST /v1/embeddings``. Validated against the lane that will embed it
    (``context={"lane": lane, "model": name}``)."""

    model: Annotated[str, Field(min_length=1), Expect("a non-empty string naming a model")]
    input: Annotated[
        str | list[str] | list[TokenIds],
        BeforeValidator(many(MAX_INPUTS, "inputs", "embed")),
        Expect("a string, an array of strings, or token ids (arrays of integers)"),
    ]
    encoding_format: Literal["float", "base64"] | None = None
    """``float`` (default) or ``base64`` (little-endian float32, OpenAI's format)."""
    dimensions: Annotated[int | None, Field(ge=1)] = None
    """At most the model's: fewer shortens and renormalises the vectors (Matryoshka-style)."""
    user: str | None = None
    """An end user's id, for OpenAI's abuse monitoring; it changes no vector and
    tierlm keeps it nowhere."""
    _decoded: list[str] | None = PrivateAttr(default=None)

    @property
    def texts(self) -> list[str]:
        if self._decoded is not None:
            return self._decoded
        if isinstance(self.input, str):
            return [self.input]
        return [t for t in self.input if isinstance(t, str)]

    @property
    def _single(self) -> bool:
        return isinstance(self.input, str)

    @model_validator(mode="after")
    def _fits_the_lane(self, info: ValidationInfo) -> EmbeddingRequest:
        context = info.context or {}
        lane: EmbeddingLane | None = context.get("lane")
        if lane is None:
            return self
        if not isinstance(self.input, str) and any(isinstance(t, list) for t in self.input):
            self._decoded = self._decode(lane)
        texts = self.texts
        if len(texts) > lane.max_queue:
            raise FieldError(
                f"{len(texts)} inputs, more than the embedding queue holds "
                f"(embeddings.max_queue = {lane.max_queue}); split the request",
                "input",
            )
        for i, text in enumerate(texts):
            # The lane's own rules (it would raise on the same texts), checked here
            # so that errors name OpenAI's field.
            where = ("input",) if self._single else ("input", i)
            if not text.strip():
                raise FieldError("empty or whitespace-only text has no embedding", *where)
            if len(text) > lane.max_chars and lane.overlong == "error":
                raise FieldError(
                    f"{len(text)} characters, over the limit of {lane.max_chars} "
                    f"(embeddings.max_chars; the model reads only its first "
                    f"{lane.embedder.max_input_tokens} tokens anyway)",
                    *where,
                    code="input_too_long",
                )
        if self.dimensions is not None and self.dimensions > lane.dim:
            raise FieldError(
                f"{context.get('model')!r} has {lane.dim} dimensions: send at most "
                f"{lane.dim} (fewer shortens the vectors); got {self.dimensions}",
                "dimensions",
            )
        return self

    def _decode(self, lane: EmbeddingLane) -> list[str]:
        decoder = token_decoder(lane.embedder)
        if decoder is None:
            raise FieldError(
                "token ids need an embedder with a tokenizer, and this one has none; send the text",
                "input",
                code="unsupported",
            )
        vocab, decode = decoder
        texts = []
        for i, ids in enumerate(self.input):
            if not isinstance(ids, list):
                raise FieldError("mix no strings with token-id arrays", "input", i)
            for j, token in enumerate(ids):
                if token >= vocab:
                    raise FieldError(
                        f"token id {token} is not in the embedder's vocabulary of {vocab} "
                        "(ids are read as the served model's tokens, not tiktoken's)",
                        "input",
                        i,
                        j,
                        code="invalid_token_id",
                    )
            texts.append(decode(ids))
        return texts
