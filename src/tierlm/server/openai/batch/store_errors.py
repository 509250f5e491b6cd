"""What a storage fault is to a client: an answer, never a 500 or a loop
(docs/design.md §9).

SQLite reports a full disk, a read-only file, a corrupt one and an I/O error
as ``sqlite3.OperationalError`` and friends, told apart only by their error
code. ``store_error`` turns each into a ``StoreError`` that says what happened
and where (the data directory, so the operator knows which disk), with the
status it is answered with: a full disk is **507** with ``Retry-After`` (space
may be freed: a ``DELETE`` works on a full disk, ``data_dir.Reserve``), the
rest **503**. At start-up the same message is the one line ``tierlm serve``
prints before it exits.
"""

from __future__ import annotations

import errno
from pathlib import Path

from tierlm.errors import TierlmError

__all__ = ["StoreError", "StoreFull", "StoreUnavailable", "disk_full", "store_error"]

FULL_RETRY_AFTER = 60
"""Seconds a client is told to wait on a full disk: freeing space is a person's
act (a deleted file, an operator), not a queue draining."""


class StoreError(TierlmError):
    """The Batch API's store cannot do what was asked (module docstring)."""

    status_hint = 503
    code = "store_unavailable"
    reason = "store_unavailable"


class StoreFull(StoreError):
    """No space left where the store writes."""

    status_hint = 507
    code = "storage_full"
    reason = "storage_full"
    retry_after = FULL_RETRY_AFTER


class StoreUnavailable(StoreError):
    """Read-only, corrupt, locked by another process, or an I/O error."""


# SQLite's primary result codes (sqlite3.h), as sqlite_errorcode holds them
# (an extended code's low byte).
_FULL = 13
_READONLY = 8
_CORRUPT = 11
_NOTADB = 26
_CANTOPEN = 14
_IOERR = 10
_BUSY = 5


def disk_full(where: Path) -> StoreFull:
    return StoreFull(
        f"the gateway's disk is full: no space left for {where}; delete files "
        "(DELETE /v1/files/{id} works on a full disk) or free space, then retry"
    )


def store_error(exc: BaseException, path: Path) -> StoreError:
    """``exc`` (a ``sqlite3.Error`` or an ``OSError``) as the answer it means."""
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, OSError):
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return disk_full(path)
        why = exc.strerror or str(exc)
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return StoreUnavailable(f"{path}: not writable ({why}); batches.data_dir, --data-dir")
        return StoreUnavailable(f"{path}: {why}")
    code = getattr(exc, "sqlite_errorcode", None)
    primary = None if code is None else code & 0xFF
    if primary == _FULL:
        return disk_full(path)
    if primary == _READONLY:
        return StoreUnavailable(
            f"{path}: not writable (read-only); batches.data_dir, --data-dir names another place"
        )
    if primary in (_CORRUPT, _NOTADB):
        return StoreUnavailable(
            f"{path}: not a readable SQLite database ({exc}); move it aside (the gateway "
            "then starts a new one) or restore a backup"
        )
    if primary == _BUSY:
        return StoreUnavailable(f"{path}: locked by another process ({exc}); retry")
    if primary in (_CANTOPEN, _IOERR):
        return StoreUnavailable(f"{path}: cannot be read or written ({exc})")
    return StoreUnavailable(f"{path}: {exc}")
