"""The llama.cpp worker's step plan (docs/design.md §4.7 (the step plan)), a
pure function: checked without llama.cpp."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlm.runners.llama_cpp.worker.engine.step_plan import SlotState, plan_step

pytestmark = pytest.mark.fast  # the inner loop: scripts/test --fast (tests/conftest.py)


def slot(slot: int, admitted: int, *, person: bool = False, pending: int = 0, n_past: int = 10):
    return SlotState(slot, admitted, person, pending, may_step=pending == 0, n_past=n_past)


def test_a_persons_prompt_is_evaluated_before_background_prompts_admitted_earlier() -> None:
    """Before, the step's prompt budget went in admission order: a person's
    chat admitted after a long background prompt waited for all of it."""
    plan = plan_step(
        [
            slot(0, 0, pending=2000),  # a background prompt, admitted first
            slot(1, 1),  # a running stream
            slot(2, 2, person=True, pending=50),
        ],
        n_batch=512,
        chunk=64,
        n_ctx=4096,
    )
    assert plan.decode == (1,)  # the stream keeps decoding (stall-free)
    assert plan.prefill == ((2, 50), (0, 14))  # the person's whole prompt first


def test_prompts_that_arrive_together_with_no_stream_running_are_read_in_one_step() -> None:
    """As llama-server reads them: one chunk a step made the eighth of eight
    first tokens wait five steps for nothing (no stream was decoding)."""
    plan = plan_step([slot(i, i, pending=40) for i in range(8)], n_batch=512, chunk=64, n_ctx=4096)
    assert plan.decode == () and plan.prefill == tuple((i, 40) for i in range(8))
    # One stream decoding: the chunk again bounds what its step carries.
    plan = plan_step(
        [slot(0, 0), *(slot(i, i, pending=40) for i in range(1, 8))],
        n_batch=512,
        chunk=64,
        n_ctx=4096,
    )
    assert plan.decode == (0,) and plan.prefill == ((1, 40), (2, 24))


def test_decoding_rows_go_in_slot_order_and_full_contexts_end() -> None:
    plan = plan_step(
        [slot(5, 0), slot(2, 1), slot(3, 2, n_past=4096)], n_batch=512, chunk=64, n_ctx=4096
    )
    assert plan.decode == (2, 5)
    assert plan.context_full == (3,)


@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 3000), st.booleans(), st.integers(0, 5000)),
        max_size=16,
    ),
    st.integers(1, 128),
    st.integers(16, 512),
)
def test_the_plan_keeps_within_the_batch_and_the_budget(
    rows: list[tuple[bool, int, bool, int]], chunk: int, n_batch: int
) -> None:
    states = [
        SlotState(i, i, person, pending, may_step=pending == 0 and ahead, n_past=past)
        for i, (person, pending, ahead, past) in enumerate(rows)
    ]
    rows_max = max(n_batch, len(states))
    plan = plan_step(states, n_batch=rows_max, chunk=chunk, n_ctx=4096)
    assert plan.tokens <= rows_max
    # The chunk bounds prompts beside decoding streams; alone, a whole batch.
    assert sum(n for _s, n in plan.prefill) <= (chunk if plan.decode else rows_max)
    # A background prompt gets budget only once every person's prompt has all of it.
    persons = {s.slot: s.pending for s in states if s.person and s.pending}
    given_to = dict(plan.prefill)
    if any(not s.person for s in states if s.slot in given_to):
        assert all(given_to.get(slot) == pending for slot, pending in persons.items())
