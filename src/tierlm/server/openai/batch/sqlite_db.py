"""One SQLite connection and the one way to use it: ``transaction`` for every
write, ``read`` for every read, ``migrate`` for the schema.

Modelled on huey's ``SqliteStorage``: the store's methods never issue BEGIN,
COMMIT or ROLLBACK themselves. ``transaction`` is BEGIN IMMEDIATE (the write
lock taken at once, so two writers never deadlock upgrading a read), COMMIT
at the end, and on any error a ROLLBACK whose own failure is swallowed: on a
full disk SQLite has often rolled back already, and the failed ROLLBACK
("no transaction is active") used to replace the real error, which then
reached the client as a 500 "internal error" (docs/design.md §9). Every
``sqlite3`` and ``OSError`` leaving the helper is a ``StoreError`` naming the
file (``store_errors``).

The schema's version is SQLite's own ``PRAGMA user_version``: ``migrate``
runs the steps above it, each in one transaction with the version it sets,
so a gateway stopped mid-migration starts over that step, and a newer file
is refused by name rather than misread.

WAL journal with ``synchronous=FULL``: each commit is on disk before the call
returns, and readers never wait for the writer. One connection used by one
thread at a time (a lock): the service calls the store from worker threads.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tierlm.server.openai.batch.store_errors import StoreUnavailable, store_error

__all__ = ["BlobReader", "Database"]


class Database:
    """``path`` opened (module docstring); raises ``StoreError`` naming it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        try:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA busy_timeout=5000")
            # Debian's SQLite zeroes every freed page (secure_delete=ON): a
            # deleted 100 MB file is then 100 MB of journal, which a full
            # disk does not have. FAST zeroes what costs no extra write.
            self._db.execute("PRAGMA secure_delete=FAST")
            # Reads the header and the schema: a file that is not a database
            # (or is corrupt there) fails here, at start-up, by name.
            self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except (sqlite3.Error, OSError) as exc:
            raise store_error(exc, path) from None

    def close(self) -> None:
        with self.lock:
            self._db.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """The connection inside BEGIN IMMEDIATE ... COMMIT (module docstring)."""
        with self.lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except (sqlite3.Error, OSError) as exc:
                if self._db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                raise store_error(exc, self.path) from None

    def read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except (sqlite3.Error, OSError) as exc:
                raise store_error(exc, self.path) from None

    @contextlib.contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """The connection for a read of several statements (a blob), errors mapped."""
        with self.lock:
            try:
                yield self._db
            except (sqlite3.Error, OSError) as exc:
                raise store_error(exc, self.path) from None

    def migrate(self, steps: Sequence[str]) -> None:
        """Bring the schema to ``len(steps)``: step ``i`` (SQL) makes version ``i + 1``."""
        (version,) = self.read("PRAGMA user_version")[0]
        if version > len(steps):
            raise StoreUnavailable(
                f"{self.path}: written by a newer tierlm (schema {version}, this one knows "
                f"{len(steps)}); upgrade tierlm, or point batches.data_dir elsewhere"
            )
        for number in range(version, len(steps)):
            with self.transaction() as db:
                for statement in steps[number].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {number + 1}")


class BlobReader:
    """One BLOB read from its start to its end, on a read-only connection of
    its own (``open``; None when ``sql`` finds no row).

    Seeking into a BLOB walks its chain of overflow pages from the first, so
    reading a 90 MB file as 1 400 separately opened 64 KiB pieces walked
    the chain 1 400 times (8 downloads took 156 s, not 4). One handle kept
    open reads the chain once. Its connection is its own, so the store's
    writers never wait for it (WAL: a reader holds a snapshot), and what it
    reads is the file as it was when opened, even if deleted meanwhile."""

    def __init__(self, db: sqlite3.Connection, blob: sqlite3.Blob, path: Path) -> None:
        self._db = db
        self._blob = blob
        self._path = path

    @classmethod
    def open(
        cls, path: Path, table: str, column: str, sql: str, args: Sequence[Any]
    ) -> BlobReader | None:
        """The BLOB in ``column`` of the ``table`` row whose rowid ``sql`` selects."""
        db: sqlite3.Connection | None = None
        try:
            db = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False
            )
            db.execute("PRAGMA cache_size=-256")  # KiB: the pages of a chunk
            db.execute("BEGIN")  # one snapshot for the whole read
            row = db.execute(sql, args).fetchone()
            if row is None:
                db.close()
                return None
            return cls(db, db.blobopen(table, column, row[0], readonly=True), path)
        except (sqlite3.Error, OSError) as exc:
            if db is not None:
                db.close()
            raise store_error(exc, path) from None

    def read(self, size: int) -> bytes:
        """The next ``size`` bytes at most; ``b""`` at the end."""
        try:
            return self._blob.read(size)
        except (sqlite3.Error, OSError) as exc:
            raise store_error(exc, self._path) from None

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._blob.close()
            self._db.close()
