"""What a request or an event costs the gateway does not grow with idle
queued streams (issue 57; docs/design.md §1.11): admission counts
come from a book kept per event (``QueueBook``), and a waiting stream is
woken only when the place it shows changes (``Changes``)."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from tierlm.runners.requests import GenerationRequest
from tierlm.runners.simulated import SimulatedRunner
from tierlm.server.gateway.admission import RunTimes, key_of
from tierlm.server.gateway.changes import Changes, JobWake, Positions, shown_position
from tierlm.shell.scheduler import Scheduler

pytestmark = pytest.mark.fast


def test_the_book_counts_what_the_snapshot_holds() -> None:
    # Jobs of several classes and keys, some cancelled queued, some run to
    # their end, some preempted by chats: the book agrees with the snapshot.
    async def main() -> None:
        scheduler = Scheduler(SimulatedRunner(token_interval=0.001))
        times = RunTimes()
        scheduler.add_listener(times.on_event)
        book = times.book
        handles = []
        for i in range(60):
            name = ("gana", "nataraj", "extract")[i % 3]
            request = GenerationRequest(model_id="sim-a", prompt="p", max_tokens=3 + i % 5)
            producer = f"key{i % 4}/agent{i % 7}"
            handles.append(scheduler.submit_generation(name, request, lambda _: None, producer))
        for handle in handles[10:20]:
            handle.cancel()
        for step in range(40):
            if step % 10 == 0:
                chat = GenerationRequest(model_id="sim-a", prompt="hi", max_tokens=2)
                scheduler.submit_generation("chat", chat, lambda _: None, "person")
            await asyncio.sleep(0.003)
            snap = scheduler.snapshot()
            queued = [info for infos in snap.queued.values() for info in infos]
            assert len(book.queued) == snap.queue_depth
            assert bool(book.running) == (snap.running is not None)
            assert book.in_class == Counter(info.class_name for info in queued)
            assert book.key_total == Counter(key_of(info) for info in queued)
            pairs = Counter((info.class_name, key_of(info)) for info in queued)
            assert book.key_in_class == pairs
            assert book.keys_in_class == Counter(name for name, _key in pairs)
        await scheduler.aclose()
        assert not book.queued and not book.running and not book.in_class

    asyncio.run(main())


def test_only_streams_whose_shown_place_changed_are_woken() -> None:
    async def main() -> tuple[set[int], int]:
        changes = Changes()
        changes.start()
        positions: dict[int, tuple[int, int]] = {i: (4, i) for i in range(1, 301)}
        looked = 0

        def look_up() -> Positions:
            nonlocal looked
            looked += 1
            return dict(positions)

        wakes = {}
        for job_id in positions:
            wake = JobWake()
            wake.job_id = job_id
            wakes[job_id] = wake
            changes.watch(wake)
            changes.position(job_id, wake, look_up)  # each told its place
        assert looked == 1  # one look-up for all 300
        # Job 1 starts: everyone moves up one place; only the places shown
        # otherwise change (exact up to 10, then rounded to 10s and 50s).
        del positions[1]
        positions = {i: (4, i - 1) for i in positions}
        changes.on_event(object())  # type: ignore[arg-type]
        changes._positions_at -= 1.0  # the look-up is allowed again
        changes._wake_watchers()
        for _ in range(10):
            await asyncio.sleep(0)  # every batch's turn
        woken = {job_id for job_id, wake in wakes.items() if wake.is_set()}
        return woken, looked

    woken, looked = asyncio.run(main())
    assert looked == 2
    # 1 is no longer queued; from 2 on, place p becomes p - 1, which shows
    # otherwise up to 11 and then only across a rounding boundary.
    moved = {i for i in range(2, 301) if shown_position(i) != shown_position(i - 1)}
    assert woken == {1} | moved
    assert len(woken) < 40  # of 300 waiting
