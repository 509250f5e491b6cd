"""``GET /v1/scheduler/routing``: the routing stats a router places requests by
(docs/distributed.md "Routing stats"), the same dict as in-process."""

from __future__ import annotations

import asyncio

from tests.payloads import chat_body
from tests.server.helpers import Gateway, serve, sim_settings
from tierlm.cluster import STATS_VERSION, rank
from tierlm.server.ops.routing import routing_stats

FIELDS = {
    "v",
    "at",
    "loaded_model",
    "swapping_to",
    "busy",
    "slots",
    "running",
    "chat_queued",
    "queued_by_model",
    "queued_by_class",
    "backlog_s",
    "swap_s",
    "chat_run_s",
    "run_s",
    "chat_classes",
    "full",
    "draining",
    "paused",
}


def routing(gateway: Gateway) -> dict[str, object]:
    response = gateway.http.get("/v1/scheduler/routing")
    assert response.status_code == 200, response.text
    data: dict[str, object] = response.json()
    return data


def test_an_idle_gateway_reports_its_model_and_nothing_queued(gateway: Gateway) -> None:
    stats = routing(gateway)
    assert set(stats) == FIELDS
    assert stats["v"] == STATS_VERSION
    assert stats["loaded_model"] == "sim-a"
    assert stats["busy"] is False and stats["slots"] == 1
    assert stats["queued_by_class"] == {} and stats["full"] == []
    assert stats["chat_classes"] == ["chat"]
    # In-process, on the gateway's loop: the same dict.
    loop = gateway.core.changes.loop
    assert loop is not None

    async def read() -> dict[str, object]:
        return routing_stats(gateway.core).read()

    assert set(asyncio.run_coroutine_threadsafe(read(), loop).result(5)) == FIELDS


def test_work_queued_and_running_is_counted_and_a_full_class_named() -> None:
    settings = sim_settings({"classes": {"gana": {"queue_limit": 2}}})
    with serve(settings) as gw:
        client = gw.openai(X_Tierlm_Class="gana")
        jobs = [
            gw.background(
                lambda m=model: client.chat.completions.create(**chat_body(m, max_tokens=400))
            )
            for model in ("sim-a", "sim-b", "sim-b")
        ]
        gw.wait(lambda s: s["queue_depth"] == 2, "two gana jobs queued")
        stats = routing(gw)
        assert stats["running"] == {"gana": 1}
        assert stats["busy"] is True
        assert stats["queued_by_class"] == {"gana": 2}
        assert sum(stats["queued_by_model"].values()) == 2  # type: ignore[attr-defined]
        assert stats["full"] == ["gana"]
        assert isinstance(stats["backlog_s"], float) and stats["backlog_s"] > 0
        # The ranking reads it: a full class is refused here, a chat is not.
        assert rank({"gw": stats}, "sim-a", "gana", stats["at"]) == []  # type: ignore[arg-type]
        assert rank({"gw": stats}, "sim-a", "chat", stats["at"]) == ["gw"]  # type: ignore[arg-type]
        for job in jobs:
            job.result()
        after = routing(gw)
        assert after["queued_by_class"] == {} and after["busy"] is False
        assert after["swap_s"] is not None  # a swap to sim-b was measured


def test_with_keys_it_needs_an_admin_key() -> None:
    keys = [
        {"name": "ops", "key": "sk-ops", "admin": True},
        {"name": "app", "key": "sk-app", "classes": ["chat"]},
    ]
    with serve(sim_settings({"keys": keys}), key="sk-ops") as gw:
        assert gw.http.get("/v1/scheduler/routing").status_code == 200
        user = gw.http.get("/v1/scheduler/routing", headers={"Authorization": "Bearer sk-app"})
        assert user.status_code == 403


def test_a_load_through_the_admin_api_is_a_swap_in_the_stats() -> None:
    """``POST /v1/models/{id}/load``: busy and ``swapping_to`` while it loads,
    and its measured time is ``swap_s`` (before, a router placed every chat on
    the 10 s default until a scheduler-driven swap)."""
    with serve(sim_settings({"backend": {"kind": "sim", "swap_seconds": 0.5}})) as gw:
        assert routing(gw)["swap_s"] is None
        load = gw.background(lambda: gw.http.post("/v1/models/sim-b/load"))
        seen: list[dict[str, object]] = []
        while not load.done():
            seen.append(routing(gw))
        answer = load.result()
        assert answer.status_code == 200, answer.text
        assert any(s["busy"] is True and s["swapping_to"] == "sim-b" for s in seen), seen
        after = routing(gw)
        assert after["loaded_model"] == "sim-b" and after["swapping_to"] is None
        assert after["busy"] is False
        swap = after["swap_s"]
        assert isinstance(swap, float) and 0.45 <= swap < 5.0  # the sim sleeps 0.5 s
        assert abs(swap - answer.json()["tierlm"]["load_seconds"]) < 0.01
