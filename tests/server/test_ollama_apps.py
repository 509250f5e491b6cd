"""Ollama apps as they really call (issue 56, items 1-6; issue 54, item 12),
against a real sim gateway on 127.0.0.1: the bodies and headers that
LiteLLM, curl, Obsidian, VS Code and Open WebUI send, which Ollama answers.

Each test is one item: any Content-Type on Ollama's API; Ollama's default
origins (and wildcards) let in on Ollama's API only; ``model:latest``; the
options Ollama ignores; pull and create of a served model, and a per-app
key's keep_alive; the class named in the model (``model@gana``) on both
surfaces; ``/api/show`` without the file's path for a non-admin key.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.payloads import MESSAGES, ollama_chat_body
from tests.server.helpers import WAIT, Gateway, serve, sim_settings

ollama = pytest.importorskip("ollama", reason="needs the ollama client (the dev extra)")

ADMIN, APP = "sk-admin", "sk-notes"
KEYS = [
    {"key": ADMIN, "admin": True},
    {"key": APP, "name": "notes", "classes": ["chat", "gana", "nataraj"]},
]


@pytest.fixture
def gw() -> Iterator[Gateway]:
    with serve(sim_settings()) as g:
        yield g


def chat(model: str = "sim-a", **more: Any) -> dict[str, Any]:
    return ollama_chat_body(model, stream=False, **more)


def recent(gw: Gateway) -> dict[str, Any]:
    job: dict[str, Any] = gw.state()["gateway"]["recent"][0]
    return job


# -- 1. Content-Type ---------------------------------------------------------------


@pytest.mark.parametrize(
    "media",
    [
        "application/octet-stream",  # LiteLLM's ollama/ and ollama_chat/ (async), its proxy
        "application/x-www-form-urlencoded",  # curl -d, as in Ollama's docs
        "text/plain;charset=UTF-8",
        None,
    ],
)
def test_ollama_s_api_reads_any_content_type_as_json(gw: Gateway, media: str | None) -> None:
    headers = {} if media is None else {"Content-Type": media}
    body = json.dumps(chat(options={"num_predict": 2}))
    response = httpx.post(f"{gw.url}/api/chat", content=body, headers=headers, timeout=WAIT)
    assert response.status_code == 200, response.text
    assert response.json()["message"]["content"] == "w0 w1 "
    # /v1 still wants JSON said: a page's "simple" request is no OpenAI client's.
    v1 = httpx.post(
        f"{gw.url}/v1/chat/completions",
        content=json.dumps({"model": "sim-a", "messages": MESSAGES}),
        headers={"Content-Type": "text/plain"},
    )
    assert v1.status_code == 415


# -- 2. Origins ----------------------------------------------------------------------

OLLAMA_LETS_IN = [
    "http://localhost:3000",
    "https://127.0.0.1:5173",
    "http://0.0.0.0:8080",
    "app://obsidian.md",
    "tauri://localhost",
    "vscode-webview://1dbhq8b0e5s7",
    "vscode-file://vscode-app",
    "file://",
]


@pytest.mark.parametrize("origin", OLLAMA_LETS_IN)
def test_ollama_s_default_origins_may_call_ollama_s_api_and_nothing_else(
    gw: Gateway, origin: str
) -> None:
    body = chat(options={"num_predict": 1})
    answer = httpx.post(f"{gw.url}/api/chat", json=body, headers={"Origin": origin})
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == origin
    preflight = httpx.options(
        f"{gw.url}/api/chat",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,authorization",
        },
    )
    assert preflight.status_code == 200, preflight.text
    assert preflight.headers["access-control-allow-origin"] == origin
    # The scheduler is no page's to steer: the same origin, elsewhere, is 403.
    pause = httpx.post(f"{gw.url}/v1/scheduler/pause", headers={"Origin": origin})
    assert pause.status_code == 403 and gw.state()["paused"] is False
    v1 = httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers={"Origin": origin})
    assert v1.status_code == 403


@pytest.mark.parametrize("origin", ["http://evil.example", "chrome-extension://abc", "null"])
def test_other_origins_stay_out_of_ollama_s_api(gw: Gateway, origin: str) -> None:
    answer = httpx.post(f"{gw.url}/api/chat", json=chat(), headers={"Origin": origin})
    assert answer.status_code == 403
    assert "cors_origins" in answer.json()["error"]


def test_cors_origins_take_wildcards_and_ollama_s_defaults_can_be_turned_off() -> None:
    server = {"cors_origins": ["chrome-extension://*"], "ollama_origins": []}
    with serve(sim_settings({"server": server})) as gw:
        extension = {"Origin": "chrome-extension://kpgdpfbmmhjoaeaabdmmpdhcddpofmjc"}
        for path, body in (
            ("/api/chat", chat(options={"num_predict": 1})),
            ("/v1/chat/completions", {"model": "sim-a", "messages": MESSAGES, "max_tokens": 1}),
        ):
            answer = httpx.post(f"{gw.url}{path}", json=body, headers=extension)
            assert answer.status_code == 200, answer.text
            assert answer.headers["access-control-allow-origin"] == extension["Origin"]
        local = httpx.post(
            f"{gw.url}/api/chat", json=chat(), headers={"Origin": "http://localhost:3000"}
        )
        assert local.status_code == 403


# -- 3. model:latest ---------------------------------------------------------------


def test_a_name_with_ollama_s_latest_tag_is_the_model(gw: Gateway) -> None:
    c = ollama.Client(host=gw.url, timeout=WAIT)
    names = [m.model for m in c.list().models]
    assert "sim-a:latest" in names and "sim-embed:latest" in names
    answer = c.chat(model="sim-a:latest", messages=MESSAGES, options={"num_predict": 2})
    assert answer.message.content == "w0 w1 " and answer.model == "sim-a:latest"
    assert recent(gw)["model"] == "sim-a"
    assert c.generate(model="sim-b:latest", prompt="hi", options={"num_predict": 1}).done
    assert c.show("sim-a:latest").capabilities == ["completion"]
    assert len(c.embed(model="sim-embed:latest", input="hi").embeddings[0]) > 0
    # Another tag is another model: not served.
    with pytest.raises(ollama.ResponseError) as info:
        c.chat(model="sim-a:7b", messages=MESSAGES)
    assert info.value.status_code == 404


# -- 4. options Ollama ignores -----------------------------------------------------

# Ollama's docs/api.md "Request (with options)", as older and newer releases
# print it: every option Ollama has had.
OLLAMA_EXAMPLE_OPTIONS = {
    "num_keep": 5,
    "seed": 42,
    "num_predict": 3,
    "top_k": 20,
    "top_p": 0.9,
    "min_p": 0.0,
    "tfs_z": 0.5,
    "typical_p": 0.7,
    "repeat_last_n": 33,
    "temperature": 0.8,
    "repeat_penalty": 1.2,
    "presence_penalty": 1.5,
    "frequency_penalty": 1.0,
    "mirostat": 1,
    "mirostat_tau": 0.8,
    "mirostat_eta": 0.6,
    "penalize_newline": True,
    "stop": ["\n", "user:"],
    "numa": False,
    "num_ctx": 1024,
    "num_batch": 2,
    "num_gqa": 1,
    "num_gpu": 1,
    "main_gpu": 0,
    "low_vram": False,
    "f16_kv": True,
    "vocab_only": False,
    "use_mmap": True,
    "use_mlock": False,
    "rope_frequency_base": 1.1,
    "rope_frequency_scale": 0.8,
    "num_thread": 8,
}


def test_ollama_s_request_with_options_example_is_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # llama-cpp's knobs (top_k, mirostat...) are refused by the sim backend as
    # on /v1 (compat.py); on a backend that has them, the example as printed.
    with serve(sim_settings({"backend": {"kind": "sim"}})) as gw:
        sim = {k: v for k, v in OLLAMA_EXAMPLE_OPTIONS.items() if k in _SIM_HAS or k in _LOAD}
        body = {
            "model": "sim-a",
            "prompt": "Why is the sky blue?",
            "stream": False,
            "options": {**sim, "num_gqa": 1, "rope_frequency_base": 1.1, "tfs_z": 0.5},
            "truncate": True,
            "shift": False,
        }
        with caplog.at_level(logging.INFO, logger="tierlm.server"):
            answer = httpx.post(f"{gw.url}/api/generate", json=body, timeout=WAIT)
        assert answer.status_code == 200, answer.text
        assert answer.json()["eval_count"] == 3
        assert "num_gqa, rope_frequency_base" in caplog.text and "tfs_z" in caplog.text
        # An option it knows is still checked.
        wrong = {**body, "options": {"num_predict": "many"}}
        refused = httpx.post(f"{gw.url}/api/generate", json=wrong)
        assert refused.status_code == 400 and refused.json()["error"].startswith(
            "options.num_predict"
        )


_SIM_HAS = {"seed", "num_predict", "temperature", "top_p", "stop"}
_LOAD = {"num_keep", "numa", "num_ctx", "num_batch", "num_gpu", "main_gpu", "low_vram", "f16_kv"}
_LOAD |= {"vocab_only", "use_mmap", "use_mlock", "num_thread", "repeat_last_n", "penalize_newline"}


# -- 5. pull, create, keep_alive ---------------------------------------------------


def test_an_app_that_pulls_or_creates_its_served_model_at_start_goes_on() -> None:
    with serve(sim_settings({"keys": KEYS}), key=ADMIN) as gw:
        app = ollama.Client(host=gw.url, timeout=WAIT, headers={"Authorization": f"Bearer {APP}"})
        assert app.pull("sim-a").status == "success"
        assert [p.status for p in app.pull("sim-a:latest", stream=True)] == ["success"]
        assert app.create(model="sim-b").status == "success"
        assert app.create(model="sim-b", from_="sim-b:latest").status == "success"
        for call in (
            lambda: app.pull("llama3.2"),
            lambda: app.create(model="mario", from_="sim-a"),
            lambda: app.create(model="sim-a", system="You are Mario"),
            lambda: app.delete("sim-a"),
        ):
            with pytest.raises(ollama.ResponseError) as info:
                call()
            assert info.value.status_code == 404 and "[backend.models]" in info.value.error
        # A per-app key's keep_alive (sent by many apps on every call) is
        # ignored, not refused; a load it asks for changes nothing.
        answer = app.chat(
            model="sim-a", messages=MESSAGES, keep_alive="5m", options={"num_predict": 1}
        )
        assert answer.done and "sim-a" not in gw.app.state.keep_alive.ttls
        assert app.generate(model="sim-b", keep_alive=-1).done_reason == "load"
        assert gw.state()["loaded_model"] == "sim-a"
        # Unloading is an admin's.
        with pytest.raises(ollama.ResponseError) as info:
            app.generate(model="sim-a", keep_alive=0)
        assert info.value.status_code == 403


# -- 6. the class in the model's name --------------------------------------------


def test_a_model_alias_names_the_class_on_both_surfaces() -> None:
    with serve(sim_settings({"keys": KEYS}), key=ADMIN) as gw:
        auth = {"Authorization": f"Bearer {APP}"}
        app = ollama.Client(host=gw.url, timeout=WAIT, headers=auth)
        answer = app.chat(model="sim-a@gana", messages=MESSAGES, options={"num_predict": 2})
        assert answer.message.content == "w0 w1 " and answer.model == "sim-a@gana"
        job = recent(gw)
        assert (job["class"], job["model"]) == ("gana", "sim-a")
        # What an app's picker lists (Open WebUI's task model): the background alias.
        assert "sim-a@background:latest" in [m.model for m in app.list().models]
        app.generate(model="sim-a@background:latest", prompt="hi", options={"num_predict": 1})
        assert recent(gw)["class"] == "gana"  # [people] program_class
        # The OpenAI surface (LiteLLM's openai/ provider, Open WebUI's OpenAI connection).
        v1 = gw.openai(APP).chat.completions.create(
            model="sim-a@nataraj", messages=MESSAGES, max_tokens=1
        )
        assert v1.model == "sim-a" and recent(gw)["class"] == "nataraj"
        # The Responses API too: every surface reads the alias.
        gw.openai(APP).responses.create(model="sim-a@gana", input="hi", max_output_tokens=1)
        assert recent(gw)["class"] == "gana"
        # The key's rules hold, as for the header: extract is not the app's.
        refused = httpx.post(f"{gw.url}/api/chat", json=chat("sim-a@extract"), headers=auth)
        assert refused.status_code == 403 and "'extract'" in refused.json()["error"]
        both = httpx.post(
            f"{gw.url}/api/chat",
            json=chat("sim-a@gana"),
            headers={**auth, "X-Tierlm-Class": "nataraj"},
        )
        assert both.status_code == 400 and "name one" in both.json()["error"]
        # An unknown suffix is no class: the name is not served.
        unknown = httpx.post(f"{gw.url}/api/chat", json=chat("sim-a@nobody"), headers=auth)
        assert unknown.status_code == 404


# -- issue 54, 12: /api/show and the model file's path ----------------------------


def test_api_show_tells_the_file_s_path_to_admin_keys_only(tmp_path: Any) -> None:
    from tierlm.runners.simulated import SimulatedRunner

    gguf = tmp_path / "secret-dir" / "model.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF" + bytes(60))

    class Described(SimulatedRunner):
        def describe(self, model_id: str) -> dict[str, object]:
            return {"path": str(gguf), "n_ctx": 512}

    runner = Described(token_interval=0.001, swap_seconds=0.0, models=["sim-a", "sim-b"])
    with serve(sim_settings({"keys": KEYS}), key=ADMIN, runner=runner) as gw:

        def shown(key: str) -> str:
            response = httpx.post(
                f"{gw.url}/api/show",
                json={"model": "sim-a"},
                headers={"Authorization": f"Bearer {key}"},
            )
            assert response.status_code == 200, response.text
            return response.text

        assert str(gguf.parent) in shown(ADMIN)
        app = shown(APP)
        assert str(gguf.parent) not in app and str(tmp_path) not in app
        assert "FROM model.gguf" in json.loads(app)["modelfile"]
