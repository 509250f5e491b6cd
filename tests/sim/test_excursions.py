"""The excursion metric (docs/design.md §4.8 (excursions), ``tierlm.sim.excursions``):
a swap away from the person's model with the chat page open is a bet on
their reading gap, lost when a chat comes before the device is back."""

from __future__ import annotations

from tierlm.sim.excursions import excursions
from tierlm.sim.records import JobRecord, RunRecord, SimRecords


def record(jobs: list[JobRecord], returns: list[tuple[float, float]]) -> SimRecords:
    rec = SimRecords("tierlm", "w", 1, 600.0, 0.05, 0.005, 10.0, jobs=jobs)
    rec.initial_model = "m1"
    rec.foreground = [(0.0, "chat")]
    rec.returns = returns
    return rec


def job(id_: int, cls: str, model: str, at: float, swap: tuple[float, float] | None) -> JobRecord:
    out = JobRecord(id_, cls, cls, model, None, None, at)
    run = RunRecord(start=at)
    if swap is not None:
        run.swap_start, run.swap_end = swap
    out.runs.append(run)
    return out


def test_a_chat_before_the_device_is_back_loses_the_bet() -> None:
    jobs = [
        job(1, "chat", "m1", 0.0, None),
        job(2, "gana", "m2", 100.0, (100.0, 110.0)),  # away: a bet
        job(3, "chat", "m1", 125.0, None),  # before the return ended: lost
        job(4, "gana", "m2", 300.0, (300.0, 310.0)),  # away again
        job(5, "chat", "m1", 400.0, None),  # after the return: won
    ]
    out = excursions(record(jobs, returns=[(120.0, 130.0), (320.0, 330.0)]))
    assert (out["bets"], out["lost"], out["chats_met"]) == (2, 1, 1)
    assert out["lost_share"] == 0.5
    assert out["chats_met_share"] == 1 / 3


def test_a_swap_with_the_chat_page_closed_is_no_bet() -> None:
    rec = record([job(1, "chat", "m1", 0.0, None), job(2, "gana", "m2", 100.0, (100.0, 110.0))], [])
    rec.foreground = [(0.0, "chat"), (50.0, "")]
    assert excursions(rec)["bets"] == 0
