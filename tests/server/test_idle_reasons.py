"""What the dashboard says of idle slots and of latency (issue 56, item 8),
from a snapshot and samples made here: each reason ``ops/idle.py`` gives,
and percentiles over the window only (an hour-old incident is gone).
"""

from __future__ import annotations

from typing import Any

import pytest

from tierlm.server.gateway.latency_window import LatencyWindow
from tierlm.server.ops.idle import idle_slots
from tierlm.shell.snapshot import JobInfo, SchedulerSnapshot, SchedulerStats


def job(n: int, tier: int = 4, model: str = "a", klass: str = "gana") -> JobInfo:
    return JobInfo(n, klass, model, f"p{n}", None, None, tier, "queued", 0.0, 1.0, 0)


def snapshot(running: list[JobInfo], queued: list[JobInfo], **more: Any) -> SchedulerSnapshot:
    fields: dict[str, Any] = {
        "now": 10.0,
        "running": running[0] if running else None,
        "running_since": 1.0 if running else None,
        "swapping_to": None,
        "loaded_model": "a",
        "queued": {4: queued},
        "foreground": None,
        "paused": False,
        "closed": False,
        "vruntime": {},
        "budget_share": {},
        "budget_cap": {},
        "stats": SchedulerStats(),
        "stuck": [],
        "policy": "tiered",
        "running_jobs": running,
        "slots": 4,
        **more,
    }
    return SchedulerSnapshot(**fields)


@pytest.mark.parametrize(
    ("snap", "why"),
    [
        (snapshot([job(1)], [job(2)], paused=True), "paused"),
        (snapshot([], [job(2, model="b")], swapping_to="b"), "swap"),
        (snapshot([job(1)], [job(2, model="b")]), "swap"),
        (
            snapshot(
                [job(1)],
                [job(2, klass="extract")],
                budget_share={"extract": 0.61},
                budget_cap={"extract": 0.6},
            ),
            "budget",
        ),
        (snapshot([job(1, tier=0, klass="chat"), job(3)], [job(2)]), "guard"),
        (snapshot([job(1)], []), "no_work"),
        (snapshot([job(1)], [job(2)]), "starting"),
    ],
)
def test_each_reason_slots_sit_idle(snap: SchedulerSnapshot, why: str) -> None:
    idle = idle_slots(snap, 1.25)
    assert idle["why"] == why and idle["idle"] == 4 - len(snap.running_jobs)
    assert idle["text"] and idle["detail"]


def test_a_full_device_has_no_reason() -> None:
    full = snapshot([job(i) for i in range(4)], [job(9)])
    assert idle_slots(full, 1.25) == {
        "slots": 4,
        "busy": 4,
        "idle": 0,
        "why": None,
        "text": "",
        "detail": "",
    }


def test_percentiles_cover_the_window_only() -> None:
    now = [0.0]
    window = LatencyWindow(clock=lambda: now[0])
    window.observe("wait", "chat", 30.0)  # an incident
    now[0] = 3600.0 - 1  # within the hour kept, outside a 5-minute window
    for seconds in (0.1, 0.2, 0.3, 0.4):
        window.observe("wait", "chat", seconds)
    recent = window.percentiles(300)["chat"]["wait"]
    assert recent == {"count": 4, "p50": 0.2, "p95": 0.4, "p99": 0.4}
    assert window.percentiles(4000)["chat"]["wait"]["p99"] == 30.0
    assert window.percentiles(300).get("gana") is None
