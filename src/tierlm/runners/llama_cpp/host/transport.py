"""Where the llama.cpp worker runs: a child process (default) or a thread here.

Both take commands with ``send`` and report events and their end through two
callbacks, called on a thread of their own (never the event loop's):
``on_event(event)`` and ``on_exit(code, stalled)``, where ``code`` is the
process's exit code (negative: killed by that signal, as ``subprocess``
reports it) and ``stalled`` the seconds without a heartbeat after which the
watchdog killed it (None: it ended by itself).

The process's watchdog (docs/design.md §1.3): a worker
whose heartbeat (``ControlBlock.beats``) has not moved for ``stall_timeout``
seconds is stopped (SIGSTOP), wedged or swapped out beyond use; it is killed,
so that its calls fail and the runner starts another, instead of every
request hanging behind it.

The process gets ``OMP_DEFAULTS`` (a short spin, then sleep) unless the user
set ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` (docs/design.md §1.5).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tierlm.runners.llama_cpp.wire.control import DEFAULT_STALL_TIMEOUT, ControlBlock
from tierlm.runners.llama_cpp.wire.messages import Shutdown
from tierlm.runners.llama_cpp.worker.service import DecodeService

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from tierlm.runners.llama_cpp.wire.messages import Command, Event

__all__ = ["OMP_DEFAULTS", "Worker", "WorkerProcess", "WorkerThread", "with_omp_defaults"]

OMP_DEFAULTS = {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": "1000"}
"""How llama.cpp's OpenMP threads wait for one another (docs/design.md §1).

ggml ends every graph node with an OpenMP barrier, hundreds per decode step.
Spinning without end (libgomp's active policy, ~300 000 spins by default)
crawls when a peer thread is descheduled: 2 threads fell from 75 to 1.4
tokens/s on a busy 2-core machine. Sleeping at once (passive) pays a kernel
wake-up at every barrier, and any other process awake then (the gateway, its
clients) delays it: a gateway with 8 slots and 2 threads decoded half as fast
as its own runner driven directly. A short spin (1 000 turns of GNU
libgomp's ``GOMP_SPINCOUNT``: microseconds) covers a barrier whose peer is almost there and
sleeps when it is not. Measured on a 2-core AMD EPYC, 8 streams, 2 threads
(``LlamaCppRunner(slots=8)``): quiet, passive 62-104 tokens/s, this 109-132,
active 117-159; beside 3 busy processes, passive 35, this 37-39, active 10.5.
``OMP_WAIT_POLICY=passive`` stays for OpenMP runtimes that do not read
``GOMP_SPINCOUNT`` (libgomp lets it override the policy's spin count)."""


def with_omp_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` plus ``OMP_DEFAULTS``, unless it chooses how OpenMP waits itself."""
    if any(name in env for name in OMP_DEFAULTS):
        return dict(env)
    return {**env, **OMP_DEFAULTS}


# How long a worker may take to finish after Shutdown before it is killed.
_SHUTDOWN_SECONDS = 10.0


class Worker(Protocol):
    pid: int
    control: ControlBlock
    exit_code: int | None
    """None while it runs."""

    def send(self, command: Command) -> None: ...

    def silent_for(self) -> float:
        """Seconds since its last heartbeat (0 where nothing watches it)."""

    def shutdown(self) -> None:
        """Ask it to finish, wait (a few seconds at most), and free it. Blocking."""


class WorkerProcess:
    """The worker as a child process: a native crash there ends only it."""

    def __init__(
        self,
        on_event: Callable[[Event], None],
        on_exit: Callable[[int, float | None], None],
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
    ) -> None:
        self.control = ControlBlock()
        self.exit_code: int | None = None
        self.stall_timeout = stall_timeout
        self.stalled: float | None = None
        """Seconds without a heartbeat after which the watchdog killed it."""
        self._beats = -1
        self._beat_at = time.monotonic()  # from spawn: starting counts as silence
        ours, theirs = socket.socketpair()
        env = with_omp_defaults(os.environ)
        # The worker imports this very tierlm, wherever it was imported from.
        package_root = str(Path(__file__).resolve().parents[3])
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_root, env.get("PYTHONPATH", "")) if p
        )
        try:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tierlm.runners.llama_cpp.worker.main",
                    str(theirs.fileno()),
                    str(self.control.fd),
                ],
                pass_fds=(theirs.fileno(), self.control.fd),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        finally:
            theirs.close()
            self.control.release_fd()
        self.pid = self._process.pid
        self._conn = Connection(ours.detach())
        self._lock = threading.Lock()
        self._on_event = on_event
        self._on_exit = on_exit
        self._reader = threading.Thread(
            target=self._read, name=f"tierlm-llama-reader-{self.pid}", daemon=True
        )
        self._reader.start()
        self._exited = threading.Event()
        self._watchdog = threading.Thread(
            target=self._watch, name=f"tierlm-llama-watchdog-{self.pid}", daemon=True
        )
        self._watchdog.start()

    def silent_for(self) -> float:
        beats = self.control.beats()
        if beats != self._beats:
            self._beats, self._beat_at = beats, time.monotonic()
        return time.monotonic() - self._beat_at

    def _watch(self) -> None:
        period = min(1.0, self.stall_timeout / 4)
        while not self._exited.wait(period):
            silent = self.silent_for()
            if silent >= self.stall_timeout:
                self.stalled = silent
                self._process.kill()  # SIGKILL ends a stopped process too
                return

    def send(self, command: Command) -> None:
        """Queue ``command``; if the worker is gone, its exit is (or will be)
        reported through ``on_exit``, which fails every call in flight."""
        try:
            with self._lock:
                self._conn.send(command)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass

    def _read(self) -> None:
        while True:
            try:
                event = self._conn.recv()
            except (EOFError, OSError):
                break
            self._on_event(event)
        self.exit_code = self._process.wait()
        self._exited.set()
        self._conn.close()
        self._on_exit(self.exit_code, self.stalled)

    def shutdown(self) -> None:
        if self.exit_code is None:
            self.send(Shutdown())
            try:
                self._process.wait(_SHUTDOWN_SECONDS)
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._reader.join(_SHUTDOWN_SECONDS)


class WorkerThread:
    """The same worker as threads of this process (``isolation="thread"``): no
    crash isolation, and no pipe; for comparison (bench/real_model.py)."""

    def __init__(
        self,
        on_event: Callable[[Event], None],
        on_exit: Callable[[int, float | None], None],
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
    ) -> None:
        del stall_timeout  # a thread of this process: nothing to kill
        # Read by the OpenMP runtime when llama.cpp is first loaded here.
        os.environ.update(with_omp_defaults(os.environ))
        self.pid = os.getpid()
        self.control = ControlBlock()
        self.control.release_fd()
        self.exit_code: int | None = None
        self._on_exit = on_exit
        self._service = DecodeService(self.control, on_event)
        self._service.start()
        # Counts run at once on the worker's command thread, as in the process.
        self._commands: list[Command] = []
        self._ready = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._dispatch, name="tierlm-llama-commands")
        self._thread.daemon = True
        self._thread.start()

    def silent_for(self) -> float:
        return 0.0

    def send(self, command: Command) -> None:
        with self._ready:
            self._commands.append(command)
            self._ready.notify()

    def _dispatch(self) -> None:
        while True:
            with self._ready:
                while not self._commands:
                    self._ready.wait()
                command = self._commands.pop(0)
            if isinstance(command, Shutdown):
                self._service.stop()
                self.exit_code = 0
                self._on_exit(0, None)
                return
            self._service.handle(command)

    def shutdown(self) -> None:
        if self.exit_code is None:
            self.send(Shutdown())
        self._thread.join(_SHUTDOWN_SECONDS)
