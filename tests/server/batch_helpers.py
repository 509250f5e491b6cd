"""Helpers of the Batch API tests: input files, waiting for a batch, its output."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from typing import Any

import openai
from openai.types import Batch

from tests.helpers import wait_until_blocking
from tests.server.helpers import WAIT

FINAL = ("completed", "failed", "expired", "cancelled")


def chat_line(i: int, max_tokens: int = 4, model: str = "sim-a") -> dict[str, Any]:
    return {
        "custom_id": f"note-{i}",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {
            "model": model,
            "messages": [{"role": "user", "content": f"extract note {i}"}],
            "max_tokens": max_tokens,
        },
    }


def jsonl(items: Sequence[dict[str, Any] | str]) -> bytes:
    return "\n".join(i if isinstance(i, str) else json.dumps(i) for i in items).encode() + b"\n"


def upload(client: openai.OpenAI, items: Sequence[dict[str, Any] | str]) -> str:
    """The id of a new batch input file holding ``items`` (lines)."""
    return client.files.create(file=("notes.jsonl", io.BytesIO(jsonl(items))), purpose="batch").id


def start(
    client: openai.OpenAI,
    items: Sequence[dict[str, Any] | str],
    window: str = "24h",
    metadata: dict[str, str] | None = None,
) -> Batch:
    file_id = upload(client, items)
    return client.batches.create(
        input_file_id=file_id,
        endpoint="/v1/chat/completions",
        completion_window=window,  # type: ignore[arg-type]
        metadata=metadata,
    )


def wait_batch(
    client: openai.OpenAI,
    batch_id: str,
    until: Callable[[Batch], bool] = lambda b: b.status in FINAL,
    timeout: float = WAIT,
) -> Batch:
    """Poll ``batches.retrieve`` until ``until`` holds (bounded)."""
    return wait_until_blocking(
        lambda: client.batches.retrieve(batch_id),
        f"batch {batch_id}",
        until=until,
        timeout=timeout,
        every=0.02,
    )


def lines_of(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    text = client.files.content(file_id).text
    return [json.loads(line) for line in text.splitlines() if line.strip()]
