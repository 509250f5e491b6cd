"""``tierlm serve --ollama-port``: the same gateway on a second port, so an
Ollama app keeps its default URL (its ``OLLAMA_HOST``). A real ``tierlm serve``
process on 127.0.0.1, the official ``ollama`` client without a host argument."""

from __future__ import annotations

import httpx
import pytest

from tests.runners.helpers import free_port
from tests.server.serve_process import tierlm_serve

ollama = pytest.importorskip("ollama", reason="needs the ollama client (the dev extra)")


def test_an_ollama_app_at_its_default_url_shares_the_gateway(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = free_port()
    with tierlm_serve("--backend", "sim", "--ollama-port", str(port)) as (url, _):
        monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{port}")  # what the app is told
        app = ollama.Client()
        assert [m.model for m in app.list().models][:2] == ["sim-a:latest", "sim-b:latest"]
        parts = list(
            app.chat(
                model="sim-a",
                messages=[{"role": "user", "content": "hi"}],
                stream=True,
                options={"num_predict": 3},
            )
        )
        assert "".join(p.message.content for p in parts) == "w0 w1 w2 " and parts[-1].done
        # One gateway: the job the app ran on the Ollama port is in the main port's state.
        state = httpx.get(f"{url}/v1/scheduler/state").json()
        assert [j["tokens"] for j in state["gateway"]["recent"]] == [3]
