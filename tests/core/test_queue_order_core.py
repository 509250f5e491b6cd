"""``TieredPolicy.queue_order``: the whole queue in dispatch order (docs/design.md §2).

Checked on the pure core over random queues (every class, producer paths,
three models, deadlines past and ahead, a foreground, and a history of runs
that leaves the pool's producers at different virtual times, some eligible,
some not):

- position 1 is always what ``pick`` takes next;
- if the device freed now and every job then ran for one slice (the most a
  pool job runs while others wait), ``pick`` called again and again (the
  device holding each picked job's model in turn) takes the jobs exactly in
  ``queue_order``'s order, when the pool's queued work is on one model and
  none of it is overdue. (A pool job run on another model, or on a loan,
  charges its producer before the pool's turns: positions do not model that,
  docs/design.md §2.)
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tierlm.core import Foreground, Job, SchedulerConfig, TaskClass, TieredPolicy, default_classes
from tierlm.testing import next_start

# No budget here: the jobs this test runs would move extraction's share, and a
# budget's share is past busy time, which positions do not model (§2).
CLASSES = {
    **default_classes(),
    "extract": TaskClass("extract", tier=2),
    "report": TaskClass("report", tier=3),
}
SLICE = 0.001  # short, so running the queue crosses no deadline ahead (>= 1 s)
PRODUCERS = ["a", "b", "swarm/1", "swarm/2", "swarm", "c/x/y"]

job_spec = st.tuples(
    st.sampled_from(sorted(CLASSES)),
    st.sampled_from(["m1", "m2", "m3"]),
    st.sampled_from(PRODUCERS),
    st.none() | st.floats(min_value=-50, max_value=-1) | st.floats(min_value=1, max_value=50),
    st.none() | st.sampled_from(["s1", "s2"]),
)


Spec = tuple[str, str, str, float | None, str | None]

queues = st.fixed_dictionaries(
    {
        "history": st.lists(
            st.tuples(job_spec, st.floats(min_value=0.1, max_value=12)), max_size=8
        ),
        "queue": st.lists(job_spec, min_size=1, max_size=25),
        "foreground": st.none()
        | st.tuples(st.sampled_from(["extract", "gana"]), st.none() | st.just("s1")),
        "loaded": st.sampled_from(["m1", "m2", None]),
    }
)


def build(
    case: dict[str, Any], *, pool_on_one_model: bool
) -> tuple[TieredPolicy, float, str | None]:
    """The policy after the case's history and with its queue (paused time)."""
    # The pool floor is a share of past busy time, like a budget: running the
    # queue changes it (docs/design.md §4), so it is left out here and tested
    # on its own (tests/shell/test_fair_pool.py).
    policy = TieredPolicy(CLASSES, SchedulerConfig(pool_floor=0.0, slice=SLICE))
    ids = iter(range(1, 10_000))
    now = 0.0
    loaded: str | None = case["loaded"]

    def make(spec: Spec, queued: bool) -> Job:
        name, model, producer, deadline, subject = spec
        if name == "chat":  # a chat that ran would hold its model (chat_grace)
            name = "gana"
        if queued and pool_on_one_model and CLASSES[name].fair:
            model = "m1"
            if deadline is not None:  # still ahead once the clock moves on (+1 s)
                deadline = abs(deadline) + 2
        due = None if deadline is None else now + deadline
        return Job(next(ids), CLASSES[name], model, producer, subject, due, now)

    # History: jobs run for a while, so the pool's producers stand apart.
    for spec, seconds in case["history"]:
        policy.submit(make(spec, False), now)
        running = next_start(policy, now, loaded)
        if running is None:
            # An anticipatory hold for the producer that just ran (§4.8, at
            # most half a swap estimate): it ends with time, and the job runs.
            now += 6.0
            running = next_start(policy, now, loaded)
        if running is not None:
            now += seconds
            policy.finished(running, now)
            loaded = running.model_id
    # The queue arrives a while after the history: a producer's anticipatory
    # hold (at most half a swap estimate, 5 s) is over, as a chat's grace is
    # kept out above: positions ignore holds that only time ends (§2).
    now += 6.0
    for spec in case["queue"]:
        policy.submit(make(spec, True), now)
    now += 1.0
    if case["foreground"] is not None:
        policy.set_foreground(Foreground(*case["foreground"]), now)
    return policy, now, loaded


@settings(max_examples=200, deadline=None)
@given(case=queues)
def test_position_one_is_the_next_pick(case: dict[str, Any]) -> None:
    policy, now, loaded = build(case, pool_on_one_model=False)
    expected = policy.queue_order(now, loaded)
    assert sorted(j.id for j in expected) == sorted(j.id for j in policy.queued())
    job = next_start(policy, now, loaded)
    assert job is not None and job.id == expected[0].id


@settings(max_examples=200, deadline=None)
@given(case=queues)
def test_queue_order_is_the_order_successive_one_slice_runs_take(case: dict[str, Any]) -> None:
    policy, now, loaded = build(case, pool_on_one_model=True)
    expected = policy.queue_order(now, loaded)
    taken = []
    while len(policy):
        job = next_start(policy, now, loaded)
        assert job is not None
        taken.append(job)
        loaded = job.model_id
        now += SLICE
        policy.finished(job, now)
    assert [j.id for j in taken] == [j.id for j in expected]


def test_looking_at_the_queue_changes_no_schedule() -> None:
    """``queue_order`` is a query (docs/design.md §2.6): it reads the pool's
    floor as a decision now would find it, and leaves it where the last
    decision did (§4.5). It brought the floor up to now, so a gateway that
    looked at queue positions every 0.25 s moved the floor between decisions
    and changed what the next one ran."""
    twins = [TieredPolicy(default_classes(), SchedulerConfig()) for _ in range(2)]
    starts = []
    for policy in twins:
        overdue = Job(1, default_classes()["gana"], "m1", "cron", None, -1.0, 0.0)
        fresh = Job(2, default_classes()["gana"], "m1", "deck", None, None, 0.0)
        policy.submit(overdue, 0.0)
        policy.submit(fresh, 0.0)
        starts.append(next_start(policy, 0.0, "m1"))
    assert [job.id for job in starts if job] == [1, 1]  # the loan runs first
    looked, untouched = twins
    before = looked.floor.active
    order = looked.queue_order(100.0, "m1")  # 100 s of overdue work: the floor is owed
    assert [job.id for job in order] == [2]
    assert looked.floor.active == before
    assert looked.floor.owed(100.0, True) == untouched.floor.owed(100.0, True)
