"""Issue 54, item 11: the README's install line alone serves the Batch API.

``pip install '.[serve]'`` had no ``python-multipart``, so every ``POST
/v1/files`` was a 500; the test environment got it through another extra and
no test saw it. Here a fresh virtual environment gets the wheel of this
checkout with the ``serve`` extra alone (the versions ``constraints.txt``
pins, from pip's index and cache), then its ``tierlm serve`` takes an upload.
About a minute; skipped when no package index can be reached.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.helpers import wait_until_blocking
from tests.runners.helpers import free_port
from tests.server.helpers import WAIT

REPO = Path(__file__).resolve().parents[2]
NETWORK = ("Could not find a version", "No matching distribution", "connection", "Network")

pytestmark = pytest.mark.slow

pytest.importorskip("hatchling", reason="builds the wheel: pip install 'tierlm[dev]'")


def run(args: list[str], env: dict[str, str], timeout: float = 900) -> str:
    done = subprocess.run(
        args, env=env, capture_output=True, text=True, check=False, timeout=timeout
    )
    if done.returncode != 0:
        output = done.stdout + done.stderr
        if any(sign in output for sign in NETWORK):
            pytest.skip(f"no package index reachable: {output.strip().splitlines()[-1]}")
        raise AssertionError(f"{' '.join(args)} failed:\n{output[-3000:]}")
    return done.stdout


def test_the_serve_extra_alone_uploads_a_file(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    wheels = tmp_path / "wheels"
    build = ["wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(wheels)]
    run([sys.executable, "-m", "pip", *build, str(REPO)], env)
    (wheel,) = wheels.glob("tierlm-*.whl")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], env)
    python = venv / "bin" / "python"
    pins = ["-c", str(REPO / "constraints.txt")]
    run([str(python), "-m", "pip", "install", "-q", *pins, f"{wheel}[serve]"], env)

    port = free_port()
    argv = [str(venv / "bin" / "tierlm"), "serve", "--backend", "sim", "--port", str(port)]
    argv += ["--data-dir", str(tmp_path / "data"), "--log-level", "warning"]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        with contextlib.suppress(httpx.TransportError):
            return httpx.get(f"{url}/health", timeout=1).status_code == 200
        return False

    try:
        wait_until_blocking(up, "tierlm serve to start", timeout=WAIT, every=0.1)
        line = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'
        answer = httpx.post(
            f"{url}/v1/files",
            data={"purpose": "batch"},
            files={"file": ("notes.jsonl", line)},
            timeout=WAIT,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["bytes"] == len(line)
    finally:
        process.kill()
        process.wait(WAIT)
