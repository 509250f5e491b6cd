"""What a GGUF file's header says about its KV cache, read without llama.cpp.

How many slots a machine can hold depends on the KV a token of context takes
(docs/design.md §2.8), which depends on the model: SmolLM2-135M
23 KB, a 7B model without grouped-query attention 512 KB. That is four numbers
of the file's metadata (GGUF spec, ggml-org/ggml docs/gguf.md): the layer
count, the embedding width, the query and KV head counts. The header is read
here, in the gateway's process and before any model loads, rather than with
the ``gguf`` package, whose reader parses every tensor and the whole
tokenizer (2.6 s for SmolLM2's 49 152 tokens): the keys needed come before
the tokenizer's in every file llama.cpp writes, so reading stops there.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import os

__all__ = ["GgufError", "KvShape", "fills_in_the_middle", "kv_shape"]

_MAGIC = b"GGUF"
# GGUF value types (gguf.md): their struct format, for the fixed-size ones.
_FIXED = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
F16_BYTES = 2
"""Bytes of one K or V element: llama.cpp's default KV type is f16 (a
quantized KV type takes less, so this is an upper bound)."""


class GgufError(ValueError):
    """The file is not a GGUF file this reader understands."""


@dataclass(frozen=True, slots=True)
class KvShape:
    """The KV cache's shape per token of context."""

    layers: int
    kv_width: int
    """Elements of K (and of V) per layer and token: the KV heads' dimension."""

    @property
    def bytes_per_token(self) -> int:
        """K and V of every layer, in f16."""
        return self.layers * 2 * self.kv_width * F16_BYTES


def kv_shape(path: str | os.PathLike[str]) -> KvShape:
    """The KV shape of the model in ``path``; ``GgufError`` when the header
    lacks what it needs or is not GGUF (v2 or later)."""
    with open(path, "rb") as f:
        count = _keys(f, path)
        wanted: dict[str, Any] = {}
        arch: str | None = None
        for _ in range(count):
            key = _string(f)
            (kind,) = _unpack(f, "I")
            if key == "general.architecture":
                arch = _value(f, kind)
            elif arch is not None and key.startswith(f"{arch}.") and kind != _ARRAY:
                wanted[key[len(arch) + 1 :]] = _value(f, kind)
            else:
                _skip(f, kind)
            if arch is not None and _complete(wanted):
                break
    if arch is None or not _complete(wanted):
        raise GgufError(f"{path}: the header does not give the attention's shape")
    heads, kv_heads = int(wanted["attention.head_count"]), int(wanted["attention.head_count_kv"])
    head_dim = int(wanted.get("attention.key_length", wanted["embedding_length"] // heads))
    return KvShape(layers=int(wanted["block_count"]), kv_width=head_dim * kv_heads)


# Fill-in-the-middle: the token ids llama.cpp reads from the metadata, else
# the token texts it looks for in the vocabulary (llama-vocab.cpp), for each
# of the three tokens an infill prompt needs (prefix, suffix, middle).
_FIM_KEYS = tuple(f"tokenizer.ggml.fim_{part}_token_id" for part in ("pre", "suf", "mid"))
_DEEPSEEK = "<\uff5cfim\u2581{}\uff5c>"  # DeepSeek-Coder's fullwidth bars
_FIM_TEXTS = tuple(
    {f"<|fim_{part}|>", f"<fim-{part}>", f"<fim_{part}>", _DEEPSEEK.format(deep), f"<{short}>"}
    | {f"\u2581<{short}>"}
    for part, deep, short in (
        ("prefix", "begin", "PRE"),
        ("suffix", "hole", "SUF"),
        ("middle", "end", "MID"),
    )
)


def fills_in_the_middle(path: str | os.PathLike[str]) -> bool:
    """Whether the model in ``path`` has the three fill-in-the-middle tokens
    llama.cpp's infill needs (by their metadata ids, else by their texts in
    the vocabulary, as llama.cpp finds them). Reads the whole tokenizer
    (SmolLM2's 49 152 tokens: tens of milliseconds): cache the answer."""
    found = [False, False, False]
    with open(path, "rb") as f:
        count = _keys(f, path)
        for _ in range(count):
            key = _string(f)
            (kind,) = _unpack(f, "I")
            if key in _FIM_KEYS:
                found[_FIM_KEYS.index(key)] = True
                _skip(f, kind)
            elif key == "tokenizer.ggml.tokens" and kind == _ARRAY:
                inner, n = _unpack(f, "IQ")
                if inner != _STRING:
                    raise GgufError(f"{path}: the vocabulary is not a list of strings")
                for _ in range(n):
                    text = _string(f)
                    for part, texts in enumerate(_FIM_TEXTS):
                        if text in texts:
                            found[part] = True
            else:
                _skip(f, kind)
    return all(found)


def _keys(f: IO[bytes], path: str | os.PathLike[str]) -> int:
    """Read a GGUF file's preamble (GGUF v2 or later): how many metadata
    keys follow."""
    if f.read(4) != _MAGIC:
        raise GgufError(f"{path}: not a GGUF file")
    (version,) = _unpack(f, "I")
    if version < 2:
        raise GgufError(f"{path}: GGUF version {version} is not supported (2 or later)")
    _tensors, count = _unpack(f, "QQ")
    return int(count)


def _complete(wanted: dict[str, Any]) -> bool:
    return all(
        k in wanted
        for k in (
            "block_count",
            "embedding_length",
            "attention.head_count",
            "attention.head_count_kv",
        )
    )


def _unpack(f: IO[bytes], fmt: str) -> tuple[Any, ...]:
    size = struct.calcsize("<" + fmt)
    data = f.read(size)
    if len(data) != size:
        raise GgufError("the GGUF header ends early")
    return struct.unpack("<" + fmt, data)


def _string(f: IO[bytes]) -> str:
    (length,) = _unpack(f, "Q")
    return f.read(length).decode("utf-8", errors="replace")


def _value(f: IO[bytes], kind: int) -> Any:
    if kind == _STRING:
        return _string(f)
    if kind in _FIXED:
        return _unpack(f, _FIXED[kind])[0]
    raise GgufError(f"unknown GGUF value type {kind}")


def _skip(f: IO[bytes], kind: int) -> None:
    if kind == _STRING:
        (length,) = _unpack(f, "Q")
        f.seek(length, 1)
    elif kind == _ARRAY:
        inner, n = _unpack(f, "IQ")
        if inner in _FIXED:
            f.seek(n * struct.calcsize("<" + _FIXED[inner]), 1)
        else:
            for _ in range(n):
                _skip(f, inner)
    elif kind in _FIXED:
        f.seek(struct.calcsize("<" + _FIXED[kind]), 1)
    else:
        raise GgufError(f"unknown GGUF value type {kind}")
