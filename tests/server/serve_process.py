"""``tierlm serve`` as a real process on 127.0.0.1, for the tests that need
one: signals, the default backend, the soak's subject."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

import httpx

from tests.helpers import wait_until_blocking
from tests.runners.helpers import free_port
from tests.server.helpers import WAIT, fresh_data_dir


@contextlib.contextmanager
def tierlm_serve(
    *argv: str, start_timeout: float = WAIT, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Start ``tierlm serve --port <free> *argv``; its URL and process once
    ``/health`` answers. Killed at the end if still running. Without
    ``--data-dir`` in ``argv``, a fresh one (a data directory is one
    gateway's: two at once on one, the second would not start)."""
    port = free_port()
    if "--data-dir" not in argv:  # one gateway per data directory: its own
        argv = (*argv, "--data-dir", str(fresh_data_dir()))
    process = subprocess.Popen(
        [sys.executable, "-m", "tierlm.cli", "serve", "--port", str(port), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"tierlm serve exited: {process.stdout.read()}")  # type: ignore[union-attr]
        with contextlib.suppress(httpx.TransportError):
            return httpx.get(f"{url}/health", timeout=1).status_code == 200
        return False

    try:
        wait_until_blocking(up, "tierlm serve to answer", timeout=start_timeout, every=0.05)
        yield url, process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(WAIT)
