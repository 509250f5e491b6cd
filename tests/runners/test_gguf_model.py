"""The generated test models: valid GGUF, deterministic, and they behave as promised
in llama.cpp (printable ASCII only, one token per byte, run to max_tokens)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tierlm.testing.gguf_model import (
    CHATML_TEMPLATE,
    IM_END,
    IM_START,
    TinyLlamaConfig,
    write_tiny_llama,
)

if TYPE_CHECKING:
    from pathlib import Path

    from tests.runners.helpers import TinyModels


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path: Path) -> None:
    a1 = write_tiny_llama(tmp_path / "a1.gguf", seed=7)
    a2 = write_tiny_llama(tmp_path / "a2.gguf", seed=7)
    b = write_tiny_llama(tmp_path / "b.gguf", seed=8)
    assert a1.read_bytes() == a2.read_bytes()
    assert a1.read_bytes() != b.read_bytes()
    assert a1.stat().st_size < 1_000_000  # the small preset stays tiny


def test_metadata_is_a_chatml_llama_with_byte_vocabulary(tiny_models: TinyModels) -> None:
    from gguf import GGUFReader

    reader = GGUFReader(tiny_models.a)

    def value(key: str) -> object:
        field = reader.fields[key]
        return field.contents()

    assert value("general.architecture") == "llama"
    assert value("llama.block_count") == 2
    assert value("llama.embedding_length") == 64
    assert value("tokenizer.chat_template") == CHATML_TEMPLATE
    tokens = value("tokenizer.ggml.tokens")
    assert isinstance(tokens, list)
    assert len(tokens) == 256 + 1 + 3  # bytes, the one merge, three specials
    assert IM_START in tokens
    assert IM_END in tokens


def test_bad_shapes_are_rejected_with_the_field_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="hidden"):
        TinyLlamaConfig(hidden=66, n_heads=4)
    with pytest.raises(ValueError, match="n_kv_heads"):
        TinyLlamaConfig(n_heads=4, n_kv_heads=3)
    with pytest.raises(ValueError, match="preset"):
        write_tiny_llama(tmp_path / "x.gguf", preset="huge")


@pytest.mark.llama
def test_loads_in_llama_cpp_and_samples_only_printable_ascii(tiny_models: TinyModels) -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(str(tiny_models.a), n_ctx=1024, n_threads=1, verbose=False)
    try:
        # One token per byte: re-tokenizing generated text gives its tokens back.
        assert len(llm.tokenize(b"hello, world", add_bos=False)) == len("hello, world")
        assert llm.tokenize(IM_START.encode(), add_bos=False, special=True) == [
            llm.tokenize(IM_START.encode(), add_bos=False, special=True)[0]
        ]
        prompt = llm.tokenize(b"<|im_start|>user\nhi<|im_end|>\n", add_bos=False, special=True)
        # Hot sampling, many tokens: no byte outside printable ASCII, no end token.
        out: list[int] = []
        for token in llm.generate(prompt, temp=1.5, top_k=0, top_p=1.0, min_p=0.0):
            out.append(token)
            if len(out) == 500:
                break
        text = llm.detokenize(out)
        assert len(text) == 500
        assert all(0x20 <= byte <= 0x7E for byte in text), text
        assert len(set(text)) > 10  # varied text, not one repeated byte
    finally:
        llm.close()
