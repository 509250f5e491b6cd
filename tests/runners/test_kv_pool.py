"""The KV snapshot pool's bookkeeping, without llama.cpp: the byte bound, the
eviction order, and which tokens a resume text maps to."""

from __future__ import annotations

import pytest

from tierlm.runners.llama_cpp.worker.kv_pool import KvPool, Snapshot

pytestmark = pytest.mark.fast  # the inner loop: scripts/test --fast (tests/conftest.py)


def snapshot(
    key: str = "m", size: int = 100, text: str = "P", tokens: int = 10, kind: str = "preempted"
) -> Snapshot:
    return Snapshot(
        key,
        kind,  # type: ignore[arg-type]
        list(range(tokens)),
        n_prompt=4,
        prompt_text=text,
        segments=[(1, "a", True), (1, "b", False), (1, "", False), (1, "cd", True)],
        state=bytearray(size),
        n_state=tokens - 1,
    )


def test_states_stay_within_the_bound_least_recently_used_out() -> None:
    pool = KvPool(limit_bytes=250)
    first, second, third = snapshot(), snapshot(), snapshot()
    pool.add(first)
    pool.add(second)
    pool.touch(first)  # used: now the most recent
    pool.add(third)
    stats = pool.stats()
    assert stats.state_bytes == 200 and stats.states == 2 and stats.evicted == 1
    assert second.state is None and first.state is not None and third.state is not None
    # The evicted snapshot keeps its tokens: a resume can still re-evaluate them.
    assert stats.snapshots == 3


def test_a_state_larger_than_the_pool_keeps_only_its_tokens() -> None:
    pool = KvPool(limit_bytes=50)
    big = snapshot(size=100)
    pool.add(big)
    assert big.state is None and big.n_state == 0
    assert pool.stats().state_bytes == 0
    assert pool.find_resume("m", "P", "a") == (big, 5)


def test_resume_text_maps_to_tokens_only_where_nothing_was_held_back() -> None:
    s = snapshot()
    assert s.tokens_for("") == 4
    assert s.tokens_for("a") == 5
    # "b" was sent while more text was held back (a stop string, an unfinished
    # character): no exact token boundary there.
    assert s.tokens_for("ab") is None
    assert s.tokens_for("abcd") == 8
    assert s.tokens_for("abx") is None
    assert s.tokens_for("abcde") is None


def test_find_resume_matches_model_and_prompt() -> None:
    pool = KvPool()
    mine = snapshot(key="m", text="P")
    pool.add(mine)
    pool.add(snapshot(key="other", text="P"))
    pool.add(snapshot(key="m", text="Q", kind="prefix"))
    assert pool.find_resume("m", "P", "abcd") == (mine, 8)
    assert pool.find_resume("m", "Q", "a") is None  # prefixes are not resumes
    assert pool.find_resume("x", "P", "a") is None


def test_best_prefix_is_the_longest_restorable_one() -> None:
    pool = KvPool()
    short = snapshot(tokens=6)
    long = snapshot(tokens=12)
    pool.add(short)
    pool.add(long)
    assert pool.best_prefix("m", list(range(20))) == (long, 11)  # capped at n_state
    assert pool.best_prefix("m", [0, 1, 2, 99]) in ((short, 3), (long, 3))
    assert pool.best_prefix("n", list(range(20))) is None


def test_limit_is_checked() -> None:
    with pytest.raises(ValueError, match="kv_pool_bytes: must be >= 0"):
        KvPool(-1)
