"""ollama-js, Ollama's official JavaScript client (pinned in
tests/server/ollama_js/package.json), unchanged, against a real gateway on
127.0.0.1: every call an app makes, streamed and not. Needs Node and
``npm install`` in tests/server/ollama_js (no download at run time: the test
skips without them)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.server.helpers import WAIT, serve, sim_settings

HERE = Path(__file__).parent / "ollama_js"
NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="needs Node")
@pytest.mark.skipif(
    not (HERE / "node_modules" / "ollama").is_dir(),
    reason="needs `npm install` in tests/server/ollama_js",
)
def test_ollama_js_calls_all_pass() -> None:
    assert NODE is not None
    with serve(sim_settings()) as gw:
        done = subprocess.run(
            [NODE, "calls.mjs", gw.url],
            cwd=HERE,
            capture_output=True,
            text=True,
            timeout=WAIT * 4,
        )
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
    assert out["list"][:3] == ["sim-a:latest", "sim-b:latest", "sim-embed:latest"]
    assert out["ps"][0][0] == "sim-a:latest"
    assert out["show"] == ["completion"]
    assert out["chat"] == ["w0 w1 w2 ", "length", 3]
    assert out["chat_stream"] == [["w0 ", False], ["w1 ", False], ["w2 ", False], ["", True]]
    assert out["generate"] == "w0 w1 "
    assert "".join(out["generate_stream"]) == "w0 w1 "
    assert out["embed"] == [384, 384] and out["embeddings"] == 384
    assert out["unload"] == "unload" and out["ps_after"] == 0
    assert out["error"][0] == 404 and "'nope'" in out["error"][1]
