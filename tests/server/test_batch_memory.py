"""Issue 54, item 6: what a client sends or fetches is not held whole
(docs/design.md §9). A file of many bad lines is read until line
``max_requests + 1`` a chunk at a time, and a download is streamed.

Measured here as the peak of Python's allocations (``tracemalloc``) in the
test process, where the gateway runs in a thread: a bound on bytes, not on
time. The resident-memory figures of a real ``tierlm serve`` under the
issue's floods are ``bench/store_memory.py``'s."""

from __future__ import annotations

import contextlib
import io
import tracemalloc
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.server.helpers import WAIT, Gateway, serve, sim_settings

MiB = 1 << 20


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with serve(sim_settings({"batches": {"max_requests": 10}})) as gateway:
        yield gateway


@contextlib.contextmanager
def traced(peaks: list[float]) -> Iterator[None]:
    """Trace Python's allocations in the block; its peak (MiB) in ``peaks``.
    Started here, after the upload: what the client still holds of it is
    not traced."""
    tracemalloc.start()
    try:
        yield
        peaks.append(tracemalloc.get_traced_memory()[1] / MiB)
    finally:
        tracemalloc.stop()


def test_a_flood_of_lines_is_refused_in_bounded_memory(gw: Gateway) -> None:
    """200 000 ``{}`` lines (600 kB) against ``max_requests`` 10: a 400 after
    line 11, in a few MiB (every line became an error line first: ~80 MiB)."""
    client = gw.openai()
    content = b"{}\n" * 200_000
    file_id = client.files.create(file=("x.jsonl", io.BytesIO(content)), purpose="batch").id
    peaks: list[float] = []
    with traced(peaks), pytest.raises(openai.BadRequestError) as info:
        client.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    assert "reading stopped at line 11" in str(info.value)
    assert peaks[0] < 4, f"peak {peaks[0]:.1f} MiB"


def test_a_download_is_streamed_in_chunks(gw: Gateway) -> None:
    """A 16 MiB file downloaded: the gateway holds a chunk, not the file."""
    line = b'{"custom_id": "x", "pad": "' + b"p" * 1000 + b'"}\n'
    content = line * (16 * MiB // len(line))
    client = gw.openai()
    file_id = client.files.create(file=("big.jsonl", io.BytesIO(content)), purpose="batch").id
    size = len(content)
    del content
    peaks: list[float] = []
    received = 0
    url = f"{gw.url}/v1/files/{file_id}/content"
    with traced(peaks), httpx.stream("GET", url, timeout=WAIT) as response:
        assert response.status_code == 200
        assert int(response.headers["content-length"]) == size
        for chunk in response.iter_bytes():
            received += len(chunk)
    assert received == size
    assert peaks[0] < 4, f"peak {peaks[0]:.1f} MiB"
