"""docs/gateway.md's table of request fields per backend, checked row by row
against real gateways on 127.0.0.1: ``sim``; ``llama-cpp`` over a generated
tiny GGUF (with FIM tokens, for ``suffix``); ``openai`` and ``ollama`` over
the fake upstream of the runner tests (Ollama cannot be installed here; the
fake records what it was sent, which is what "passed through" promises). Each
row's example is sent to each: rejected is a 400 naming the field, anything
else a 200; passed through means the upstream received it (for Ollama, where
the row says). The table in the docs is the one ``compat.table()`` writes, so
the docs, the table and the behaviour cannot drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runners.fake_servers import make_app
from tests.runners.helpers import FakeState
from tests.server.helpers import Gateway, run_app, serve, sim_settings
from tierlm.server.openai.compat import BACKENDS, BEGIN, END, ROWS, Row, Support, table
from tierlm.server.settings.sources import settings_from_dict
from tierlm.testing.gguf_model import write_tiny_llama

DOCS = Path(__file__).resolve().parents[2] / "docs" / "gateway.md"
MODEL = "m"


def test_the_table_in_the_docs_is_compat_s() -> None:
    # On failure: python -m tierlm.server.openai.compat --write docs/gateway.md
    text = DOCS.read_text()
    documented = re.search(re.escape(BEGIN) + ".*?" + re.escape(END), text, re.DOTALL)
    assert documented is not None and documented.group(0) == table()


def test_every_row_rejected_by_parsing_is_rejected_by_every_backend() -> None:
    """A row without an ``extra`` key is decided by the request's parsing,
    which knows no backend."""
    for row in ROWS:
        if row.key is None:
            kinds = {row.of(b) is Support.REJECTED for b in BACKENDS}
            assert len(kinds) == 1, row.name


@pytest.fixture(scope="module")
def gateways(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, Gateway], FakeState]]:
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
    state = FakeState(requests=[], loaded={}, disconnects=[])
    # With FIM tokens: the suffix row is honoured (llama-cpp, a model that has them).
    fim = write_tiny_llama(tmp_path_factory.mktemp("fim") / "m.gguf", fim=True)
    tiny = {"path": str(fim), "n_threads": 1}
    configs = {
        "sim": sim_settings({"backend": {"models": [MODEL]}}),
        "llama-cpp": settings_from_dict(
            {"backend": {"kind": "llama-cpp", "models": {MODEL: tiny}}}
        ),
    }
    with run_app(make_app(state)) as fake:
        for kind in ("openai", "ollama"):
            configs[kind] = settings_from_dict(
                {"backend": {"kind": kind, "url": fake, "models": [MODEL]}}
            )
        with (
            serve(configs["sim"]) as sim,
            serve(configs["llama-cpp"]) as llama,
            serve(configs["openai"]) as upstream_openai,
            serve(configs["ollama"]) as upstream_ollama,
        ):
            yield (
                {
                    "sim": sim,
                    "llama-cpp": llama,
                    "openai": upstream_openai,
                    "ollama": upstream_ollama,
                },
                state,
            )


def _body(row: Row) -> tuple[str, dict[str, Any]]:
    if row.endpoint == "chat":
        base: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
        path = "/v1/chat/completions"
    else:
        base, path = {"prompt": "hi"}, "/v1/completions"
    return path, {"model": MODEL, "max_tokens": 4, **base, **row.example}


def _at(body: dict[str, Any], dotted: str) -> Any:
    value: Any = body
    for part in dotted.split("."):
        assert isinstance(value, dict) and part in value, (dotted, body)
        value = value[part]
    return value


@pytest.mark.llama
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_each_row_against_a_real_gateway(
    gateways: tuple[dict[str, Gateway], FakeState], backend: str, row: Row
) -> None:
    servers, upstream = gateways
    gw = servers[backend]
    support = row.of(backend)
    path, body = _body(row)
    upstream.requests.clear()
    response = gw.http.post(path, json=body)
    if support is Support.REJECTED:
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == row.field or error["param"] in row.example, error
        return
    assert response.status_code == 200, response.text
    if support is not Support.PASSED:
        return
    (_, sent) = upstream.requests[-1]
    if backend == "openai":
        for key, value in row.example.items():
            assert sent[key] == value, (key, sent)
    else:
        assert row.ollama_as is not None, f"{row.name}: where does ollama take it?"
        assert _at(sent, row.ollama_as) is not None
        key = next(iter(row.example))
        if row.ollama_as.startswith("options."):
            assert _at(sent, row.ollama_as) == row.example[key]


def test_tool_choice_none_sends_ollama_no_tools(
    gateways: tuple[dict[str, Gateway], FakeState],
) -> None:
    servers, upstream = gateways
    row = next(r for r in ROWS if r.name == '`tool_choice: "none"`')
    path, body = _body(row)
    upstream.requests.clear()
    assert servers["ollama"].http.post(path, json=body).status_code == 200
    (_, sent) = upstream.requests[-1]
    assert "tools" not in sent and "tool_choice" not in sent
