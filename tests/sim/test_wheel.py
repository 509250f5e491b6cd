"""``tierlm simulate --workload azure-chat`` from a non-editable install, outside
the repository: the trace travels inside the wheel (docs/design.md §8.5).

Builds the wheel from this checkout with the build backend the project
declares (hatchling, from the dev extra; no build isolation, so no network),
installs it into a fresh target directory, and runs the command from a
temporary directory with only that directory on the path. Takes ~10 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytest.importorskip("hatchling", reason="builds the wheel: pip install 'tierlm[dev]'")


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=300
    )


def test_azure_chat_runs_from_an_installed_wheel(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TIERLM_TRACE")}
    env["PIP_NO_INDEX"] = "1"  # everything needed is here; never the network
    wheels = tmp_path / "wheels"
    built = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(wheels),
            str(REPO),
        ],
        tmp_path,
        env,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("tierlm-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "tierlm/sim/data/azure-llm-2023-conv.csv.gz" in names
    assert "tierlm/sim/data/ATTRIBUTION.md" in names
    # The ONNX MiniLM's vocabulary ([embed]: the model's package ships none).
    assert "tierlm/embedding/data/minilm-vocab.txt.gz" in names
    assert "tierlm/embedding/data/ATTRIBUTION.md" in names

    site = tmp_path / "site"
    installed = _run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(site), str(wheel)],
        tmp_path,
        env,
    )
    assert installed.returncode == 0, installed.stderr

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env["PYTHONPATH"] = str(site)
    where = _run([sys.executable, "-c", "import tierlm; print(tierlm.__file__)"], elsewhere, env)
    assert Path(where.stdout.strip()).is_relative_to(site), where.stdout
    done = _run(
        [
            sys.executable,
            "-m",
            "tierlm.cli",
            "simulate",
            "--workload",
            "azure-chat",
            "--policies",
            "tierlm,fifo",
            "--duration",
            "900",
            "--out",
            "out",
        ],
        elsewhere,
        env,
    )
    assert done.returncode == 0, done.stderr
    printed = " ".join(done.stdout.split())
    assert "azure-chat, 900 simulated s" in printed
    assert "(stated 30.0 %)" in printed
    assert "Azure LLM inference trace 2023" in printed and "CC-BY 4.0" in printed
    assert (elsewhere / "out" / "results.json").is_file()
