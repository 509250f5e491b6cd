"""A replica's operations answers, in calls that each end (``OpenAnswers``).

The ingress reaches a replica's operations by broadcast calls
(``tierlm.ray.reach``), which return one value each: no stream. Almost every
answer is whole at once (``/metrics``, the scheduler API, a load); the
dashboard's events (SSE) never end. So an answer is read until it ends or,
once its head is sent, until ``SETTLE_S`` passes without its end: then it is
a stream, kept here under an id, and the ingress fetches its next pieces with
further calls (``more``), each waiting a little for them (a long poll). One
the ingress stops asking for (its client left, the ingress died) is closed
after ``IDLE_S``, so nothing runs for nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["IDLE_S", "SETTLE_S", "OpenAnswers"]

SETTLE_S = 0.3
"""After its head, an answer not ended within this is a stream."""
IDLE_S = 60.0
"""A stream nobody fetched for this long is closed (its client left)."""


@dataclass
class _Open:
    pieces: asyncio.Queue[bytes | None]
    pump: asyncio.Task[None]
    polled: float = field(default_factory=time.monotonic)


class OpenAnswers:
    """The streams a replica's operations answered, by id (module docstring)."""

    def __init__(self, idle_s: float = IDLE_S, settle_s: float = SETTLE_S) -> None:
        self.idle_s = idle_s
        self.settle_s = settle_s
        self._open: dict[str, _Open] = {}
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._open)

    async def start(self, answer: AsyncIterator[dict[str, Any]]) -> dict[str, Any]:
        """The answer ``tierlm.ray.ops.call`` streams, as one value: ``status``,
        ``headers``, the ``body`` so far, and ``stream`` (an id for ``more``)
        when it had not ended."""
        self._reap()
        pieces: asyncio.Queue[bytes | None] = asyncio.Queue()
        head: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

        async def pump() -> None:
            try:
                async for item in answer:
                    if "status" in item and not head.done():
                        head.set_result(item)
                    elif "body" in item:
                        await pieces.put(item["body"])
            except Exception as exc:
                if not head.done():
                    head.set_exception(exc)
            finally:
                if not head.done():
                    head.set_exception(RuntimeError("the answer ended without a head"))
                await pieces.put(None)
                with contextlib.suppress(Exception):
                    await answer.aclose()  # type: ignore[attr-defined]

        task = asyncio.ensure_future(pump())
        try:
            first = await head
        except BaseException:
            task.cancel()
            raise
        body, ended = await _drain(pieces, self.settle_s, until_end=True)
        out = {"status": first["status"], "headers": first["headers"], "body": body}
        if ended:
            return {**out, "stream": None}
        key = str(next(self._ids))
        self._open[key] = _Open(pieces, task)
        return {**out, "stream": key}

    async def more(self, key: str, wait_s: float) -> dict[str, Any]:
        """The stream's pieces since the last call, waiting up to ``wait_s``
        for one; ``end`` once it ended (or is unknown: closed, reaped)."""
        self._reap()
        found = self._open.get(key)
        if found is None:
            return {"body": b"", "end": True}
        found.polled = time.monotonic()
        body, ended = await _drain(found.pieces, wait_s, until_end=False)
        found.polled = time.monotonic()
        if ended:
            self._open.pop(key, None)
        return {"body": body, "end": ended}

    def close(self, key: str) -> None:
        """The client went away: stop the stream."""
        found = self._open.pop(key, None)
        if found is not None:
            found.pump.cancel()

    def close_all(self) -> None:
        for key in list(self._open):
            self.close(key)

    def _reap(self) -> None:
        now = time.monotonic()
        for key, found in list(self._open.items()):
            if now - found.polled > self.idle_s:
                self.close(key)


async def _drain(
    pieces: asyncio.Queue[bytes | None], wait_s: float, *, until_end: bool
) -> tuple[bytes, bool]:
    """The pieces queued, waiting up to ``wait_s`` for the first (or, with
    ``until_end``, for the end); whether the answer ended."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    out: list[bytes] = []
    while True:
        try:
            piece = pieces.get_nowait()
        except asyncio.QueueEmpty:
            left = deadline - loop.time()
            if left <= 0 or (out and not until_end):
                return b"".join(out), False
            try:
                piece = await asyncio.wait_for(pieces.get(), left)
            except TimeoutError:
                return b"".join(out), False
        if piece is None:
            return b"".join(out), True
        out.append(piece)
