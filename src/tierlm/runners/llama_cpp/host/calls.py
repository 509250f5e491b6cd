"""The runner's calls in flight to its worker, and how events reach them.

Events arrive on the transport's reader thread; each call belongs to the event
loop that made it, so they are handed over with ``call_soon_threadsafe``. A
worker's exit fails every call still in flight with ``WorkerCrashed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import TYPE_CHECKING, Any

from tierlm.runners.errors import InvalidRequest, RunnerError
from tierlm.runners.llama_cpp.wire.messages import Failed, Log, Piece, Progress, Reply, Step
from tierlm.runners.requests import TokenPiece

if TYPE_CHECKING:
    from tierlm.runners.llama_cpp.wire.messages import Event

__all__ = ["Call", "Calls", "WorkerCrashed", "describe_exit"]

logger = logging.getLogger("tierlm.runners.llama_cpp")


def describe_exit(code: int) -> str:
    """``signal 11`` (SIGSEGV), ``signal 6`` (SIGABRT: an assertion in llama.cpp),
    ``signal 9`` (SIGKILL: the OOM killer), ``exit status 1``."""
    return f"signal {-code}" if code < 0 else f"exit status {code}"


class WorkerCrashed(Exception):
    """The worker died while a call was in flight (or the watchdog killed it:
    ``stalled`` seconds without a heartbeat)."""

    def __init__(self, code: int, stalled: float | None = None) -> None:
        self.code = code
        self.stalled = stalled
        if stalled is not None:
            super().__init__(f"it sent no heartbeat for {stalled:.0f} s and was killed")
        else:
            super().__init__(describe_exit(code))


class Call:
    """One command awaiting its reply; a generation also gets its pieces."""

    __slots__ = ("done", "loop", "pieces", "stage")

    def __init__(self, loop: asyncio.AbstractEventLoop, *, stream: bool = False) -> None:
        self.loop = loop
        self.done: asyncio.Future[Any] = loop.create_future()
        self.pieces: asyncio.Queue[str | None] | None = asyncio.Queue() if stream else None
        self.stage = ""
        """The last ``Progress`` stage the worker reported."""

    def _settle(self, outcome: Reply | Failed | WorkerCrashed) -> None:
        if self.done.done():
            return
        if isinstance(outcome, Reply):
            self.done.set_result(outcome.value)
        elif isinstance(outcome, Failed) and outcome.invalid:
            self.done.set_exception(
                InvalidRequest(outcome.message, param=outcome.param, model_id=outcome.model_id)
            )
        elif isinstance(outcome, Failed):
            self.done.set_exception(RunnerError(outcome.message, model_id=outcome.model_id))
        else:
            self.done.set_exception(outcome)
        if self.pieces is not None:
            self.pieces.put_nowait(None)  # wakes the reader: the outcome is in `done`

    def settle(self, outcome: Reply | Failed | WorkerCrashed) -> None:
        """From any thread."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            self.loop.call_soon_threadsafe(self._settle, outcome)

    def piece(self, event: Piece) -> None:
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.put, event)

    def put(self, event: Piece) -> None:
        """On the call's loop."""
        assert self.pieces is not None
        text = event.text
        if event.logprobs is not None:
            text = TokenPiece(text, *event.logprobs)
        self.pieces.put_nowait(text)

    async def result(self) -> Any:
        """The reply, raising a failure; shielded: a cancelled awaiter leaves
        the call to finish."""
        if not self.done.done():
            await asyncio.shield(self.done)
        return self.done.result()


class Calls:
    """The calls in flight to ONE worker, by call id (a generation's is its
    ``Generate`` command's)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[int, Call] = {}
        self._streams: dict[int, Call] = {}
        """The generations among them (their pieces come before the reply)."""
        self._exit: int | None = None
        self._stalled: float | None = None

    def add(self, call_id: int, call: Call) -> None:
        with self._lock:
            if self._exit is not None:
                call.settle(WorkerCrashed(self._exit, self._stalled))
                return
            self._calls[call_id] = call
            if call.pieces is not None:
                self._streams[call_id] = call

    def generations(self) -> list[int]:
        """The generations in flight, by call id."""
        with self._lock:
            return list(self._streams)

    def on_event(self, event: Event) -> None:
        """The transport's reader thread: route one event."""
        if isinstance(event, Step):
            self._on_step(event)
        elif isinstance(event, Piece):
            call = self._streams.get(event.call_id)
            if call is not None:
                call.piece(event)
        elif isinstance(event, Reply | Failed):
            with self._lock:
                call = self._calls.pop(event.call_id, None)
                self._streams.pop(event.call_id, None)
            if call is not None:
                call.settle(event)
        elif isinstance(event, Progress):
            call = self._calls.get(event.call_id)
            if call is not None:
                call.stage = event.stage
        elif isinstance(event, Log):
            logger.log(event.level, "worker: %s", event.message)

    def _on_step(self, step: Step) -> None:
        """A batched step's pieces, handed to each loop in one call; a reply
        after the pieces before it (a generation's last piece comes first)."""
        batches: dict[asyncio.AbstractEventLoop, list[tuple[Call, Piece]]] = {}

        def flush() -> None:
            for loop, items in batches.items():
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_put_all, items)
            batches.clear()

        for event in step.events:
            if isinstance(event, Piece):
                call = self._streams.get(event.call_id)
                if call is not None:
                    batches.setdefault(call.loop, []).append((call, event))
            else:
                flush()
                self.on_event(event)
        flush()

    def on_exit(self, code: int, stalled: float | None = None) -> int:
        """The worker is gone: fail what it still owed; returns how many calls."""
        with self._lock:
            self._exit, self._stalled = code, stalled
            calls, self._calls, self._streams = list(self._calls.values()), {}, {}
        for call in calls:
            call.settle(WorkerCrashed(code, stalled))
        return len(calls)


def _put_all(items: list[tuple[Call, Piece]]) -> None:
    for call, event in items:
        call.put(event)
