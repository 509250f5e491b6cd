"""The Batch API through the official openai client, unchanged: files, batches,
bad lines, limits, cancel, expiry, and what a batch is scheduled as."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.helpers import wait_until_blocking
from tests.server.batch_helpers import chat_line, lines_of, start, upload, wait_batch
from tests.server.helpers import Gateway, serve, sim_settings


def batch_settings(data_dir: Path, **batches: Any) -> dict[str, Any]:
    return {"batches": {"data_dir": str(data_dir), **batches}}


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    data = tmp_path_factory.mktemp("batches")
    with serve(sim_settings(batch_settings(data))) as g:
        yield g


def test_files_and_batches_with_the_openai_client(gw: Gateway) -> None:
    client = gw.openai()
    items = [chat_line(i) for i in range(12)]
    file_id = upload(client, items)
    assert client.files.retrieve(file_id).purpose == "batch"
    assert file_id in [f.id for f in client.files.list(purpose="batch")]
    batch = client.batches.create(
        input_file_id=file_id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"job": "backfill"},
    )
    assert batch.status in ("validating", "in_progress")
    assert batch.request_counts is not None and batch.request_counts.total == 12
    done = wait_batch(client, batch.id)
    assert done.status == "completed"
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (12, 0)
    assert done.metadata == {"job": "backfill"}
    assert done.model == "sim-a"
    assert done.error_file_id is None
    output = lines_of(client, done.output_file_id)
    assert sorted(line["custom_id"] for line in output) == sorted(i["custom_id"] for i in items)
    for line in output:
        assert line["error"] is None and line["id"].startswith("batch_req_")
        response = line["response"]
        assert response["status_code"] == 200
        assert response["body"]["object"] == "chat.completion"
        assert response["body"]["choices"][0]["message"]["content"] == "w0 w1 w2 w3 "
    assert batch.id in [b.id for b in client.batches.list()]
    output_file = client.files.retrieve(done.output_file_id or "")
    assert output_file.purpose == "batch_output"
    assert client.files.delete(file_id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(file_id)
    # The batch ran from its own copy of the requests: deleting the input changes nothing.
    assert client.batches.retrieve(batch.id).status == "completed"


def test_bad_lines_go_to_the_error_file_and_the_rest_runs(gw: Gateway) -> None:
    client = gw.openai()
    good = [chat_line(i) for i in range(3)]
    wrong_url = {**chat_line(4), "url": "/v1/completions"}
    unknown_model = chat_line(5, model="gpt-9")
    bad_field = chat_line(6)
    bad_field["body"]["temperature"] = "hot"
    streamed = chat_line(7)
    streamed["body"]["stream"] = True
    items: list[dict[str, Any] | str] = [
        *good,
        "{not json",
        {"method": "POST", "url": "/v1/chat/completions", "body": {}},
        chat_line(0),  # custom_id used by line 1
        wrong_url,
        unknown_model,
        bad_field,
        streamed,
    ]
    done = wait_batch(client, start(client, items).id)
    assert done.status == "completed"
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed) == (10, 3)
    assert done.request_counts.failed == 7
    assert len(lines_of(client, done.output_file_id)) == 3
    errors = {
        e["error"]["message"].partition(":")[0]: e for e in lines_of(client, done.error_file_id)
    }
    assert set(errors) == {f"line {n}" for n in range(4, 11)}
    for entry in errors.values():
        assert entry["response"] is None
    assert "custom_id" in errors["line 5"]["error"]["message"]
    assert "used by an earlier line" in errors["line 6"]["error"]["message"]
    assert "url: must be the batch's endpoint" in errors["line 7"]["error"]["message"]
    assert "gpt-9" in errors["line 8"]["error"]["message"]
    assert "body.temperature" in errors["line 9"]["error"]["message"]
    assert "body.stream" in errors["line 10"]["error"]["message"]
    assert errors["line 6"]["custom_id"] == "note-0"


def test_a_file_without_a_valid_line_is_refused(gw: Gateway) -> None:
    client = gw.openai()
    with pytest.raises(openai.BadRequestError) as info:
        start(client, ["{}", "nonsense"])
    assert info.value.status_code == 400
    assert "input_file_id: no valid request line (line 1: custom_id" in str(info.value)


def test_bad_batch_fields_are_named(gw: Gateway) -> None:
    client = gw.openai()
    file_id = upload(client, [chat_line(0)])
    cases: list[tuple[dict[str, Any], str]] = [
        ({"completion_window": "forever"}, "completion_window: must be a duration"),
        ({"endpoint": "/v1/responses"}, "endpoint"),
        ({"input_file_id": "file-nope"}, "input_file_id: no file 'file-nope'"),
        ({"metadata": {"tierlm_class": "nope"}}, "metadata.tierlm_class: unknown task class"),
        # docs/design.md §4.11: nobody waits on a batch line.
        ({"metadata": {"tierlm_class": "chat"}}, "metadata.tierlm_class: class 'chat' is a person"),
    ]
    for change, message in cases:
        fields: dict[str, Any] = {
            "input_file_id": file_id,
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
            **change,
        }
        with pytest.raises(openai.APIStatusError) as info:
            client.batches.create(**fields)
        assert info.value.status_code in (400, 404)
        assert message in str(info.value), str(info.value)


def test_list_pages_with_after_and_limit(gw: Gateway) -> None:
    client = gw.openai()
    ids = [start(client, [chat_line(0, max_tokens=1)]).id for _ in range(3)]
    first = client.batches.list(limit=2)
    assert [b.id for b in first.data] == [ids[2], ids[1]]
    assert first.has_more
    rest = client.batches.list(limit=2, after=ids[1])
    assert rest.data[0].id == ids[0]
    # The client's auto-pagination walks every page.
    assert ids[::-1] == [b.id for b in client.batches.list(limit=1) if b.id in ids]


def test_metrics_count_batches_and_their_requests(gw: Gateway) -> None:
    client = gw.openai()
    before = gw.metric("tierlm_batch_requests_total", outcome="completed")
    ended = gw.metric("tierlm_batches_total", status="completed")
    wait_batch(client, start(client, [chat_line(i, max_tokens=1) for i in range(5)]).id)
    assert gw.metric("tierlm_batch_requests_total", outcome="completed") == before + 5
    # The batch's status is stored as its run ends; its task's end, which the
    # counters follow, comes a moment later: wait for it (a hang guard only).
    wait_until_blocking(
        lambda: gw.metric("tierlm_batches_running") == 0, "no batch running", timeout=60
    )
    assert gw.metric("tierlm_batches_total", status="completed") == ended + 1
    assert gw.metric("tierlm_batches_running") == 0


# -- slow device: cancel, expiry, scheduling ---------------------------------------------


@pytest.fixture
def slow(tmp_path: Path) -> Iterator[Gateway]:
    """A device of 20 ms a token; two requests of a batch in flight."""
    raw = {
        "backend": {"token_interval": 0.02},
        **batch_settings(tmp_path, in_flight=2, promote_fraction=0),
    }
    with serve(sim_settings(raw)) as g:
        yield g


def test_cancel_keeps_what_finished_and_ends_the_rest(slow: Gateway) -> None:
    client = slow.openai()
    items = [chat_line(i, max_tokens=10) for i in range(20)]
    batch = start(client, items)
    wait_batch(
        client, batch.id, lambda b: b.request_counts is not None and b.request_counts.completed >= 2
    )
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    done = wait_batch(client, batch.id)
    assert done.status == "cancelled" and done.cancelled_at is not None
    output, errors = lines_of(client, done.output_file_id), lines_of(client, done.error_file_id)
    assert len(output) >= 2 and errors
    assert all(e["error"]["code"] == "batch_cancelled" for e in errors)
    # Every request exactly once, in one file or the other.
    ids = sorted(line["custom_id"] for line in output + errors)
    assert ids == sorted(i["custom_id"] for i in items)
    assert done.request_counts is not None
    assert done.request_counts.completed + done.request_counts.failed == 20
    # The device is free again: no job of the batch is left.
    state = slow.wait(lambda s: s["running"] is None and s["queue_depth"] == 0, "an idle device")
    assert state["batches"] == {"running": 0, "requests_in_flight": 0}
    assert client.batches.cancel(batch.id).status == "cancelled"  # again: as it is
    finished = wait_batch(client, start(client, [chat_line(0, max_tokens=1)]).id)
    with pytest.raises(openai.ConflictError) as info:
        client.batches.cancel(finished.id)
    assert "is completed; only a batch validating or in progress" in str(info.value)


def test_a_batch_past_its_window_expires(slow: Gateway) -> None:
    client = slow.openai()
    items = [chat_line(i, max_tokens=20) for i in range(10)]
    done = wait_batch(client, start(client, items, window="1s").id)
    assert done.status == "expired" and done.expired_at is not None
    errors = lines_of(client, done.error_file_id)
    assert errors and all(e["error"]["code"] == "batch_expired" for e in errors)
    assert len(errors) + len(lines_of(client, done.output_file_id)) == 10


def test_a_batch_runs_as_background_of_its_class(slow: Gateway) -> None:
    client = slow.openai()
    batch = start(
        client,
        [chat_line(i, max_tokens=6) for i in range(40)],
        metadata={"tierlm_class": "extract", "tierlm_producer": "backfill"},
    )
    running = slow.wait_running("extract")
    assert running["producer"] == "backfill"
    # 40 lines, but never more than in_flight (2) of them in the scheduler at once.
    held = []
    for _ in range(50):
        state = slow.state()
        jobs = [*state["running_jobs"], *(j for t in state["queued"].values() for j in t)]
        held.append(sum(1 for job in jobs if job["producer"] == "backfill"))
    assert max(held) == 2, held
    # What a dashboard reads: the batch's progress, and its row in the state API.
    shown = slow.http.get("/v1/scheduler/batches").json()["running"]
    assert [(b["id"], b["class"], b["request_counts"]["total"]) for b in shown] == [
        (batch.id, "extract", 40)
    ]
    assert 0 <= shown[0]["progress"] < 1 and 1 <= shown[0]["in_flight"] <= 2
    assert slow.state()["batches"][batch.id].startswith("in_progress: ")
    assert (batch.model_extra or {})["tierlm"] == {
        "class": "extract",
        "producer": "backfill",
        "overdue_from": None,  # promote_fraction = 0
    }
    client.batches.cancel(batch.id)
    wait_batch(client, batch.id)


def test_an_embeddings_batch_runs_on_the_embedding_lane(gw: Gateway) -> None:
    client = gw.openai()
    served = gw.state()["embeddings"]["model"]
    items: list[dict[str, Any] | str] = [
        {
            "custom_id": f"text-{i}",
            "method": "POST",
            "url": "/v1/embeddings",
            "body": {"model": served, "input": [f"note {i}", "another"]},
        }
        for i in range(3)
    ]
    file_id = upload(client, items)
    batch = client.batches.create(
        input_file_id=file_id, endpoint="/v1/embeddings", completion_window="1h"
    )
    done = wait_batch(client, batch.id)
    assert done.status == "completed" and done.completion_window == "1h"
    assert done.expires_at == done.created_at + 3600
    output = lines_of(client, done.output_file_id)
    direct = client.embeddings.create(
        model=served, input=["note 0", "another"], encoding_format="float"
    )
    first = next(line for line in output if line["custom_id"] == "text-0")
    body = first["response"]["body"]
    assert [d["embedding"] for d in body["data"]] == [d.embedding for d in direct.data]
