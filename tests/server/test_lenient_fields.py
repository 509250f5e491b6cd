"""Issue 19 item 5 and the default ``max_tokens``, as clients see them, on the
real default model (llama-cpp) on 127.0.0.1: message names and OpenAI's
harmless fields accepted, ``user`` as the producer, ``/v1/models`` paths for
admin keys only, and a request without ``max_tokens`` bounded by the context."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.server.helpers import Gateway, serve, serve_default_model, sim_settings

pytestmark = pytest.mark.llama
pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")

from tierlm.runners.llama_cpp import DEFAULT_CHAT_MODEL_ID  # noqa: E402

MODEL = DEFAULT_CHAT_MODEL_ID
HARMLESS = {
    "store": True,
    "metadata": {"run": "nightly-7"},
    "service_tier": "auto",
    "prompt_cache_key": "k1",
    "safety_identifier": "hash-1",
    "reasoning_effort": "low",
    "verbosity": "low",
    "user": "end-user-7",
}


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with serve_default_model() as g:
        yield g


def test_a_named_message_and_harmless_fields_are_accepted(
    gw: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="tierlm.server")
    answer = gw.openai().chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "Be brief.", "name": "rules"},
            {"role": "user", "content": "Hi!", "name": "ann"},
        ],
        max_tokens=5,
        **HARMLESS,  # type: ignore[arg-type]
    )
    assert answer.choices[0].message.content is not None
    # user is the fair-pool producer (no X-Tierlm-Producer header)...
    assert answer.model_extra["tierlm"]["producer"] == "end-user-7"
    # ...and metadata is in the log.
    assert any("nightly-7" in r.getMessage() for r in caplog.records)
    headed = gw.openai(X_Tierlm_Producer="indexer").chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=2, user="u9"
    )
    assert headed.model_extra["tierlm"]["producer"] == "indexer"


def test_langchain_message_with_name(gw: Gateway) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    from langchain_core.messages import HumanMessage

    llm = langchain_openai.ChatOpenAI(
        model=MODEL, base_url=f"{gw.url}/v1", api_key="unused", max_tokens=8, max_retries=0
    )
    reply = llm.invoke([HumanMessage("hello", name="example_user")])
    assert isinstance(reply.content, str)


def test_llamaindex_openai_like_chat_with_harmless_fields(gw: Gateway) -> None:
    openai_like = pytest.importorskip("llama_index.llms.openai_like")
    from llama_index.core.llms import ChatMessage

    llm = openai_like.OpenAILike(
        model=MODEL,
        api_base=f"{gw.url}/v1",
        api_key="unused",
        is_chat_model=True,
        max_tokens=8,
        additional_kwargs={"user": "li-user", "metadata": {"app": "rag"}},
    )
    reply = llm.chat([ChatMessage(role="user", content="Hi", additional_kwargs={"name": "ann"})])
    assert reply.message.content is not None


def test_without_max_tokens_the_answer_may_fill_the_context(gw: Gateway) -> None:
    """No max_tokens: what the context leaves after the prompt (at most
    limits.max_tokens_limit), not a fixed 256; a json answer is not cut."""
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", timeout=180, max_retries=0)
    answer = client.completions.create(
        model=MODEL, prompt="1, 2, 3, 4, 5, 6, 7,", temperature=0, stop=[" 100,"]
    )
    assert answer.usage is not None and answer.usage.completion_tokens > 256
    assert answer.choices[0].finish_reason == "stop"


def test_model_paths_are_for_admin_keys_only() -> None:
    from tierlm.runners.llama_cpp import LlamaCppRunner, default_chat_spec

    spec = default_chat_spec()
    assert spec is not None
    keys = [{"name": "ops", "key": "k-admin", "admin": True}, {"name": "app", "key": "k-app"}]
    settings = sim_settings({"keys": keys})
    settings = settings.model_copy(
        update={
            "backend": settings_for(spec.path).backend,
        }
    )
    with serve(settings, key="k-admin", runner=LlamaCppRunner({MODEL: spec})) as gw:
        admin = gw.openai("k-admin").models.retrieve(MODEL).model_extra["tierlm"]
        app = gw.openai("k-app").models.list().data[0].model_extra["tierlm"]
        assert admin["load_options"]["path"] == str(spec.path)
        assert app["load_options"]["path"] == Path(spec.path).name


def settings_for(path: Path) -> object:
    from tierlm.server.settings.sources import settings_from_dict

    return settings_from_dict({"backend": {"kind": "llama-cpp", "models": {MODEL: str(path)}}})


def test_n_choices_streamed_and_not(gw: Gateway) -> None:
    """n > 1: n jobs, one answer of n choices (the prompt counted once)."""
    client = gw.openai()
    fields = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6}
    answer = client.chat.completions.create(n=3, temperature=1.0, seed=1, **fields)  # type: ignore[call-overload]
    assert [c.index for c in answer.choices] == [0, 1, 2]
    assert len(answer.model_extra["tierlm"]["job_ids"]) == 3
    one = client.chat.completions.create(**fields)  # type: ignore[call-overload]
    assert answer.usage.prompt_tokens == one.usage.prompt_tokens
    assert 3 <= answer.usage.completion_tokens <= 3 * 6  # summed over the choices
    texts: dict[int, str] = {}
    usage = None
    for chunk in client.chat.completions.create(
        n=2,
        stream=True,
        stream_options={"include_usage": True},
        **fields,  # type: ignore[call-overload]
    ):
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
        usage = chunk.usage or usage
    assert sorted(texts) == [0, 1] and usage is not None
    assert usage.completion_tokens <= 2 * 6 and usage.prompt_tokens == one.usage.prompt_tokens


def test_langchain_generates_n_choices(gw: Gateway) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    llm = langchain_openai.ChatOpenAI(
        model=MODEL, base_url=f"{gw.url}/v1", api_key="unused", max_tokens=5, n=2, max_retries=0
    )
    from langchain_core.messages import HumanMessage

    result = llm.generate([[HumanMessage("Hi")]])
    assert len(result.generations[0]) == 2
