"""Fixtures of the scheduler-with-real-backends tests.

``tiny_models`` and ``llama_server`` come from ``tests/conftest.py``: the same
generated models and the same real ``llama_cpp.server`` as the runner tests.

``medium_model`` is the generated ``medium`` preset (~45 MB, ~5-10 ms a token on
one thread): slow enough that a token interval is long against the event loop's
overhead, so a latency bound in token intervals means something, and a long
prompt takes a second or more to evaluate. The ``small`` models generate in a
fraction of a millisecond a token, where such a bound would be all slack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tierlm.testing.gguf_model import write_tiny_llama

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["medium_model"]


@pytest.fixture(scope="session")
def medium_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gguf", reason="needs the gguf package to write test models")
    return write_tiny_llama(tmp_path_factory.mktemp("medium") / "medium.gguf", preset="medium")
