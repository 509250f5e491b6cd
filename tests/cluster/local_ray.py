"""A local Ray for a test module, writing only in a temp dir of its own.

``local_ray(port)`` starts Ray on 127.0.0.1 (``tierlm.ray.start_local``) with
its session folder (logs, sockets, spilled objects) in a fresh folder under
/tmp (short: Ray's socket paths must fit 107 bytes), and removes it after
Ray stops. Ray 2.60 turns token authentication on for a cluster it starts
and, without a token, writes a new one to ~/.ray/auth_token: the process
gets one in ``RAY_AUTH_TOKEN`` instead (the same for every Ray of the test
run: Ray caches the token it read first), which the processes it starts
(``serve run``) inherit.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tierlm.ray.app import LOOPBACK_ENV

__all__ = ["local_ray"]

for _key, _value in {**LOOPBACK_ENV, "RAY_AUTH_TOKEN": secrets.token_hex(32)}.items():
    os.environ.setdefault(_key, _value)  # before ray is first imported


@contextlib.contextmanager
def local_ray(port: int) -> Iterator[Path]:
    """Ray and Serve's proxy on 127.0.0.1:``port``; yields the session folder's
    parent (``<it>/session_latest/logs/serve`` holds Serve's logs)."""
    import ray
    from ray import serve

    from tierlm.ray import start_local

    folder = Path(tempfile.mkdtemp(prefix="tierlm-ray-", dir="/tmp"))
    try:
        start_local(port, num_cpus=2, temp_dir=str(folder))
        try:
            yield folder
        finally:
            serve.shutdown()
            ray.shutdown()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
