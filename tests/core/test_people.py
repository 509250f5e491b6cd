"""Who is a person (docs/design.md §4.11): judged by pacing, time passed in."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlm.core.people import (
    NEW_NAMES_AT,
    PROGRAM_AT,
    READING_GAP,
    WINDOW,
    PeopleJudge,
    Why,
)


def converse(judge: PeopleJudge, who: str, gaps: list[float], answer: float = 2.0) -> list[bool]:
    """Requests of ``who`` one after the other: each answered in ``answer``
    seconds, the next sent ``gap`` seconds after that answer ended; whether
    each was judged a person's."""
    now, verdicts = 0.0, []
    for gap in [0.0, *gaps]:
        now += gap
        verdicts.append(judge.arrived(who, now).person)
        now += answer
        judge.ended(who, now)
    return verdicts


def test_a_new_identity_s_first_request_is_a_person_s() -> None:
    verdict = PeopleJudge().arrived("key|OpenAI||", 0.0)
    assert verdict.person and verdict.why is Why.FIRST


def test_an_agent_loop_is_a_program_from_its_second_request() -> None:
    assert converse(PeopleJudge(), "agent", [0.01] * 9) == [True] + [False] * 9


def test_a_person_who_reads_stays_a_person() -> None:
    assert converse(PeopleJudge(), "person", [3.0, 12.0, 5.0, 40.0, 3.0]) == [True] * 6


def test_typing_continue_three_times_in_a_row_is_still_a_person() -> None:
    # Read nothing, type "continue" and Enter: 3.9 s by the keystroke-level
    # model; 2 s is a fast typist. Never a program's.
    assert converse(PeopleJudge(), "person", [2.0, 2.0, 2.0], answer=0.5) == [True] * 4


def test_a_front_end_s_follow_up_after_each_answer_leaves_its_person_a_person() -> None:
    judge, now, chats = PeopleJudge(), 0.0, []
    for _ in range(6):
        chats.append(judge.arrived("webui", now).person)  # the person's message
        now += 2.0
        judge.ended("webui", now)
        now += 0.05
        title = judge.arrived("webui", now)  # the front-end's own request
        assert not title.person and title.why is Why.BACK_TO_BACK
        now += 0.5
        judge.ended("webui", now)
        now += 8.0  # reads
    assert chats == [True] * 6


def test_requests_alongside_another_are_a_program_s() -> None:
    judge = PeopleJudge()
    assert judge.arrived("batch", 0.0).person
    second = judge.arrived("batch", 0.0)
    assert not second.person and second.why is Why.ALONGSIDE


def test_a_program_that_paces_like_one_keeps_its_tool_calls_in_the_pool() -> None:
    # Three quick calls, then a 4 s tool call: still a program's.
    verdicts = converse(PeopleJudge(), "agent", [0.01, 0.01, 0.01, 4.0])
    assert verdicts[-1] is False


def test_a_program_that_starts_reading_again_is_a_person_again() -> None:
    judge = PeopleJudge()
    verdicts = converse(judge, "dev", [0.01] * 6 + [10.0] * 4)
    # A reading gap makes the window one short fewer: a person's once fewer
    # than PROGRAM_AT of the last WINDOW gaps are short.
    back_after = WINDOW - PROGRAM_AT + 1
    assert verdicts[7 : 7 + back_after - 1] == [False] * (back_after - 1)
    assert verdicts[7 + back_after - 1 :] == [True] * (4 - back_after + 1)


def test_an_identity_away_for_five_minutes_is_a_newcomer() -> None:
    judge = PeopleJudge()
    converse(judge, "agent", [0.01] * 5)
    assert judge.arrived("agent", 10_000.0).why is Why.FIRST


def test_the_table_of_identities_is_bounded() -> None:
    judge = PeopleJudge(remembered=100)
    for i in range(10_000):
        judge.arrived(f"id{i}", float(i))
        judge.ended(f"id{i}", float(i))
    assert len(judge) == 100


def test_a_negative_reading_gap_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="reading_gap"):
        PeopleJudge(reading_gap=-1)


@given(st.lists(st.floats(0, 60, allow_nan=False), min_size=1, max_size=30))
def test_no_request_sent_within_the_reading_gap_is_a_person_s(gaps: list[float]) -> None:
    judge, now = PeopleJudge(), 0.0
    assert judge.arrived("x", now).person  # the first: no evidence
    for gap in gaps:
        judge.ended("x", now)
        now += gap
        verdict = judge.arrived("x", now)
        if gap < READING_GAP:
            assert not verdict.person
        if verdict.person:
            assert gap >= READING_GAP


def test_a_tool_s_result_is_a_program_s_however_long_the_tool_ran() -> None:
    # An agent's tool call takes seconds (a search, a build): pacing alone
    # would take the gap for reading. Its result, sent as the next request,
    # says otherwise.
    judge = PeopleJudge()
    assert judge.arrived("agent", 0.0).person  # the first: no evidence
    judge.ended("agent", 1.0)
    after_tool = judge.arrived("agent", 9.0, tool_result=True)
    assert not after_tool.person and after_tool.why is Why.TOOL_RESULT
    judge.ended("agent", 10.0)
    # The person who started the run reads the answer and writes again:
    # a person's message, the one tool result among the last gaps is no pattern.
    assert judge.arrived("agent", 20.0).person


def test_a_client_that_invents_a_name_for_each_request_is_a_program() -> None:
    # Each request under a new `user`: every one a "first", a person's for
    # want of evidence, unless the client's own record counts.
    judge, now, verdicts = PeopleJudge(), 0.0, []
    for i in range(40):
        verdicts.append(judge.arrived(f"-|bot|u{i}|", now, client="-|bot"))
        now += 0.5
        judge.ended(f"-|bot|u{i}|", now)
    assert [v.person for v in verdicts[:NEW_NAMES_AT]] == [True] * NEW_NAMES_AT
    assert all(not v.person and v.why is Why.NEW_NAMES for v in verdicts[NEW_NAMES_AT:])
    # Away five minutes, its record starts afresh, as an identity's does.
    assert judge.arrived("-|bot|later|", now + 300.0, client="-|bot").person


def test_invented_names_sent_at_once_are_programs_after_the_first_few() -> None:
    judge = PeopleJudge()
    verdicts = [judge.arrived(f"-|bot|u{i}|", 0.0, client="-|bot") for i in range(64)]
    assert sum(v.person for v in verdicts) == NEW_NAMES_AT


def test_a_front_end_s_people_are_judged_one_by_one_not_by_their_client() -> None:
    # Forty people behind one front-end (one key, one User-Agent, a `user`
    # each) arrive 4 s apart, then chat, reading 20 s between messages: the
    # client sends mostly follow-ups, and no newcomer is taken for a program.
    # (Arriving 2.3 s apart, 13 of the first 16 requests are newcomers' and the
    # 13th is served as a program's: bench/people.py gives the rates.)
    judge, verdicts = PeopleJudge(), []
    events: list[tuple[float, int]] = []
    for person in range(40):
        arrives = person * 4.0
        events += [(arrives + turn * 20.0 + person * 0.3, person) for turn in range(5)]
    for now, person in sorted(events):
        identity = f"app|webui|p{person}|"
        verdicts.append(judge.arrived(identity, now, client="app|webui"))
        judge.ended(identity, now + 2.0)
    assert all(v.person for v in verdicts), [v.why for v in verdicts if not v.person]
