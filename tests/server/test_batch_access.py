"""The Batch API's limits (a 4xx naming the setting), keys owning their files and
batches, and a batch due soon promoted as overdue work (docs/design.md §4.5)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.server.batch_helpers import chat_line, jsonl, start, upload, wait_batch
from tests.server.helpers import Gateway, serve, sim_settings

KEYS = [
    {
        "key": "sk-alice",
        "name": "alice",
        "classes": ["chat", "gana", "nataraj", "extract"],
        "allow_deadline": True,
    },
    {"key": "sk-bob", "name": "bob", "classes": ["chat", "gana", "nataraj"]},
    {"key": "sk-admin", "name": "ops", "admin": True},
]


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Gateway]:
    batches = {
        "data_dir": str(tmp_path),
        "max_file_bytes": 2000,
        "max_requests": 3,
        "max_batches_per_key": 1,
        "in_flight": 1,
    }
    raw: dict[str, Any] = {"backend": {"token_interval": 0.02}, "batches": batches}
    with serve(sim_settings(raw)) as g:
        yield g


def test_each_limit_is_a_4xx_naming_its_setting(limited: Gateway) -> None:
    client = limited.openai()
    big = jsonl([chat_line(i) for i in range(20)])
    assert len(big) > 2000
    with pytest.raises(openai.APIStatusError) as info:
        client.files.create(file=("big.jsonl", io.BytesIO(big)), purpose="batch")
    assert info.value.status_code == 413
    assert "batches.max_file_bytes" in str(info.value)

    with pytest.raises(openai.BadRequestError) as bad:
        start(client, [chat_line(i) for i in range(4)])
    assert "more than the limit of 3 requests (batches.max_requests)" in str(bad.value)
    assert "reading stopped at line 4" in str(bad.value)

    with pytest.raises(openai.BadRequestError) as purpose:
        client.files.create(file=("x.jsonl", io.BytesIO(b"{}")), purpose="fine-tune")
    assert "purpose: must be one of batch" in str(purpose.value)

    running = start(client, [chat_line(i, max_tokens=50) for i in range(3)])
    with pytest.raises(openai.RateLimitError) as full:
        start(client, [chat_line(0)])
    assert "limit is 1 (batches.max_batches_per_key)" in str(full.value)
    client.batches.cancel(running.id)
    wait_batch(client, running.id)
    # Once it ended, the key may start another.
    assert wait_batch(client, start(client, [chat_line(0)]).id).status == "completed"


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[Gateway]:
    raw = {
        "keys": KEYS,
        "backend": {"token_interval": 0.02},
        # No pool floor: from the first job it would hold loans closed until
        # the pool has run a slice (docs/design.md §4.5).
        "scheduler": {"pool_floor": 0},
        "batches": {"data_dir": str(tmp_path), "in_flight": 4, "promote_fraction": 1.0},
    }
    with serve(sim_settings(raw), key="sk-admin") as g:
        yield g


def test_another_key_sees_no_file_or_batch_of_the_owner(keyed: Gateway) -> None:
    alice, bob = keyed.openai("sk-alice"), keyed.openai("sk-bob")
    file_id = upload(alice, [chat_line(0, max_tokens=1)])
    batch = alice.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = wait_batch(alice, batch.id)
    for call in (
        lambda: bob.files.retrieve(file_id),
        lambda: bob.files.content(file_id),
        lambda: bob.files.content(done.output_file_id or ""),
        lambda: bob.files.delete(file_id),
        lambda: bob.batches.retrieve(batch.id),
        lambda: bob.batches.cancel(batch.id),
        lambda: bob.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        ),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert bob.files.list().data == [] and bob.batches.list().data == []
    assert alice.files.retrieve(file_id).id == file_id  # Bob's delete did nothing
    # The batch ran under Alice's key: her part of the fair pool.
    assert (done.model_extra or {})["tierlm"]["producer"] == f"alice/batches/{batch.id}"


def test_a_batch_due_soon_is_overdue_work_on_a_loan(keyed: Gateway) -> None:
    """promote_fraction = 1: Alice's batch is due from its creation, so its
    requests are overdue work (T3, on a loan of her share, docs/design.md §4.5)
    and preempt a pool job inside its slice; Bob's key may not borrow
    (allow_deadline), so his batch waits for that job to end, as pool work does."""
    alice = keyed.openai("sk-alice")
    bob = keyed.openai("sk-bob")
    agent = keyed.openai("sk-admin", X_Tierlm_Class="gana", X_Tierlm_Producer="agent")

    def ask() -> Any:
        return agent.chat.completions.create(
            model="sim-a", messages=[{"role": "user", "content": "x"}], max_tokens=40
        )

    for client, preempts in ((bob, 0), (alice, 1)):
        keyed.wait(lambda s: s["running"] is None and s["queue_depth"] == 0, "an idle device")
        futures = [keyed.background(ask) for _ in range(2)]
        keyed.wait(lambda s: s["running"] is not None and s["queue_depth"] >= 1, "agent busy")
        before = keyed.state()["stats"]["preemptions"]
        batch = start(
            client,
            [chat_line(i, max_tokens=5) for i in range(2)],
            metadata={"tierlm_class": "gana"},
        )
        promoted = (batch.model_extra or {})["tierlm"]["overdue_from"] is not None
        assert promoted == bool(preempts)
        keyed.wait(
            lambda s: s["running"] is not None and "batches/" in s["running"]["producer"],
            "the batch running",
        )
        assert keyed.state()["stats"]["preemptions"] - before == preempts
        wait_batch(client, batch.id)
        for future in futures:
            future.result()


def test_a_key_without_allow_deadline_gets_no_promotion(tmp_path: Path) -> None:
    keys = [{"key": "sk-x", "name": "x", "classes": ["gana"], "allow_deadline": False}]
    raw = {"keys": keys, "batches": {"data_dir": str(tmp_path), "promote_fraction": 1.0}}
    with serve(sim_settings(raw), key="sk-x") as gw:
        client = gw.openai()
        batch = start(client, [chat_line(0, max_tokens=1)])
        assert (batch.model_extra or {})["tierlm"] == {
            "class": "gana",
            "producer": f"x/batches/{batch.id}",
            "overdue_from": None,
        }
        assert wait_batch(client, batch.id).status == "completed"
