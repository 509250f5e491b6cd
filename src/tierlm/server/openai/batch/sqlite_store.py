"""``BatchStore`` in one SQLite file (stdlib ``sqlite3``): the data directory's
``batches.sqlite3``, one file a user can back up (``sqlite3 batches.sqlite3
".backup copy.sqlite3"`` while the gateway runs).

WAL journal with ``synchronous=FULL``: each commit is on disk before the call
returns, so what the API answered survives a SIGKILL and a power cut alike,
and readers never wait for the writer. One connection, used by one thread at a
time (a lock): the service calls the store from ``asyncio.to_thread``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tierlm.server.openai.batch.store import (
    ACTIVE,
    BatchRecord,
    BatchStatus,
    FileRecord,
    PendingRequest,
    RequestResult,
)

__all__ = ["SqliteStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL,
    filename TEXT NOT NULL,
    purpose TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    content BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS files_owner ON files (owner, seq);
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL,
    status TEXT NOT NULL,
    total INTEGER NOT NULL,
    completed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    output_file_id TEXT,
    error_file_id TEXT,
    times TEXT NOT NULL DEFAULT '{}',
    fixed TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS batches_owner ON batches (owner, seq);
CREATE INDEX IF NOT EXISTS batches_status ON batches (status);
CREATE TABLE IF NOT EXISTS requests (
    batch_id TEXT NOT NULL,
    line INTEGER NOT NULL,
    custom_id TEXT,
    body TEXT,
    done INTEGER NOT NULL DEFAULT 0,
    error INTEGER NOT NULL DEFAULT 0,
    output TEXT,
    PRIMARY KEY (batch_id, line)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS requests_pending ON requests (batch_id, done, line);
"""

# What never changes after a batch is created: one JSON column.
_FIXED = (
    "input_file_id",
    "endpoint",
    "completion_window",
    "created_at",
    "expires_at",
    "class_name",
    "producer",
    "deadline",
    "metadata",
    "model",
    "errors",
)
_FILE_COLUMNS = "id, owner, filename, purpose, bytes, created_at"
_BATCH_COLUMNS = (
    "id, owner, status, total, completed, failed, output_file_id, error_file_id, times, fixed"
)


class SqliteStore:
    """``BatchStore`` in ``path`` (created, with its directory, if missing)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _write(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[int]:
        """Run ``statements`` in one transaction; their row counts."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                counts = [self._db.execute(sql, args).rowcount for sql, args in statements]
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return counts

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # -- files ---------------------------------------------------------------------
    def add_file(self, record: FileRecord, content: bytes) -> None:
        self._write([_insert_file(record, content)])

    def get_file(self, file_id: str, owner: str) -> FileRecord | None:
        rows = self._read(
            f"SELECT {_FILE_COLUMNS} FROM files WHERE id = ? AND owner = ?", (file_id, owner)
        )
        return FileRecord(*rows[0]) if rows else None

    def file_content(self, file_id: str, owner: str) -> bytes | None:
        rows = self._read("SELECT content FROM files WHERE id = ? AND owner = ?", (file_id, owner))
        return bytes(rows[0][0]) if rows else None

    def list_files(
        self, owner: str, purpose: str | None, after: str | None, limit: int, newest_first: bool
    ) -> list[FileRecord]:
        where, args = ["owner = ?"], [owner]
        if purpose is not None:
            where.append("purpose = ?")
            args.append(purpose)
        if after is not None:
            where.append(f"seq {'<' if newest_first else '>'} (SELECT seq FROM files WHERE id = ?)")
            args.append(after)
        order = "DESC" if newest_first else "ASC"
        rows = self._read(
            f"SELECT {_FILE_COLUMNS} FROM files WHERE {' AND '.join(where)} "
            f"ORDER BY seq {order} LIMIT ?",
            (*args, limit),
        )
        return [FileRecord(*row) for row in rows]

    def delete_file(self, file_id: str, owner: str) -> bool:
        (count,) = self._write([("DELETE FROM files WHERE id = ? AND owner = ?", (file_id, owner))])
        return count > 0

    # -- batches -------------------------------------------------------------------
    def add_batch(
        self, record: BatchRecord, pending: Sequence[PendingRequest], bad: Sequence[RequestResult]
    ) -> None:
        fixed = json.dumps({name: getattr(record, name) for name in _FIXED})
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT INTO batches (id, owner, status, total, failed, times, fixed) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        record.id,
                        record.owner,
                        record.status,
                        record.total,
                        record.failed,
                        json.dumps(record.times),
                        fixed,
                    ),
                )
                self._db.executemany(
                    "INSERT INTO requests (batch_id, line, custom_id, body) VALUES (?, ?, ?, ?)",
                    [(record.id, p.line, p.custom_id, json.dumps(p.body)) for p in pending],
                )
                self._db.executemany(
                    "INSERT INTO requests (batch_id, line, custom_id, done, error, output) "
                    "VALUES (?, ?, ?, 1, 1, ?)",
                    [(record.id, r.line, r.custom_id, r.output) for r in bad],
                )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def get_batch(self, batch_id: str, owner: str | None) -> BatchRecord | None:
        sql, args = f"SELECT {_BATCH_COLUMNS} FROM batches WHERE id = ?", [batch_id]
        if owner is not None:
            sql += " AND owner = ?"
            args.append(owner)
        rows = self._read(sql, args)
        return _batch(rows[0]) if rows else None

    def list_batches(self, owner: str, after: str | None, limit: int) -> list[BatchRecord]:
        sql, args = f"SELECT {_BATCH_COLUMNS} FROM batches WHERE owner = ?", [owner]
        if after is not None:
            sql += " AND seq < (SELECT seq FROM batches WHERE id = ?)"
            args.append(after)
        rows = self._read(sql + " ORDER BY seq DESC LIMIT ?", (*args, limit))
        return [_batch(row) for row in rows]

    def unfinished(self) -> list[BatchRecord]:
        marks = ", ".join("?" * len(ACTIVE))
        rows = self._read(
            f"SELECT {_BATCH_COLUMNS} FROM batches WHERE status IN ({marks}) ORDER BY seq", ACTIVE
        )
        return [_batch(row) for row in rows]

    def count_unfinished(self, owner: str) -> int:
        marks = ", ".join("?" * len(ACTIVE))
        rows = self._read(
            f"SELECT COUNT(*) FROM batches WHERE owner = ? AND status IN ({marks})",
            (owner, *ACTIVE),
        )
        return int(rows[0][0])

    def set_status(
        self, batch_id: str, status: BatchStatus, at: int, mark: str | None = None
    ) -> None:
        marks = [f"$.{status}_at", at]
        if mark is not None:
            marks += [f"$.{mark}_at", at]
        places = ", ".join("?, ?" for _ in range(len(marks) // 2))
        self._write(
            [
                (
                    f"UPDATE batches SET status = ?, times = json_set(times, {places}) "
                    "WHERE id = ?",
                    (status, *marks, batch_id),
                )
            ]
        )

    # -- requests ------------------------------------------------------------------
    def pending(self, batch_id: str, skip: Sequence[int], limit: int) -> list[PendingRequest]:
        marks = ", ".join("?" * len(skip))
        exclude = f" AND line NOT IN ({marks})" if skip else ""
        rows = self._read(
            "SELECT line, custom_id, body FROM requests WHERE batch_id = ? AND done = 0"
            f"{exclude} ORDER BY line LIMIT ?",
            (batch_id, *skip, limit),
        )
        return [PendingRequest(line, custom_id, json.loads(body)) for line, custom_id, body in rows]

    def finish_request(self, batch_id: str, result: RequestResult) -> bool:
        column = "failed" if result.error else "completed"
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                changed = self._db.execute(
                    "UPDATE requests SET done = 1, error = ?, output = ? "
                    "WHERE batch_id = ? AND line = ? AND done = 0",
                    (int(result.error), result.output, batch_id, result.line),
                ).rowcount
                if changed:
                    self._db.execute(
                        f"UPDATE batches SET {column} = {column} + 1 WHERE id = ?", (batch_id,)
                    )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        return changed > 0

    def finish_all_pending(self, batch_id: str, results: Sequence[RequestResult]) -> None:
        for result in results:
            self.finish_request(batch_id, result)

    def results(self, batch_id: str, error: bool) -> list[str]:
        rows = self._read(
            "SELECT output FROM requests WHERE batch_id = ? AND done = 1 AND error = ? "
            "ORDER BY line",
            (batch_id, int(error)),
        )
        return [row[0] for row in rows]

    def finalize(
        self,
        batch_id: str,
        status: BatchStatus,
        at: int,
        files: Sequence[tuple[FileRecord, bytes]],
        output_file_id: str | None,
        error_file_id: str | None,
    ) -> None:
        self._write(
            [
                *(_insert_file(record, content) for record, content in files),
                (
                    "UPDATE batches SET status = ?, times = json_set(times, ?, ?), "
                    "output_file_id = ?, error_file_id = ? WHERE id = ?",
                    (status, f"$.{status}_at", at, output_file_id, error_file_id, batch_id),
                ),
            ]
        )


def _insert_file(record: FileRecord, content: bytes) -> tuple[str, Sequence[Any]]:
    return (
        "INSERT INTO files (id, owner, filename, purpose, bytes, created_at, content) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            record.id,
            record.owner,
            record.filename,
            record.purpose,
            record.bytes,
            record.created_at,
            content,
        ),
    )


def _batch(row: tuple[Any, ...]) -> BatchRecord:
    batch_id, owner, status, total, completed, failed, output_id, error_id, times, fixed = row
    return BatchRecord(
        id=batch_id,
        owner=owner,
        status=status,
        total=total,
        completed=completed,
        failed=failed,
        output_file_id=output_id,
        error_file_id=error_id,
        times=json.loads(times),
        **json.loads(fixed),
    )
