"""Bounded admission (docs/design.md §1): the work done on a request before it
is queued (rendering and counting its chat, building its grammar) has a size
limit with a 400 naming the field, so no client holds everyone's admission.
The sim gateway with the default limits (1 MiB bodies)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.payloads import HI as MESSAGES
from tests.server.helpers import Gateway, module_gateway

gw = module_gateway()


def nested_any_of(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"anyOf": [schema, {"type": "null"}]}
    return schema


def wide_object(fields: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            f"field_{i:05d}": {"type": "string", "description": "x" * 40} for i in range(fields)
        },
    }


def json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}


def tools(parameters: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "f", "parameters": parameters}}]


@pytest.mark.parametrize(
    ("change", "param", "message"),
    [
        (
            {"messages": [{"role": "user", "content": "a"}] * 2049},
            "messages",
            "at most 2048 items, got 2049",
        ),
        (
            {"response_format": json_schema(nested_any_of(40))},
            "response_format.json_schema.schema",
            "nested deeper than 32 levels",
        ),
        (
            {"tools": tools(nested_any_of(40))},
            "tools[0].function.parameters",
            "nested deeper than 32 levels",
        ),
        (
            {"tools": tools(wide_object(1200))},
            "tools[0].function.parameters",
            "bytes of JSON, over the limit of 65536",
        ),
    ],
)
def test_oversized_admission_work_is_a_400_naming_the_field(
    gw: Gateway, change: dict[str, Any], param: str, message: str
) -> None:
    body = {"model": "sim-a", "messages": MESSAGES, "max_tokens": 2, **change}
    response = gw.http.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert message in error["message"]
    # The gateway still serves, at once.
    reply = gw.openai().chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=2)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "w0 w1 "


def test_what_fits_the_limits_is_served(gw: Gateway) -> None:
    """The limits' edge is accepted: 2 048 messages (a schema at the edge, on
    the real model: ``test_agent_calls``)."""
    many = [{"role": "user", "content": "a"}] * 2048
    reply = gw.openai().chat.completions.create(model="sim-a", messages=many, max_tokens=2)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "w0 w1 "
