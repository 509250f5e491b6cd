"""``[batches]``: the Batch API's store and limits (docs/gateway.md "Batches").

Files, batches and each request's state live in one SQLite file,
``<data_dir>/batches.sqlite3``: one file a user can back up, written before
the API answers, so a restarted gateway resumes every unfinished batch. The
directory is one gateway's (a lock, docs/design.md §9).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import Field

from tierlm.server.settings.schema import Flag, PathField, Schema

__all__ = ["DB_NAME", "BatchSettings", "default_data_dir"]

DB_NAME = "batches.sqlite3"


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/tierlm``, else ``~/.local/share/tierlm`` (the XDG default)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local/share")
    return Path(base) / "tierlm"


class BatchSettings(Schema):
    """The Batch API (``/v1/files``, ``/v1/batches``)."""

    data_dir: Annotated[PathField | None, Flag("--data-dir", "DIR")] = None
    """Where the gateway keeps its durable state: the Batch API's SQLite file
    ``batches.sqlite3`` (unset: ``$XDG_DATA_HOME/tierlm``, else
    ``~/.local/share/tierlm``). One gateway per directory: a second one on it
    does not start (``gateway.lock`` names the holder's pid)."""
    max_file_bytes: Annotated[int, Field(ge=1)] = 100 << 20
    """Largest file ``POST /v1/files`` takes, in bytes (OpenAI's own limit is 200 MB)."""
    max_bytes_per_key: Annotated[int, Field(ge=1)] = 1 << 30
    """Bytes of files (uploads and batch outputs) one API key (the gateway,
    without keys) may hold in the store; an upload past it is a 413 until the
    key deletes some. Each key its own share: one key cannot fill the disk
    for the others."""
    max_requests: Annotated[int, Field(ge=1)] = 50_000
    """Requests (lines) per batch at most (OpenAI's limit)."""
    max_batches_per_key: Annotated[int, Field(ge=1)] = 100
    """Unfinished batches per API key (per gateway without keys) at most."""
    in_flight: Annotated[int | None, Field(ge=1, le=1000)] = None
    """A batch's jobs in the scheduler at once (a line with ``n`` choices is
    ``n`` jobs); the rest wait in the store and are fed as those finish, so
    50 000 lines never flood the queue. Unset: twice the device's slots, so
    that a batch alone fills every slot and each has its next job queued
    (4 left half of 8 slots idle: 200 requests ran at 0.91x the same sent
    live)."""
    max_completion_window: Annotated[float, Field(gt=0)] = 7 * 86400.0
    """Longest ``completion_window`` accepted, in seconds (default 7 days)."""
    promote_fraction: Annotated[float, Field(ge=0, le=1)] = 0.25
    """A batch's requests get a deadline (a loan, docs/design.md §4.5) this
    fraction of its window before it expires: with ``24h``, overdue work for the
    last 6 h. Only for keys allowed deadlines (``allow_deadline``); 0: never."""

    def directory(self) -> Path:
        """The data directory."""
        return self.data_dir or default_data_dir()

    def database(self) -> Path:
        """The SQLite file."""
        return self.directory() / DB_NAME
