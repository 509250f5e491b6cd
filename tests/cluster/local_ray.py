"""A local Ray for a test module, writing only in a temp dir of its own, and
the tierlm fleet on it: every Ray test module's fixture (``ray_fleet``).

``local_ray(port)`` starts Ray on 127.0.0.1 (``tierlm.ray.start_local``) with
its session folder (logs, sockets, spilled objects) in a fresh folder under
/tmp (short: Ray's socket paths must fit 107 bytes), and removes it after
Ray stops. Ray 2.60 turns token authentication on for a cluster it starts
and, without a token, writes a new one to ~/.ray/auth_token: the process
gets one in ``RAY_AUTH_TOKEN`` instead (the same for every Ray of the test
run: Ray caches the token it read first), which the processes it starts
(``serve run``) inherit.

``ray_fleet(args, ready)`` is a module's fixture whole: a free port on
127.0.0.1, ``local_ray`` on it (Serve's own wait for its proxy cut, below),
``tierlm.ray.build(args)`` deployed (none: Ray and Serve only), and
``ready(url)`` returning once the fleet serves as the module needs.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tierlm.ray.app import LOOPBACK_ENV

__all__ = ["Fleet", "free_port", "local_ray", "ray_fleet"]

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Fleet:
    url: str
    """The ingress (Serve's proxy): ``http://127.0.0.1:<port>``."""
    port: int
    session: Path
    """``local_ray``'s folder: ``<it>/session_latest/logs/serve`` holds Serve's logs."""

    def serve_logs(self, pattern: str = "*.log") -> list[Path]:
        return sorted(self.session.glob(f"session_latest/logs/serve/{pattern}"))


@contextlib.contextmanager
def ray_fleet(
    args: Mapping[str, Any] | None,
    ready: Callable[[str], object] = lambda url: None,
    port: int | None = None,
) -> Iterator[Fleet]:
    """Ray on 127.0.0.1 (``local_ray``), the fleet of ``args`` deployed (None:
    nothing deployed), ``ready(url)`` waited for; yields the ``Fleet``."""
    from ray import serve

    from tierlm.ray import build

    port = free_port() if port is None else port
    with contextlib.ExitStack() as stack:
        # A fault injection (named so): Serve's own wait for its HTTP proxy, a
        # fixed 60 s, is cut to nothing, as a machine too busy for it makes it
        # time out (every Ray test failed so at load 10 on two cores);
        # ``start_local`` then waits for the proxy itself, and every test
        # runs on that Serve.
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("ray.serve._private.api.HTTP_PROXY_TIMEOUT", 0.01)
            session = stack.enter_context(local_ray(port))
        url = f"http://127.0.0.1:{port}"
        if args is not None:
            serve.run(build(dict(args)), route_prefix="/")
        ready(url)
        yield Fleet(url, port, session)
