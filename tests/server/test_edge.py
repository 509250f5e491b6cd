"""The gateway's edge, against a real server on 127.0.0.1 with real clients
(httpx, the official openai client): pathological JSON is a 400 that keeps the
connection, the body is bounded, web pages cannot drive the gateway (Host,
Origin, Content-Type; CORS only on purpose), every response has a request id,
and an unexpected exception is a 500 without its text.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import openai
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.payloads import MESSAGES, chat_body
from tests.server.helpers import WAIT, Gateway, module_gateway, serve, sim_settings
from tierlm.server.settings.sources import settings_from_dict

gw = module_gateway({"limits": {"max_body_bytes": 100_000}})


def error_of(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


# Text that only an exception (or a traceback) would put in an answer.
EXCEPTION_TEXT = re.compile(r"Traceback|\w+(Error|Exception)\b|File \"|site-packages|/src/tierlm")


# -- pathological JSON: 400, never exception text, the connection kept ---------------------

DEEP = b"[" * 5000 + b"]" * 5000
DEEP_OBJECT = b'{"model": "sim-a", "n": ' + b'{"a": ' * 150 + b"1" + b"}" * 150 + b"}"
DIGITS = b'{"model": "sim-a", "max_tokens": ' + b"9" * 5000 + b"}"
NAN = b'{"model": "sim-a", "temperature": NaN}'
SURROGATE = json.dumps({"model": "sim-a", "messages": [{"role": "user", "content": "x\ud800"}]})
PATHOLOGICAL = [
    (DEEP, "request body: nested deeper than 100 levels", None),
    (DEEP_OBJECT, "request body: nested deeper than 100 levels", None),
    (DIGITS, "request body: a number with more than 4300 digits", None),
    (NAN, "request body: not valid JSON: NaN is not a JSON value", None),
    (SURROGATE.encode(), "contains a lone UTF-16 surrogate", "messages[0].content"),
]
BODY_ENDPOINTS = [
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/embeddings"),
    ("PUT", "/v1/scheduler/foreground"),
]


def test_pathological_json_is_a_400_on_a_connection_that_stays_usable(gw: Gateway) -> None:
    # One kept-alive connection: every answer must come back on it.
    with httpx.Client(base_url=gw.url, timeout=WAIT, limits=httpx.Limits(max_connections=1)) as c:
        streams = set()
        for method, path in BODY_ENDPOINTS:
            for body, message, param in PATHOLOGICAL:
                response = c.request(
                    method, path, content=body, headers={"Content-Type": "application/json"}
                )
                assert response.status_code == 400, (path, body[:40], response.text)
                error = error_of(response)
                assert message in error["message"], (path, error)
                if param is not None and path != "/v1/embeddings":
                    assert error["param"] in (param, None)
                assert not EXCEPTION_TEXT.search(error["message"]), error
                assert response.headers.get("connection") != "close"
                streams.add(id(response.extensions["network_stream"]))
        for _ in range(20):
            ok = c.post("/v1/chat/completions", json=chat_body(max_tokens=2))
            assert ok.status_code == 200
            streams.add(id(ok.extensions["network_stream"]))
        assert len(streams) == 1  # never reconnected


def test_what_the_fuzzer_found_is_a_client_error_or_fine(gw: Gateway) -> None:
    # test_fuzz.py found these (each was a 500).
    assert gw.http.post("/v1/chat/completions", json=chat_body(stop=None)).status_code == 200


def test_a_body_over_the_limit_is_413_on_every_endpoint(gw: Gateway) -> None:
    big = b'{"x": "' + b"y" * 200_000 + b'"}'
    for method, path in [*BODY_ENDPOINTS, ("POST", "/v1/scheduler/pause")]:
        response = httpx.request(
            method, gw.url + path, content=big, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 413, path
        assert "larger than the limit of 100000 bytes" in error_of(response)["message"]
        # The rest of the body is not read: the connection is closed, not reused.
        assert response.headers["connection"] == "close"
    assert gw.state()["paused"] is False


# -- web pages: Host, Origin, Content-Type, CORS ------------------------------------------


def test_a_foreign_host_name_is_421(gw: Gateway) -> None:
    port = gw.url.rsplit(":", 1)[1]
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.2"):
        response = httpx.post(f"{gw.url}/v1/scheduler/pause", headers={"Host": host})
        assert response.status_code == 421, host
        error = error_of(response)
        assert (error["code"], error["param"]) == ("host_not_allowed", "Host")
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "LOCALHOST"):
        assert httpx.get(f"{gw.url}/health", headers={"Host": host}).status_code == 200
    assert gw.state()["paused"] is False
    assert gw.metric("tierlm_rejected_requests_total", reason="host_not_allowed") >= 3


def test_a_page_of_another_origin_cannot_drive_the_scheduler(gw: Gateway) -> None:
    pause = f"{gw.url}/v1/scheduler/pause"
    # What a page can send cross-origin without a CORS preflight:
    simple = [
        {"content": "x", "headers": {"Content-Type": "text/plain"}},
        {"content": "a=1", "headers": {"Content-Type": "application/x-www-form-urlencoded"}},
    ]
    for request in simple:
        response = httpx.post(pause, **request)  # type: ignore[arg-type]
        assert response.status_code == 415
        error = error_of(response)
        assert error["code"] == "unsupported_media_type"
        assert error["message"].startswith("Content-Type: must be application/json, got ")
    # A bodiless POST passes the Content-Type check, but a browser says where it is from.
    response = httpx.post(pause, headers={"Origin": "http://evil.example"})
    assert response.status_code == 403
    assert error_of(response)["code"] == "origin_not_allowed"
    assert gw.state()["paused"] is False
    # curl and scripts (no Origin, no body) are not browsers: they may.
    assert httpx.post(pause).json()["paused"] is True
    assert httpx.post(f"{gw.url}/v1/scheduler/resume").json()["paused"] is False
    # The gateway's own pages (the dashboard) are same-origin.
    own = {"Origin": gw.url, "Content-Type": "application/json"}
    assert httpx.put(f"{gw.url}/v1/scheduler/foreground", content="null", headers=own).is_success


def test_cors_is_off_unless_origins_are_listed(gw: Gateway) -> None:
    preflight = {
        "Origin": "http://chat.example:3000",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    response = httpx.options(f"{gw.url}/v1/chat/completions", headers=preflight)
    assert response.status_code == 403
    assert "access-control-allow-origin" not in response.headers

    settings = sim_settings({"server": {"cors_origins": ["http://chat.example:3000"]}})
    with serve(settings) as chat_ui:
        url = f"{chat_ui.url}/v1/chat/completions"
        response = httpx.options(url, headers=preflight)
        assert response.status_code == 200
        assert response.headers["access-control-allow-origin"] == "http://chat.example:3000"
        origin = {"Origin": "http://chat.example:3000"}
        reply = httpx.post(url, json=chat_body(max_tokens=2), headers=origin)
        assert reply.status_code == 200
        assert reply.headers["access-control-allow-origin"] == "http://chat.example:3000"
        assert "x-request-id" in reply.headers["access-control-expose-headers"].lower()
        # Another origin still may not.
        other = httpx.post(url, json=chat_body(), headers={"Origin": "http://evil.example"})
        assert other.status_code == 403


def test_allowed_hosts_settings() -> None:
    def hosts(server: dict[str, Any], **extra: Any) -> Any:
        return settings_from_dict({"server": server, **extra}).server.accepted_hosts()

    assert hosts({}) == {"localhost", "127.0.0.1", "::1"}
    assert hosts({"host": "::1"}) == {"localhost", "127.0.0.1", "::1"}
    assert hosts({"allowed_hosts": "gw.lan, Other.Lan"}) == {"gw.lan", "other.lan"}
    assert hosts({"allowed_hosts": ["*"]}) is None
    # A wildcard address (which needs keys): any name, the keys guard it.
    assert hosts({"host": "0.0.0.0"}, keys=[{"key": "k"}]) is None
    assert hosts({"host": "192.168.1.5"}, keys=[{"key": "k"}]) == {
        "localhost",
        "127.0.0.1",
        "::1",
        "192.168.1.5",
    }


# -- request ids ---------------------------------------------------------------------------


def test_every_response_has_a_request_id(gw: Gateway) -> None:
    hex16 = re.compile(r"[0-9a-f]{16}")
    responses = [
        httpx.get(f"{gw.url}/health"),
        httpx.get(f"{gw.url}/nowhere"),
        httpx.post(f"{gw.url}/v1/chat/completions", content=b"{", headers={"Host": "evil"}),
        httpx.post(f"{gw.url}/v1/chat/completions", content=b"{"),
    ]
    for response in responses:
        assert hex16.fullmatch(response.headers["x-request-id"]), response
    assert len({r.headers["x-request-id"] for r in responses}) == len(responses)
    # A sane id of the client's is kept (one id for the call on both sides)...
    raw = gw.openai(X_Request_Id="trace-7f3a:step.2").chat.completions.with_raw_response.create(
        model="sim-a", messages=MESSAGES, max_tokens=2
    )
    assert raw.headers["x-request-id"] == "trace-7f3a:step.2"
    # ...one that could break a log line or a header is replaced.
    for bad in ("has space", "x" * 200, 'quote"d'):
        response = httpx.get(f"{gw.url}/health", headers={"X-Request-Id": bad})
        assert hex16.fullmatch(response.headers["x-request-id"])


# -- an exception no handler answers ------------------------------------------------------


async def _boom(request: Request) -> Response:
    raise RuntimeError("/srv/secret/path: something internal broke")


def test_an_unexpected_exception_is_a_500_without_its_text() -> None:
    # No endpoint fails like this on demand: a route added for the test FAKES the fault.
    with serve() as g:
        g.app.router.routes.append(Route("/boom", _boom, methods=["GET"]))
        with httpx.Client(base_url=g.url, limits=httpx.Limits(max_connections=1)) as client:
            response = client.get("/boom")
            assert response.status_code == 500
            error = error_of(response)
            assert error["code"] == "internal_error"
            assert "/srv/secret" not in response.text and "RuntimeError" not in response.text
            assert response.headers["x-request-id"] in error["message"]
            # The connection stays usable.
            again = client.get("/health")
            assert again.status_code == 200
            assert again.extensions["network_stream"] is response.extensions["network_stream"]


def test_the_official_client_sees_openai_errors(gw: Gateway) -> None:
    client = openai.OpenAI(
        base_url=f"{gw.url}/v1",
        api_key="unused",
        max_retries=0,
        default_headers={"Origin": "http://evil.example"},
    )
    with pytest.raises(openai.PermissionDeniedError) as info:
        client.chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=2)
    assert info.value.code == "origin_not_allowed"
