"""LlamaCppEmbedder over a generated tiny llama GGUF (the plumbing, not the meaning)."""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("llama_cpp", reason="needs llama-cpp-python: tierlm[llama]")
pytest.importorskip("gguf", reason="needs the gguf package: tierlm[llama]")
gguf_model = pytest.importorskip(
    "tierlm.testing.gguf_model", reason="needs tierlm.testing.gguf_model (tiny GGUF writer)"
)

from tierlm.embedding import EmbeddingLane, LlamaCppEmbedder  # noqa: E402

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.llama


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> LlamaCppEmbedder:
    path: Path = gguf_model.write_tiny_llama(tmp_path_factory.mktemp("gguf") / "e.gguf", seed=6)
    return LlamaCppEmbedder(path, n_ctx=256, n_threads=1)


def test_one_unit_vector_per_text(embedder: LlamaCppEmbedder) -> None:
    assert embedder.dim == 64  # the small preset's hidden size
    assert embedder.max_input_tokens == 256
    vectors = embedder.embed_batch(["cat", "kitten", "revenue"])
    assert len(vectors) == 3
    for vector in vectors:
        assert len(vector) == 64
        assert math.sqrt(sum(x * x for x in vector)) == pytest.approx(1.0, abs=1e-5)
    assert vectors[0] != vectors[1]


def test_batch_equals_single_calls_and_is_deterministic(embedder: LlamaCppEmbedder) -> None:
    texts = ["cat", "a longer text about the weather", "revenue"]
    batch = embedder.embed_batch(texts)
    singles = [embedder.embed_batch([t])[0] for t in texts]
    for a, b in zip(batch, singles, strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5
    assert embedder.embed_batch(texts) == batch


def test_overlong_text_is_truncated(embedder: LlamaCppEmbedder) -> None:
    # One token per byte in the generated vocabulary: 1 000 bytes > 256 tokens.
    (vector,) = embedder.embed_batch(["x" * 1000])
    assert len(vector) == 64


def test_the_lane_runs_it_off_the_loop(embedder: LlamaCppEmbedder) -> None:
    texts = [f"note {i}" for i in range(40)]
    expected = embedder.embed_batch(texts)

    async def main() -> list[list[float]]:
        async with EmbeddingLane(embedder, concurrency=2, max_batch=8) as lane:
            return await lane.embed_many(texts)

    got = asyncio.run(main())
    for a, b in zip(got, expected, strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5


def test_a_missing_model_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no GGUF model"):
        LlamaCppEmbedder(tmp_path / "absent.gguf")
