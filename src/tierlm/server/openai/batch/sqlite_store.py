"""``BatchStore`` in one SQLite file (stdlib ``sqlite3``): the data directory's
``batches.sqlite3``, one file a user can back up (``sqlite3 batches.sqlite3
".backup copy.sqlite3"`` while the gateway runs).

Every statement goes through ``sqlite_db.Database`` (one transaction helper,
``PRAGMA user_version`` migrations). A file's content is a BLOB moved in
chunks through SQLite's incremental blob I/O (``blobopen``): an upload is
copied from the spooled request body, a download and a batch's parse read
the file through one handle (``sqlite_db.BlobReader``), and an output file
is written from the requests' rows as they are read, so no file is ever
whole in memory (docs/design.md §9). Many rows are
one transaction (a batch's requests, a cancel's 50 000 answers): one fsync,
not one each.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tierlm.server.openai.batch.data_dir import Reserve
from tierlm.server.openai.batch.sqlite_db import BlobReader, Database
from tierlm.server.openai.batch.store import (
    ACTIVE,
    CHUNK,
    BatchLimitReached,
    BatchRecord,
    BatchStatus,
    FileRecord,
    KeyStorageFull,
    PendingRequest,
    Reader,
    RequestResult,
)
from tierlm.server.openai.batch.store_errors import StoreFull

__all__ = ["SqliteStore"]

# Step i makes schema version i + 1 (Database.migrate); never edit a step, add one.
_MIGRATIONS = (
    # 1: the schema of the first release (files written before user_version was
    # kept have it already: every statement is IF NOT EXISTS).
    """
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
CREATE INDEX IF NOT EXISTS requests_pending ON requests (batch_id, done, line)
""",
    # 2: batches whose requests are being added (add_requests before add_batch):
    # what a crash left there is dropped at the next open.
    """
CREATE TABLE building (batch_id TEXT PRIMARY KEY) WITHOUT ROWID
""",
)

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
_ACTIVE_MARKS = ", ".join("?" * len(ACTIVE))


class SqliteStore:
    """``BatchStore`` in ``path`` (created if missing; its directory must exist)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = Database(path)
        self.db.migrate(_MIGRATIONS)
        self.reserve = Reserve(path.parent)
        self.reserve.lay()
        with self.db.transaction() as db:
            building = [row[0] for row in db.execute("SELECT batch_id FROM building")]
            for batch_id in building:
                db.execute("DELETE FROM requests WHERE batch_id = ?", (batch_id,))
            db.execute("DELETE FROM building")

    def close(self) -> None:
        self.db.close()

    # -- files ---------------------------------------------------------------------
    def add_file(self, record: FileRecord, read: Reader, most_per_owner: int | None) -> None:
        with self.db.transaction() as db:
            if most_per_owner is not None:
                held = _owner_bytes(db, record.owner)
                if held + record.bytes > most_per_owner:
                    raise KeyStorageFull(held)
            seq = _insert_file(db, record)
            copied = 0
            with db.blobopen("files", "content", seq) as blob:
                while copied < record.bytes:
                    chunk = read(min(CHUNK, record.bytes - copied))
                    if not chunk:
                        break
                    blob.write(chunk)
                    copied += len(chunk)
            if copied != record.bytes:
                raise ValueError(f"file {record.id}: read {copied} of {record.bytes} bytes")

    def owner_bytes(self, owner: str) -> int:
        with self.db.reading() as db:
            return _owner_bytes(db, owner)

    def get_file(self, file_id: str, owner: str) -> FileRecord | None:
        rows = self.db.read(
            f"SELECT {_FILE_COLUMNS} FROM files WHERE id = ? AND owner = ?", (file_id, owner)
        )
        return FileRecord(*rows[0]) if rows else None

    def open_file(self, file_id: str, owner: str) -> BlobReader | None:
        sql = "SELECT seq FROM files WHERE id = ? AND owner = ?"
        return BlobReader.open(self.path, "files", "content", sql, (file_id, owner))

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
        rows = self.db.read(
            f"SELECT {_FILE_COLUMNS} FROM files WHERE {' AND '.join(where)} "
            f"ORDER BY seq {order} LIMIT ?",
            (*args, limit),
        )
        return [FileRecord(*row) for row in rows]

    def delete_file(self, file_id: str, owner: str) -> bool:
        try:
            deleted = self._delete_file(file_id, owner)
        except StoreFull:
            if not self.reserve.give_up():
                raise
            deleted = self._delete_file(file_id, owner)  # in the reserve's room
        self.reserve.lay()
        return deleted

    def _delete_file(self, file_id: str, owner: str) -> bool:
        with self.db.transaction() as db:
            return bool(
                db.execute(
                    "DELETE FROM files WHERE id = ? AND owner = ?", (file_id, owner)
                ).rowcount
            )

    # -- batches -------------------------------------------------------------------
    def add_requests(
        self, batch_id: str, pending: Sequence[PendingRequest], bad: Sequence[RequestResult]
    ) -> None:
        with self.db.transaction() as db:
            db.execute("INSERT OR IGNORE INTO building (batch_id) VALUES (?)", (batch_id,))
            db.executemany(
                "INSERT INTO requests (batch_id, line, custom_id, body) VALUES (?, ?, ?, ?)",
                [(batch_id, p.line, p.custom_id, json.dumps(p.body)) for p in pending],
            )
            db.executemany(
                "INSERT INTO requests (batch_id, line, custom_id, done, error, output) "
                "VALUES (?, ?, ?, 1, 1, ?)",
                [(batch_id, r.line, r.custom_id, r.output) for r in bad],
            )

    def drop_requests(self, batch_id: str) -> None:
        with self.db.transaction() as db:
            db.execute("DELETE FROM requests WHERE batch_id = ?", (batch_id,))
            db.execute("DELETE FROM building WHERE batch_id = ?", (batch_id,))

    def add_batch(self, record: BatchRecord, most_unfinished: int) -> None:
        fixed = json.dumps({name: getattr(record, name) for name in _FIXED})
        with self.db.transaction() as db:
            (count,) = db.execute(
                f"SELECT COUNT(*) FROM batches WHERE owner = ? AND status IN ({_ACTIVE_MARKS})",
                (record.owner, *ACTIVE),
            ).fetchone()
            if count >= most_unfinished:
                raise BatchLimitReached(count)
            db.execute(
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
            db.execute("DELETE FROM building WHERE batch_id = ?", (record.id,))

    def get_batch(self, batch_id: str, owner: str | None) -> BatchRecord | None:
        sql, args = f"SELECT {_BATCH_COLUMNS} FROM batches WHERE id = ?", [batch_id]
        if owner is not None:
            sql += " AND owner = ?"
            args.append(owner)
        rows = self.db.read(sql, args)
        return _batch(rows[0]) if rows else None

    def list_batches(self, owner: str, after: str | None, limit: int) -> list[BatchRecord]:
        sql, args = f"SELECT {_BATCH_COLUMNS} FROM batches WHERE owner = ?", [owner]
        if after is not None:
            sql += " AND seq < (SELECT seq FROM batches WHERE id = ?)"
            args.append(after)
        rows = self.db.read(sql + " ORDER BY seq DESC LIMIT ?", (*args, limit))
        return [_batch(row) for row in rows]

    def unfinished(self) -> list[BatchRecord]:
        rows = self.db.read(
            f"SELECT {_BATCH_COLUMNS} FROM batches WHERE status IN ({_ACTIVE_MARKS}) ORDER BY seq",
            ACTIVE,
        )
        return [_batch(row) for row in rows]

    def count_unfinished(self, owner: str) -> int:
        rows = self.db.read(
            f"SELECT COUNT(*) FROM batches WHERE owner = ? AND status IN ({_ACTIVE_MARKS})",
            (owner, *ACTIVE),
        )
        return int(rows[0][0])

    def set_status(
        self, batch_id: str, status: BatchStatus, at: int, mark: str | None = None
    ) -> None:
        marks: list[Any] = [f"$.{status}_at", at]
        if mark is not None:
            marks += [f"$.{mark}_at", at]
        places = ", ".join("?, ?" for _ in range(len(marks) // 2))
        with self.db.transaction() as db:
            db.execute(
                f"UPDATE batches SET status = ?, times = json_set(times, {places}) WHERE id = ?",
                (status, *marks, batch_id),
            )

    # -- requests ------------------------------------------------------------------
    def pending(self, batch_id: str, skip: Sequence[int], limit: int) -> list[PendingRequest]:
        marks = ", ".join("?" * len(skip))
        exclude = f" AND line NOT IN ({marks})" if skip else ""
        rows = self.db.read(
            "SELECT line, custom_id, body FROM requests WHERE batch_id = ? AND done = 0"
            f"{exclude} ORDER BY line LIMIT ?",
            (batch_id, *skip, limit),
        )
        return [PendingRequest(line, custom_id, json.loads(body)) for line, custom_id, body in rows]

    def finish_request(self, batch_id: str, result: RequestResult) -> bool:
        with self.db.transaction() as db:
            return _finish(db, batch_id, result)

    def finish_all_pending(self, batch_id: str, results: Sequence[RequestResult]) -> None:
        with self.db.transaction() as db:
            for result in results:
                _finish(db, batch_id, result)

    def finalize(
        self,
        batch_id: str,
        status: BatchStatus,
        at: int,
        output: FileRecord,
        errors: FileRecord,
    ) -> tuple[str | None, str | None]:
        with self.db.transaction() as db:
            output_id = _output_file(db, batch_id, output, error=False)
            error_id = _output_file(db, batch_id, errors, error=True)
            db.execute(
                "UPDATE batches SET status = ?, times = json_set(times, ?, ?), "
                "output_file_id = ?, error_file_id = ? WHERE id = ?",
                (status, f"$.{status}_at", at, output_id, error_id, batch_id),
            )
        return output_id, error_id


def _owner_bytes(db: sqlite3.Connection, owner: str) -> int:
    (held,) = db.execute(
        "SELECT COALESCE(SUM(bytes), 0) FROM files WHERE owner = ?", (owner,)
    ).fetchone()
    return int(held)


def _insert_file(db: sqlite3.Connection, record: FileRecord) -> int:
    """The file's row with ``record.bytes`` zeros for content; its rowid (for ``blobopen``)."""
    cursor = db.execute(
        "INSERT INTO files (id, owner, filename, purpose, bytes, created_at, content) "
        "VALUES (?, ?, ?, ?, ?, ?, zeroblob(?))",
        (
            record.id,
            record.owner,
            record.filename,
            record.purpose,
            record.bytes,
            record.created_at,
            record.bytes,
        ),
    )
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def _finish(db: sqlite3.Connection, batch_id: str, result: RequestResult) -> bool:
    changed = db.execute(
        "UPDATE requests SET done = 1, error = ?, output = ? "
        "WHERE batch_id = ? AND line = ? AND done = 0",
        (int(result.error), result.output, batch_id, result.line),
    ).rowcount
    if changed:
        column = "failed" if result.error else "completed"
        db.execute(f"UPDATE batches SET {column} = {column} + 1 WHERE id = ?", (batch_id,))
    return changed > 0


def _output_file(
    db: sqlite3.Connection, batch_id: str, record: FileRecord, *, error: bool
) -> str | None:
    """The output (or error) file of the batch's answered rows, in line order,
    written a chunk at a time; None when there is no such row."""
    where = "FROM requests WHERE batch_id = ? AND done = 1 AND error = ?"
    args = (batch_id, int(error))
    count, size = db.execute(
        f"SELECT COUNT(*), COALESCE(SUM(length(CAST(output AS BLOB))), 0) {where}", args
    ).fetchone()
    if not count:
        return None
    record = dataclasses.replace(record, bytes=size + count)  # a newline after each line
    seq = _insert_file(db, record)
    with db.blobopen("files", "content", seq) as blob:
        piece = bytearray()
        for (line,) in db.execute(f"SELECT output {where} ORDER BY line", args):
            piece += line.encode()
            piece += b"\n"
            if len(piece) >= CHUNK:
                blob.write(bytes(piece))
                piece.clear()
        blob.write(bytes(piece))
    return record.id


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
