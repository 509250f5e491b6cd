"""Run something until a ``CancelToken`` is cancelled: the one way tierlm races
an await against a cancel (docs/design.md §2.9).

Either a token or a generation call's view of it (``CallToken``: a yield
waits for the call's first token, docs/design.md §4.6) will do.

``cancelled_by(token)`` is an anyio cancel scope that is cancelled when the
token is: at once if it already is (level-triggered, as the token: a cancel is
never missed, whenever it came), and from any thread (a llama.cpp worker, a
signal handler), waking the loop thread-safely. The token keeps the reason;
the scope only stops the await. ``until_cancelled(token, aw)`` is the common
case: ``aw``'s result, or None once the token is cancelled.

The HTTP runners race each read of a stream against the job's token with it;
the gateway races a response against the client's disconnect, which it turns
into a token too (``tierlm.server.edge.disconnect``).

It lives beside the runner protocol, which owns ``CancelToken``, so that runners
use it and still import nothing of tierlm but their protocol layer
(docs/design.md §1). anyio comes with httpx and Starlette: only the HTTP runners
and the gateway import this module, and the base install does not need it.

A cancel scope belongs to the frame that entered it: never keep one open across
the ``yield`` of an async generator (the reader's code would run inside it).
Race each step instead, as ``tierlm.runners.http.post_stream`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Coroutine, Iterator
from typing import TypeVar

import anyio

from tierlm.runners.cancellation import Cancellable, CancelToken

__all__ = ["cancelled_by", "until_cancelled"]

_T = TypeVar("_T")


@contextlib.contextmanager
def cancelled_by(token: Cancellable) -> Iterator[anyio.CancelScope]:
    """A cancel scope cancelled when ``token`` is; see the module docstring.

    After the block, ``scope.cancelled_caught`` says whether the block was cut
    short, ``token.reason`` why.
    """
    loop = asyncio.get_running_loop()
    owner = threading.get_ident()
    with anyio.CancelScope() as scope:

        def on_cancel(_: CancelToken) -> None:
            if threading.get_ident() == owner:
                scope.cancel()
            else:
                with contextlib.suppress(RuntimeError):  # the loop is already closed
                    loop.call_soon_threadsafe(scope.cancel)

        remove = token.add_callback(on_cancel)
        try:
            yield scope
        finally:
            remove()


async def until_cancelled(token: Cancellable, work: Awaitable[_T]) -> _T | None:
    """``await work``, or None as soon as ``token`` is cancelled (``work`` is then
    cancelled where it waits).

    A ``work`` that finished in the same instant as the cancel returns its
    result (e.g. a response the caller must close); the caller sees the cancel
    at its next check, since the token stays cancelled.
    """
    if token.cancelled:
        if isinstance(work, Coroutine):
            work.close()  # never started: no "never awaited" warning
        return None
    result: _T | None = None
    with cancelled_by(token):
        result = await work
    return result
