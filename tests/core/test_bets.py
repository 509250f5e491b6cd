"""The budget of lost excursion bets (docs/design.md §4.8 (bets)): with the
chat page open, background swaps away from the person's model only on a bet
their own reading gaps say holds, and only as often as the stated share of
their messages (``SchedulerConfig.lost_bets``) allows one to be lost."""

from __future__ import annotations

import pytest

from tierlm.core.bets import GAPS_KEPT, SURE, ExcursionBets
from tierlm.core.config import SchedulerConfig
from tierlm.sim import compute_metrics, simulate
from tierlm.sim.device import DeviceModel
from tierlm.sim.workloads import get_workload


def person(gaps: list[float], share: float = 0.02) -> ExcursionBets:
    bets = ExcursionBets(share)
    for gap in gaps:
        bets.gap(gap)
        bets.message()
        bets.answered()
    return bets


def test_a_bet_reads_the_gaps_the_person_may_still_be_in() -> None:
    bets = person([15, 50, 50, 50])
    # At once, one gap in four (the quick reply) would not hold 30 s: a bet
    # the budget has nothing for yet.
    risk = bets.risk(0.0, 30.0)
    assert risk is not None and risk > SURE
    assert not bets.wins(0.0, 30.0)
    # Once 15 s have passed, every gap they may still be in holds it.
    assert bets.risk(15.5, 30.0) == pytest.approx(SURE)
    assert bets.wins(15.5, 30.0)
    # The odds are looked at again when the quick reply has run out.
    assert bets.next_chance(0.0) == 15


def test_a_risky_bet_waits_for_the_budget_a_sure_one_for_no_debt() -> None:
    bets = person([20, 60, 60, 60])  # one gap in four would not hold 30 s
    risk = bets.risk(0.0, 30.0)
    assert risk is not None and risk > SURE
    assert not bets.wins(0.0, 30.0)  # 4 messages earned 0.08 of a lost one
    for _ in range(46):
        bets.message()
        bets.answered()
    assert bets.wins(0.0, 30.0)  # 50 messages: one lost message is paid for
    bets.swapped("m2", "m1", chat_open=True)
    bets.message()  # the person wrote while the device was away: lost
    assert bets.lost == 1
    assert not bets.wins(0.0, 30.0)  # the next risky bet waits 50 messages
    assert bets.wins(30.5, 20.0)  # a sure one need not: the loss was paid for
    bets.message()  # away still: a second message lost, one more than earned
    assert bets.lost == 2
    assert not bets.wins(30.5, 20.0)  # nothing is bet while a loss is owed


def test_a_message_already_waiting_when_the_swap_away_ends_is_lost() -> None:
    bets = person([60] * GAPS_KEPT)
    bets.message()  # sent, not yet answered
    bets.swapped("m2", "m1", chat_open=True)
    assert bets.lost == 1
    bets.swapped("m1", "m1", chat_open=True)
    bets.message()  # back home: no loss
    assert bets.lost == 1


def test_a_budget_of_none_makes_no_bet() -> None:
    assert not person([60] * GAPS_KEPT, share=0.0).wins(0.0, 30.0)


def test_the_setting_is_checked() -> None:
    with pytest.raises(ValueError, match="lost_bets: must be a fraction in"):
        SchedulerConfig(lost_bets=1.5)
    with pytest.raises(ValueError, match="lost_bets: must be a number >= 0"):
        SchedulerConfig(lost_bets=-0.1)


def _azure_chat(slots: int, lost_bets: float) -> dict[str, float]:
    records = simulate(
        get_workload("azure-chat"),
        "tierlm",
        seed=7,
        duration=2 * 3600.0,
        device=DeviceModel(slots=slots),
        config=SchedulerConfig(lost_bets=lost_bets),
    )
    m = compute_metrics(records)
    return {
        "chats": m["chat"]["count"],
        "lost": m["excursions"]["chats_met"],
        "late": m["deadlines"]["lateness_max"],
    }


@pytest.mark.parametrize("slots", [1, 8])
def test_a_person_chatting_for_hours_meets_background_swaps_within_the_budget(
    slots: int,
) -> None:
    """The Azure conversation trace: one person, the page open for two hours,
    a cron job on a second model every 5 min. The median bet let about one
    message in ten wait for a swap; the budget holds it to 2 % (plus the one
    message a sure bet may lose), and a looser budget serves the cron sooner."""
    strict, loose = _azure_chat(slots, 0.02), _azure_chat(slots, 0.2)
    assert strict["chats"] >= 80, strict
    assert strict["lost"] <= 0.02 * strict["chats"] + 1, strict
    assert loose["lost"] > strict["lost"], (strict, loose)
    assert loose["late"] < strict["late"], (strict, loose)
