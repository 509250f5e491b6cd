"""Issue 54, items 7 and 9: the data directory is one gateway's, and a store
the gateway cannot use stops ``tierlm serve`` at start with one line naming
the path (docs/design.md §9), instead of a second gateway re-running the
first's batch, a traceback, or a gateway answering every Batch call 500."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runners.helpers import free_port
from tests.server.mounts import tmpfs
from tests.server.serve_process import tierlm_serve

SIM = ("--backend", "sim", "--log-level", "warning")
START = 60.0


def serve_once(data_dir: Path) -> subprocess.CompletedProcess[str]:
    """``tierlm serve`` on ``data_dir``, expected to exit at start (killed,
    and the test failed, if it serves instead)."""
    argv = [sys.executable, "-m", "tierlm.cli", "serve", "--port", str(free_port()), *SIM]
    argv += ["--data-dir", str(data_dir)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = process.communicate(timeout=START)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"tierlm serve started on {data_dir}; it should have refused")
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_a_second_gateway_on_a_data_dir_is_refused_naming_it_and_the_holder(
    tmp_path: Path,
) -> None:
    """Item 7: the second gateway does not start (it resumed the first's
    batch: requests ran twice, two output files)."""
    with tierlm_serve(*SIM, "--data-dir", str(tmp_path)) as (_, first):
        line = one_line(serve_once(tmp_path))
        assert str(tmp_path) in line
        assert f"pid {first.pid}" in line
        assert "--data-dir" in line
    # The lock dies with its holder: the directory serves again.
    with tierlm_serve(*SIM, "--data-dir", str(tmp_path)):
        pass


def test_a_corrupt_store_is_one_line_naming_the_file(tmp_path: Path) -> None:
    """Item 9: a ``batches.sqlite3`` that is not a database."""
    store = tmp_path / "batches.sqlite3"
    store.write_bytes(b"not a database, " * 1000)
    line = one_line(serve_once(tmp_path))
    assert str(store) in line
    assert "not a readable SQLite database" in line


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A read-only directory: a tmpfs mounted ``ro`` (root ignores mode bits),
    else one with its write bits cleared."""
    if os.geteuid() != 0:
        tmp_path.chmod(0o555)
        yield tmp_path
        tmp_path.chmod(0o755)
        return
    with tmpfs(tmp_path / "ro", size="1m", read_only=True) as mounted:
        yield mounted


def test_a_read_only_data_dir_is_one_line_naming_it(read_only: Path) -> None:
    """Item 9: the gateway started and every Batch call, ``GET /v1/files``
    included, was a 500."""
    line = one_line(serve_once(read_only))
    assert str(read_only) in line
    assert "not writable" in line
