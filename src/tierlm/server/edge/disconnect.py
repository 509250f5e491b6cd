"""A client's disconnect as a ``CancelToken``, for ``tierlm.runners.cancel_scope``.

Starlette notices a disconnect only when a write fails, which for a request that
waits in a queue and writes nothing may be never. The ASGI ``receive`` channel
reports ``http.disconnect`` the moment the connection closes: ``client_gone``
reads it in a task and cancels a token then (reason ``CALLER``), so a response
races its waits against the token with the same primitive the runners use
(docs/design.md §2.9).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from starlette.types import Receive

from tierlm.runners.cancellation import CancelReason, CancelToken

__all__ = ["client_gone"]


@contextlib.asynccontextmanager
async def client_gone(receive: Receive) -> AsyncIterator[CancelToken]:
    """A token cancelled when the client disconnects while the block runs.

    Call it once the request body is read: the next message is then the disconnect.
    """
    token = CancelToken()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        token.cancel(CancelReason.CALLER)

    # A plain task, not an anyio task group: the block's own errors (an APIError
    # for a full queue) must reach Starlette's handlers unwrapped.
    watcher = asyncio.ensure_future(watch())
    try:
        yield token
    finally:
        watcher.cancel()
