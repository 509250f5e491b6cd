"""The ``sessions`` workload: several people chat in turn, each after reading
gaps of their own (tierlm.sim.workloads.sessions)."""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict

import pytest

from tierlm.sim import compute_metrics, simulate
from tierlm.sim.records import CHAT_CLASS, FOREGROUND_NONE, SimRecords
from tierlm.sim.workloads import WORKLOADS, get_workload
from tierlm.sim.workloads.sessions import CONTEXT_WINDOW, Sessions


def _chats(rec: SimRecords) -> list[tuple[float, float | None, str, int, int]]:
    """(submitted, ended, producer, prompt, output) of each chat, in order."""
    return sorted(
        (j.submitted, j.ended, j.producer, j.prompt_tokens, j.output_tokens)
        for j in rec.jobs
        if j.class_name == CHAT_CLASS
    )


def _gaps(rec: SimRecords) -> dict[str, list[float]]:
    """Each person's reading gaps: from a reply's end to their next message.
    Sessions alternate persons, so two chats in a row of one person are one
    session's."""
    gaps: dict[str, list[float]] = defaultdict(list)
    chats = _chats(rec)
    for (_, ended, who, _, _), (submitted, _, nxt, _, _) in itertools.pairwise(chats):
        if who == nxt and ended is not None:
            gaps[who].append(submitted - ended)
    return gaps


def test_registered_with_its_parameters() -> None:
    assert WORKLOADS["sessions"] is Sessions
    workload = get_workload("sessions", params={"people": 2, "sigma": 0.5})
    assert isinstance(workload, Sessions)
    assert workload.params()["people"] == 2 and workload.params()["sigma"] == 0.5


def test_people_take_turns_with_the_page_closed_between_sessions() -> None:
    rec = simulate(get_workload("sessions"), "tierlm", seed=3, duration=3 * 3600.0)
    chats = _chats(rec)
    people = [who for _, _, who, _, _ in chats]
    assert len(chats) >= 40
    assert len(set(people)) >= 2 and all(p.startswith("chat:person-") for p in people)
    # The page closes between sessions, and no one writes with it closed.
    closes = [t for t, name in rec.foreground if name == FOREGROUND_NONE]
    assert len(closes) >= 2
    for submitted, *_ in chats:
        shown = [name for t, name in rec.foreground if t <= submitted]
        assert shown[-1] == CHAT_CLASS
    # A session is one person's: the person changes only across a closed page.
    for (t0, _, a, _, _), (t1, _, b, _, _) in itertools.pairwise(chats):
        if a != b:
            assert any(t0 < t <= t1 for t in closes)
    # Background beside: the cron on the second model ran.
    assert any(j.model_id == "m2" and j.ended is not None for j in rec.jobs)


def test_prompts_grow_with_the_conversation_within_the_window() -> None:
    rec = simulate(get_workload("sessions", params={"background": 0}), "tierlm", seed=5)
    chats = _chats(rec)
    assert max(prompt for *_, prompt, _ in chats) <= CONTEXT_WINDOW
    grew = 0
    for (_, _, a, p0, out), (_, _, b, p1, _) in itertools.pairwise(chats):
        if a == b and p0 + out + 60 <= CONTEXT_WINDOW:
            # The next turn holds this one's message and reply.
            assert p1 >= p0 + out
            grew += 1
    assert grew >= 20
    # Long sessions reach the window and stay near it.
    assert max(prompt for *_, prompt, _ in chats) > CONTEXT_WINDOW - 200


def test_same_seed_same_run_other_seed_other_run() -> None:
    workload = get_workload("sessions")
    first = simulate(workload, "tierlm", seed=11, duration=1800.0)
    again = simulate(workload, "tierlm", seed=11, duration=1800.0)
    other = simulate(workload, "tierlm", seed=12, duration=1800.0)
    assert _chats(first) == _chats(again)
    assert compute_metrics(first) == compute_metrics(again)
    assert _chats(first) != _chats(other)
    assert workload.params() == get_workload("sessions").params()


def test_a_policy_changes_when_people_write_not_what() -> None:
    """Closed loop: a slower policy lets fewer messages be sent, but each
    person's messages are the same ones, in the same order."""
    workload = get_workload("sessions")
    asked: dict[str, dict[str, list[tuple[int, int]]]] = {}
    for policy in ("tierlm", "fifo+resume"):
        rec = simulate(workload, policy, seed=2, duration=3600.0)
        by_person: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for _, _, who, prompt, output in _chats(rec):
            by_person[who].append((prompt, output))
        asked[policy] = by_person
    assert asked["tierlm"]
    for who, ours in asked["tierlm"].items():
        theirs = asked["fifo+resume"].get(who, [])
        shorter = min(len(ours), len(theirs))
        assert ours[:shorter] == theirs[:shorter], who


def test_each_person_reads_at_their_own_heavy_tailed_pace() -> None:
    workload = get_workload(
        "sessions", params={"people": 3, "median_min": 15, "median_max": 150, "background": 0}
    )
    assert isinstance(workload, Sessions)
    seed = 3
    drawn = {f"chat:{p.name}": p.median for p in workload.persons(seed)}
    # This seed's people: one fast reader, two slow ones (27, 96 and 145 s).
    assert max(drawn.values()) >= 4 * min(drawn.values())
    gaps = _gaps(simulate(workload, "tierlm", seed=seed, duration=12 * 3600.0))
    assert set(gaps) == set(drawn)
    seen = {who: statistics.median(g) for who, g in gaps.items()}
    for who, g in gaps.items():
        assert len(g) >= 15, who
        # Their gaps centre on their own median ...
        assert drawn[who] / 1.6 <= seen[who] <= drawn[who] * 1.6, (who, seen[who], drawn[who])
        # ... with a heavy tail: the longest many times the median.
        assert max(g) >= 4 * seen[who], who
    # The persons differ, as drawn: the slowest reader's median gap is over
    # twice the fastest's, and they read in the order drawn.
    assert max(seen.values()) >= 2 * min(seen.values())
    assert sorted(seen, key=lambda w: seen[w]) == sorted(drawn, key=lambda w: drawn[w])


def test_people_differ_by_seed_and_stay_in_the_stated_range() -> None:
    workload = Sessions(people=6, median_min=20, median_max=120)
    first, other = workload.persons(1), workload.persons(2)
    assert first == workload.persons(1) and first != other
    for person in first + other:
        assert 20 <= person.median <= 120
        assert 0.8 <= person.sigma <= 1.2
    assert len({p.median for p in first}) == 6 and len({p.sigma for p in first}) == 6


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"people": 0}, "people"),
        ({"people": 2.5}, "people"),
        ({"median_min": 0}, "median_min"),
        ({"median_min": 60, "median_max": 30}, "median_max"),
        ({"sigma": -1}, "sigma"),
        ({"sigma": float("nan")}, "sigma"),
        ({"messages_min": 0}, "messages_min"),
        ({"messages_min": 10, "messages_max": 5}, "messages_max"),
        ({"away_min": -1}, "away_min"),
        ({"away_min": 600, "away_max": 300}, "away_max"),
        ({"background": 2}, "background"),
    ],
)
def test_bad_parameters_name_the_field(params: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}: must be"):
        get_workload("sessions", params=params)


def test_an_unknown_parameter_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) gap.*known: people"):
        get_workload("sessions", params={"gap": 30})
