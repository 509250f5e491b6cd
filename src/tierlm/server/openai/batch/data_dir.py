"""The data directory as one gateway's own: a lock, and room kept for a DELETE.

**One gateway per data directory** (docs/design.md §9). The default,
``~/.local/share/tierlm``, is shared by every ``tierlm serve`` a user starts;
two gateways on it both resumed the same batch, ran its requests twice and
wrote two output files. ``claim`` takes an exclusive ``flock`` on
``<data_dir>/gateway.lock`` and writes the holder's pid in it; a second
gateway is refused at start-up with one line naming the directory and that
pid. The kernel drops the lock when the process dies (a SIGKILL included), so
a stale file never blocks a restart. ``flock`` locks conflict between two
opens in one process too: two apps in one test process are two gateways.

**Room for a DELETE on a full disk.** SQLite needs a few pages of journal to
delete anything, so on a disk with no byte left even ``DELETE /v1/files``
failed, and the API offered no way out. ``Reserve`` keeps a small file of
zeros beside the store; when a delete meets a full disk, the reserve is
removed, the delete retried (the freed pages then hold the next writes), and
the reserve is laid again when there is room.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from tierlm.server.openai.batch.store_errors import StoreUnavailable, store_error

__all__ = ["LOCK_NAME", "RESERVE_BYTES", "RESERVE_NAME", "DataDirLock", "Reserve"]

LOCK_NAME = "gateway.lock"
RESERVE_NAME = "reserve"
RESERVE_BYTES = 256 << 10
"""Journal pages for a few deletes (a file's row and its free-list pages)."""


class DataDirLock:
    """``claim``: this gateway's, or a one-line ``StoreError`` (module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def claim(self) -> None:
        if self._fd is not None:
            return
        lock = self.path / LOCK_NAME
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise store_error(exc, self.path) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _holder(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise store_error(exc, lock) from None
            raise StoreUnavailable(
                f"data dir {self.path} is in use by another tierlm gateway ({holder}); stop "
                "it, or give this one its own directory (--data-dir, batches.data_dir)"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            os.fsync(fd)
        except OSError as exc:
            os.close(fd)
            raise store_error(exc, self.path) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # drops the flock
            self._fd = None


def _holder(fd: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        pid = int(os.pread(fd, 32, 0).decode().strip())
        return f"pid {pid}"
    return "pid unknown"


class Reserve:
    """A file of ``RESERVE_BYTES`` zeros to give up on a full disk (module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / RESERVE_NAME

    def lay(self) -> bool:
        """Lay the reserve if missing; False when there is no room for it now."""
        if self.path.exists() and self.path.stat().st_size >= RESERVE_BYTES:
            return True
        try:
            with open(self.path, "wb") as file:
                file.write(bytes(RESERVE_BYTES))
                file.flush()
                os.fsync(file.fileno())
        except OSError:
            with contextlib.suppress(OSError):
                self.path.unlink()
            return False
        return True

    def give_up(self) -> bool:
        """Remove the reserve; True if there was one to free."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise store_error(exc, self.path) from None
        return True
