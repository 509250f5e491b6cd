"""Issue 54, items 3, 4, 5 and 10: a batch's limits hold as a request's do
(docs/design.md §9). Its lines are the key's jobs, ``n`` choices are ``n``
places, a line is never larger than a request body, an endpoint the gateway
does not serve is refused at create, and ``max_batches_per_key`` holds
against concurrent creates."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest

from tests.server.batch_helpers import chat_line, jsonl, lines_of, upload, wait_batch
from tests.server.helpers import Gateway, serve, sim_settings

KEY_LIMIT = 3
KEYS = [
    {
        "key": "sk-ann",
        "name": "ann",
        "classes": ["chat", "gana", "nataraj"],
        "queue_limit": KEY_LIMIT,
    },
    {"key": "sk-admin", "name": "ops", "admin": True},
]
BODY_LIMIT = 4096


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    raw = {
        "keys": KEYS,
        "backend": {"token_interval": 0.01},
        "limits": {"max_body_bytes": BODY_LIMIT},
        "embeddings": {"backend": "none"},
        "batches": {"max_batches_per_key": 2, "in_flight": 4},
    }
    with serve(sim_settings(raw), key="sk-admin") as gateway:
        yield gateway


def create(client: openai.OpenAI, file_id: str, endpoint: str = "/v1/chat/completions") -> Any:
    return client.batches.create(
        input_file_id=file_id,
        endpoint=endpoint,  # type: ignore[arg-type]
        completion_window="24h",
    )


def jobs_of(state: dict[str, Any], prefix: str) -> int:
    """Jobs queued or running whose producer starts with ``prefix``."""
    jobs = [job for tier in state["queued"].values() for job in tier]
    jobs += state.get("running_jobs") or []
    return sum(1 for job in jobs if str(job.get("producer", "")).startswith(prefix))


def test_concurrent_creates_cannot_pass_max_batches_per_key(gw: Gateway) -> None:
    """Item 3: 12 creates at once with a limit of 2: two batches, ten 429s
    (the count is checked in the transaction that records the batch)."""
    ann = gw.openai("sk-ann")
    file_id = upload(ann, [chat_line(i, max_tokens=30) for i in range(6)])

    def one(_: int) -> str:
        try:
            return str(create(ann, file_id).id)
        except openai.RateLimitError as exc:
            return "429" if "batches.max_batches_per_key" in str(exc) else str(exc)

    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(one, range(12)))
    made = [a for a in answers if a.startswith("batch_")]
    assert answers.count("429") == 10, answers
    assert len(made) == 2, answers
    # Meanwhile the key's jobs, batches included, stay within its queue limit.
    for _ in range(20):
        assert jobs_of(gw.state(), "ann/") <= KEY_LIMIT + 1  # queued, plus the one running
    for batch_id in made:
        ann.batches.cancel(batch_id)
        wait_batch(ann, batch_id)


def test_a_line_asking_more_choices_than_the_key_may_queue_fails_alone(gw: Gateway) -> None:
    """Item 3: ``n`` over the key's queue limit could never be queued (it
    waited for ever); it is a bad line naming the limit, and the rest runs."""
    ann = gw.openai("sk-ann")
    wide = chat_line(1)
    wide["body"]["n"] = KEY_LIMIT + 1
    batch = create(ann, upload(ann, [chat_line(0), wide, chat_line(2)]))
    done = wait_batch(ann, batch.id)
    assert done.status == "completed"
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (2, 1)
    [error] = lines_of(ann, done.error_file_id)
    assert error["custom_id"] == "note-1"
    assert "queue_limit of key 'ann'" in error["error"]["message"]


def test_choices_count_as_places_of_the_batch() -> None:
    """Item 4: lines of ``n: 4`` with ``in_flight: 4``: the batch holds at
    most 4 jobs at once, not 4 lines of 4 (16)."""
    raw = {"backend": {"token_interval": 0.01}, "batches": {"in_flight": 4}}
    with serve(sim_settings(raw)) as gw:
        client = gw.openai()
        items = []
        for i in range(6):
            item = chat_line(i, max_tokens=20)
            item["body"]["n"] = 4
            items.append(item)
        batch = create(client, upload(client, items))
        most = 0
        while True:
            most = max(most, jobs_of(gw.state(), "batches/"))
            if client.batches.retrieve(batch.id).status == "completed":
                break
        assert 0 < most <= 4
        output = lines_of(client, client.batches.retrieve(batch.id).output_file_id)
        assert [len(line["response"]["body"]["choices"]) for line in output] == [4] * 6


def test_a_line_larger_than_a_request_body_fails_alone(gw: Gateway) -> None:
    """Item 5: a line over ``limits.max_body_bytes`` (the size
    ``/v1/chat/completions`` refuses with 413) is a bad line, not run."""
    ann = gw.openai("sk-ann")
    huge = chat_line(1)
    huge["body"]["messages"][0]["content"] = "x" * (BODY_LIMIT * 5)
    batch = create(ann, upload(ann, [chat_line(0), huge]))
    done = wait_batch(ann, batch.id)
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (1, 1)
    [error] = lines_of(ann, done.error_file_id)
    assert error["error"]["code"] == "body_too_large"
    assert "line 2" in error["error"]["message"]
    assert "limits.max_body_bytes" in error["error"]["message"]


def test_an_embeddings_batch_without_embeddings_is_refused_at_create(gw: Gateway) -> None:
    """Item 10: embeddings are off here; the batch is a 400 at create, not a
    batch whose every line fails."""
    ann = gw.openai("sk-ann")
    line = {
        "custom_id": "e-1",
        "method": "POST",
        "url": "/v1/embeddings",
        "body": {"model": "any", "input": "hello"},
    }
    file_id = ann.files.create(file=("e.jsonl", io.BytesIO(jsonl([line]))), purpose="batch").id
    with pytest.raises(openai.BadRequestError) as info:
        create(ann, file_id, "/v1/embeddings")
    assert info.value.code == "embeddings_disabled"
    assert info.value.param == "endpoint"  # type: ignore[attr-defined]
    assert not [b for b in ann.batches.list() if b.endpoint == "/v1/embeddings"]


def test_a_file_past_max_requests_stops_at_the_next_line() -> None:
    """Item 6 (its logic): reading stops at line ``max_requests + 1``; the
    lines after it are never checked (each became an error line before)."""
    with serve(sim_settings({"batches": {"max_requests": 5}})) as gw:
        client = gw.openai()
        content = jsonl([json.dumps({})] * 1000)
        file_id = client.files.create(file=("x.jsonl", io.BytesIO(content)), purpose="batch").id
        with pytest.raises(openai.BadRequestError) as info:
            create(client, file_id)
        assert "reading stopped at line 6" in str(info.value)


def test_each_key_has_its_own_share_of_the_store() -> None:
    """A key's files are capped (``batches.max_bytes_per_key``): past it the
    key's upload is a 413 naming the setting, and another key still uploads."""
    keys = [*KEYS, {"key": "sk-bob", "name": "bob", "classes": ["gana", "nataraj"]}]
    raw = {"keys": keys, "batches": {"max_bytes_per_key": 100_000}}
    with serve(sim_settings(raw), key="sk-admin") as gw:
        ann, bob = gw.openai("sk-ann"), gw.openai("sk-bob")
        content = b"{}\n" * 20_000  # 60 kB
        kept = ann.files.create(file=("a.jsonl", io.BytesIO(content)), purpose="batch")
        with pytest.raises(openai.APIStatusError) as info:
            ann.files.create(file=("b.jsonl", io.BytesIO(content)), purpose="batch")
        assert info.value.status_code == 413
        assert info.value.code == "key_storage_full"
        assert "batches.max_bytes_per_key" in str(info.value)
        bob.files.create(file=("c.jsonl", io.BytesIO(content)), purpose="batch")
        ann.files.delete(kept.id)  # room again
        ann.files.create(file=("b.jsonl", io.BytesIO(content)), purpose="batch")
