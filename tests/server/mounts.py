"""A small tmpfs for the tests of a full or read-only disk (issue 54): as root
where ``mount`` works; the test is skipped, saying why, elsewhere."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["tmpfs"]


@contextlib.contextmanager
def tmpfs(path: Path, size: str, *, read_only: bool = False) -> Iterator[Path]:
    """``path`` as a tmpfs of ``size`` (``"4m"``), unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("a small disk needs a tmpfs mount, which needs root")
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
