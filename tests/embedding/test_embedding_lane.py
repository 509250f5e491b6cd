"""The embedding lane's behaviour, on the virtual-time loop with simulated embedders."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import TYPE_CHECKING

import pytest

from tests.embedding.helpers import RecordingEmbedder
from tierlm.embedding import (
    EmbeddingError,
    EmbeddingFailed,
    EmbeddingLane,
    LaneClosed,
    LaneFull,
    SimulatedEmbedder,
    TextTooLong,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tierlm.embedding import Vector


def now() -> float:
    return asyncio.get_running_loop().time()


async def settle() -> None:
    """Let every ready callback run (no virtual time passes)."""
    for _ in range(10):
        await asyncio.sleep(0)


# ------------------------------------------------------------------ batching


async def test_concurrent_calls_are_coalesced_into_batches_of_max_batch() -> None:
    emb = RecordingEmbedder()

    lane = EmbeddingLane(emb, concurrency=2, max_batch=32)
    texts = [f"note {i}" for i in range(100)]
    vectors = await asyncio.gather(*(lane.embed(t) for t in texts))
    assert vectors == [emb.vector_for(t) for t in texts]
    assert emb.sizes == [32, 32, 32, 4]
    # Full batches start at once; the last, partial one waits for a slot.
    assert emb.started_at[:2] == [0.0, 0.0]
    stats = lane.stats()
    assert stats.batches == 4
    assert stats.batch_sizes == {4: 1, 32: 3}
    assert stats.embedded == stats.accepted == 100
    await lane.aclose()


async def test_a_lone_call_waits_max_wait_for_company_then_runs() -> None:
    emb = RecordingEmbedder(fixed_seconds=0.01, per_text_seconds=0.001)

    lane = EmbeddingLane(emb, concurrency=1, max_wait_ms=5)
    vector = await lane.embed("alone")
    assert vector == emb.vector_for("alone")
    assert emb.started_at == [pytest.approx(0.005)]
    assert now() == pytest.approx(0.005 + emb.cost(1))

    # A second text arriving inside the window joins the first's batch.
    start = now()
    first = asyncio.create_task(lane.embed("first"))
    await asyncio.sleep(0.003)
    second = asyncio.create_task(lane.embed("second"))
    await asyncio.gather(first, second)
    assert emb.batches[-1] == ["first", "second"]
    assert emb.started_at[-1] == pytest.approx(start + 0.005)
    await lane.aclose()


async def test_zero_max_wait_runs_what_is_queued_at_once() -> None:
    emb = RecordingEmbedder()

    lane = EmbeddingLane(emb, concurrency=1, max_wait_ms=0)
    await lane.embed("now")
    assert emb.started_at == [0.0]
    await lane.aclose()


async def test_results_go_to_the_right_caller_in_order() -> None:
    emb = RecordingEmbedder()

    lane = EmbeddingLane(emb, concurrency=2, max_batch=8)
    many = [f"many {i}" for i in range(50)]
    singles = [f"single {i}" for i in range(30)]
    results = await asyncio.gather(lane.embed_many(many), *(lane.embed(t) for t in singles))
    assert results[0] == [emb.vector_for(t) for t in many]
    assert list(results[1:]) == [emb.vector_for(t) for t in singles]
    assert len(emb.batches) > 2  # the call really was split across batches
    await lane.aclose()


@pytest.mark.parametrize("concurrency", [1, 2, 3])
async def test_concurrency_bound_is_never_exceeded(concurrency: int) -> None:
    emb = RecordingEmbedder(fixed_seconds=0.05)

    lane = EmbeddingLane(emb, concurrency=concurrency, max_batch=4)

    async def caller(i: int) -> None:
        await asyncio.sleep(i * 0.003)  # staggered arrivals
        await lane.embed(f"text {i}")

    await asyncio.gather(*(caller(i) for i in range(300)))
    assert emb.peak_in_flight == concurrency
    assert lane.stats().peak_in_flight_batches == concurrency
    await lane.aclose()


def test_a_blocking_embedder_runs_off_the_event_loop() -> None:
    class Blocking:
        dim = 2
        max_input_tokens = 16

        def __init__(self) -> None:
            self.threads: set[int] = set()

        def embed_batch(self, texts: Sequence[str]) -> list[Vector]:
            self.threads.add(threading.get_ident())
            return [[float(len(t)), 1.0] for t in texts]

    emb = Blocking()

    async def main() -> list[Vector]:
        async with EmbeddingLane(emb, concurrency=2) as lane:
            return await asyncio.gather(*(lane.embed("x" * n) for n in range(1, 6)))

    # A real loop: the virtual one cannot wait for threads.
    assert asyncio.run(main()) == [[float(n), 1.0] for n in range(1, 6)]
    assert emb.threads
    assert threading.get_ident() not in emb.threads


async def test_non_list_vectors_are_returned_as_lists_of_float() -> None:
    class Tuples:
        dim = 3
        max_input_tokens = 16

        async def embed_batch(self, texts: Sequence[str]) -> list[tuple[int, int, int]]:
            return [(1, 2, 3) for _ in texts]

    async with EmbeddingLane(Tuples()) as lane:  # type: ignore[arg-type]
        assert await lane.embed("a") == [1.0, 2.0, 3.0]


# ---------------------------------------------------------------- pushback


async def test_nowait_on_a_full_queue_raises_lane_full_and_queues_nothing() -> None:
    emb = RecordingEmbedder(fixed_seconds=1.0)

    lane = EmbeddingLane(emb, concurrency=1, max_batch=2, max_queue=3)
    busy = asyncio.create_task(lane.embed("busy"))
    await asyncio.sleep(0.1)  # "busy" is running; the next texts must queue
    queued = [asyncio.create_task(lane.embed(f"q{i}")) for i in range(3)]
    await settle()
    assert lane.stats().queue_depth == 3

    with pytest.raises(LaneFull, match="queue full"):
        await lane.embed("one more", nowait=True)
    with pytest.raises(LaneFull):
        await lane.embed_many(["a", "b"], nowait=True)
    stats = lane.stats()
    assert stats.rejected == 3
    assert stats.queue_depth == 3
    await asyncio.gather(busy, *queued)
    assert "one more" not in emb.seen

    # Room again: nowait is accepted, all or nothing for embed_many.
    assert await lane.embed_many(["a", "b"], nowait=True) == [
        emb.vector_for("a"),
        emb.vector_for("b"),
    ]
    with pytest.raises(LaneFull):  # can never fit
        await lane.embed_many(["x"] * 4, nowait=True)
    await lane.aclose()


async def test_a_full_queue_pushes_back_in_arrival_order() -> None:
    emb = RecordingEmbedder(fixed_seconds=1.0)

    lane = EmbeddingLane(emb, concurrency=1, max_batch=2, max_queue=2)
    busy = asyncio.create_task(lane.embed("busy"))
    await asyncio.sleep(0.1)
    callers = []
    for i in range(6):
        callers.append(asyncio.create_task(lane.embed(f"t{i}")))
        await asyncio.sleep(0.01)
    stats = lane.stats()
    assert stats.queue_depth == 2
    assert stats.waiting_callers == 4
    assert stats.pushbacks == 4
    assert not any(c.done() for c in callers)
    results = await asyncio.gather(*callers)
    assert results == [emb.vector_for(f"t{i}") for i in range(6)]
    await busy
    # Texts entered the queue, and so the batches, in arrival order.
    assert emb.seen == ["busy"] + [f"t{i}" for i in range(6)]
    assert lane.stats().peak_queue_depth == 2
    await lane.aclose()


async def test_embed_many_larger_than_the_queue_is_admitted_as_room_appears() -> None:
    emb = RecordingEmbedder()

    lane = EmbeddingLane(emb, concurrency=1, max_batch=4, max_queue=5)
    texts = [f"t{i}" for i in range(23)]
    assert await lane.embed_many(texts) == [emb.vector_for(t) for t in texts]
    assert emb.seen == texts
    stats = lane.stats()
    assert stats.peak_queue_depth <= 5
    assert stats.pushbacks > 0
    await lane.aclose()


# ------------------------------------------------------------------ floods


async def _flood(
    lane: EmbeddingLane, *, rate: float, seconds: float, nowait: bool
) -> dict[str, object]:
    """Offer ``rate`` texts/s for ``seconds``, one independent caller per text.

    Samples the lane at every arrival; returns what each caller got.
    """
    n = round(rate * seconds)
    outcomes: dict[str, object] = {}
    worst_queue = worst_in_flight_texts = worst_waiting = 0

    async def caller(text: str) -> None:
        try:
            outcomes[text] = await lane.embed(text, nowait=nowait)
        except LaneFull as exc:
            outcomes[text] = exc

    callers = []
    start = now()
    for i in range(n):
        await asyncio.sleep(max(0.0, start + i / rate - now()))
        callers.append(asyncio.create_task(caller(f"note {i}")))
        stats = lane.stats()
        worst_queue = max(worst_queue, stats.queue_depth)
        worst_in_flight_texts = max(worst_in_flight_texts, stats.in_flight_texts)
        worst_waiting = max(worst_waiting, stats.waiting_callers)
    await asyncio.gather(*callers)
    assert worst_queue <= lane.max_queue
    assert worst_in_flight_texts <= lane.concurrency * lane.max_batch
    outcomes["_worst_waiting"] = worst_waiting
    return outcomes


async def test_flood_200_per_second_for_10_s_within_capacity() -> None:
    """The seed's flood: with MiniLM-like costs the lane keeps up, nothing waits long."""
    emb = RecordingEmbedder()  # ~7 ms + ~2 ms per text: ~1 000 texts/s at batch 32

    lane = EmbeddingLane(emb, concurrency=2)
    outcomes = await _flood(lane, rate=200, seconds=10, nowait=True)
    assert outcomes.pop("_worst_waiting") == 0
    assert len(outcomes) == 2000
    for text, vector in outcomes.items():
        assert vector == emb.vector_for(text), text
    stats = lane.stats()
    assert (stats.accepted, stats.embedded, stats.rejected, stats.dropped) == (2000, 2000, 0, 0)
    assert stats.pushbacks == 0
    assert stats.peak_queue_depth <= 4
    assert stats.latency_p99 is not None
    assert stats.latency_p99 < 0.005 + emb.cost(4)
    assert now() < 10.1
    await lane.aclose()


async def test_flood_beyond_capacity_pushes_back_and_loses_nothing() -> None:
    # ~173 texts/s at best (2 x 32 texts per 0.37 s): a 200/s flood overruns it.
    emb = RecordingEmbedder(fixed_seconds=0.05, per_text_seconds=0.01)

    lane = EmbeddingLane(emb, concurrency=2, max_queue=100)
    outcomes = await _flood(lane, rate=200, seconds=10, nowait=False)
    worst_waiting = outcomes.pop("_worst_waiting")
    assert isinstance(worst_waiting, int)
    assert worst_waiting > 0  # pushback observed
    assert len(outcomes) == 2000
    for text, vector in outcomes.items():
        assert vector == emb.vector_for(text), text
    # Every text embedded exactly once, in the order offered.
    assert emb.seen == [f"note {i}" for i in range(2000)]
    stats = lane.stats()
    assert stats.pushbacks > 0
    assert stats.peak_queue_depth == 100
    assert (stats.accepted, stats.embedded, stats.dropped) == (2000, 2000, 0)
    assert (stats.queue_depth, stats.waiting_callers, stats.in_flight_batches) == (0, 0, 0)
    await lane.aclose()


async def test_flood_beyond_capacity_with_nowait_rejects_the_overflow_visibly() -> None:
    emb = RecordingEmbedder(fixed_seconds=0.05, per_text_seconds=0.01)

    lane = EmbeddingLane(emb, concurrency=2, max_queue=100)
    outcomes = await _flood(lane, rate=200, seconds=10, nowait=True)
    assert outcomes.pop("_worst_waiting") == 0
    accepted = {t: v for t, v in outcomes.items() if not isinstance(v, LaneFull)}
    rejected = [t for t, v in outcomes.items() if isinstance(v, LaneFull)]
    assert rejected  # the overflow is visible to the producer
    assert len(accepted) + len(rejected) == 2000
    for text, vector in accepted.items():
        assert vector == emb.vector_for(text)
    assert sorted(emb.seen) == sorted(accepted)
    stats = lane.stats()
    assert (stats.accepted, stats.rejected) == (len(accepted), len(rejected))
    assert stats.peak_queue_depth == 100
    await lane.aclose()


async def test_flood_leaves_no_memory_behind() -> None:
    """Memory bounded: what the lane holds after a flood is small and a second
    flood through the same lane adds nothing to it."""
    import gc
    import tracemalloc
    from pathlib import Path

    import tierlm.embedding

    package = str(Path(tierlm.embedding.__file__).parent)
    emb = SimulatedEmbedder(dim=8)

    def held_by_the_lane() -> int:
        # Only allocations made by tierlm.embedding: the test's own tasks and
        # asyncio's internals are not the lane's memory.
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(True, f"{package}/*")]
        )
        return sum(stat.size for stat in snapshot.statistics("filename"))

    tracemalloc.start()
    try:
        lane = EmbeddingLane(emb, concurrency=2, max_queue=64)
        held = []
        for _ in range(2):
            outcomes = await _flood(lane, rate=200, seconds=10, nowait=False)
            assert len(outcomes) == 2001
            del outcomes
            gc.collect()
            held.append(held_by_the_lane())
        await lane.aclose()
    finally:
        tracemalloc.stop()
    # After a flood the lane keeps its counters, a bounded window of recent
    # latencies (1 024 floats) and a batch size histogram: tens of KB.
    assert held[0] < 128 * 1024, held
    # 2 000 more texts add nothing (a kept vector per text would be ~300 KB).
    assert held[1] - held[0] < 8 * 1024, held


# ------------------------------------------------------------- cancellation


async def test_a_cancelled_caller_is_dropped_if_its_batch_has_not_started() -> None:
    emb = RecordingEmbedder(fixed_seconds=1.0)

    lane = EmbeddingLane(emb, concurrency=1, max_batch=8)
    busy = asyncio.create_task(lane.embed("busy"))
    await asyncio.sleep(0.1)
    b, c, d = (asyncio.create_task(lane.embed(t)) for t in ("b", "c", "d"))
    await settle()
    c.cancel()
    await settle()
    assert lane.stats().queue_depth == 2
    assert await b == emb.vector_for("b")
    assert await d == emb.vector_for("d")
    assert c.cancelled()
    await busy
    assert emb.batches == [["busy"], ["b", "d"]]
    assert lane.stats().dropped == 1
    await lane.aclose()


async def test_a_caller_cancelled_after_its_batch_started_does_not_disturb_the_batch() -> None:
    emb = RecordingEmbedder(fixed_seconds=1.0)

    lane = EmbeddingLane(emb, concurrency=1, max_batch=8)
    a, b = (asyncio.create_task(lane.embed(t)) for t in ("a", "b"))
    await asyncio.sleep(0.5)  # the batch [a, b] is running
    a.cancel()
    assert await b == emb.vector_for("b")
    assert a.cancelled()
    assert emb.batches == [["a", "b"]]
    assert lane.stats().dropped == 0
    await lane.aclose()


async def test_cancelling_embed_many_drops_its_queued_texts() -> None:
    emb = RecordingEmbedder(fixed_seconds=1.0)

    lane = EmbeddingLane(emb, concurrency=1, max_batch=2)
    many = asyncio.create_task(lane.embed_many(["m0", "m1", "m2", "m3", "m4"]))
    await asyncio.sleep(0.5)  # [m0, m1] running, m2..m4 queued
    many.cancel()
    await settle()
    assert lane.stats().queue_depth == 0
    assert await lane.embed("after") == emb.vector_for("after")
    assert emb.batches == [["m0", "m1"], ["after"]]
    assert lane.stats().dropped == 3
    await lane.aclose()


async def test_a_cancelled_pushed_back_caller_gives_up_its_place() -> None:
    emb = RecordingEmbedder(fixed_seconds=1.0)

    lane = EmbeddingLane(emb, concurrency=1, max_batch=1, max_queue=1)
    busy = asyncio.create_task(lane.embed("busy"))
    await asyncio.sleep(0.1)
    queued = asyncio.create_task(lane.embed("queued"))
    w1 = asyncio.create_task(lane.embed("w1"))
    w2 = asyncio.create_task(lane.embed("w2"))
    await settle()
    assert lane.stats().waiting_callers == 2
    w1.cancel()
    await settle()
    assert lane.stats().waiting_callers == 1
    assert len(lane._queue._waiters) == 1  # it left the line, not just went quiet
    assert await w2 == emb.vector_for("w2")
    await asyncio.gather(busy, queued)
    assert emb.seen == ["busy", "queued", "w2"]
    await lane.aclose()


async def test_a_caller_cancelled_just_after_its_text_was_queued_for_it_is_dropped() -> None:
    """Room goes straight to the first pushed-back caller: its text is queued for
    it before it resumes. Cancelled in between, the text must still be dropped."""
    emb = RecordingEmbedder(fixed_seconds=1.0)

    lane = EmbeddingLane(emb, concurrency=1, max_batch=1, max_queue=1)
    busy = asyncio.create_task(lane.embed("busy"))
    await asyncio.sleep(0.1)
    queued = asyncio.create_task(lane.embed("queued"))
    waiter = asyncio.create_task(lane.embed("w"))
    await settle()
    assert lane.stats().waiting_callers == 1

    hand_off = lane._queue._wake_waiters

    def hand_off_then_cancel() -> None:
        hand_off()
        if lane.stats().waiting_callers == 0 and not waiter.done():
            waiter.cancel()  # "w" is queued now, its caller not yet resumed

    lane._queue._wake_waiters = hand_off_then_cancel  # type: ignore[method-assign]
    await asyncio.gather(busy, queued)
    await settle()
    assert waiter.cancelled()
    await asyncio.sleep(5)
    assert emb.seen == ["busy", "queued"]
    stats = lane.stats()
    assert (stats.dropped, stats.queue_depth) == (1, 0)
    assert lane._queue._room() == lane.max_queue
    await lane.aclose()


async def test_random_cancellations_keep_the_books_straight() -> None:
    """Seeded chaos: callers arrive, some are cancelled at random moments.

    Whatever happens, every surviving caller gets its own vector, no queue slot
    leaks (the lane ends empty with its full room) and nothing hangs.
    """
    emb = RecordingEmbedder(fixed_seconds=0.02, per_text_seconds=0.004)
    rng = random.Random(6)

    lane = EmbeddingLane(emb, concurrency=2, max_batch=8, max_queue=12)
    tasks: dict[str, asyncio.Task[Vector]] = {}
    for i in range(600):
        await asyncio.sleep(rng.random() * 0.006)
        text = f"t{i}"
        tasks[text] = asyncio.create_task(lane.embed(text))
        if rng.random() < 0.3:
            victim = rng.choice(list(tasks.values()))
            victim.cancel()
        if rng.random() < 0.05:
            # A cancellation a tick later: some callers are then mid-admission.
            await asyncio.sleep(0)
            rng.choice(list(tasks.values())).cancel()
    results = await asyncio.gather(*tasks.values(), return_exceptions=True)
    survivors = 0
    for (text, task), result in zip(tasks.items(), results, strict=True):
        if task.cancelled():
            continue
        assert result == emb.vector_for(text)
        survivors += 1
    stats = lane.stats()
    assert survivors > 300
    assert stats.queue_depth == 0
    assert stats.waiting_callers == 0
    assert lane._queue._room() == lane.max_queue  # no queue slot leaked
    assert stats.embedded + stats.dropped == stats.accepted
    await lane.aclose()


# ---------------------------------------------------------------- failures


async def test_a_failing_batch_fails_only_the_text_the_embedder_cannot_take() -> None:
    emb = RecordingEmbedder(fail_when=lambda texts: "boom" in texts)

    lane = EmbeddingLane(emb, concurrency=1, max_batch=2)
    results = await asyncio.gather(
        lane.embed("a"),
        lane.embed("boom"),
        lane.embed("c"),
        lane.embed("d"),
        return_exceptions=True,
    )
    # The failed batch is retried in halves: "a" alone succeeds, "boom" alone fails.
    assert emb.batches == [["a", "boom"], ["a"], ["boom"], ["c", "d"]]
    failed = results[1]
    assert isinstance(failed, EmbeddingFailed)
    assert isinstance(failed.__cause__, RuntimeError)
    assert "alone, after its batch of 2 texts failed" in str(failed)
    assert [results[0], *results[2:]] == [emb.vector_for(t) for t in ("a", "c", "d")]
    stats = lane.stats()
    assert (stats.failed, stats.failed_batches, stats.embedded, stats.batches) == (1, 1, 3, 2)
    # The lane goes on working.
    assert await lane.embed("later") == emb.vector_for("later")
    await lane.aclose()


async def test_bisection_finds_every_bad_text_of_a_batch() -> None:
    bad = {"bad3", "bad6"}
    emb = RecordingEmbedder(fail_when=lambda texts: bool(bad & set(texts)))

    lane = EmbeddingLane(emb, concurrency=1, max_batch=8)
    texts = [f"bad{i}" if f"bad{i}" in bad else f"ok{i}" for i in range(8)]
    results = await asyncio.gather(*(lane.embed(t) for t in texts), return_exceptions=True)
    for text, result in zip(texts, results, strict=True):
        if text in bad:
            assert isinstance(result, EmbeddingFailed), text
        else:
            assert result == emb.vector_for(text), text
    # Far fewer calls than one per text after the first, and never more than 2n - 1.
    assert len(emb.batches) <= 2 * len(texts) - 1
    assert lane.stats().failed == 2
    await lane.aclose()


async def test_a_lone_surrogate_is_refused_before_it_is_queued() -> None:
    emb = RecordingEmbedder()

    lane = EmbeddingLane(emb, concurrency=1)
    with pytest.raises(ValueError, match=r"texts\[1\]: contains a lone UTF-16 surrogate"):
        await lane.embed_many(["fine", "x\ud800"])
    assert emb.batches == [] and lane.stats().accepted == 0
    # A surrogate pair written as two escapes is one character: valid text.
    assert await lane.embed("\ud83d\ude00".encode("utf-16", "surrogatepass").decode("utf-16"))
    await lane.aclose()


async def test_embed_many_fails_as_a_whole_and_drops_its_queued_rest() -> None:
    emb = RecordingEmbedder(fail_when=lambda texts: "boom" in texts)

    lane = EmbeddingLane(emb, concurrency=1, max_batch=2)
    with pytest.raises(EmbeddingFailed) as info:
        await lane.embed_many(["boom", "x", "y", "z"])
    assert info.value.index == 0
    await settle()
    # [boom, x] failed, then boom alone; the call gave up, so y and z were never run.
    assert emb.batches == [["boom", "x"], ["boom"], ["x"]]
    assert lane.stats().dropped == 2
    await lane.aclose()


async def test_an_embedder_returning_the_wrong_shape_fails_its_batch() -> None:
    class Short(SimulatedEmbedder):
        async def embed_batch(self, texts: Sequence[str]) -> list[Vector]:
            vectors = await super().embed_batch(texts)
            return vectors[:-1] if len(texts) > 1 else [vectors[0][:-1]]

    lane = EmbeddingLane(Short(dim=4), concurrency=1, max_batch=2)
    results = await asyncio.gather(lane.embed("a"), lane.embed("b"), return_exceptions=True)
    for failed in results:
        assert isinstance(failed, EmbeddingFailed)
        assert isinstance(failed.__cause__, EmbeddingError)
        assert "2 texts" in str(failed)
    with pytest.raises(EmbeddingFailed, match="dimensions"):
        await lane.embed("c")
    await lane.aclose()


# ------------------------------------------------------------------ closing


async def test_aclose_finishes_running_batches_and_fails_the_rest_clearly() -> None:
    emb = RecordingEmbedder(fixed_seconds=1.0)

    lane = EmbeddingLane(emb, concurrency=1, max_batch=1, max_queue=1)
    running = asyncio.create_task(lane.embed("running"))
    await asyncio.sleep(0.1)
    queued = asyncio.create_task(lane.embed("queued"))
    waiting = asyncio.create_task(lane.embed("waiting"))
    await settle()
    await lane.aclose()
    assert running.result() == emb.vector_for("running")
    for task in (queued, waiting):
        with pytest.raises(LaneClosed):
            task.result()
    with pytest.raises(LaneClosed):
        await lane.embed("late")
    assert emb.seen == ["running"]
    stats = lane.stats()
    assert stats.closed
    assert (stats.queue_depth, stats.in_flight_batches, stats.waiting_callers) == (0, 0, 0)
    await lane.aclose()  # idempotent


async def test_aclose_with_drain_embeds_the_queued_texts_first() -> None:
    emb = RecordingEmbedder(fixed_seconds=1.0)

    lane = EmbeddingLane(emb, concurrency=1, max_batch=2)
    tasks = [asyncio.create_task(lane.embed(f"t{i}")) for i in range(5)]
    await asyncio.sleep(0.1)
    await lane.aclose(drain=True)
    assert [t.result() for t in tasks] == [emb.vector_for(f"t{i}") for i in range(5)]


async def test_async_with_closes_and_an_unused_lane_closes_at_once() -> None:
    emb = RecordingEmbedder()

    async with EmbeddingLane(emb) as lane:
        await lane.embed("x")
    assert lane.closed
    await EmbeddingLane(emb).aclose()


# --------------------------------------------------------------- bad input


async def test_bad_input_is_rejected_before_anything_is_queued() -> None:
    emb = RecordingEmbedder()

    lane = EmbeddingLane(emb)
    with pytest.raises(TypeError, match="must be a str"):
        await lane.embed(123)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        await lane.embed("")
    with pytest.raises(ValueError, match="empty"):
        await lane.embed(" \n\t")
    assert await lane.embed_many([]) == []
    with pytest.raises(TypeError, match="not one string"):
        await lane.embed_many("abc")
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        await lane.embed_many(["fine", None])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"texts\[2\]"):
        await lane.embed_many(["fine", "also fine", ""])
    assert lane.stats().accepted == 0
    assert emb.calls == 0
    await lane.aclose()


async def test_overlong_texts_are_truncated_by_default() -> None:
    emb = RecordingEmbedder(max_input_tokens=4)

    lane = EmbeddingLane(emb)
    assert lane.max_chars == 4 * 32  # max_input_tokens * CHARS_PER_TOKEN_BOUND
    long_text = "word " * 100
    assert await lane.embed(long_text) == emb.vector_for(long_text[: lane.max_chars])
    # The model's window counts too: only the first 4 words matter here.
    assert await lane.embed("a b c d e f") == await lane.embed("a b c d")
    assert emb.seen[0] == long_text[:128]
    assert lane.stats().truncated == 1
    await lane.aclose()


async def test_overlong_texts_can_be_an_error_instead() -> None:
    emb = RecordingEmbedder()

    lane = EmbeddingLane(emb, max_chars=10, overlong="error")
    assert await lane.embed("x" * 10) == emb.vector_for("x" * 10)
    with pytest.raises(TextTooLong, match="11 characters, over the limit of 10"):
        await lane.embed("x" * 11)
    with pytest.raises(ValueError, match=r"texts\[1\]"):  # TextTooLong is a ValueError
        await lane.embed_many(["ok", "y" * 11])
    await lane.aclose()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"max_batch": 0}, "max_batch"),
        ({"max_queue": -1}, "max_queue"),
        ({"max_wait_ms": -1}, "max_wait_ms"),
        ({"max_chars": 0}, "max_chars"),
        ({"overlong": "ignore"}, "overlong"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        EmbeddingLane(SimulatedEmbedder(), **kwargs)  # type: ignore[arg-type]


# -------------------------------------------------------------------- stats


class BatchLog:
    """A ``BatchObserver`` that keeps what it is told."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[float]]] = []

    def batch_ran(self, size: int, latencies: Sequence[float]) -> None:
        self.batches.append((size, list(latencies)))


async def test_stats_report_latencies_and_the_observer_sees_every_batch() -> None:
    emb = RecordingEmbedder(fixed_seconds=0.01, per_text_seconds=0.0)
    log = BatchLog()

    lane = EmbeddingLane(emb, concurrency=1, max_wait_ms=5, observer=log)
    assert lane.stats().latency_p50 is None
    for i in range(10):
        await lane.embed(f"t{i}")
    stats = lane.stats()
    # Each lone call: 5 ms waiting for company + 10 ms of embedding.
    assert stats.latency_count == 10
    assert stats.latency_sum == pytest.approx(0.15)
    assert stats.latency_p50 == pytest.approx(0.015)
    assert stats.latency_p99 == pytest.approx(0.015)
    assert stats.batch_sizes == {1: 10}
    assert stats.mean_batch_size == 1
    assert log.batches == [(1, [pytest.approx(0.015)])] * 10
    await lane.aclose()


async def test_the_observer_sees_a_failed_batch_with_its_embedded_texts_only() -> None:
    emb = SimulatedEmbedder(fail_when=lambda texts: "boom" in texts)
    log = BatchLog()

    lane = EmbeddingLane(emb, concurrency=1, max_wait_ms=5, observer=log)
    with pytest.raises(EmbeddingFailed):
        await lane.embed_many(["boom", "bystander"])
    stats = lane.stats()
    assert (stats.batches, stats.failed_batches, stats.failed, stats.embedded) == (1, 1, 1, 1)
    # The bystander's latency only: it was embedded, alone, after the batch failed.
    assert len(log.batches) == 1 and log.batches[0][0] == 2 and len(log.batches[0][1]) == 1
    await lane.aclose()
