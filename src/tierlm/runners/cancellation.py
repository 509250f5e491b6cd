"""Cancellation, level-triggered with a reason (docs/design.md §2.9).

trio's cancel scopes are the model: a ``CancelToken`` once cancelled stays
cancelled, its reason is kept (a stronger reason replaces a weaker one, never
the other way), and a callback added late runs at once, so a cancel is never
lost and never counted twice. ``CallToken`` is one generation call's view of the
job's token: a yield stops a call only once it produced a token
(docs/design.md §4.6). ``Cancelled`` is what the awaiter of a
cancelled job gets. ``CancelReason``, why a job is told to stop, is the policy
core's word (``tierlm.core.stop_reasons``), re-exported here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Protocol

from tierlm.core.stop_reasons import CancelReason

__all__ = [
    "CallToken",
    "CancelReason",
    "CancelToken",
    "Cancellable",
    "Cancelled",
    "wait_cancelled",
]


class Cancelled(Exception):
    """A job stopped because its cancel token was cancelled.

    Raised to the awaiter of a cancelled job, and inside ``work`` by the
    checkpoints of ``ctx`` once its token is cancelled. It is an ordinary
    ``Exception`` on purpose, not ``asyncio.CancelledError``: the task that awaits
    a job was not itself cancelled, only the job.
    """

    def __init__(self, reason: CancelReason, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        message = f"job {reason.value}"
        super().__init__(f"{message}: {detail}" if detail else message)


class Cancellable(Protocol):
    """What ``tierlm.runners.cancel_scope`` races an await against: a
    ``CancelToken``, or a generation call's view of one (``CallToken``)."""

    @property
    def cancelled(self) -> bool: ...

    def add_callback(self, callback: Callable[[CancelToken], None]) -> Callable[[], None]: ...


class CancelToken:
    """A level-triggered cancel flag with a reason, in the spirit of trio's scopes.

    Once cancelled it stays cancelled: every later check sees it, so a cancel is
    never lost, and cancelling again never counts twice. A stronger reason
    replaces a weaker one, never the reverse: ``YIELD`` < ``PREEMPTED`` <
    ``CALLER``, ``SHUTDOWN``. A job asked to yield for fairness and then
    needed by a person is preempted at once (``aborts_prompt`` turns true); a
    job that was being preempted when its caller gave up ends as cancelled,
    not re-queued.

    ``cancelled`` (stop at the next token boundary) and ``aborts_prompt`` (stop
    a prompt evaluation too) are plain attributes, safe to poll from a worker
    thread (a llama.cpp decode loop and its abort callback read them).
    """

    __slots__ = ("_callbacks", "aborts_prompt", "cancelled", "reason")

    def __init__(self) -> None:
        self.cancelled: bool = False
        self.aborts_prompt: bool = False
        """Cancelled for a reason that may cut a prompt evaluation short: any
        but ``YIELD`` (docs/design.md §4.6)."""
        self.reason: CancelReason | None = None
        self._callbacks: list[Callable[[CancelToken], None]] = []

    def cancel(self, reason: CancelReason = CancelReason.CALLER) -> bool:
        """Cancel; return True if this call changed the token's state or reason."""
        if not reason.replaces(self.reason):
            return False
        self.reason = reason
        self.aborts_prompt = reason is not CancelReason.YIELD
        self.cancelled = True
        for callback in list(self._callbacks):
            callback(self)
        return True

    def add_callback(self, callback: Callable[[CancelToken], None]) -> Callable[[], None]:
        """Call ``callback(token)`` when cancelled (at once if already), and
        again each time a stronger reason replaces the token's reason.

        Returns a function that removes the callback.
        """
        self._callbacks.append(callback)
        if self.cancelled:
            callback(self)

        def remove() -> None:
            with contextlib.suppress(ValueError):  # removed twice
                self._callbacks.remove(callback)

        return remove

    def for_call(self, produced: Callable[[], int]) -> CallToken:
        """This token as one generation call sees it; ``produced()`` is the
        number of tokens the call has produced so far (``CallToken``)."""
        return CallToken(self, produced)

    def raise_if_cancelled(self) -> None:
        if self.cancelled:
            assert self.reason is not None
            raise Cancelled(self.reason)

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until cancelled or ``timeout`` seconds pass; return ``cancelled``."""
        return await wait_cancelled(self, timeout)

    def __repr__(self) -> str:
        state = f"cancelled ({self.reason.value})" if self.reason else "active"
        return f"<CancelToken {state}>"


class CallToken:
    """One generation call's view of its job's ``CancelToken``: when the call
    must stop (docs/design.md §4.6).

    ``cancelled`` is true, at a token boundary or while the prompt is
    evaluated, once the token ``aborts_prompt`` (a person is waiting, the
    caller gave up, shutdown); and for a ``YIELD``, once the call has produced
    a token: a yield never cuts a prompt evaluation, it lets the call finish
    it and produce its first token, then stops it at the next boundary. A call
    that begins with its token already cancelled, for any reason, starts
    nothing (no evaluation is under way to protect). Runners check it before
    each token and while evaluating; ``cancel_scope`` races awaits against it.
    """

    __slots__ = ("_early", "_produced", "token")

    def __init__(self, token: CancelToken, produced: Callable[[], int]) -> None:
        self.token = token
        self._produced = produced
        self._early = token.cancelled

    @property
    def cancelled(self) -> bool:
        token = self.token
        return token.cancelled and (token.aborts_prompt or self._early or self._produced() > 0)

    @property
    def reason(self) -> CancelReason | None:
        return self.token.reason

    def add_callback(self, callback: Callable[[CancelToken], None]) -> Callable[[], None]:
        """Call ``callback(token)`` when the call must stop, as
        ``CancelToken.add_callback`` (checked at every change of the token:
        a yield before the first token calls nothing, its upgrade does)."""

        def check(token: CancelToken) -> None:
            if self.cancelled:
                callback(token)

        return self.token.add_callback(check)

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until the call must stop or ``timeout`` seconds pass; return ``cancelled``."""
        return await wait_cancelled(self, timeout)


async def wait_cancelled(cancel: Cancellable, timeout: float | None = None) -> bool:
    """Wait until ``cancel.cancelled`` or ``timeout`` seconds pass; return it."""
    if cancel.cancelled:
        return True
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    def wake(_: CancelToken) -> None:
        if not fut.done():
            fut.set_result(None)

    remove = cancel.add_callback(wake)
    try:
        await asyncio.wait_for(asyncio.shield(fut), timeout)
    except TimeoutError:
        pass
    finally:
        remove()
    return cancel.cancelled
