"""The runner's worker across its lives: started, watched, replaced.

``WorkerSupervisor`` owns the current worker (``transport.py``) and its calls
in flight (``calls.py``). A worker that dies (a native crash) or that its
watchdog kills (no heartbeat for ``stall_timeout``: docs/design.md §1.3) is replaced once, and the
model it held is loaded again
by the runner's ``reload``; every caller that met the same death waits for
that one recovery. ``problem()`` says why the worker cannot serve now, for
``/ready``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any, Literal

from tierlm.runners.errors import RunnerError
from tierlm.runners.llama_cpp.host.calls import Call, Calls, WorkerCrashed
from tierlm.runners.llama_cpp.host.transport import Worker, WorkerProcess, WorkerThread

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from tierlm.runners.llama_cpp.wire.messages import Command

__all__ = ["ISOLATIONS", "Isolation", "WorkerSupervisor"]

logger = logging.getLogger("tierlm.runners.llama_cpp")

Isolation = Literal["process", "thread"]
ISOLATIONS: tuple[Isolation, ...] = ("process", "thread")


class WorkerSupervisor:
    """The one worker of a runner, and its replacement after a crash or stall."""

    def __init__(
        self,
        isolation: Isolation,
        stall_timeout: float,
        *,
        on_spawn: Callable[[Worker], None],
        reload: Callable[[], Awaitable[str]] | None = None,
    ) -> None:
        self.isolation: Isolation = isolation
        self.stall_timeout = stall_timeout
        self.on_spawn = on_spawn
        """Sends a new worker its first commands (configuration, faults)."""
        self.reload = reload
        """After a restart: load the model again; says how that went."""
        self.restarts = 0
        """Workers started again after a crash or a stall (not after an
        uncounted ``restart(counted=False)``: the start-up probe's crash)."""
        self.last_crash: str | None = None
        self.worker: Worker | None = None
        self.calls = Calls()
        self._recovery: asyncio.Future[str] | None = None
        """The reload after the last crash."""
        self._revivals: set[asyncio.Future[str]] = set()

    @property
    def pid(self) -> int | None:
        worker = self.worker
        return worker.pid if worker is not None and worker.exit_code is None else None

    def problem(self) -> str | None:
        """Why the worker cannot serve now, None if it can: it has sent no
        heartbeat for a while (its watchdog kills it at ``stall_timeout``), or
        it is being restarted after a crash."""
        worker = self.worker
        if worker is None:
            return None
        recovery = self._recovery
        if worker.exit_code is not None or (recovery is not None and not recovery.done()):
            return "the llama.cpp worker is restarting after a crash"
        silent = worker.silent_for()
        # A few missed beats are a busy machine; a fifth of the timeout is not.
        if silent >= max(2.0, self.stall_timeout / 5):
            return (
                f"the llama.cpp worker has sent no heartbeat for {silent:.0f} s "
                f"(killed and restarted at {self.stall_timeout:.0f} s)"
            )
        return None

    def spawn(self) -> Worker:
        calls = Calls()
        loop = asyncio.get_running_loop()

        def on_exit(code: int, stalled: float | None) -> None:
            owed = calls.on_exit(code, stalled)
            if stalled is not None:
                logger.error(
                    "the llama.cpp worker (pid %d) sent no heartbeat for %.0f s: killed; "
                    "%d call(s) in flight fail, a new worker starts",
                    worker.pid, stalled, owed,
                )  # fmt: skip
                self.last_crash = f"no heartbeat for {stalled:.0f} s: killed by the watchdog"
                if owed == 0:  # nobody's error path will restart it: do it now
                    with contextlib.suppress(RuntimeError):  # the loop is closed
                        loop.call_soon_threadsafe(self._revive, worker)

        if self.isolation == "process":
            worker: Worker = WorkerProcess(calls.on_event, on_exit, self.stall_timeout)
        else:
            worker = WorkerThread(calls.on_event, on_exit)
        self.worker, self.calls = worker, calls
        self.on_spawn(worker)
        return worker

    def restart(self, dead: Worker, *, counted: bool = True) -> None:
        """Start a new worker if ``dead`` is still the current one."""
        if self.worker is dead:
            if counted:
                self.restarts += 1
            self.spawn()

    async def recover(self, dead: Worker) -> str:
        """After ``dead`` crashed: a new worker, holding the model again.

        Returns how that went, for the crash's error message. Once per crash:
        a later caller waits for the same reload, which runs as a task of its
        own (a caller that is cancelled does not interrupt it).
        """
        if self.worker is dead:
            self.restart(dead)
            self._recovery = None if self.reload is None else asyncio.ensure_future(self.reload())
        recovery = self._recovery
        return "restarted" if recovery is None else await asyncio.shield(recovery)

    def _revive(self, dead: Worker) -> None:
        """A worker killed while idle: start another and reload its model now,
        so that ``/ready`` turns true again without waiting for a request."""
        if self.worker is dead:
            revival = asyncio.ensure_future(self.recover(dead))
            self._revivals.add(revival)
            revival.add_done_callback(self._revivals.discard)

    async def live(self) -> tuple[Worker, Calls]:
        """The worker, started (or restarted after a crash) when needed."""
        worker = self.worker
        if worker is None:
            worker = self.spawn()
        elif worker.exit_code is not None:
            await self.recover(worker)
            assert self.worker is not None
            worker = self.worker
        return worker, self.calls

    async def call(self, command: Command, *, stream: bool = False) -> tuple[Worker, Call]:
        """Send ``command`` to the live worker; its call, to await (``stream``:
        a generation, whose pieces come before its reply)."""
        worker, calls = await self.live()
        call = Call(asyncio.get_running_loop(), stream=stream)
        calls.add(command.call_id, call)
        worker.send(command)
        return worker, call

    async def ask(self, command: Callable[[], Command], model_id: str, doing: str) -> Any:
        """The reply to a quick command (rendering a prompt, tokenizing),
        sent again once to a new worker if the worker died meanwhile; a
        second death is a ``RunnerError`` saying what it was ``doing``."""
        for attempt in (1, 2):
            worker, call = await self.call(command())
            try:
                return await call.result()
            except WorkerCrashed as crash:
                outcome = await self.recover(worker)
                if attempt == 2:
                    raise RunnerError(
                        f"model {model_id!r}: the llama.cpp worker crashed ({crash}) "
                        f"while {doing}; {outcome}",
                        model_id=model_id,
                    ) from None
        raise AssertionError("unreachable")

    def detach(self) -> Worker | None:
        """The worker, no longer supervised (the runner closes it)."""
        worker, self.worker = self.worker, None
        return worker
