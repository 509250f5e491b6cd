"""Schema-driven fuzzing of every endpoint of a real gateway on 127.0.0.1.

The gateway describes itself at ``/openapi.json`` (its request models' JSON
schemas). Hypothesis draws requests from that document: bodies that fit the
schema (``hypothesis-jsonschema``), bodies with one field replaced by any JSON
value, any JSON at all (NaN, lone surrogates, deep nesting included), and raw
bytes; with random scheduling headers, path and query values and
Content-Types. They are sent, one after another, on ONE kept-alive httpx
connection, and every answer must hold:

- no 5xx: client input is never a server error;
- an error is OpenAI's ``{"error": {...}}`` (Ollama's ``{"error": "..."}``
  under ``/api/``) and carries no exception text;
- the connection stays usable: the next request goes out on the same one
  (only a 408, 413 or 431, whose body was not read, may close it, saying so).

hypothesis-jsonschema rather than schemathesis: it is a Hypothesis strategy,
so the test keeps its own client (one connection, checked after every request)
and its own properties, and it adds one small package beside Hypothesis where
schemathesis brings its own runner and a dozen dependencies.

A few hundred examples by default; ``-m nightly`` runs thousands.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.helpers import WAIT, Gateway, serve, sim_settings

from_schema = pytest.importorskip(
    "hypothesis_jsonschema", reason="needs hypothesis-jsonschema (the dev extra)"
).from_schema

DEFAULT_EXAMPLES = 300
NIGHTLY_EXAMPLES = 5000
# Statuses after which the server closes the connection, the body not read.
CLOSING = {408, 413, 431}
EXCEPTION_TEXT = re.compile(r"Traceback|\w+(Error|Exception)\b|File \"|site-packages|/src/tierlm")


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str
    body: dict[str, Any] | None
    form: bool
    parameters: tuple[dict[str, Any], ...]


def endpoints(document: dict[str, Any]) -> list[Endpoint]:
    """Every operation of the document but the endless event streams."""
    found = []
    components = document["components"]
    for path, operations in document["paths"].items():
        for method, op in operations.items():
            content = op["responses"]["200"]["content"]
            if "text/event-stream" in content:
                continue  # never ends: nothing to answer
            body = None
            form = False
            request = op.get("requestBody", {}).get("content", {})
            if "application/json" in request:
                body = {**request["application/json"]["schema"], "components": components}
            elif request:
                form = True
            parameters = tuple(op.get("parameters", ()))
            found.append(Endpoint(method.upper(), path, body, form, parameters))
    return found


TEXT = st.text(st.characters(exclude_categories=["Cc"]) | st.characters(categories=["Cs"]))
ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)
# What a header may carry at all (h11 refuses, client-side, surrounding spaces).
HEADER_VALUE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40).map(
    str.strip
)
CONTENT_TYPES = st.sampled_from(
    ["application/json", "application/json; charset=utf-8", None, "text/plain", "APPLICATION/JSON"]
)


def body_of(endpoint: Endpoint, data: st.DataObject) -> bytes:
    if endpoint.form:
        return data.draw(st.binary(max_size=64), label="form")
    kind = data.draw(st.sampled_from(["schema", "mutated", "json", "bytes"]), label="kind")
    if kind == "bytes" or (endpoint.body is None and kind != "json"):
        return data.draw(st.binary(max_size=200), label="bytes")
    if kind == "json":
        return json.dumps(data.draw(ANY_JSON, label="json")).encode()
    value = data.draw(from_schema(endpoint.body), label="schema")
    if kind == "mutated" and isinstance(value, dict) and value:
        key = data.draw(st.sampled_from(sorted(value)), label="field")
        value[key] = data.draw(ANY_JSON, label="value")
    return json.dumps(value).encode()


def request_of(client: httpx.Client, endpoint: Endpoint, data: st.DataObject) -> httpx.Request:
    path = endpoint.path
    headers: dict[str, str] = {}
    params: dict[str, str] = {}
    for parameter in endpoint.parameters:
        name, where = parameter["name"], parameter["in"]
        if where == "path":
            value = data.draw(st.sampled_from(["sim-a", "sim-embed", "x"]) | st.text(), label=name)
            path = path.replace("{" + name + "}", quote(value, safe="") or "x")
        elif data.draw(st.booleans(), label=f"send {name}"):
            value = data.draw(HEADER_VALUE, label=name)
            (headers if where == "header" else params)[name] = value
    body = b""
    if endpoint.method in ("POST", "PUT"):
        body = body_of(endpoint, data)
        media = data.draw(CONTENT_TYPES, label="content-type")
        if endpoint.form:
            media = "application/x-www-form-urlencoded"
        if media is not None:
            headers["Content-Type"] = media
    return client.build_request(endpoint.method, path, params=params, headers=headers, content=body)


@pytest.fixture(scope="module")
def fuzz_gw() -> Iterator[Gateway]:
    # Short generations: a fuzzed max_tokens may ask for the limit. No idle
    # timeout within the run: Hypothesis may think for seconds between requests,
    # and an idle connection closed then would not be the server's fault.
    limits = {
        "max_tokens_limit": 4,
        "max_body_bytes": 20_000,
        "keep_alive_timeout": 3600,
        "header_timeout": 3600,
    }
    backend = {"token_interval": 0.0005, "swap_seconds": 0.001}
    with serve(sim_settings({"limits": limits, "backend": backend})) as gw:
        yield gw


def check(request: httpx.Request, response: httpx.Response) -> None:
    where = f"{request.method} {request.url.path}"
    assert response.status_code < 500, (where, request.content[:200], response.text[:500])
    if response.status_code >= 400:
        error = response.json()["error"]
        if request.url.path.startswith("/api/"):  # Ollama's shape
            assert isinstance(error, str), (where, error)
            error = {"message": error}
        else:
            assert set(error) == {"message", "type", "param", "code"}, (where, error)
        assert not EXCEPTION_TEXT.search(error["message"]), (where, error)
    if response.headers.get("connection") == "close":
        assert response.status_code in CLOSING, (where, response.status_code)


def fuzz(gw: Gateway, examples: int) -> Counter[str]:
    document = httpx.get(f"{gw.url}/openapi.json").json()
    targets = endpoints(document)
    seen: Counter[str] = Counter()
    # keepalive_expiry=None: httpx itself drops a connection idle for 5 s (its
    # default), and Hypothesis may think that long between two requests
    # (shrinking, a slow machine); the assertion below would then blame the
    # server for the client's own close.
    client = httpx.Client(
        base_url=gw.url,
        timeout=WAIT,
        limits=httpx.Limits(max_connections=1, keepalive_expiry=None),
    )
    connection: list[Any] = []
    previous: list[Any] = []

    def one_request(data: st.DataObject) -> None:
        endpoint = data.draw(st.sampled_from(only or targets), label="endpoint")
        request = request_of(client, endpoint, data)
        try:
            response = client.send(request)
        except BaseException:
            connection.clear()  # httpx drops the connection: not the next request's fault
            raise
        seen[f"{endpoint.method} {endpoint.path}"] += 1
        check(request, response)
        stream = response.extensions["network_stream"]
        if connection:
            assert stream is connection[0], f"the server closed the connection after {previous}"
        connection[:] = [] if response.headers.get("connection") == "close" else [stream]
        previous[:] = [request.method, request.url.path, request.content[:200]]
        previous.append(response.status_code)
        if endpoint.path == "/v1/scheduler/pause" and response.is_success:
            # A paused scheduler would hold the next chat forever.
            assert client.post("/v1/scheduler/resume").is_success

    def draw(max_examples: int) -> None:
        # A fresh Hypothesis test per call: settings may decorate a test once.
        run = given(st.data())(one_request)
        settings(
            max_examples=max_examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )(run)()

    only: list[Any] = []
    try:
        draw(examples)
        # Then each endpoint the draws missed, once: 300 draws over 40-odd
        # endpoints left one out now and then, and the coverage check blamed
        # the server for the dice.
        for endpoint in targets:
            if f"{endpoint.method} {endpoint.path}" not in seen:
                only[:] = [endpoint]
                draw(1)
    finally:
        client.close()
    return seen


@pytest.mark.parametrize(
    "examples", [DEFAULT_EXAMPLES, pytest.param(NIGHTLY_EXAMPLES, marks=pytest.mark.nightly)]
)
def test_fuzz_every_endpoint(fuzz_gw: Gateway, examples: int) -> None:
    seen = fuzz(fuzz_gw, examples)
    document = httpx.get(f"{fuzz_gw.url}/openapi.json").json()
    assert {f"{e.method} {e.path}" for e in endpoints(document)} <= set(seen), seen
    # The gateway goes on serving.
    assert fuzz_gw.openai().models.list().data


def test_the_document_lists_every_route(fuzz_gw: Gateway) -> None:
    document = httpx.get(f"{fuzz_gw.url}/openapi.json").json()
    listed = {(method.upper(), path) for path, ops in document["paths"].items() for method in ops}
    routes = {
        (method, re.sub(r":\w+}", "}", route.path))
        for route in fuzz_gw.app.routes
        for method in route.methods
        if method != "HEAD"
    }
    assert routes == listed
    chat = document["paths"]["/v1/chat/completions"]["post"]
    schema = chat["requestBody"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/ChatRequest"}
    request = document["components"]["schemas"]["ChatRequest"]
    assert request["additionalProperties"] is False and "messages" in request["required"]
    assert {p["name"] for p in chat["parameters"]} >= {"X-Tierlm-Class", "X-Tierlm-Deadline"}
