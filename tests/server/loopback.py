"""No internet in a test: every name lookup and connection that is not to
loopback fails (and is recorded), so a client library that would fetch
something (LiteLLM's price map, tiktoken's encodings) fails the test that
makes it fetch, instead of reaching beyond 127.0.0.1."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Iterator
from typing import Any

__all__ = ["loopback_only"]


def _loopback(host: object) -> bool:
    if host in ("localhost", None):
        return True
    try:
        return ipaddress.ip_address(str(host)).is_loopback
    except ValueError:
        return False


@contextlib.contextmanager
def loopback_only() -> Iterator[list[str]]:
    """Refuse (and record) every name lookup and connection that is not to
    loopback: what LiteLLM would fetch from the internet fails loudly here."""
    attempts: list[str] = []
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def connect(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address[0]):
            attempts.append(f"connect {address}")
            raise OSError(f"test: no internet ({address})")
        real_connect(sock, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _loopback(host.decode() if isinstance(host, bytes) else host):
            attempts.append(f"lookup {host}")
            raise socket.gaierror(f"test: no internet ({host})")
        return real_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.getaddrinfo = getaddrinfo
    try:
        yield attempts
    finally:
        socket.socket.connect = real_connect  # type: ignore[method-assign]
        socket.getaddrinfo = real_getaddrinfo
