"""The fleet's /health and /ready from its replicas' answers (``fleet_health``),
the silent replicas named (``Roster``), and the scrape's fleet gauge: pure,
no Ray. The same on a real Ray with a frozen replica:
tests/cluster/test_ray_any_router.py."""

from __future__ import annotations

from tierlm.ray.exposition import fleet_lines, merge
from tierlm.ray.fleet_health import fleet_health
from tierlm.ray.roster import Roster, Seen

OK = (200, {"status": "ok"})
SILENT = "not_answering: no answer within 2 s"


def test_all_live_is_ok_with_the_count() -> None:
    status, body = fleet_health("/health", {"a": OK, "b": OK}, [], {}, 0.0)
    assert status == 200
    assert body["status"] == "ok" and body["live_replicas"] == 2 and body["replicas_total"] == 2


def test_one_silent_is_degraded_200_and_named_with_its_silence() -> None:
    seen = {"c": Seen(at=10.0, pid=42)}
    status, body = fleet_health("/health", {"a": OK, "b": OK}, [("c", SILENT)], seen, 15.0)
    assert status == 200 and body["status"] == "degraded"
    assert body["live_replicas"] == 2 and body["replicas_total"] == 3
    entry = body["replicas"]["c"]
    assert entry["status"] == "not_answering" and entry["silent_for_s"] == 5.0
    assert entry["pid"] == 42


def test_a_replica_that_says_degraded_makes_the_fleet_degraded() -> None:
    answers = {"a": OK, "b": (200, {"status": "degraded", "worker_problem": "silent"})}
    status, body = fleet_health("/health", answers, [], {}, 0.0)
    assert status == 200 and body["status"] == "degraded" and body["live_replicas"] == 2


def test_503_only_when_no_replica_is_live() -> None:
    unhealthy = (503, {"status": "unhealthy", "reason": "stalled"})
    status, body = fleet_health("/health", {"a": unhealthy}, [("b", SILENT)], {}, 0.0)
    assert status == 503 and body["reason"] == "no replica is live"
    status, body = fleet_health("/health", {}, [], {}, 0.0)
    assert status == 503 and body["reason"] == "no replica runs"


def test_ready_counts_ready_replicas() -> None:
    starting = (503, {"status": "starting"})
    status, body = fleet_health("/ready", {"a": OK, "b": starting}, [], {}, 0.0)
    assert status == 200 and body["status"] == "degraded" and body["ready_replicas"] == 1


def test_roster_names_the_most_recently_heard_as_silent_and_forgets_the_rest() -> None:
    roster = Roster()
    for at, name in enumerate(("old", "a", "b", "c")):
        roster.heard(name, float(at))
    # a and b answered; one did not: c (heard last); "old" left the fleet.
    assert roster.silent(["a", "b"], 1) == ["c"]
    assert set(roster.seen) == {"a", "b", "c"}
    # Two silent, one never heard from.
    assert roster.silent(["a"], 3) == ["c", "b", "unnamed-1"]
    assert roster.silent(["a", "b", "c"], 0) == []


def test_the_scrape_says_how_many_replicas_answered() -> None:
    text = merge({"a": "# TYPE x gauge\nx 1\n"}) + fleet_lines(1, 1)
    assert 'x{replica="a"} 1' in text
    assert 'tierlm_fleet_replicas{state="silent"} 1' in text
    assert text.count("# TYPE tierlm_fleet_replicas gauge") == 1
