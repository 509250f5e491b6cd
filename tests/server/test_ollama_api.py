"""Ollama's native API, with the official ``ollama`` Python client, unchanged,
against a real gateway on 127.0.0.1 (sim backend: the text is the simulated
device's "w0 w1 ...", so what a call returns is known exactly).

Every call an Ollama app makes: discovery, list, ps, show, chat and generate
(streamed and not), embed and the legacy embeddings, load and unload through
an empty generate; errors as Ollama's ``{"error": ...}`` with their status;
the scheduling headers and keys as on ``/v1``; and a chat through
``/api/chat`` preempting background work exactly as one through ``/v1``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.payloads import MESSAGES, chat_body, ollama_chat_body
from tests.server.helpers import WAIT, Gateway, in_queue, serve, sim_settings, sse

ollama = pytest.importorskip("ollama", reason="needs the ollama client (the dev extra)")


def words(n: int) -> str:
    return "".join(f"w{i} " for i in range(n))


def client(gw: Gateway, **headers: str) -> Any:
    return ollama.Client(host=gw.url, timeout=WAIT, headers=headers or None)


@pytest.fixture
def gw() -> Iterator[Gateway]:
    with serve(sim_settings()) as g:
        yield g


def test_discovery_says_ollama_is_running(gw: Gateway) -> None:
    assert httpx.get(f"{gw.url}/").text == "Ollama is running"
    head = httpx.head(f"{gw.url}/")
    assert head.status_code == 200 and head.content == b""
    version = httpx.get(f"{gw.url}/api/version").json()
    assert version["version"].count(".") == 2


def test_list_show_and_ps(gw: Gateway) -> None:
    c = client(gw)
    names = [m.model for m in c.list().models]
    # Ollama's names carry a tag; each chat model also under its background alias.
    assert names == [
        "sim-a:latest",
        "sim-b:latest",
        "sim-embed:latest",
        "sim-a@background:latest",
        "sim-b@background:latest",
    ]
    shown = c.show("sim-a")
    assert shown.capabilities == ["completion"]  # the sim backend refuses tools
    assert c.show("sim-embed").capabilities == ["embedding"]
    # The first model is preloaded; kept until a swap: Ollama's "forever".
    (loaded,) = c.ps().models
    assert loaded.model == "sim-a:latest"
    assert loaded.expires_at is not None and loaded.expires_at.year > 2200
    # A keep-alive set by a load request: expires_at is when it runs out.
    assert c.generate(model="sim-a", keep_alive="10m").done_reason == "load"
    (loaded,) = c.ps().models
    assert loaded.expires_at is not None
    left = loaded.expires_at - dt.datetime.now(dt.UTC)
    assert dt.timedelta(minutes=9) < left <= dt.timedelta(minutes=10)


def test_chat_not_streamed_and_streamed(gw: Gateway) -> None:
    c = client(gw)
    answer = c.chat(model="sim-a", messages=MESSAGES, stream=False, options={"num_predict": 5})
    assert answer.message.role == "assistant" and answer.message.content == words(5)
    assert answer.done and answer.done_reason == "length"
    assert answer.eval_count == 5 and answer.prompt_eval_count
    assert answer.total_duration >= answer.eval_duration > 0  # nanoseconds
    parts = list(c.chat(model="sim-a", messages=MESSAGES, stream=True, options={"num_predict": 4}))
    assert [p.message.content for p in parts[:-1]] == [f"w{i} " for i in range(4)]
    assert not any(p.done for p in parts[:-1])
    last = parts[-1]
    assert last.done and last.done_reason == "length" and last.eval_count == 4
    # Streaming is the server's default (the client asks for it or not): NDJSON.
    raw = httpx.post(
        f"{gw.url}/api/chat",
        json=ollama_chat_body(options={"num_predict": 2}),
    )
    assert raw.headers["content-type"] == "application/x-ndjson"
    assert len(raw.text.splitlines()) == 3


def test_chat_says_which_job_and_class_it_was(gw: Gateway) -> None:
    answer = client(gw, **{"X-Tierlm-Class": "gana", "X-Tierlm-Producer": "app:1"}).chat(
        model="sim-a", messages=MESSAGES, stream=False, options={"num_predict": 2}
    )
    assert answer.message.content == words(2)
    (job,) = gw.state()["gateway"]["recent"]
    assert (job["class"], job["producer"], job["tokens"]) == ("gana", "app:1", 2)
    # The client keeps only the fields it knows; the raw answer says which job it was.
    raw = httpx.post(
        f"{gw.url}/api/chat",
        json={"model": "sim-a", "messages": MESSAGES, "stream": False},
        headers={"X-Tierlm-Class": "gana"},
    ).json()
    assert raw["tierlm"]["class"] == "gana" and raw["tierlm"]["job_id"] == job["id"] + 1
    assert gw.metric("tierlm_jobs_total", class_="gana", outcome="completed") == 2


def test_generate_not_streamed_streamed_and_raw(gw: Gateway) -> None:
    c = client(gw)
    answer = c.generate(
        model="sim-a", prompt="hello", system="be brief", options={"num_predict": 3}
    )
    assert answer.response == words(3) and answer.done_reason == "length"
    parts = list(c.generate(model="sim-a", prompt="hello", stream=True, options={"num_predict": 3}))
    assert "".join(p.response for p in parts) == words(3) and parts[-1].done
    raw = c.generate(model="sim-a", prompt="hello", raw=True, options={"num_predict": 2})
    assert raw.response == words(2)


def test_embed_and_legacy_embeddings_are_the_v1_vectors(gw: Gateway) -> None:
    c = client(gw)
    v1 = gw.openai().embeddings.create(model="sim-embed", input=["a cat", "a dog"])
    embedded = c.embed(model="sim-embed", input=["a cat", "a dog"])
    for ours, theirs in zip(embedded.embeddings, v1.data, strict=True):
        assert ours == pytest.approx(theirs.embedding, abs=1e-6)
    legacy = c.embeddings(model="sim-embed", prompt="a cat")
    assert legacy.embedding == pytest.approx(v1.data[0].embedding, abs=1e-6)
    short = c.embed(model="sim-embed", input="a cat", dimensions=8)
    assert len(short.embeddings[0]) == 8


def test_an_empty_generate_unloads_with_keep_alive_0_and_loads_without(gw: Gateway) -> None:
    c = client(gw)
    assert c.generate(model="sim-a", keep_alive=0).done_reason == "unload"
    assert c.ps().models == [] and gw.state()["loaded_model"] is None
    assert c.generate(model="sim-b").done_reason == "load"
    assert [m.model for m in c.ps().models] == ["sim-b:latest"]
    assert c.chat(model="sim-a", messages=[]).done_reason == "load"
    assert gw.state()["loaded_model"] == "sim-a"


def test_errors_are_ollama_s_with_their_status(gw: Gateway) -> None:
    c = client(gw)

    def error(call: Any) -> Any:
        with pytest.raises(ollama.ResponseError) as info:
            call()
        return info.value

    unknown = error(lambda: c.chat(model="nope", messages=MESSAGES))
    assert unknown.status_code == 404 and "'nope'" in unknown.error
    option = error(lambda: c.chat(model="sim-a", messages=MESSAGES, options={"num_predict": 10**6}))
    assert option.status_code == 400 and option.error.startswith("options.num_predict: ")
    suffix = error(lambda: c.generate(model="sim-a", prompt="def f(", suffix="return x"))
    assert suffix.status_code == 400 and "insert" in suffix.error
    tools = error(lambda: c.chat(model="sim-a", messages=MESSAGES, tools=[WEATHER]))
    assert tools.status_code == 400 and "tools" in tools.error and "sim" in tools.error
    pull = error(lambda: c.pull("llama3"))
    assert pull.status_code == 404 and "/api/tags" in pull.error
    # An endpoint nobody serves: Ollama's shape, counted and listed as rejected.
    missing = httpx.get(f"{gw.url}/api/nothing")
    assert missing.status_code == 404 and missing.json() == {
        "error": "GET /api/nothing: no such endpoint"
    }
    assert gw.metric("tierlm_rejected_requests_total", reason="unknown_url") == 1
    rejected = gw.state()["rejected"]
    assert rejected[0]["path"] == "/api/nothing" and rejected[0]["status"] == 404


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def test_keys_name_the_class_as_on_v1() -> None:
    keys = [
        {"key": "sk-admin", "admin": True},
        {"key": "sk-app", "name": "notes", "classes": ["gana"], "default_class": "gana"},
    ]
    with serve(sim_settings({"keys": keys}), key="sk-admin") as gw:
        with pytest.raises(ollama.ResponseError) as info:
            client(gw).list()
        assert info.value.status_code == 401
        app = client(gw, Authorization="Bearer sk-app")
        answer = app.chat(
            model="sim-a", messages=MESSAGES, stream=False, options={"num_predict": 2}
        )
        assert answer.message.content == words(2)
        (job,) = gw.state()["gateway"]["recent"]
        assert (job["class"], job["producer"]) == ("gana", "notes")  # the key's defaults
        # Many apps send a keep_alive with every request: another key's is
        # ignored (an admin key's setting), and the chat is served.
        kept = app.chat(model="sim-a", messages=MESSAGES, keep_alive="1h", stream=False)
        assert kept.done and "sim-a" not in gw.app.state.keep_alive.ttls
        chat = client(gw, Authorization="Bearer sk-app", **{"X-Tierlm-Class": "chat"})
        with pytest.raises(ollama.ResponseError) as info:
            chat.chat(model="sim-a", messages=MESSAGES)
        assert info.value.status_code == 403 and "X-Tierlm-Class" in info.value.error


@pytest.mark.parametrize("chat_api", ["/v1", "/api/chat"])
def test_a_chat_preempts_background_work_the_same_through_either_api(
    gw: Gateway, chat_api: str
) -> None:
    """The background stream is an Ollama app's; the chat comes through
    ``/v1`` or ``/api/chat``: the scheduler cannot tell them apart."""
    tokens = 400
    gana = client(gw, **{"X-Tierlm-Class": "gana", "X-Tierlm-Producer": "gana:1"})

    def background() -> str:
        stream = gana.generate(
            model="sim-a", prompt="x", raw=True, stream=True, options={"num_predict": tokens}
        )
        return "".join(part.response for part in stream)

    future = gw.background(background)
    gw.wait_running("gana")
    if chat_api == "/v1":
        reply = gw.openai().chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=5)
        text = reply.choices[0].message.content
    else:
        answer = client(gw).chat(
            model="sim-a", messages=MESSAGES, stream=False, options={"num_predict": 5}
        )
        text = answer.message.content
    assert text == words(5)
    # The chat did not wait for the 400 tokens: the background job was
    # preempted, and is still under way when the chat has ended (asserted in
    # order, not in seconds: a busy machine stretches every token).
    assert not future.done()
    assert future.result(WAIT) == words(tokens)  # resumed: every token once, in order
    state = gw.state()
    assert state["stats"]["preemptions"] == 1 and state["stats"]["requeues"] == 1
    assert gw.metric("tierlm_jobs_total", class_="chat", outcome="completed") == 1


def test_a_request_s_keep_alive_unloads_its_model_once_idle(gw: Gateway) -> None:
    c = client(gw)
    answer = c.chat(
        model="sim-a", messages=MESSAGES, stream=False, keep_alive=0.2, options={"num_predict": 2}
    )
    assert answer.message.content == words(2)
    # Idle past its keep-alive: unloaded, as Ollama does (the scheduler's unload).
    gw.wait(lambda s: s["loaded_model"] is None, "the model to be unloaded")
    assert c.ps().models == []
    # The next request loads it again (a swap), and is answered.
    assert c.generate(model="sim-a", prompt="x", options={"num_predict": 1}).response == "w0 "


def test_an_app_that_leaves_a_stream_has_its_job_cancelled(gw: Gateway) -> None:
    body = {"model": "sim-a", "messages": MESSAGES, "options": {"num_predict": 4000}}
    with httpx.stream("POST", f"{gw.url}/api/chat", json=body, timeout=WAIT) as response:
        job_id = int(response.headers["x-tierlm-job-id"])
        first = next(response.iter_lines())
        assert '"done":false' in first
    gw.wait(lambda s: s["running"] is None, "the job to stop")
    (job,) = gw.state()["gateway"]["recent"]
    assert job["id"] == job_id and job["outcome"] == "cancelled"
    assert job["reason"] == "client disconnected while running" and job["tokens"] < 4000


def test_an_error_after_the_stream_started_is_an_error_line() -> None:
    # A class that is not re-queued loses its job when a chat preempts it: the
    # stream has started, so the error comes as Ollama's last line, which the
    # client raises.
    settings = sim_settings({"classes": {"gana": {"tier": 4, "fair": True, "requeue": False}}})
    with serve(settings) as gw:
        gana = client(gw, **{"X-Tierlm-Class": "gana"})

        def background() -> Any:
            with pytest.raises(ollama.ResponseError) as info:
                for _ in gana.generate(
                    model="sim-a", prompt="x", stream=True, options={"num_predict": 4000}
                ):
                    pass
            return info.value

        future = gw.background(background)
        gw.wait_running("gana")
        client(gw).chat(model="sim-a", messages=MESSAGES, stream=False, options={"num_predict": 2})
        error = future.result(WAIT)
        assert "preempted" in error.error


def test_a_full_class_queue_is_a_429_with_retry_after_as_on_v1() -> None:
    """The same queue limits: the job is refused before it is queued."""
    settings = sim_settings({"classes": {"gana": {"queue_limit": 1}}})
    with serve(settings) as gw, sse(gw, chat_body(max_tokens=4000)):
        gw.wait_running("chat")
        with sse(gw, chat_body(max_tokens=3), {"X-Tierlm-Class": "gana"}) as first:
            gw.wait(lambda s: in_queue(s, first.job_id) == 4, "the first gana job queued")
            raw = httpx.post(
                f"{gw.url}/api/chat",
                json={"model": "sim-a", "messages": MESSAGES},
                headers={"X-Tierlm-Class": "gana"},
            )
            assert raw.status_code == 429 and int(raw.headers["retry-after"]) >= 1
            assert "queue_limit" in raw.json()["error"]
            with pytest.raises(ollama.ResponseError) as info:
                client(gw, **{"X-Tierlm-Class": "gana"}).chat(model="sim-a", messages=MESSAGES)
            assert info.value.status_code == 429
            assert gw.metric("tierlm_rejected_requests_total", reason="queue_full") == 2
