"""A batched device behind the gateway (sim backend, ``[backend] slots``):
requests stream side by side, and the state API, /metrics and the dashboard's
state show every slot (docs/design.md §2.3, §4.7)."""

from __future__ import annotations

from tests.payloads import MESSAGES
from tests.server.helpers import serve, sim_settings

LONG = 4000  # tokens: far longer than the test lets them run


def test_four_slots_run_four_background_streams_at_once_and_say_so() -> None:
    settings = sim_settings({"backend": {"slots": 4}})
    with serve(settings) as gateway:
        client = gateway.openai(X_Tierlm_Class="gana")
        streams = [
            client.chat.completions.create(
                model="sim-a",
                messages=MESSAGES,
                max_tokens=LONG,
                stream=True,
                extra_headers={"X-Tierlm-Producer": f"agent{i}"},
            )
            for i in range(4)
        ]
        # Every stream produces tokens before any of them ends: side by side.
        for stream in streams:
            next(iter(stream))
        state = gateway.wait(lambda s: len(s["running_jobs"]) == 4, "four jobs in the batch")
        assert state["slots"] == 4
        assert len({job["id"] for job in state["running_jobs"]}) == 4
        assert state["running"]["id"] == state["running_jobs"][0]["id"]
        assert gateway.metric("tierlm_slots") == 4
        assert gateway.metric("tierlm_batch_size") == 4
        assert gateway.metric("tierlm_running", class_="gana") == 4
        dash = gateway.http.get("/dashboard/state").json()
        assert dash["slots"] == 4 and len(dash["batch"]) == 4
        for stream in streams:
            stream.close()


def test_one_slot_is_the_default_and_runs_one_stream_at_a_time() -> None:
    with serve() as gateway:
        client = gateway.openai(X_Tierlm_Class="gana")
        streams = [
            client.chat.completions.create(
                model="sim-a",
                messages=MESSAGES,
                max_tokens=LONG,
                stream=True,
                extra_headers={"X-Tierlm-Producer": f"agent{i}"},
            )
            for i in range(2)
        ]
        next(iter(streams[0]))
        state = gateway.state()
        assert state["slots"] == 1 and len(state["running_jobs"]) == 1
        assert gateway.metric("tierlm_batch_size") == 1
        for stream in streams:
            stream.close()
