"""One error tree, one handler (docs/design.md §1): every ``TierlmError`` a
route lets through is answered by its own status hint, in OpenAI's error
format, by the gateway's one exception handler.

Each error class of tierlm is raised from a route of the real gateway app
(its middleware and handlers), in process over ASGI.
"""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import tierlm
from tierlm.embedding.errors import LaneFull, TextTooLong
from tierlm.errors import TierlmError
from tierlm.runners.errors import DeviceCrashed, InvalidRequest, RunnerError
from tierlm.runners.http import UpstreamError
from tierlm.server.app import create_app
from tierlm.server.edge.errors import APIError
from tierlm.shell.scheduler import SchedulerClosedError

from .helpers import sim_settings


def _every_error_class() -> list[type[TierlmError]]:
    """Every TierlmError class of tierlm (its modules imported, the optional
    extras' aside)."""
    for module in pkgutil.walk_packages(tierlm.__path__, "tierlm."):
        if module.name.startswith(("tierlm.ray", "tierlm.testing.pytest_plugin")):
            continue
        importlib.import_module(module.name)
    found: list[type[TierlmError]] = []
    stack: list[type[TierlmError]] = [TierlmError]
    while stack:
        cls = stack.pop()
        found.append(cls)
        stack.extend(cls.__subclasses__())
    return sorted(
        (c for c in set(found) if c is not APIError and c.__module__.startswith("tierlm.")),
        key=lambda c: c.__qualname__,
    )


ERRORS = _every_error_class()


def _raise(cls: type[TierlmError]) -> Any:
    async def route(request: Request) -> Response:
        if issubclass(cls, InvalidRequest):
            raise cls("schema: not expressible", param="response_format")
        raise cls(f"{cls.__name__} said why")

    return route


def _app() -> Any:
    app = create_app(sim_settings())
    for cls in ERRORS:
        app.router.routes.append(Route(f"/raise/{cls.__qualname__}", _raise(cls)))
    return app


async def _get(app: Any, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return await client.get(path)


def test_the_tree_is_found() -> None:
    names = {cls.__name__ for cls in ERRORS}
    assert {"LaneFull", "SchedulerClosedError", "InvalidRequest", "UpstreamTimeout"} <= names


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__qualname__)
def test_each_error_from_a_route_is_answered_by_its_hint(cls: type[TierlmError]) -> None:
    response = asyncio.run(_get(_app(), f"/raise/{cls.__qualname__}"))
    assert response.status_code == cls.status_hint
    error = response.json()["error"]
    assert error["code"] == cls.code
    if cls.status_hint < 500:
        assert error["type"] != "server_error"
        assert cls.__name__ in error["message"] or "not expressible" in error["message"]
    else:
        assert error["type"] == "server_error"
        prefix = "backend: " if issubclass(cls, RunnerError) else ""
        assert error["message"].startswith(prefix)


def test_the_issue_s_three_come_back_as_their_status_not_500() -> None:
    app = _app()
    expected = {LaneFull: 429, SchedulerClosedError: 503, InvalidRequest: 400, TextTooLong: 400}
    for cls, status in expected.items():
        response = asyncio.run(_get(app, f"/raise/{cls.__qualname__}"))
        assert response.status_code == status, cls
    invalid = asyncio.run(_get(app, "/raise/InvalidRequest")).json()["error"]
    assert invalid == {
        "message": "schema: not expressible",
        "type": "invalid_request_error",
        "param": "response_format",
        "code": "invalid_request",
    }


def test_server_side_errors_keep_their_own_status() -> None:
    app = _app()
    for cls, status in {RunnerError: 500, DeviceCrashed: 500, UpstreamError: 502}.items():
        assert asyncio.run(_get(app, f"/raise/{cls.__qualname__}")).status_code == status
    timeout = asyncio.run(_get(app, "/raise/UpstreamTimeout"))
    assert timeout.status_code == 504
    assert timeout.json()["error"]["code"] == "upstream_timeout"


def test_a_retry_hint_becomes_retry_after() -> None:
    async def full(request: Request) -> Response:
        error = LaneFull("embedding queue full: 10/10 texts queued, 1 offered")
        error.retry_after = 7
        raise error

    app = _app()
    app.router.routes.append(Route("/full", full))
    response = asyncio.run(_get(app, "/full"))
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    assert response.json()["error"]["code"] == "queue_full"
