"""``TieredPolicy.queue_order``: the whole queue in dispatch order (docs/design.md §2).

The property: if the device freed now and nothing else changed, ``pick`` called
again and again (the device holding each picked job's model in turn) returns
the jobs exactly in ``queue_order``'s order. Checked on the pure core over
random queues: every class, producer paths, three models, deadlines past and
ahead, a foreground, and a history of runs that leaves the pool's producers
at different virtual times (some eligible, some not).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tierlm.core import Foreground, Job, SchedulerConfig, TaskClass, TieredPolicy, default_classes

CLASSES = {**default_classes(), "report": TaskClass("report", tier=3)}
PRODUCERS = ["a", "b", "swarm/1", "swarm/2", "swarm", "c/x/y"]

job_spec = st.tuples(
    st.sampled_from(sorted(CLASSES)),
    st.sampled_from(["m1", "m2", "m3"]),
    st.sampled_from(PRODUCERS),
    st.none() | st.floats(min_value=-50, max_value=50),
    st.none() | st.sampled_from(["s1", "s2"]),
)


@settings(max_examples=200, deadline=None)
@given(
    history=st.lists(st.tuples(job_spec, st.floats(min_value=0.1, max_value=12)), max_size=8),
    queue=st.lists(job_spec, min_size=1, max_size=25),
    foreground=st.none()
    | st.tuples(st.sampled_from(["extract", "gana"]), st.none() | st.just("s1")),
    loaded=st.sampled_from(["m1", "m2", None]),
)
def test_queue_order_is_the_order_successive_picks_take(
    history: list[tuple[tuple[str, str, str, float | None, str | None], float]],
    queue: list[tuple[str, str, str, float | None, str | None]],
    foreground: tuple[str, str | None] | None,
    loaded: str | None,
) -> None:
    # The pool floor is a share of past busy time, like a budget: picks in a
    # row without running anything change it (docs/design.md §4), so it is
    # left out here and tested on its own (tests/test_fair_pool.py).
    policy = TieredPolicy(CLASSES, SchedulerConfig(pool_floor=0.0))
    ids = iter(range(1, 10_000))
    now = 0.0

    def make(spec: tuple[str, str, str, float | None, str | None]) -> Job:
        name, model, producer, deadline, subject = spec
        if name == "chat":  # a chat that ran would hold its model (chat_grace)
            name = "gana"
        due = None if deadline is None else now + deadline
        return Job(next(ids), CLASSES[name], model, producer, subject, due, now)

    # History: jobs run for a while, so the pool's producers stand apart.
    for spec, seconds in history:
        policy.submit(make(spec), now)
        running = policy.pick(now, loaded)
        if running is not None:
            policy.started(running, now)
            now += seconds
            policy.finished(running, now)
            loaded = running.model_id
    for spec in queue:
        policy.submit(make(spec), now)
    now += 1.0
    if foreground is not None:
        policy.set_foreground(Foreground(*foreground), now)

    expected = policy.queue_order(now, loaded)
    assert sorted(j.id for j in expected) == sorted(j.id for j in policy.queued())
    taken = []
    while len(policy):
        job = policy.pick(now, loaded)
        assert job is not None
        taken.append(job)
        loaded = job.model_id
    assert [j.id for j in taken] == [j.id for j in expected]
