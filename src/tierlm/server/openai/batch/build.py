"""A batch's requests, written to the store from its input file as they are read.

The file is read a chunk at a time from the store (``open_file``), cut into
lines no longer than the body limit (``lines.split_lines``), each line checked
on its own (``lines.LineChecker``), and the requests written a few hundred
rows a transaction (``add_requests``). Reading stops at line
``max_requests + 1``: a file of a million ``{}`` lines (3 MB) grew the gateway
by ~390 MiB and answered after 40 s, every line an error line before the
count was checked; now it is refused after ``max_requests + 1`` lines, with
memory for one chunk and one flush at most (docs/design.md §9).

Runs in a worker thread (the store's calls are synchronous); the batch itself
is recorded afterwards by ``add_batch``, or its requests dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from tierlm.server.openai.batch.lines import LineChecker, LineRules, split_lines
from tierlm.server.openai.batch.store import (
    CHUNK,
    BatchStore,
    FileRecord,
    PendingRequest,
    RequestResult,
)

__all__ = ["Built", "TooManyRequests", "build_requests"]

FLUSH_ROWS = 500
"""Rows a transaction writes: one fsync for a few hundred lines."""
FLUSH_BYTES = 4 << 20
"""...or fewer, once their bodies add up to this much."""


class TooManyRequests(Exception):
    """The file has more than ``max_requests`` requests (reading stopped at ``line``)."""

    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


@dataclass(slots=True)
class Built:
    """What the batch's file held, as written."""

    total: int = 0
    failed: int = 0
    first_error: str | None = None
    """The first bad line's message (the 400's when no line is valid)."""
    model: str | None = None


def build_requests(
    store: BatchStore, batch_id: str, file: FileRecord, rules: LineRules, max_requests: int
) -> Built:
    """Write the requests of ``file`` as ``batch_id``'s (module docstring);
    ``TooManyRequests`` past ``max_requests``, with nothing left written."""
    checker = LineChecker(rules)
    built = Built()
    pending: list[PendingRequest] = []
    bad: list[RequestResult] = []
    size = 0
    try:
        lines = split_lines(_chunks(store, file), rules.limits.max_body_bytes)
        for number, raw in enumerate(lines, start=1):
            checked = checker.check(number, raw)
            if checked is None:
                continue
            built.total += 1
            if built.total > max_requests:
                raise TooManyRequests(number)
            if isinstance(checked, RequestResult):
                built.failed += 1
                built.first_error = built.first_error or _message(checked)
                bad.append(checked)
                size += len(checked.output)
            else:
                pending.append(checked)
                size += len(raw or b"")
            if len(pending) + len(bad) >= FLUSH_ROWS or size >= FLUSH_BYTES:
                store.add_requests(batch_id, pending, bad)
                pending, bad, size = [], [], 0
        if pending or bad:
            store.add_requests(batch_id, pending, bad)
    except BaseException:
        store.drop_requests(batch_id)
        raise
    built.model = checker.model
    return built


def _chunks(store: BatchStore, file: FileRecord) -> Iterator[bytes]:
    reader = store.open_file(file.id, file.owner)
    if reader is None:  # deleted meanwhile: no line
        return
    try:
        while chunk := reader.read(CHUNK):
            yield chunk
    finally:
        reader.close()


def _message(result: RequestResult) -> str:
    error = json.loads(result.output).get("error") or {}
    return str(error.get("message", ""))
