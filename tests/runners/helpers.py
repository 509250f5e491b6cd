"""Helpers of the runner tests: the types the fixtures return, and ``run``."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tests.helpers import wait_until

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Coroutine

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one test coroutine on a fresh event loop (no pytest-asyncio needed)."""
    return asyncio.run(coro)


async def disconnected(state: FakeState, model: str) -> None:
    """Until the fake server has seen the client leave ``model``'s request
    (its state lives in the server's thread: polled)."""
    await wait_until(lambda: model in state.disconnects, f"the client to leave {model}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class TinyModels:
    a: Path
    b: Path


@dataclass(frozen=True)
class LlamaServer:
    url: str
    models: TinyModels
    process: subprocess.Popen[bytes]
    log: Path


@dataclass
class FakeState:
    """What the fake server saw; tests read it."""

    requests: list[tuple[str, dict[str, Any]]]
    loaded: dict[str, Any]
    """Model name -> keep_alive of the models the fake holds."""
    disconnects: list[str]
    """Models whose stream the client closed before the end."""

    def clear(self) -> None:
        self.requests.clear()
        self.loaded.clear()
        self.disconnects.clear()


@dataclass(frozen=True)
class FakeServer:
    url: str
    state: FakeState


def cpu_has_avx512() -> bool:
    """Does this machine's CPU report AVX-512 (``avx512f``)? There, greedy text
    of the real model can differ between a batch and one row (an open problem,
    tests/runners/test_llama_cpp_batch.py)."""
    try:
        return " avx512f" in Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return False
