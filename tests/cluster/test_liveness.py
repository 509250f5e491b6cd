"""tierlm.ray.liveness: when a replica's check_health tells Serve to replace it
(pure: the clock and the counts are arguments; the Ray test stalls a real one)."""

from __future__ import annotations

from tierlm.ray.liveness import CRASH_LOOP, CRASH_WINDOW_S, Liveness


def test_work_waiting_with_nothing_happening_is_a_stall_and_progress_is_not() -> None:
    live = Liveness(stall_after_s=10.0, now=0.0)
    assert live.problem(9.0, working=True, restarts=0) is None
    live.progress(9.0)  # a token
    assert live.problem(18.0, working=True, restarts=0) is None
    problem = live.problem(19.5, working=True, restarts=0)
    assert problem is not None and "stalled" in problem and "10 s" in problem


def test_an_idle_replica_is_never_stalled_however_long_it_idles() -> None:
    live = Liveness(stall_after_s=10.0, now=0.0)
    assert live.problem(1000.0, working=False, restarts=0) is None
    # Work arrives after the long idle: its clock starts now.
    assert live.problem(1005.0, working=True, restarts=0) is None


def test_restarts_in_a_row_are_a_crash_loop_and_spaced_ones_are_not() -> None:
    live = Liveness(stall_after_s=10.0, now=0.0)
    for i in range(CRASH_LOOP - 1):  # the watchdog restarting the worker
        assert live.problem(i * 10.0, working=False, restarts=i + 1) is None
    problem = live.problem(30.0, working=False, restarts=CRASH_LOOP)
    assert problem is not None and "crash loop" in problem
    spaced = Liveness(stall_after_s=10.0, now=0.0)
    for i in range(2 * CRASH_LOOP):
        assert spaced.problem(i * (CRASH_WINDOW_S / 2 + 1), working=False, restarts=i + 1) is None
