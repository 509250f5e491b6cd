"""Invariants of docs/design.md §7, checked by Hypothesis over random histories.

A rule-based state machine drives a real Scheduler on a virtual-time loop with
random submits (every class, two models, deadlines past and ahead, subjects,
producer paths, failing work), cancels, foreground changes, pauses and time
advances, and checks:

- every submitted job ends exactly once (result, error or cancelled);
- a chat never waits behind lower tiers for more than one token boundary
  (besides the rest of a swap in progress, which cannot be interrupted), and
  nothing else starts while a chat waits;
- the fair pool's bookkeeping is exact: every node's weighted sum of its
  active children's virtual runtimes is what it says (docs/design.md §4);
- EEVDF eligibility: a job dispatched in the pool's order was, at every level
  of its producer path, the eligible entity with the earliest virtual deadline
  among those with work on its model (or, none being eligible, the furthest
  behind), so no producer starves;
- loans: a pool job never starts while an overdue job on its model has an
  open loan (its producer eligible, the floor not owed);
- slices: a pool job preempted by nothing but the pool had run a full slice
  since its start (or since its swap);
- preemption kinds (docs/design.md §4): a preemption is a ``PREEMPTED`` only
  while a person waits (T0 or T1 work queued) or the scheduler pauses, and a
  ``YIELD`` otherwise; a prompt evaluation is only ever cut by a cancel that
  aborts prompts, and a yielded call produced its first token (the device
  evaluates prompts here, up to 6 s of them, longer than a slice);
- chat is never re-queued.

200 examples in the default run; ``-m nightly`` runs 2 000.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.helpers import SWAP, TOKEN, runner
from tierlm import (
    CancelReason,
    JobContext,
    JobEnded,
    JobEvent,
    JobHandle,
    JobStarted,
    Preempting,
    Requeued,
    RunEnded,
    Scheduler,
    SchedulerEvent,
    SwapFinished,
    SwapStarted,
)
from tierlm.core import Job, TieredPolicy
from tierlm.core.eevdf import Entity
from tierlm.runners import GenerationRequest, SimulatedRunner
from tierlm.testing import VirtualTimeLoop

CLASSES = ["chat", "extract", "nataraj", "gana"]
PRODUCERS = ["a", "b", "swarm/1", "swarm/2", "swarm"]
PREFILL = 0.005  # seconds a prompt token: prompts of up to 3 000 tokens take 15 s
PROMPTS = st.integers(min_value=1, max_value=3000)


async def _failing(ctx: JobContext) -> None:
    await ctx.cancel.wait(0.3)  # a stop ends it as promptly as a runner would
    ctx.checkpoint()
    raise RuntimeError("work failed")


def _check_sums(node: Entity, violations: list[str]) -> None:
    """Every node's running sums equal a recount of its active children."""
    stack = [node]
    while stack:
        entity = stack.pop()
        active = [c for c in entity.children.values() if c.active]
        load = sum(c.load for c in active)
        total = sum(c.load * c.v for c in active)
        if (entity.sum_load, entity.sum_lv) != (load, total):
            violations.append(f"{entity!r}: sums {entity.sum_load, entity.sum_lv} != {load, total}")
        stack.extend(entity.children.values())


def _check_eevdf_pick(policy: TieredPolicy, job: Job, violations: list[str]) -> None:
    """At every level of ``job``'s path, it ranked first among the entities
    with queued work on its model (rank: eligible by deadline, else by v)."""
    entity: Entity | None = policy.fair.leaf(job.class_name, job.producer)
    while entity is not None and entity.parent is not None:
        node = entity.parent
        mine = node.rank(entity)
        for sibling in node.children.values():
            if (
                sibling is not entity
                and job.model_id in sibling.queued
                and node.rank(sibling) < mine
            ):
                violations.append(
                    f"{job!r}: at {node!r} ran {entity!r} {mine} before {sibling!r} "
                    f"{node.rank(sibling)}"
                )
        entity = node


class SchedulerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = VirtualTimeLoop()
        self.sched = Scheduler(runner("m1", prefill_per_token=PREFILL))
        assert isinstance(self.sched.policy, TieredPolicy)
        self.policy: TieredPolicy = self.sched.policy
        self.loop.run_until_complete(self.sched.__aenter__())
        self.handles: list[JobHandle[Any]] = []
        self.ends: Counter[int] = Counter()
        self.violations: list[str] = []
        self.submitted_at: dict[int, float] = {}
        self.chat_ids: set[int] = set()
        self.runs: list[tuple[int, str, float, float | None]] = []  # id, class, start, end
        self.open_runs: dict[int, int] = {}
        self.first_start: dict[int, float] = {}
        self.ended_at: dict[int, float] = {}
        self.slice_start: float | None = None
        self.swaps: list[tuple[float, float | None]] = []  # of jobs below chat: start, end
        self.open_swaps: dict[int, int] = {}
        self.sched.add_listener(self._on_event)

    # -- observation -------------------------------------------------------

    def _on_event(self, event: SchedulerEvent) -> None:
        if not isinstance(event, JobEvent):
            return
        job = event.job
        if isinstance(event, JobEnded):
            self.ended_at.setdefault(job.id, event.time)
            self.ends[job.id] += 1
            if self.ends[job.id] > 1:
                self.violations.append(f"job {job.id} ended twice")
        if isinstance(event, Requeued) and job.class_name == "chat":
            self.violations.append(f"chat {job.id} was re-queued")
        if isinstance(event, JobStarted):
            self.open_runs[job.id] = len(self.runs)
            self.runs.append((job.id, job.class_name, event.time, None))
            self.first_start.setdefault(job.id, event.time)
            self.slice_start = event.time
            self._check_pool_start(job, event.time)
        if isinstance(event, SwapStarted) and job.class_name != "chat":
            self.open_swaps[job.id] = len(self.swaps)
            self.swaps.append((event.time, None))
        if isinstance(event, SwapFinished | RunEnded) and job.id in self.open_swaps:
            index = self.open_swaps.pop(job.id)
            self.swaps[index] = (self.swaps[index][0], event.time)
        if isinstance(event, SwapFinished):
            self.slice_start = event.time  # a slice counts from the end of the swap
        if isinstance(event, Preempting):
            self._check_slice(job, event.time)
            self._check_kind(event)
        if isinstance(event, RunEnded):
            index = self.open_runs.pop(job.id, None)
            if index is not None:
                job_id, cls, start, _ = self.runs[index]
                self.runs[index] = (job_id, cls, start, event.time)

    def _check_pool_start(self, job: Job, now: float) -> None:
        policy = self.policy
        _check_sums(policy.fair.root, self.violations)
        if not job.task_class.fair or policy.tier(job, now) != 4:
            return
        _check_eevdf_pick(policy, job, self.violations)
        if policy.floor.active:
            return  # the pool was owed its floor at this decision: loans were closed
        for other in policy.queued():
            if (
                other.task_class.fair
                and other.model_id == job.model_id
                and other.deadline is not None
                and now >= other.deadline
                and policy.fair.path_eligible(other)
            ):
                self.violations.append(f"t={now}: pool job {job!r} ran before open loan {other!r}")

    def _check_slice(self, job: Job, now: float) -> None:
        """A pool job preempted while nothing of a higher tier waits was
        preempted by a slice: it must have run one."""
        policy = self.policy
        if self.sched.paused or not job.task_class.fair or policy.tier(job, now) != 4:
            return
        if any(policy.tier(other, now) < 4 for other in policy.queued()):
            return
        start = self.slice_start
        ran = now - start if start is not None else 0.0
        if ran < policy.config.slice - 1e-6:
            self.violations.append(
                f"t={now}: pool job {job!r} preempted {ran:.3f} s into its slice"
            )

    def _check_kind(self, event: Preempting) -> None:
        """Only a person waiting (or a pause) cuts an evaluation short."""
        now = event.time
        person = [o for o in self.policy.queued() if self.policy.tier(o, now) <= 1]
        # Foreground flapping (docs/design.md §4.6): the surface the person just
        # left yields to the new one; only a chat then still cuts it at once.
        policy = self.policy
        if policy.flapping.just_left(event.job, now, policy.slices.evaluations, []):
            person = [o for o in person if self.policy.tier(o, now) == 0]
        if event.reason is CancelReason.YIELD and person:
            self.violations.append(f"t={now}: {event.job!r} yielded while {person[0]!r} waits")
        if event.reason is CancelReason.PREEMPTED and not (person or self.sched.paused):
            self.violations.append(f"t={now}: {event.job!r} preempted with no person waiting")

    def _work(self, seconds: float, prompt_tokens: int) -> Any:
        """A job that evaluates its prompt, decodes for ``seconds``, and
        resumes where a preemption stopped it (its prompt evaluated again);
        it checks how each of its calls stopped."""
        tokens = max(1, round(seconds / TOKEN))
        done = [0]
        violations = self.violations

        async def work(ctx: JobContext) -> int:
            left = tokens - done[0]
            if left > 0:
                assert isinstance(ctx.runner, SimulatedRunner)
                request = GenerationRequest(
                    ctx.model_id, prompt="x", max_tokens=left, prompt_tokens=prompt_tokens
                )
                cancel = ctx.cancel
                began_cancelled = cancel.cancelled
                outcome = await ctx.runner.complete(request, cancel)
                done[0] += outcome.tokens
                if outcome.stopped and not began_cancelled:
                    if outcome.first_token_at is None and not cancel.aborts_prompt:
                        violations.append(f"job {ctx.job_id}: {cancel.reason} cut its evaluation")
                    if cancel.reason is CancelReason.YIELD and outcome.tokens < 1:
                        violations.append(f"job {ctx.job_id}: yielded without a token")
            ctx.checkpoint()
            return done[0]

        return work

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    # -- rules ---------------------------------------------------------------

    @rule(
        class_name=st.sampled_from(CLASSES),
        model=st.sampled_from(["m1", "m1", "m2"]),
        seconds=st.floats(min_value=0.05, max_value=20),
        producer=st.sampled_from(PRODUCERS),
        deadline=st.none() | st.floats(min_value=-10, max_value=60),
        subject=st.none() | st.sampled_from(["s1", "s2"]),
        fails=st.booleans(),
        prompt=PROMPTS,
    )
    def submit(
        self,
        class_name: str,
        model: str,
        seconds: float,
        producer: str,
        deadline: float | None,
        subject: str | None,
        fails: bool,
        prompt: int,
    ) -> None:
        async def go() -> None:
            now = self.sched.now()
            work = _failing if fails and class_name != "chat" else self._work(seconds, prompt)
            handle = self.sched.submit(
                class_name,
                model,
                work,
                producer=producer,
                subject=subject,
                deadline=None if deadline is None else now + deadline,
            )
            self.handles.append(handle)
            self.submitted_at[handle.id] = now
            if class_name == "chat":
                self.chat_ids.add(handle.id)

        self._run(go())

    @rule(
        class_name=st.sampled_from(["nataraj", "gana"]),
        model=st.sampled_from(["m1", "m1", "m2"]),
        seconds=st.floats(min_value=1, max_value=20),
        producer=st.sampled_from(PRODUCERS),
        count=st.integers(2, 4),
        overdue=st.booleans(),
        prompt=PROMPTS,
    )
    def backlog(
        self,
        class_name: str,
        model: str,
        seconds: float,
        producer: str,
        count: int,
        overdue: bool,
        prompt: int,
    ) -> None:
        """Several pool jobs of one producer at once: the pool's contended case."""

        async def go() -> None:
            now = self.sched.now()
            for _ in range(count):
                handle = self.sched.submit(
                    class_name,
                    model,
                    self._work(seconds, prompt),
                    producer=producer,
                    deadline=now - 1 if overdue else None,
                )
                self.handles.append(handle)
                self.submitted_at[handle.id] = now

        self._run(go())

    @rule(
        model=st.sampled_from(["m1", "m1", "m2"]),
        seconds=st.floats(min_value=1, max_value=20),
        prompt=PROMPTS,
    )
    def contend(self, model: str, seconds: float, prompt: int) -> None:
        """Two Gana producers at once, prompts of up to 15 s: slices end in
        the middle of evaluations (docs/design.md §4.6)."""

        async def go() -> None:
            now = self.sched.now()
            for producer in ("a", "b"):
                handle = self.sched.submit(
                    "gana", model, self._work(seconds, prompt), producer=producer
                )
                self.handles.append(handle)
                self.submitted_at[handle.id] = now

        self._run(go())

    @precondition(lambda self: bool(self.handles))
    @rule(index=st.integers(0, 10_000))
    def cancel(self, index: int) -> None:
        handle = self.handles[index % len(self.handles)]

        async def go() -> None:
            handle.cancel()

        self._run(go())

    @rule(
        class_name=st.none() | st.sampled_from(CLASSES),
        subject=st.none() | st.sampled_from(["s1", "s2"]),
    )
    def foreground(self, class_name: str | None, subject: str | None) -> None:
        async def go() -> None:
            self.sched.set_foreground(class_name, subject if class_name else None)

        self._run(go())

    @rule()
    def pause(self) -> None:
        self._run(self.sched.pause())

    @rule()
    def resume(self) -> None:
        async def go() -> None:
            self.sched.resume()

        self._run(go())

    @rule(seconds=st.floats(min_value=0.01, max_value=30))
    def advance(self, seconds: float) -> None:
        self._run(asyncio.sleep(seconds))

    # -- invariants ------------------------------------------------------------

    @invariant()
    def no_violation(self) -> None:
        assert not self.violations, self.violations

    @invariant()
    def chat_never_waits_behind_lower_tiers(self) -> None:
        if self.sched.paused:
            return
        now = self.loop.time()
        for chat_id in self.chat_ids:
            arrived = self.submitted_at[chat_id]
            waited_until = self.first_start.get(chat_id, self.ended_at.get(chat_id, now))
            behind = 0.0
            for job_id, cls, start, end in self.runs:
                if cls == "chat":
                    continue
                overlap = min(end if end is not None else now, waited_until) - max(start, arrived)
                if overlap > 0:
                    behind += overlap
                    assert start <= arrived, (
                        f"job {job_id} ({cls}) started while chat {chat_id} waited"
                    )
            swapping = sum(
                max(0.0, min(end if end is not None else now, waited_until) - max(start, arrived))
                for start, end in self.swaps
            )
            assert swapping <= SWAP + 1e-6, (chat_id, swapping)
            # One token boundary: never a prompt evaluation (a yield under way
            # is cut short), besides the rest of a swap in progress.
            assert behind - swapping <= TOKEN + 1e-6, (chat_id, behind, swapping)

    def teardown(self) -> None:
        try:
            self._run(self.sched.aclose())
            assert all(h.done() for h in self.handles)
            for handle in self.handles:
                assert self.ends[handle.id] == 1, (handle, self.ends[handle.id])
            assert not self.violations, self.violations
        finally:
            self.loop.close()


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


SchedulerMachine.TestCase.settings = _settings(200)
test_scheduler_invariants = SchedulerMachine.TestCase


@pytest.mark.nightly
def test_scheduler_invariants_nightly() -> None:
    """The same machine, ten times the histories (``pytest -m nightly``)."""
    run_state_machine_as_test(SchedulerMachine, settings=_settings(2000))
