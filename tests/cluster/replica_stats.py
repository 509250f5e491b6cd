"""A replica's routing stats as the router reads them (``tierlm.cluster``),
for the pure tests of ranking, affinity and moves: an idle replica's, with
``fields`` changed."""

from __future__ import annotations

from typing import Any

from tierlm.cluster import STATS_VERSION


def idle_replica(now: float, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "v": STATS_VERSION,
        "at": now,
        "loaded_model": None,
        "swapping_to": None,
        "busy": False,
        "slots": 1,
        "running": {},
        "chat_queued": 0,
        "queued_by_model": {},
        "queued_by_class": {},
        "backlog_s": 0.0,
        "swap_s": 10.0,
        "chat_run_s": 2.0,
        "run_s": {"gana": 2.0},
        "chat_classes": ["chat"],
        "full": [],
        "draining": False,
        "paused": False,
    }
    base.update(fields)
    return base
