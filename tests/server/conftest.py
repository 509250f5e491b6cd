"""Fixtures of the gateway tests: a real gateway (uvicorn, 127.0.0.1, a free port)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.server.helpers import Gateway, serve


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    """A sim gateway with the default classes and no keys."""
    with serve() as gw:
        yield gw
