"""Tiny llama-architecture GGUF models with random weights, for tests and benchmarks.

The real-backend tests need a model that llama.cpp loads and runs, without a
download. This module writes one with the ``gguf`` package:

- architecture ``llama`` (RMSNorm, rotary attention, SwiGLU feed-forward);
- a byte-level BPE vocabulary (``tokenizer.ggml.model = gpt2``): the 256 bytes,
  ChatML's ``<|im_start|>`` and ``<|im_end|>``, and ``<|endoftext|>``. A single
  merge joins two control bytes that never occur in text, so every text
  tokenizes to one token per byte: re-tokenizing generated text gives back the
  same tokens, which is what makes resume-after-preemption exact;
- a ChatML chat template in ``tokenizer.chat_template``;
- weights that let ONLY printable ASCII (0x20-0x7E) be sampled. Random weights
  would otherwise emit bytes >= 0x80; invalid UTF-8 makes llama-cpp-python's
  streaming hold text back and slow down sharply, and an end-of-generation token
  would end runs early. So generations stream one character per token and always
  run to ``max_tokens``.

How the last point works: dimension 0 of the residual stream is a constant. Every
token embedding has the same large value there, and no layer writes to it (row 0 of the
attention output and feed-forward down projections is zero), so after the final
RMSNorm that dimension is a large positive number for every position. The output
matrix row of each forbidden token is ``-FORBIDDEN_BIAS`` in that column and zero
elsewhere: its logit is hugely negative whatever the rest of the state, a bias
term in a model that has none.

Presets (``PRESETS``): ``small`` (2 layers, hidden 64, f32, ~0.5 MB) loads in
milliseconds and generates thousands of tokens/s on one core, for tests;
``medium`` (8 layers, hidden 512, f16, ~45 MB) takes seconds to evaluate a long
prompt, for abort tests; ``large`` (8 layers, hidden 1024, f16, ~170 MB) takes
~10-30 ms a token on 2 cores, like a phone's on-device model, for the
real-model benchmark.

Usage::

    from tierlm.testing.gguf_model import write_tiny_llama, write_model_pair
    path = write_tiny_llama(tmp_path / "m.gguf", seed=1)
    a, b = write_model_pair(tmp_path)          # two models, different seeds
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    from os import PathLike

__all__ = [
    "CHATML_TEMPLATE",
    "FIM_TOKENS",
    "IM_END",
    "IM_START",
    "PRESETS",
    "TinyLlamaConfig",
    "allowed_output_bytes",
    "write_model_pair",
    "write_tiny_llama",
]

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
FIM_TOKENS = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
"""With ``write_tiny_llama(fim=True)``: FIM_PRE, FIM_SUF, FIM_MID, as
Qwen2.5-Coder names them (llama.cpp's fill-in-the-middle tokens)."""

# The ChatML template as Qwen2 ships it (minus the default system prompt), so
# llama-cpp-python and llama.cpp's server render the same prompt as ours.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Residual dimension 0 holds CONSTANT_RATIO * sqrt(hidden) in every embedding,
# the other dimensions have unit scale: after RMSNorm it is ~0.7 * sqrt(hidden)
# (5.6 at hidden 64) and the others ~0.7 each.
CONSTANT_RATIO = 1.0
# Logit penalty per unit of that normalized component: at hidden 64 a forbidden
# token's logit is about -560, while allowed ones are within ~10 of 0.
FORBIDDEN_BIAS = 100.0
# Random part of the allowed tokens' output rows: logits with a standard
# deviation of ~3, so hot sampling gives varied text.
OUTPUT_SCALE = 0.5
# Bigram part: each allowed token's output row also copies the embedding of one
# other token (a random permutation), so that token tends to follow it. Without
# it, greedy decoding of a random model soon repeats one character forever,
# which makes resume tests blind; with it greedy text runs through long cycles.
# (Values tuned by measuring distinct characters and cycle length of the output.)
BIGRAM_SCALE = 4.0


def allowed_output_bytes() -> range:
    """The bytes the generated models can emit: printable ASCII, 0x20 to 0x7E."""
    return range(0x20, 0x7F)


@dataclass(frozen=True, slots=True)
class TinyLlamaConfig:
    """Shape of a generated model. Defaults are the ``small`` preset."""

    n_layers: int = 2
    hidden: int = 64
    n_heads: int = 4
    n_kv_heads: int = 2
    """Fewer KV heads than query heads (grouped-query attention, as real models)."""
    ffn: int | None = None
    """Feed-forward width; None = 8/3 * hidden rounded up to 32, llama's ratio."""
    context_length: int = 4096
    """``llama.context_length``: the largest ``n_ctx`` the model accepts untroubled."""
    dtype: Literal["f32", "f16"] = "f32"

    def __post_init__(self) -> None:
        for name in ("n_layers", "hidden", "n_heads", "n_kv_heads", "context_length"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name}: must be a positive int, got {value!r}")
        if self.hidden % self.n_heads:
            raise ValueError(f"hidden: {self.hidden} is not a multiple of n_heads={self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_kv_heads: {self.n_kv_heads} does not divide n_heads={self.n_heads}"
            )
        if (self.hidden // self.n_heads) % 2:
            raise ValueError("hidden / n_heads: rotary embeddings need an even head size")

    @property
    def ffn_width(self) -> int:
        if self.ffn is not None:
            return self.ffn
        return -(-(self.hidden * 8 // 3) // 32) * 32


PRESETS: dict[str, TinyLlamaConfig] = {
    # ~0.5 MB; loads in milliseconds; thousands of tokens/s. For tests.
    "small": TinyLlamaConfig(),
    # ~45 MB in f16; a 4000-token prompt takes seconds to evaluate: for tests
    # that abort a long prompt evaluation. ~3-10 ms a token here.
    "medium": TinyLlamaConfig(n_layers=8, hidden=512, n_heads=8, n_kv_heads=4, dtype="f16"),
    # ~170 MB in f16; ~10 ms a token on a quiet 2-core machine, ~30 ms with other
    # processes running, like a phone's on-device model: for bench/real_model.py.
    "large": TinyLlamaConfig(n_layers=8, hidden=1024, n_heads=16, n_kv_heads=4, dtype="f16"),
}


def _byte_token_texts() -> list[str]:
    """GPT-2's byte-to-unicode map: the text of the token of each byte 0..255.

    Byte-level BPE tokenizers (llama.cpp's ``gpt2`` model) store bytes as
    printable code points: printable Latin-1 bytes stand for themselves, the
    others are shifted to U+0100 and up (a space is "Ġ").
    """
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    texts: dict[int, str] = {b: chr(b) for b in printable}
    shifted = 0
    for b in range(256):
        if b not in texts:
            texts[b] = chr(256 + shifted)
            shifted += 1
    return [texts[b] for b in range(256)]


def _vocabulary(fim: bool = False) -> tuple[list[str], list[int], list[str], dict[str, int]]:
    """Tokens, their types, merges and the ids of the special tokens (with
    ``fim``, Qwen2.5-Coder's three fill-in-the-middle tokens after the rest)."""
    from gguf import TokenType

    byte_texts = _byte_token_texts()
    tokens = list(byte_texts)
    types = [int(TokenType.NORMAL)] * 256
    # llama.cpp insists on a merges list for BPE. This one merge joins bytes
    # 0x00 and 0x01, which never occur in text, so text stays one token a byte.
    merges = [f"{byte_texts[0]} {byte_texts[1]}"]
    tokens.append(byte_texts[0] + byte_texts[1])
    types.append(int(TokenType.NORMAL))
    special: dict[str, int] = {}
    for text in (END_OF_TEXT, IM_START, IM_END, *(FIM_TOKENS if fim else ())):
        special[text] = len(tokens)
        tokens.append(text)
        types.append(int(TokenType.CONTROL))
    return tokens, types, merges, special


def write_tiny_llama(
    path: str | PathLike[str],
    *,
    seed: int = 0,
    config: TinyLlamaConfig | None = None,
    preset: str = "small",
    name: str | None = None,
    fim: bool = False,
    **overrides: Any,
) -> Path:
    """Write a random-weight llama GGUF to ``path`` and return the path.

    ``fim``: with fill-in-the-middle tokens (``FIM_TOKENS``), for
    ``suffix`` and ``/infill``; the vocabulary grows by three, so the weights
    differ from the same seed's without them.

    ``config`` (or the named ``preset``, default ``small``), with any
    ``TinyLlamaConfig`` field overridden by keyword (``n_layers=4``), gives the
    shape; ``seed`` the weights. Same arguments, same bytes.
    """
    from gguf import GGUFWriter

    if config is None:
        try:
            config = PRESETS[preset]
        except KeyError:
            known = ", ".join(sorted(PRESETS))
            raise ValueError(f"preset: unknown {preset!r} (known: {known})") from None
    if overrides:
        config = replace(config, **overrides)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    tokens, types, merges, special = _vocabulary(fim)
    n_vocab = len(tokens)
    n_embd = config.hidden
    head_dim = n_embd // config.n_heads
    n_kv = config.n_kv_heads * head_dim
    n_ff = config.ffn_width
    rng = np.random.default_rng(seed)
    dtype = np.float16 if config.dtype == "f16" else np.float32

    def matrix(rows: int, cols: int) -> np.ndarray[Any, np.dtype[np.float32]]:
        # numpy shape (out, in): GGUF reverses it into ggml's (in, out). Scaled by
        # 1/sqrt(in) so activations keep unit scale through the layers.
        scale = 1.0 / np.sqrt(cols)
        values: np.ndarray[Any, np.dtype[np.float32]] = rng.standard_normal(
            (rows, cols), dtype=np.float32
        ) * np.float32(scale)
        return values

    writer = GGUFWriter(path, arch="llama")
    writer.add_name(name or f"tierlm-tiny-llama-{config.n_layers}x{n_embd}-seed{seed}")
    writer.add_context_length(config.context_length)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(config.n_layers)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(config.n_heads)
    writer.add_head_count_kv(config.n_kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(1 if config.dtype == "f16" else 0)  # llama_ftype ALL_F32 / MOSTLY_F16

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(special[END_OF_TEXT])
    writer.add_eos_token_id(special[IM_END])
    writer.add_add_bos_token(False)  # ChatML models (Qwen) prepend no BOS
    if fim:
        for kind, text in zip(("pre", "suf", "mid"), FIM_TOKENS, strict=True):
            writer.add_uint32(f"tokenizer.ggml.fim_{kind}_token_id", special[text])
    writer.add_chat_template(CHATML_TEMPLATE)

    allowed = np.zeros(n_vocab, dtype=bool)
    allowed[list(allowed_output_bytes())] = True

    embeddings = rng.standard_normal((n_vocab, n_embd), dtype=np.float32)
    # The other dimensions have unit variance, so their RMS is ~1.
    embeddings[:, 0] = CONSTANT_RATIO * np.sqrt(n_embd)
    writer.add_tensor("token_embd.weight", embeddings.astype(dtype))

    ones = np.ones(n_embd, dtype=np.float32)  # norm weights stay f32, as converters do
    for i in range(config.n_layers):
        prefix = f"blk.{i}"
        attn_out = matrix(n_embd, n_embd)
        attn_out[0, :] = 0.0  # never write the constant dimension
        ffn_down = matrix(n_embd, n_ff)
        ffn_down[0, :] = 0.0
        writer.add_tensor(f"{prefix}.attn_norm.weight", ones)
        writer.add_tensor(f"{prefix}.attn_q.weight", matrix(n_embd, n_embd).astype(dtype))
        writer.add_tensor(f"{prefix}.attn_k.weight", matrix(n_kv, n_embd).astype(dtype))
        writer.add_tensor(f"{prefix}.attn_v.weight", matrix(n_kv, n_embd).astype(dtype))
        writer.add_tensor(f"{prefix}.attn_output.weight", attn_out.astype(dtype))
        writer.add_tensor(f"{prefix}.ffn_norm.weight", ones)
        writer.add_tensor(f"{prefix}.ffn_gate.weight", matrix(n_ff, n_embd).astype(dtype))
        writer.add_tensor(f"{prefix}.ffn_up.weight", matrix(n_ff, n_embd).astype(dtype))
        writer.add_tensor(f"{prefix}.ffn_down.weight", ffn_down.astype(dtype))
    writer.add_tensor("output_norm.weight", ones)

    output = rng.standard_normal((n_vocab, n_embd), dtype=np.float32) * OUTPUT_SCALE
    # A bigram term: allowed token v is favoured after token perm[v], whose
    # embedding its output row copies.
    ids = np.flatnonzero(allowed)
    perm = rng.permutation(ids)
    output[ids] += BIGRAM_SCALE * embeddings[perm] / np.sqrt(n_embd)
    output[:, 0] = 0.0
    output[~allowed, :] = 0.0
    output[~allowed, 0] = -FORBIDDEN_BIAS
    writer.add_tensor("output.weight", output.astype(dtype))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_model_pair(
    directory: str | PathLike[str],
    *,
    preset: str = "small",
    seeds: tuple[int, int] = (1, 3),
    **overrides: Any,
) -> tuple[Path, Path]:
    """Write two models of the same shape with different seeds into ``directory``.

    Two distinct models for swap tests; a session-scoped pytest fixture::

        @pytest.fixture(scope="session")
        def tiny_models(tmp_path_factory):
            return write_model_pair(tmp_path_factory.mktemp("models"))
    """
    directory = Path(directory)
    return (
        write_tiny_llama(
            directory / f"tiny-{preset}-a.gguf", seed=seeds[0], preset=preset, **overrides
        ),
        write_tiny_llama(
            directory / f"tiny-{preset}-b.gguf", seed=seeds[1], preset=preset, **overrides
        ),
    )
