"""``/health`` is liveness, ``/ready`` readiness (docs/gateway.md "Health");
text no model can read is the client's mistake (400 naming the field)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.payloads import MESSAGES, chat_body
from tests.server.helpers import Gateway, serve, sim_settings
from tierlm.server.settings.sources import settings_from_dict

LONE = "x\ud800y"  # a lone surrogate: valid JSON (as "\ud800"), no valid text
CHAT_PARTS = [*MESSAGES, {"role": "user", "content": [{"type": "text", "text": LONE}]}]


def test_health_and_ready_on_a_loaded_model(gateway: Gateway) -> None:
    health = gateway.http.get("/health")
    assert health.status_code == 200
    assert health.json()["status"] == "ok"
    assert health.json()["loaded_model"] == "sim-a"
    ready = gateway.http.get("/ready")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"


def test_without_preload_nothing_is_due_before_the_first_request() -> None:
    with serve(sim_settings({"backend": {"preload": False}})) as gw:
        assert gw.http.get("/health").json()["loaded_model"] is None
        assert gw.http.get("/ready").status_code == 200


def test_a_model_that_failed_to_load_is_alive_but_not_ready(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(60))  # a truncated file: llama.cpp cannot load it
    settings = settings_from_dict(
        {"backend": {"kind": "llama-cpp", "models": {"broken": str(broken)}}}
    )
    with serve(settings) as gw:
        assert gw.http.get("/health").json()["status"] == "ok"
        ready = gw.http.get("/ready")
        assert ready.status_code == 503
        reason = ready.json()["reason"]
        assert reason.startswith("no model is loaded: loading 'broken' failed: ")


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (
            "/v1/chat/completions",
            chat_body(messages=[{"role": "user", "content": LONE}]),
            "messages[0].content",
        ),
        (
            "/v1/chat/completions",
            chat_body(
                messages=[*MESSAGES, {"role": "user", "content": [{"type": "text", "text": LONE}]}]
            ),
            "messages[1].content",
        ),
        ("/v1/completions", {"model": "sim-a", "prompt": LONE, "max_tokens": 2}, "prompt"),
        ("/v1/chat/completions", chat_body(stop=["ok", LONE]), "stop[1]"),
    ],
)
def test_a_lone_surrogate_is_a_400_naming_the_field(
    gateway: Gateway, path: str, body: dict[str, object], param: str
) -> None:
    # As a browser's JSON.stringify sends it: the surrogate as a \u escape.
    response = gateway.http.post(
        path, content=json.dumps(body), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    # Named by the JSON reader, the request's schema or the gateway's check,
    # down to the text part where one of them can.
    assert error["param"].startswith(param)
    assert error["message"].startswith(f"{error['param']}: ")
    assert "surrogate" in error["message"].lower() or "unicode" in error["message"].lower()
    # Nothing was queued, and the next request is served.
    assert gateway.state()["stats"]["submitted"] == 0
    reply = gateway.openai().chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=2)
    assert reply.choices[0].message.content == "w0 w1 "


def test_an_unloaded_model_is_still_ready(gateway: Gateway) -> None:
    # The next request loads it again (an admin's unload, keep_alive): only a
    # load that failed makes the gateway not ready.
    assert gateway.http.post("/v1/models/sim-a/unload").status_code == 200
    assert gateway.http.get("/health").json()["loaded_model"] is None
    assert gateway.http.get("/ready").json()["status"] == "ready"
    reply = gateway.openai().chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=2)
    assert reply.choices[0].message.content == "w0 w1 "
