"""Scheduling through the gateway (sim backend): preemption, queue positions,
disconnects, backpressure, the scheduler API, the scheduling headers.

A long chat is the tests' "blocker": a chat is never preempted (T0 only loses
to itself), so while it runs everything else waits in the queue, where the
tests look at it. Leaving a ``with sse(...)`` block disconnects that client,
which cancels its job: the blocker ends with its block.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import re
from typing import Any

import httpx
import openai
import pytest

from tests.helpers import wait_until
from tests.payloads import MESSAGES, chat_body
from tests.server.helpers import (
    WAIT,
    Gateway,
    in_queue,
    serve,
    sim_settings,
    sse,
    virtual_gateway,
)

QUEUED = re.compile(r": tierlm queued job=(\d+) tier=T(\d) position=(\d+)")
GANA = {"X-Tierlm-Class": "gana"}
LONG = 4000  # tokens: 20 s of the tests' device, far longer than any test lets it run


def queued(line: str) -> tuple[int, int, int]:
    match = QUEUED.fullmatch(line)
    assert match, line
    job, tier, position = (int(g) for g in match.groups())
    return job, tier, position


def recent(gw: Gateway, job_id: int) -> dict[str, object] | None:
    for job in gw.state()["gateway"]["recent"]:
        if job["id"] == job_id:
            return dict(job)
    return None


def test_chat_preempts_a_running_background_request(gateway: Gateway) -> None:
    tokens = 400
    gana = gateway.openai(X_Tierlm_Class="gana", X_Tierlm_Producer="gana:1")

    def background() -> str:
        stream = gana.chat.completions.create(
            model="sim-a", messages=MESSAGES, max_tokens=tokens, stream=True
        )
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    future = gateway.background(background)
    gateway.wait_running("gana")
    chat = gateway.openai().chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=5)
    assert chat.choices[0].message.content == "w0 w1 w2 w3 w4 "
    # The chat did not wait for the background request to end: it was
    # preempted (asserted in order, never in seconds of a shared machine).
    assert not future.done()

    # The background request resumed: every token once, in order, one stream.
    assert future.result(WAIT) == "".join(f"w{i} " for i in range(tokens))
    state = gateway.state()
    assert state["stats"]["preemptions"] == 1
    assert state["stats"]["requeues"] == 1
    assert [j["outcome"] for j in state["gateway"]["recent"][:2]] == ["completed", "completed"]
    assert gateway.metric("tierlm_preemptions_total", class_="gana") == 1
    assert gateway.metric("tierlm_jobs_total", class_="gana", outcome="requeued") == 1
    assert gateway.metric("tierlm_jobs_total", class_="chat", outcome="completed") == 1


def test_a_waiting_stream_is_told_its_position_and_tier() -> None:
    # No pool floor: with it, a chat's busy time leaves the backlogged pool
    # owed its floor, and extraction would wait behind the gana (§4.3; below).
    with (
        serve(sim_settings({"scheduler": {"pool_floor": 0}})) as gateway,
        sse(gateway, chat_body(max_tokens=LONG)),
    ):
        gateway.wait_running("chat")
        with sse(gateway, chat_body(max_tokens=3), GANA) as gana:
            job, tier, position = queued(gana.next())
            assert (job, tier, position) == (gana.job_id, 4, 1)
            # Extraction is T2: it goes ahead, and the gana stream is told so.
            with sse(gateway, chat_body(max_tokens=3), {"X-Tierlm-Class": "extract"}) as extract:
                assert queued(extract.next()) == (extract.job_id, 2, 1)
                assert queued(gana.next()) == (gana.job_id, 4, 2)
            # The extract client left: its job is gone, the gana is first again.
            assert queued(gana.next()) == (gana.job_id, 4, 1)


def test_a_pool_owed_its_floor_is_ahead_of_extraction_in_the_positions(gateway: Gateway) -> None:
    """docs/design.md §4.3: a chat's busy time leaves the backlogged pool owed
    its floor, so extraction waits behind it, and the positions say so (they
    are computed with the floor's state as of now, as the next decision would
    see it): when the chat ends, the gana runs first."""
    with contextlib.ExitStack() as streams:
        chat = streams.enter_context(sse(gateway, chat_body(max_tokens=LONG)))
        gateway.wait_running("chat")
        gana = streams.enter_context(sse(gateway, chat_body(max_tokens=3), GANA))
        assert queued(gana.next()) == (gana.job_id, 4, 1)
        extract_headers = {"X-Tierlm-Class": "extract"}
        extract = streams.enter_context(sse(gateway, chat_body(max_tokens=3), extract_headers))
        assert queued(extract.next()) == (extract.job_id, 2, 2)
        chat.response.close()  # the person's client leaves: the device frees
        gateway.wait(lambda s: s["stats"]["completed"] >= 2, "the gana and the extraction")
    done = {job["id"]: job["ended_at"] for job in gateway.state()["gateway"]["recent"]}
    assert done[gana.job_id] < done[extract.job_id]


def test_a_quiet_stream_gets_heartbeats() -> None:
    with (
        serve(sim_settings({"server": {"sse_heartbeat": 0.1}})) as gw,
        sse(gw, chat_body(max_tokens=LONG)),
    ):
        gw.wait_running("chat")
        with sse(gw, chat_body(max_tokens=3), GANA) as gana:
            first = gana.next()
            queued(first)
            # Nothing changes: the same line again, as a keep-alive.
            assert gana.next() == first


def test_the_openai_client_ignores_the_comments_of_a_waiting_stream(gateway: Gateway) -> None:
    client = gateway.openai(X_Tierlm_Class="nataraj")

    def waiting() -> str:
        stream = client.chat.completions.create(
            model="sim-a", messages=MESSAGES, max_tokens=3, stream=True
        )
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    with sse(gateway, chat_body(max_tokens=LONG)):
        gateway.wait_running("chat")
        future = gateway.background(waiting)
        gateway.wait(lambda s: s["queued"]["4"], "the nataraj request queued")
    # The blocker's client left: the queued request runs.
    assert future.result(WAIT) == "w0 w1 w2 "


def test_a_client_that_leaves_while_queued_has_its_job_removed(gateway: Gateway) -> None:
    with sse(gateway, chat_body(max_tokens=LONG)) as blocker:
        gateway.wait_running("chat")
        with sse(gateway, chat_body(max_tokens=3), {"X-Tierlm-Class": "nataraj"}) as waiting:
            job_id = waiting.job_id
            assert queued(waiting.next())[1] == 4
            assert in_queue(gateway.state(), job_id) == 4
        state = gateway.wait(lambda s: in_queue(s, job_id) is None, "the job to leave the queue")
        assert state["running"]["id"] == blocker.job_id  # the blocker was not disturbed
        assert recent(gateway, job_id) == {
            "id": job_id,
            "class": "nataraj",
            "producer": "nataraj",
            "model": "sim-a",
            "outcome": "cancelled",
            "ended_at": recent(gateway, job_id)["ended_at"],  # type: ignore[index]
            "tokens": 0,
            "reason": "client disconnected while queued",
            # Never started: no wait to its start, no first token, no decode.
            "wait": None,
            "ttft": None,
            "duration": recent(gateway, job_id)["duration"],  # type: ignore[index]
            "decode": 0,
            "tokens_per_s": None,
        }
        assert (
            gateway.metric("tierlm_client_disconnects_total", class_="nataraj", state="queued") == 1
        )
        assert gateway.metric("tierlm_jobs_total", class_="nataraj", outcome="cancelled") == 1


def test_a_client_that_leaves_while_running_has_its_job_stopped(gateway: Gateway) -> None:
    with sse(gateway, chat_body(max_tokens=LONG), GANA) as gana:
        job_id = gana.job_id
        assert '"role":"assistant"' in gana.next_data()
        assert '"content":"w0 "' in gana.next_data()  # generating
        gateway.wait_running("gana")
    state = gateway.wait(lambda s: s["running"] is None, "the device to be idle")
    assert state["stats"]["cancelled"] == 1
    ended = recent(gateway, job_id)
    assert ended is not None
    assert ended["outcome"] == "cancelled"
    assert ended["reason"] == "client disconnected while running"
    assert 0 < int(ended["tokens"]) < LONG  # type: ignore[call-overload]
    assert gateway.metric("tierlm_client_disconnects_total", class_="gana", state="running") == 1


def test_a_non_streamed_client_that_leaves_has_its_job_removed(gateway: Gateway) -> None:
    def impatient() -> None:
        # Gives up after a second in the queue, as a client with a timeout does.
        httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json=chat_body(max_tokens=3),
            headers=GANA,
            timeout=httpx.Timeout(WAIT, read=1.0),
        )

    with sse(gateway, chat_body(max_tokens=LONG)):
        gateway.wait_running("chat")
        future = gateway.background(impatient)
        state = gateway.wait(lambda s: s["queued"]["4"], "the request queued")
        job_id = state["queued"]["4"][0]["id"]
        with pytest.raises(httpx.ReadTimeout):
            future.result(WAIT)
        gateway.wait(lambda s: in_queue(s, job_id) is None, "the job to leave the queue")
        assert recent(gateway, job_id)["reason"] == "client disconnected while queued"  # type: ignore[index]


def test_a_full_class_queue_answers_429_with_retry_after() -> None:
    settings = sim_settings({"classes": {"gana": {"queue_limit": 1}}})
    with serve(settings) as gw, sse(gw, chat_body(max_tokens=LONG)):
        gw.wait_running("chat")
        with sse(gw, chat_body(max_tokens=3), GANA) as first:
            queued(first.next())
            client = gw.openai(X_Tierlm_Class="gana")
            with pytest.raises(openai.RateLimitError) as info:
                client.chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=3)
            assert "class 'gana': 1 jobs are queued, the limit (queue_limit) is 1" in (
                info.value.message
            )
            assert int(info.value.response.headers["retry-after"]) >= 1
            assert gw.metric("tierlm_rejected_requests_total", reason="queue_full") == 1
            # The limit is per class: another class still queues.
            with sse(gw, chat_body(max_tokens=3), {"X-Tierlm-Class": "nataraj"}) as other:
                assert queued(other.next())[1] == 4
            assert gw.state()["gateway"]["queue_limits"]["gana"] == 1


def test_foreground_through_the_scheduler_api(gateway: Gateway) -> None:
    api = gateway.http
    with sse(gateway, chat_body(max_tokens=LONG), GANA):
        gateway.wait_running("gana")
        headers = {"X-Tierlm-Class": "nataraj", "X-Tierlm-Subject": "note-1"}
        with sse(gateway, chat_body(max_tokens=3), headers) as nataraj:
            assert queued(nataraj.next())[1] == 4
            # Another subject in the foreground: this job stays in the fair pool.
            response = api.put(
                "/v1/scheduler/foreground", json={"class": "nataraj", "subject": "note-2"}
            )
            assert response.json() == {"foreground": {"class": "nataraj", "subject": "note-2"}}
            assert in_queue(gateway.state(), nataraj.job_id) == 4
            # Its subject: T1, which preempts the gana.
            api.put("/v1/scheduler/foreground", json={"class": "nataraj", "subject": "note-1"})
            assert nataraj.text() == "w0 w1 w2 "
            state = gateway.wait(lambda s: s["stats"]["preemptions"] == 1, "the gana preempted")
            assert state["foreground"] == {"class": "nataraj", "subject": "note-1"}
    assert api.put("/v1/scheduler/foreground", content=b"null").json() == {"foreground": None}
    assert gateway.state()["foreground"] is None
    for body, param, message in [
        ({"class": "boss"}, "class", "class: unknown task class 'boss'"),
        (
            {"class": "gana", "subject": [1]},
            "subject",
            "subject: must be a string, an integer or null",
        ),
        ({"klass": "gana"}, "klass", "klass: unknown field"),
        (3, None, "request body: must be"),
    ]:
        response = api.put("/v1/scheduler/foreground", json=body)
        assert response.status_code == 400
        assert response.json()["error"]["param"] == param
        assert response.json()["error"]["message"].startswith(message)


def test_pause_and_resume(gateway: Gateway) -> None:
    api = gateway.http
    with sse(gateway, chat_body(max_tokens=LONG), GANA) as gana:
        gateway.wait_running("gana")
        assert api.post("/v1/scheduler/pause?wait=true").json() == {"paused": True, "idle": True}
        state = gateway.state()
        assert state["paused"] and state["running"] is None
        assert in_queue(state, gana.job_id) == 4  # preempted and re-queued, not lost
        # Nothing is dispatched while paused, not even a chat.
        chat = gateway.background(
            lambda: gateway.openai().chat.completions.create(
                model="sim-a", messages=MESSAGES, max_tokens=2
            )
        )
        gateway.wait(lambda s: s["queued"]["0"], "the chat queued")
        assert gateway.state()["running"] is None
        assert api.post("/v1/scheduler/resume").json() == {"paused": False}
        assert chat.result(WAIT).choices[0].message.content == "w0 w1 "
        gateway.wait_running("gana")


def test_deadline_header(gateway: Gateway) -> None:
    past = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
    with sse(gateway, chat_body(max_tokens=LONG)):
        gateway.wait_running("chat")
        for deadline, tier in [("3600", 4), ("0", 3), (past, 3), ("2999-01-01T00:00:00+01:00", 4)]:
            headers = {**GANA, "X-Tierlm-Deadline": deadline}
            with sse(gateway, chat_body(max_tokens=2), headers) as job:
                assert queued(job.next())[1] == tier, deadline


def test_metrics_series(gateway: Gateway) -> None:
    client = gateway.openai(X_Tierlm_Class="extract")
    client.chat.completions.create(model="sim-b", messages=MESSAGES, max_tokens=5)  # a swap
    gateway.openai(X_Tierlm_Class="gana").completions.create(
        model="sim-b", prompt="x", max_tokens=3
    )
    samples = gateway.metrics()
    names = {name for name, _ in samples}
    for series in [
        "tierlm_queue_depth",
        "tierlm_queued_jobs",
        "tierlm_running",
        "tierlm_wait_seconds_bucket",
        "tierlm_time_to_first_token_seconds_bucket",
        "tierlm_generated_tokens_total",
        "tierlm_tokens_per_second",
        "tierlm_preemptions_total",
        "tierlm_swaps_total",
        "tierlm_swap_seconds_total",
        "tierlm_budget_share",
        "tierlm_budget_cap",
        "tierlm_vruntime_seconds",
        "tierlm_jobs_total",
        "tierlm_client_disconnects_total",
        "tierlm_rejected_requests_total",
        "tierlm_loaded_model",
        "tierlm_paused",
    ]:
        assert series in names, series
    assert {dict(labels)["tier"] for name, labels in samples if name == "tierlm_queue_depth"} == {
        "T0",
        "T1",
        "T2",
        "T3",
        "T4",
    }
    assert gateway.metric("tierlm_swaps_total", model="sim-b") == 1
    # The sim's swap sleeps 0.05 s; asyncio may wake up to one clock tick early (its
    # loop rounds deadlines by the clock's resolution), so allow a millisecond.
    assert gateway.metric("tierlm_swap_seconds_total", model="sim-b") >= 0.049
    assert gateway.metric("tierlm_generated_tokens_total", class_="extract", model="sim-b") == 5
    assert gateway.metric("tierlm_time_to_first_token_seconds_count", class_="extract") == 1
    assert gateway.metric("tierlm_budget_cap", class_="extract") == 0.6
    assert gateway.metric("tierlm_budget_share", class_="extract") > 0.5
    assert gateway.metric("tierlm_vruntime_seconds", producer="gana") > 0
    assert gateway.metric("tierlm_loaded_model", model="sim-b") == 1
    assert gateway.metric("tierlm_tokens_per_second", model="sim-b") > 0


def test_far_queue_positions_are_rounded_up() -> None:
    from tierlm.server.gateway.gateway import shown_position

    assert [shown_position(p) for p in (1, 9, 10)] == [1, 9, 10]
    assert [shown_position(p) for p in (11, 20, 21, 100)] == [20, 20, 30, 100]
    assert [shown_position(p) for p in (101, 150, 151, 499)] == [150, 150, 200, 500]


def test_the_sim_backend_answers_a_request_without_max_tokens_shortly() -> None:
    """Not 256 tokens (13 s on the default device) for a first "hello"."""
    with serve(sim_settings()) as gw:
        body = {"model": "sim-a", "messages": MESSAGES}
        reply = gw.http.post("/v1/chat/completions", json=body).json()
        assert reply["usage"]["completion_tokens"] == 16
        assert reply["choices"][0]["finish_reason"] == "length"
    # A limit set by hand still decides.
    assert sim_settings({"limits": {"default_max_tokens": 100}}).limits.default_max_tokens == 100
    assert sim_settings({"limits": {"max_tokens_limit": 4}}).limits.default_max_tokens == 4


def test_work_for_another_model_says_in_the_log_why_it_waits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After a chat on sim-a, an extract request for sim-b waits for the chat
    hold and a swap: one info line says so, and one when the swap starts."""
    settings = sim_settings({"scheduler": {"chat_grace": 0.3}})
    with caplog.at_level("INFO", logger="tierlm.server"), serve(settings) as gw:
        assert gw.http.post("/v1/chat/completions", json=chat_body()).status_code == 200
        extract = {"X-Tierlm-Class": "extract"}
        for _ in range(2):  # said once for the model, not per request
            reply = gw.http.post("/v1/chat/completions", json=chat_body("sim-b"), headers=extract)
            assert reply.status_code == 200
    said = [r.getMessage() for r in caplog.records if r.name == "tierlm.server"]
    waits = [m for m in said if "needs model 'sim-b' while 'sim-a' is loaded" in m]
    assert len(waits) == 1 and "scheduler.chat_grace" in waits[0] and "0.3 s" in waits[0]
    assert any(m.startswith("swapping model 'sim-a' -> 'sim-b' for job") for m in said)


def test_a_burst_of_waiting_streams_replays_the_queue_a_few_times_not_once_each(
    gateway: Gateway,
) -> None:
    """Each admission changes the queue; looking up positions for each new
    stream replayed a growing queue once per request (500 at once held the
    event loop for 5 s in bench/gateway_load.py). Positions are looked up at
    most every POSITION_INTERVAL for all streams: every stream is still told
    its place, with a handful of replays instead of one per stream."""
    policy = gateway.core.scheduler.policy
    real_queue_order = policy.queue_order
    replays = 0

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal replays
        replays += 1
        return real_queue_order(*args, **kwargs)

    streams = 120

    async def first_position(client: httpx.AsyncClient) -> tuple[int, int, int]:
        body = {**chat_body(max_tokens=2), "stream": True}
        async with client.stream(
            "POST", "/v1/chat/completions", json=body, headers=GANA
        ) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith(": tierlm queued"):
                    return queued(line)
        raise AssertionError("the stream ended without a position")

    async def burst() -> list[tuple[int, int, int]]:
        limits = httpx.Limits(max_connections=streams + 1)
        async with httpx.AsyncClient(base_url=gateway.url, timeout=WAIT, limits=limits) as client:
            return await asyncio.gather(*(first_position(client) for _ in range(streams)))

    with sse(gateway, chat_body(max_tokens=LONG)):  # the blocker: everything waits
        gateway.wait_running("chat")
        policy.queue_order = counted  # type: ignore[method-assign]
        try:
            told = asyncio.run(burst())
        finally:
            policy.queue_order = real_queue_order  # type: ignore[method-assign]
    assert len({job for job, _, _ in told}) == streams
    assert all(tier == 4 and position >= 1 for _, tier, position in told)
    assert replays <= streams // 4, replays


async def test_retry_after_before_any_run_was_measured_follows_the_run_under_way() -> None:
    """No run measured yet, a job running for 2.5 s and jobs queued behind it:
    Retry-After grows with the run under way (as long again as it ran, and a
    queued run at least that long), not the 1 s a measured run would replace.
    In virtual time (the real app through ASGI): the 2.5 s are the loop's."""
    settings = sim_settings({"classes": {"gana": {"queue_limit": 2}}})
    async with virtual_gateway(settings) as client:

        async def state() -> dict[str, Any]:
            return dict((await client.get("/v1/scheduler/state")).json())

        def gana() -> asyncio.Task[httpx.Response]:
            body = chat_body(max_tokens=LONG)
            return asyncio.create_task(client.post("/v1/chat/completions", json=body, headers=GANA))

        running = gana()
        await wait_until(
            state,
            "a gana job running",
            until=lambda s: s["running"] is not None and s["running"]["class_name"] == "gana",
        )
        queued = [gana(), gana()]
        await wait_until(state, "two gana queued", until=lambda s: s["queue_depth"] == 2)
        await asyncio.sleep(2.5)
        assert (await state())["gateway"]["run_seconds"] == {}  # nothing measured
        refused = await client.post(
            "/v1/chat/completions", json=chat_body(max_tokens=3), headers=GANA
        )
        assert refused.status_code == 429, refused.text
        # The first queued gana leaves the queue when the running one ends:
        # ~2.5 s more by the estimate (and never the constant 1).
        assert int(refused.headers["retry-after"]) >= 2
        for task in [running, *queued]:
            task.cancel()
        await asyncio.gather(running, *queued, return_exceptions=True)
