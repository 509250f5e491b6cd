"""The models' endpoints on a real gateway: each model's state, loading and
unloading by hand (admin, through the scheduler), and the idle time to live
(``keep_alive``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.helpers import wait_until_blocking
from tests.payloads import MESSAGES
from tests.server.helpers import WAIT, Gateway, module_gateway, serve, sim_settings
from tierlm.server.settings.sources import settings_from_dict

if TYPE_CHECKING:
    from tests.runners.helpers import TinyModels

KEYS = [
    {"key": "sk-user", "name": "user", "classes": ["chat", "gana"]},
    {"key": "sk-admin", "name": "ops", "admin": True},
]


gw = module_gateway(
    {"keys": KEYS, "backend": {"models": {"sim-a": {}, "sim-b": {}}}}, key="sk-admin"
)


def states(gw: Gateway, key: str = "sk-user") -> dict[str, str]:
    models = gw.openai(key).models.list()
    return {m.id: (m.model_extra or {})["tierlm"]["state"] for m in models}


def test_models_list_their_state(gw: Gateway) -> None:
    gw.openai("sk-user").chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=1)
    # The embedding lane's model is listed too (it serves /v1/embeddings).
    assert states(gw) == {"sim-a": "loaded", "sim-b": "not loaded", "sim-embed": "loaded"}
    card = gw.openai("sk-user").models.retrieve("sim-b")
    assert (card.model_extra or {})["tierlm"] == {"state": "not loaded", "backend": "sim"}


def test_load_and_unload_need_an_admin_key(gw: Gateway) -> None:
    user = httpx.Client(base_url=gw.url, headers={"Authorization": "Bearer sk-user"})
    for action in ("load", "unload"):
        response = user.post(f"/v1/models/sim-b/{action}")
        assert response.status_code == 403, response.text
        assert response.json()["error"]["code"] == "admin_required"
    assert gw.http.post("/v1/models/nope/load").status_code == 404


def test_load_then_unload_by_hand(gw: Gateway) -> None:
    loaded = gw.http.post("/v1/models/sim-b/load")
    assert loaded.status_code == 200, loaded.text
    assert loaded.json()["tierlm"]["state"] == "loaded"
    assert loaded.json()["tierlm"]["load_seconds"] >= 0
    assert states(gw) == {"sim-a": "not loaded", "sim-b": "loaded", "sim-embed": "loaded"}
    assert gw.state()["loaded_model"] == "sim-b"
    unloaded = gw.http.post("/v1/models/sim-b/unload").json()["tierlm"]
    assert unloaded == {"state": "not loaded", "backend": "sim", "unloaded": True}
    assert gw.state()["loaded_model"] is None
    # Idempotent, and the next request loads its model again.
    assert gw.http.post("/v1/models/sim-b/unload").json()["tierlm"]["unloaded"] is False
    answer = gw.openai().chat.completions.create(model="sim-b", messages=MESSAGES, max_tokens=2)
    assert answer.choices[0].message.content == "w0 w1 "
    assert states(gw)["sim-b"] == "loaded"


def test_unload_waits_for_the_running_job(gw: Gateway) -> None:
    gana = gw.openai("sk-user", X_Tierlm_Class="gana")
    gw.openai().chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=1)
    future = gw.background(
        lambda: gana.chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=60)
    )
    job = gw.wait_running("gana")["id"]
    requeues = gw.state()["stats"]["requeues"]
    response = gw.http.post("/v1/models/sim-a/unload")
    assert response.json()["tierlm"]["unloaded"] is True
    # The job was not cut short: it had run to its end when the unload happened.
    state = gw.state()
    ended = next(entry for entry in state["gateway"]["recent"] if entry["id"] == job)
    assert (ended["outcome"], ended["tokens"]) == ("completed", 60)
    assert state["stats"]["requeues"] == requeues
    assert future.result(WAIT).choices[0].message.content.count("w") == 60


def test_an_upstream_backend_cannot_unload(gw: Gateway) -> None:
    settings = settings_from_dict(
        {
            "backend": {"kind": "openai", "url": gw.url, "api_key": "sk-user", "models": ["sim-a"]},
            # The LLM models' cards only (MiniLM is served by default with [embed]).
            "embeddings": {"backend": "none"},
        }
    )
    with serve(settings) as upstream:
        assert states(upstream, "x") == {"sim-a": "upstream"}
        response = upstream.http.post("/v1/models/sim-a/unload")
        assert response.status_code == 400
        assert response.json()["error"]["message"] == (
            "the openai backend cannot unload models: its server holds them"
        )


def wait_for(predicate: Any, what: str) -> None:
    wait_until_blocking(predicate, what, timeout=WAIT, every=0.02)


def test_keep_alive_unloads_an_idle_model() -> None:
    settings = sim_settings(
        {"backend": {"models": {"sim-a": {"keep_alive": "300ms"}, "sim-b": {}}}}
    )
    with serve(settings) as gw:
        client = gw.openai()
        card = (client.models.retrieve("sim-a").model_extra or {})["tierlm"]
        assert card["keep_alive"] == 0.3 and 0 <= card["expires_in"] <= 0.3
        client.chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=1)
        wait_for(lambda: states(gw, "x")["sim-a"] == "not loaded", "sim-a unloaded")
        assert gw.state()["loaded_model"] is None
        answer = client.chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=2)
        assert answer.choices[0].message.content == "w0 w1 "


@pytest.mark.llama
def test_llama_cpp_models_show_their_load_options(tiny_models: TinyModels) -> None:
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
    model = {"n_threads": 1, "n_ctx": 1024}
    settings = settings_from_dict(
        {
            "backend": {
                "kind": "llama-cpp",
                "models": {
                    "a": {"path": str(tiny_models.a), **model},
                    "b": {"path": str(tiny_models.b), **model, "keep_alive": "1h"},
                },
            },
            # The LLM models' cards only (MiniLM is served by default with [embed]).
            "embeddings": {"backend": "none"},
        }
    )
    with serve(settings) as gw:
        cards = {m.id: (m.model_extra or {})["tierlm"] for m in gw.openai().models.list()}
        assert {m: c["state"] for m, c in cards.items()} == {"a": "loaded", "b": "on disk"}
        options = cards["a"]["load_options"]
        assert options["path"] == str(tiny_models.a)
        assert (options["n_ctx"], options["n_threads"]) == (1024, 1)
        assert options["applied"]["n_ctx"] >= 1024 and options["applied"]["n_threads"] == 1
        assert "applied" not in cards["b"]["load_options"] and cards["b"]["keep_alive"] == 3600
        assert gw.http.post("/v1/models/b/load").json()["tierlm"]["state"] == "loaded"
        unloaded = gw.http.post("/v1/models/b/unload").json()["tierlm"]
        assert (unloaded["state"], unloaded["unloaded"]) == ("on disk", True)
        # The worker freed it; the next chat loads it again.
        answer = gw.openai().chat.completions.create(model="b", messages=MESSAGES, max_tokens=3)
        assert len(answer.choices[0].message.content or "") == 3
