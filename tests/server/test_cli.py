"""``tierlm serve`` as a process: it serves, and a stop signal ends open streams
at once and exits cleanly."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

import tierlm
from tests.runners.helpers import free_port
from tests.server.helpers import MESSAGES, WAIT


@contextlib.contextmanager
def tierlm_serve(*argv: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tierlm.cli", "serve", "--port", str(port), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"tierlm serve exited: {process.stdout.read()}")  # type: ignore[union-attr]
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("tierlm serve did not start")
            time.sleep(0.05)
        yield url, process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(WAIT)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_serve_then_stop_with_a_stream_open(sig: signal.Signals) -> None:
    with tierlm_serve("--token-interval", "0.005", "--log-level", "warning") as (url, process):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=WAIT)
        reply = client.chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=3)
        assert reply.choices[0].message.content == "w0 w1 w2 "
        stream = client.chat.completions.create(
            model="sim-a",
            messages=MESSAGES,
            max_tokens=4000,
            stream=True,  # 20 s
        )
        chunks = iter(stream)
        next(chunks)
        started = time.monotonic()
        process.send_signal(sig)
        # The open stream ends at once with the shutdown error, not after 20 s.
        with pytest.raises(openai.APIError, match="the gateway is shutting down"):
            for _ in chunks:
                pass
        process.wait(WAIT)
        assert time.monotonic() - started < 5
        # Ctrl-C is a normal way to stop it; SIGTERM ends it as SIGTERM does.
        assert process.returncode == (0 if sig == signal.SIGINT else -signal.SIGTERM)
        output = process.stdout.read()  # type: ignore[union-attr]
        assert "Traceback" not in output


# A named fake of a missing install: an import hook (sitecustomize, on
# PYTHONPATH ahead of everything) that makes the server extra's packages
# unimportable, as they are after a plain `pip install tierlm`.
BLOCK_SERVER_EXTRA = """
import sys

BLOCKED = {"starlette", "uvicorn", "prometheus_client", "pydantic", "pydantic_settings"}


class BlockServerExtra:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, BlockServerExtra())
"""


def test_serve_without_the_server_extra_says_what_to_install(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(BLOCK_SERVER_EXTRA)
    src = Path(tierlm.__file__).resolve().parents[1]
    paths = [str(tmp_path), str(src), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    probe = subprocess.run(
        [sys.executable, "-c", "import tierlm, starlette"], env=env, capture_output=True, text=True
    )
    assert "No module named 'starlette'" in probe.stderr  # the fake works

    def run_tierlm(*argv: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tierlm.cli", *argv]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=WAIT)

    result = run_tierlm("serve", "--check")
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()  # one line, no traceback
    assert line.startswith("tierlm serve: needs the 'server' extra (")
    assert line.endswith("is not installed): pip install 'tierlm[server]'")
    # The base install still runs its own commands.
    simulate = run_tierlm("simulate", "--help")
    assert simulate.returncode == 0, simulate.stderr
