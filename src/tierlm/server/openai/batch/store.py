"""The Batch API's durable state behind one small interface, ``BatchStore``.

The gateway holds no state of its own about a batch that the store does not
hold first: every change (a file uploaded, a batch created, one request's
result, a status) is written, and committed, before the API answers or the
next request is fed. A restart reads the unfinished batches back and goes on
where they stopped; a request's result is written once (``finish_request``
changes a pending request only), and the output files are made from the
requests' rows, so no result is lost or written twice.

Every object has an owner (the API key's name) and a read by another owner
finds nothing (docs/design.md §9). What the API reads or writes whole is
bounded: file contents move in chunks (``add_file`` reads its content,
``open_file`` gives a reader), a batch's requests are added a chunk at a
time (``add_requests``) before the batch itself, whose per-key limit is
checked in the transaction that records it (``add_batch``).

``SqliteStore`` (``sqlite_store.py``) is the one implementation; a Postgres
store for a team's shared deployment would implement the same Protocol. The
methods are synchronous: the service calls them off the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = [
    "ACTIVE",
    "CHUNK",
    "BatchLimitReached",
    "BatchRecord",
    "BatchStatus",
    "BatchStore",
    "FileReader",
    "FileRecord",
    "KeyStorageFull",
    "PendingRequest",
    "RequestResult",
]

BatchStatus = Literal[
    "validating",
    "failed",
    "in_progress",
    "finalizing",
    "completed",
    "expired",
    "cancelling",
    "cancelled",
]
CHUNK = 64 << 10
"""Bytes a file's content is read or written by at a time."""

ACTIVE: tuple[BatchStatus, ...] = ("validating", "in_progress", "finalizing", "cancelling")
"""Unfinished: a restarted gateway resumes them."""


@dataclass(frozen=True, slots=True)
class FileRecord:
    id: str
    owner: str
    """The API key's name ("" without keys): only it sees the file."""
    filename: str
    purpose: str
    bytes: int
    created_at: int


@dataclass(slots=True)
class BatchRecord:
    id: str
    owner: str
    input_file_id: str
    endpoint: str
    completion_window: str
    created_at: int
    expires_at: int
    status: BatchStatus
    class_name: str
    producer: str | None
    deadline: float | None
    """Unix time from which its requests are overdue (a loan, docs/design.md §4.5)."""
    metadata: dict[str, str] | None = None
    model: str | None = None
    total: int = 0
    completed: int = 0
    failed: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: list[dict[str, Any]] | None = None
    times: dict[str, int] = field(default_factory=dict)
    """``in_progress_at``, ``finalizing_at``, ``completed_at``, ``failed_at``,
    ``expired_at``, ``cancelling_at``, ``cancelled_at``: those that happened."""


@dataclass(frozen=True, slots=True)
class PendingRequest:
    """A request of a batch not yet answered."""

    line: int
    """Its line in the input file, from 1."""
    custom_id: str
    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class RequestResult:
    """A request's line of the output (``error`` False) or error file."""

    line: int
    custom_id: str | None
    output: str
    """The JSON line, as written to the file."""
    error: bool


class BatchLimitReached(Exception):
    """``add_batch``: the owner has ``count`` unfinished batches, its limit."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.count = count


class KeyStorageFull(Exception):
    """``add_file``: the owner's files hold ``held`` bytes; this one would pass its share."""

    def __init__(self, held: int) -> None:
        super().__init__(held)
        self.held = held


Reader = Callable[[int], bytes]
"""Reads up to n bytes of a file's content (``b""`` at its end)."""


class FileReader(Protocol):
    """A file's content, read a chunk at a time (``BatchStore.open_file``)."""

    def read(self, size: int) -> bytes:
        """The next ``size`` bytes at most; ``b""`` at the end."""

    def close(self) -> None: ...


class BatchStore(Protocol):
    """Files, batches and their requests, durable (module docstring)."""

    def close(self) -> None: ...

    # -- files ---------------------------------------------------------------------
    def add_file(self, record: FileRecord, read: Reader, most_per_owner: int | None) -> None:
        """Store ``record.bytes`` bytes from ``read``; ``KeyStorageFull`` if the
        owner's files would then hold more than ``most_per_owner`` bytes."""

    def owner_bytes(self, owner: str) -> int: ...

    def get_file(self, file_id: str, owner: str) -> FileRecord | None: ...

    def open_file(self, file_id: str, owner: str) -> FileReader | None:
        """The file's content to read from its start (None: no such file);
        read whole as it was when opened, whatever changes meanwhile."""

    def list_files(
        self, owner: str, purpose: str | None, after: str | None, limit: int, newest_first: bool
    ) -> list[FileRecord]: ...

    def delete_file(self, file_id: str, owner: str) -> bool:
        """Works on a full disk too (``data_dir.Reserve``)."""

    # -- batches -------------------------------------------------------------------
    def add_requests(
        self, batch_id: str, pending: Sequence[PendingRequest], bad: Sequence[RequestResult]
    ) -> None:
        """Some of a batch's requests to run and its bad lines (already answered),
        before the batch is recorded; a crash before ``add_batch`` leaves
        nothing (they are dropped at the next open)."""

    def drop_requests(self, batch_id: str) -> None:
        """Forget the requests of a batch that will not be recorded."""

    def add_batch(self, record: BatchRecord, most_unfinished: int) -> None:
        """Record the batch, whose requests were added; ``BatchLimitReached`` if
        its owner already has ``most_unfinished`` unfinished batches (checked
        in the same transaction: concurrent creates cannot pass it together)."""

    def get_batch(self, batch_id: str, owner: str | None) -> BatchRecord | None:
        """``owner`` None: whoever owns it (the service's own reads)."""

    def list_batches(self, owner: str, after: str | None, limit: int) -> list[BatchRecord]:
        """Newest first; ``after``: those created before that batch."""

    def unfinished(self) -> list[BatchRecord]:
        """Every batch in an ``ACTIVE`` status, oldest first."""

    def count_unfinished(self, owner: str) -> int: ...

    def set_status(
        self, batch_id: str, status: BatchStatus, at: int, mark: str | None = None
    ) -> None:
        """The status, and its ``<status>_at`` time (and ``<mark>_at``, if given)."""

    # -- requests ------------------------------------------------------------------
    def pending(self, batch_id: str, skip: Sequence[int], limit: int) -> list[PendingRequest]:
        """Up to ``limit`` unanswered requests in line order, but for ``skip``."""

    def finish_request(self, batch_id: str, result: RequestResult) -> bool:
        """Answer a pending request and count it; False (and no change) if it
        was answered already."""

    def finish_all_pending(self, batch_id: str, results: Sequence[RequestResult]) -> None:
        """Answer these (the unrun requests of an expired or cancelled batch),
        in one transaction."""

    def finalize(
        self,
        batch_id: str,
        status: BatchStatus,
        at: int,
        output: FileRecord,
        errors: FileRecord,
    ) -> tuple[str | None, str | None]:
        """The output and error files, made from the requests' rows (``output``
        and ``errors`` give their ids and names; their sizes are counted), and
        the final status, at once; the ids of the files made (None: no line)."""
