"""API keys: who may claim which class (403 otherwise), who may steer the scheduler."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.payloads import MESSAGES
from tests.server.helpers import Gateway, error_message, module_gateway

KEYS = [
    {"key": "sk-chat", "name": "chat-ui", "classes": ["chat"]},
    {
        "key": "sk-indexer",
        "name": "indexer",
        "classes": ["extract", "gana"],
        "default_class": "extract",
    },
    {"key": "sk-admin", "name": "ops", "admin": True},
]


gw = module_gateway({"keys": KEYS}, key="sk-admin")


def test_a_key_limited_to_extract_cannot_claim_chat(gw: Gateway) -> None:
    before = gw.metric("tierlm_rejected_requests_total", reason="class_not_allowed")
    client = gw.openai("sk-indexer", X_Tierlm_Class="chat")
    with pytest.raises(openai.PermissionDeniedError) as info:
        client.chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=2)
    assert info.value.status_code == 403
    assert error_message(info.value).endswith(
        "X-Tierlm-Class: class 'chat' is not allowed for API key 'indexer' (allowed: extract, gana)"
    )
    assert info.value.code == "class_not_allowed"
    assert gw.metric("tierlm_rejected_requests_total", reason="class_not_allowed") == before + 1


def test_a_key_gets_its_default_class_and_producer(gw: Gateway) -> None:
    raw = gw.openai("sk-indexer").chat.completions.with_raw_response.create(
        model="sim-a", messages=MESSAGES, max_tokens=2
    )
    assert raw.headers["x-tierlm-class"] == "extract"
    assert (raw.parse().model_extra or {})["tierlm"]["producer"] == "indexer"
    raw = gw.openai(
        "sk-indexer", X_Tierlm_Class="gana", X_Tierlm_Producer="gana:7"
    ).chat.completions.with_raw_response.create(model="sim-a", messages=MESSAGES, max_tokens=2)
    assert raw.headers["x-tierlm-class"] == "gana"
    # Namespaced under the key: the key's ids share its part of the fair pool.
    assert (raw.parse().model_extra or {})["tierlm"]["producer"] == "indexer/gana:7"
    assert "indexer/gana:7" in gw.state()["vruntime"]


def test_missing_or_wrong_key_is_401(gw: Gateway) -> None:
    with pytest.raises(openai.AuthenticationError) as info:
        gw.openai("sk-wrong").chat.completions.create(model="sim-a", messages=MESSAGES)
    assert error_message(info.value).endswith("Authorization: invalid API key")
    response = httpx.post(f"{gw.url}/v1/chat/completions", json={"model": "sim-a"})
    assert response.status_code == 401
    assert "missing API key" in response.json()["error"]["message"]
    with pytest.raises(openai.AuthenticationError):
        gw.openai("sk-wrong").models.list()
    # Health is for supervisors: no key.
    assert httpx.get(f"{gw.url}/health").status_code == 200


def test_scheduler_api_metrics_and_dashboard_need_an_admin_key(gw: Gateway) -> None:
    chat = {"Authorization": "Bearer sk-chat"}
    for method, path in [
        ("GET", "/v1/scheduler/state"),
        ("POST", "/v1/scheduler/pause"),
        ("POST", "/v1/scheduler/resume"),
        ("PUT", "/v1/scheduler/foreground"),
        ("GET", "/metrics"),
        ("GET", "/dashboard/state"),
    ]:
        response = httpx.request(method, f"{gw.url}{path}", headers=chat, json=None)
        assert response.status_code == 403, path
        assert response.json()["error"]["message"] == (
            "API key 'chat-ui' is not an admin key; this endpoint needs one"
        )
    assert gw.http.get("/v1/scheduler/state").status_code == 200
    assert gw.http.get("/metrics").status_code == 200


def test_dashboard_login_by_a_form_post_never_a_key_in_the_url(gw: Gateway) -> None:
    with httpx.Client(base_url=gw.url) as browser:
        page = browser.get("/dashboard")
        assert page.status_code == 401
        assert "<form method=post action='/dashboard/login'>" in page.text
        assert "type=password name=key" in page.text
        # A key in the URL would be written to the access log: it is not accepted.
        in_url = browser.get("/dashboard?key=sk-admin")
        assert in_url.status_code == 401 and "set-cookie" not in in_url.headers
        assert "not accepted" in in_url.text
        assert browser.post("/dashboard/login", data={"key": "sk-chat"}).status_code == 401
        login = browser.post("/dashboard/login", data={"key": "sk-admin"})
        assert login.status_code == 303 and login.headers["location"] == "/dashboard"
        cookie = login.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/dashboard" in cookie
        assert browser.get("/dashboard").status_code == 200
        assert browser.get("/dashboard/state").json()["backend"] == "sim"
        # The cookie is for the dashboard only.
        assert browser.get("/v1/scheduler/state").status_code == 401
    # A page of another origin cannot post the form (login CSRF).
    foreign = httpx.post(
        f"{gw.url}/dashboard/login",
        data={"key": "sk-admin"},
        headers={"Origin": "http://evil.example"},
    )
    assert foreign.status_code == 403
