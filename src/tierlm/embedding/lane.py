"""The embedding lane: concurrent ``embed`` calls coalesced into bounded batches.

See docs/design.md §5.

Embeddings never go through the LLM scheduler: the lane owns its embedder and
its own worker threads, so it never blocks, preempts or is preempted by a chat.
What it adds over calling the embedder directly:

- **Micro-batching.** Texts queued by concurrent callers are run together, up
  to ``max_batch`` at a time; the lane waits at most ``max_wait_ms`` after the
  oldest queued text arrived for a batch to fill. A batch is several times
  cheaper per text than single calls (MiniLM on 2 cores: ~9 ms for one text,
  ~64 ms for 32).
- **Bounded work.** At most ``concurrency`` batches run at once, and at most
  ``max_queue`` texts wait for a batch. A caller that finds the queue full waits
  for room (pushback), in arrival order; with ``nowait=True`` it gets
  :class:`LaneFull` at once instead.
- **Isolation.** Each text has its own future: results go to their caller in
  the order given; a batch whose embedder call fails fails only the callers in
  that batch; a caller cancelled before its batch starts has its text dropped.
- **Clean shutdown.** ``aclose()`` refuses new texts, fails queued ones and
  pushed-back callers with :class:`LaneClosed` (or runs the queued ones first
  with ``drain=True``) and waits for the batches already running.

Input rules (checked before anything is queued, so a bad call queues nothing):

- a text must be a ``str`` (``TypeError`` otherwise) and must contain something
  other than whitespace (``ValueError``): an empty text has no meaning, yet the
  models would still return a vector for it that pollutes similarity search;
- ``embed_many([])`` returns ``[]``: there is nothing to embed, as with ``map``;
  ``embed_many("a str")`` is a ``TypeError`` (it would embed each character);
- overlong texts are **truncated** by default: the embedder keeps the first
  ``max_input_tokens`` tokens (what sentence-transformers and llama.cpp do), and
  the lane first cuts a text to ``max_chars`` characters so that a huge text
  cannot pin memory in the queue. With ``overlong="error"`` a text longer than
  ``max_chars`` raises :class:`TextTooLong` instead (the gateway's 400).

Blocking embedders (a plain ``def embed_batch``) run in a worker thread through
``asyncio.to_thread``; ``async def embed_batch`` is awaited on the loop, which is
what the simulated embedder does on the virtual-time loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import importlib
import inspect
import math
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from tierlm.embedding.embedders import Embedder, Vector

__all__ = [
    "DEFAULT_MAX_BATCH",
    "DEFAULT_MAX_QUEUE",
    "DEFAULT_MAX_WAIT_MS",
    "EmbeddingError",
    "EmbeddingFailed",
    "EmbeddingLane",
    "LaneClosed",
    "LaneFull",
    "LaneStats",
    "TextTooLong",
    "default_concurrency",
    "total_memory_bytes",
]

# docs/design.md §5's signature. 32 is sentence-transformers' own default batch size,
# past which MiniLM's cost per text stops falling on a small CPU.
DEFAULT_MAX_BATCH = 32
# A single call waits this long at most for company: small next to one MiniLM
# call (~9 ms), long enough for callers woken by the same event to join.
DEFAULT_MAX_WAIT_MS = 5.0
# A flood of 200 notes/s (the seed's figure) fills this in 50 s if the embedder
# stalled completely; ~10 000 short strings are a few MB.
DEFAULT_MAX_QUEUE = 10_000
# The seed's future work: 2 batches at once, 3 on machines with >= 8 cores and
# >= 16 GiB. Two overlap one batch's Python work (tokenising, copying out the
# vectors) with the other's matrix work; more would only contend for the cores
# that the LLM needs too.
SMALL_MACHINE_CONCURRENCY = 2
LARGE_MACHINE_CONCURRENCY = 3
LARGE_MACHINE_CORES = 8
LARGE_MACHINE_MEMORY = 16 * 1024**3
# English averages ~4 characters per token; with 8x margin, any natural text
# that fits the model's window also fits ``max_input_tokens * 32`` characters
# (8 192 for MiniLM's 256 tokens), and a text cut there had most of it
# discarded by the model's own truncation anyway.
CHARS_PER_TOKEN_BOUND = 32
# Latency histogram bounds (seconds): from one warm MiniLM call to a queue that
# took a minute to drain; the last bucket is +Inf, as Prometheus wants.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    math.inf,
)
# p50/p99 are taken over the most recent texts only, so ``stats()`` stays cheap
# and reflects the lane's current state rather than its whole history.
LATENCY_WINDOW = 1024
# Dropped texts stay in the queue (a deque has no cheap removal) until this many
# pile up and they outnumber the live ones; then the queue is rebuilt.
_COMPACT_MIN_DEAD = 64


class EmbeddingError(Exception):
    """Base class of the lane's errors."""


class LaneFull(EmbeddingError):
    """``nowait=True`` and the queue has no room for the text(s)."""


class LaneClosed(EmbeddingError):
    """The lane is closed, or was closed before the text was embedded."""


class EmbeddingFailed(EmbeddingError):
    """The embedder failed on the batch holding this text; ``__cause__`` says why."""


class TextTooLong(EmbeddingError, ValueError):
    """``overlong="error"`` and a text is longer than ``max_chars``."""


def total_memory_bytes(meminfo: str | os.PathLike[str] = "/proc/meminfo") -> int | None:
    """The machine's physical memory in bytes, or None when it cannot be told.

    psutil when it is installed (the ``embed`` extra has it); otherwise Linux's
    ``/proc/meminfo``; otherwise POSIX ``sysconf``.
    """
    try:
        # Imported by name: psutil ships no type information, and the lane
        # must work without it.
        psutil: Any = importlib.import_module("psutil")
    except ImportError:
        pass
    else:
        return int(psutil.virtual_memory().total)
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemTotal:"):
                # "MemTotal:       24570556 kB"
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        page_size = os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    if pages <= 0 or page_size <= 0:
        return None
    return pages * page_size


def default_concurrency(cpu_count: int | None = None, memory_bytes: int | None = None) -> int:
    """2 batches at once; 3 on machines with >= 8 cores and >= 16 GiB (docs/design.md §5).

    Arguments left None are detected (``os.cpu_count()``, :func:`total_memory_bytes`);
    a machine that cannot be measured counts as small.
    """
    cores = os.cpu_count() if cpu_count is None else cpu_count
    memory = total_memory_bytes() if memory_bytes is None else memory_bytes
    if (
        cores is not None
        and memory is not None
        and cores >= LARGE_MACHINE_CORES
        and memory >= LARGE_MACHINE_MEMORY
    ):
        return LARGE_MACHINE_CONCURRENCY
    return SMALL_MACHINE_CONCURRENCY


@dataclass(frozen=True, slots=True)
class LaneStats:
    """A snapshot of the lane, for ``/metrics`` and the dashboard.

    Counters are totals since the lane was made; latencies are loop-clock
    seconds from the ``embed``/``embed_many`` call (so including any pushback
    wait) to the text's vector.
    """

    queue_depth: int
    """Texts accepted and waiting for a batch."""
    max_queue: int
    waiting_callers: int
    """Callers held back by pushback, waiting for room in the queue."""
    in_flight_batches: int
    in_flight_texts: int
    concurrency: int
    max_batch: int
    accepted: int
    """Texts admitted to the queue."""
    embedded: int
    """Texts whose batch succeeded."""
    failed: int
    """Texts whose batch failed."""
    dropped: int
    """Texts removed before their batch started: caller cancelled, or lane closed."""
    rejected: int
    """Texts refused with :class:`LaneFull` (``nowait``)."""
    pushbacks: int
    """Times a caller had to wait for room in the queue."""
    truncated: int
    """Texts cut to ``max_chars`` characters."""
    batches: int
    """Batches run to the end, failed ones included."""
    failed_batches: int
    batch_sizes: Mapping[int, int]
    """Histogram data: batch size -> number of batches of that size."""
    peak_queue_depth: int
    peak_in_flight_batches: int
    latency_count: int
    latency_sum: float
    latency_buckets: tuple[tuple[float, int], ...]
    """Cumulative ``(upper bound, texts <= bound)`` pairs, the last bound +Inf."""
    latency_p50: float | None
    """Over the last ``LATENCY_WINDOW`` texts; None before the first."""
    latency_p99: float | None
    closed: bool


class _State(enum.Enum):
    NEW = "new"
    QUEUED = "queued"
    STARTED = "started"
    DROPPED = "dropped"


class _Item:
    """One text of one caller, with the future its vector goes to."""

    __slots__ = ("enqueued", "future", "state", "submitted", "text")

    def __init__(self, text: str, future: asyncio.Future[Vector], submitted: float) -> None:
        self.text = text
        self.future = future
        self.submitted = submitted
        self.enqueued = submitted
        self.state = _State.NEW


class EmbeddingLane:
    """Micro-batched, bounded access to one embedder. See the module docstring.

    Use it from one event loop (the first call binds it). ``async with`` closes it.
    """

    def __init__(
        self,
        embedder: Embedder,
        concurrency: int | None = None,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_wait_ms: float = DEFAULT_MAX_WAIT_MS,
        max_queue: int = DEFAULT_MAX_QUEUE,
        *,
        max_chars: int | None = None,
        overlong: Literal["truncate", "error"] = "truncate",
    ) -> None:
        if concurrency is None:
            concurrency = default_concurrency()
        for name, value in (
            ("concurrency", concurrency),
            ("max_batch", max_batch),
            ("max_queue", max_queue),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: must be an int >= 1, got {value!r}")
        if not isinstance(max_wait_ms, int | float) or not max_wait_ms >= 0:
            raise ValueError(f"max_wait_ms: must be a number >= 0, got {max_wait_ms!r}")
        if overlong not in ("truncate", "error"):
            raise ValueError(f"overlong: must be 'truncate' or 'error', got {overlong!r}")
        if max_chars is None:
            max_chars = int(embedder.max_input_tokens) * CHARS_PER_TOKEN_BOUND
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"max_chars: must be an int >= 1, got {max_chars!r}")

        self.embedder = embedder
        self.dim = int(embedder.dim)
        self.concurrency = concurrency
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000.0
        self.max_queue = max_queue
        self.max_chars = max_chars
        self.overlong = overlong
        # Decided once: calling a blocking embed_batch to find out would block
        # the loop. Anything else that returns an awaitable is awaited anyway.
        self._async_embedder = inspect.iscoroutinefunction(embedder.embed_batch)

        self._loop: asyncio.AbstractEventLoop | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(concurrency)
        self._has_items = asyncio.Event()
        self._batch_full = asyncio.Event()
        self._queue: deque[_Item] = deque()
        self._live = 0  # QUEUED items in _queue
        self._dead = 0  # DROPPED items still in _queue
        # Callers pushed back, oldest first, each with the text it waits to queue.
        # Room that appears goes straight to them (their text is queued for them),
        # so a caller arriving later cannot overtake one that waits.
        self._space_waiters: deque[tuple[asyncio.Future[None], _Item]] = deque()
        self._closing = False

        self._in_flight_batches = 0  # counted here: a task's done callback runs late
        self._in_flight_texts = 0
        self._accepted = 0
        self._embedded = 0
        self._failed = 0
        self._dropped = 0
        self._rejected = 0
        self._pushbacks = 0
        self._truncated = 0
        self._batches = 0
        self._failed_batches = 0
        self._batch_sizes: dict[int, int] = {}
        self._peak_queue = 0
        self._peak_in_flight = 0
        self._latency_count = 0
        self._latency_sum = 0.0
        self._latency_bucket_counts = [0] * len(LATENCY_BUCKETS)
        self._recent_latencies: deque[float] = deque(maxlen=LATENCY_WINDOW)

    # ----------------------------------------------------------------- public

    @property
    def closed(self) -> bool:
        return self._closing

    async def embed(self, text: str, *, nowait: bool = False) -> Vector:
        """The vector of ``text``. Waits for room when the queue is full, unless
        ``nowait`` (then :class:`LaneFull`)."""
        checked = self._check_text(text, "text")
        return (await self._submit([checked], nowait))[0]

    async def embed_many(self, texts: Sequence[str], *, nowait: bool = False) -> list[Vector]:
        """The vectors of ``texts``, in order. Each text may land in a different batch.

        With ``nowait`` all texts are admitted or none (:class:`LaneFull`); without
        it, they are admitted as room appears.
        """
        if isinstance(texts, str | bytes):
            raise TypeError("embed_many takes a sequence of texts, not one string; use embed()")
        texts = list(texts)
        checked = [self._check_text(text, f"texts[{i}]") for i, text in enumerate(texts)]
        if not checked:
            return []
        return await self._submit(checked, nowait)

    def stats(self) -> LaneStats:
        """A consistent snapshot; cheap enough for every ``/metrics`` scrape."""
        recent = sorted(self._recent_latencies)
        cumulative = 0
        buckets = []
        for bound, count in zip(LATENCY_BUCKETS, self._latency_bucket_counts, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        return LaneStats(
            queue_depth=self._live,
            max_queue=self.max_queue,
            waiting_callers=sum(1 for w, _ in self._space_waiters if not w.done()),
            in_flight_batches=self._in_flight_batches,
            in_flight_texts=self._in_flight_texts,
            concurrency=self.concurrency,
            max_batch=self.max_batch,
            accepted=self._accepted,
            embedded=self._embedded,
            failed=self._failed,
            dropped=self._dropped,
            rejected=self._rejected,
            pushbacks=self._pushbacks,
            truncated=self._truncated,
            batches=self._batches,
            failed_batches=self._failed_batches,
            batch_sizes=dict(sorted(self._batch_sizes.items())),
            peak_queue_depth=self._peak_queue,
            peak_in_flight_batches=self._peak_in_flight,
            latency_count=self._latency_count,
            latency_sum=self._latency_sum,
            latency_buckets=tuple(buckets),
            latency_p50=_percentile(recent, 0.50),
            latency_p99=_percentile(recent, 0.99),
            closed=self._closing,
        )

    snapshot = stats

    async def aclose(self, *, drain: bool = False) -> None:
        """Close the lane and wait until nothing of it runs.

        New calls get :class:`LaneClosed`, and so do callers waiting for room.
        Queued texts get :class:`LaneClosed` too, or with ``drain=True`` are
        embedded first. Batches already running finish and deliver their
        vectors. Safe to call more than once.
        """
        if not self._closing:
            self._closing = True
            while self._space_waiters:
                waiter, _ = self._space_waiters.popleft()
                if not waiter.done():
                    waiter.set_exception(LaneClosed("embedding lane closed"))
            if not drain:
                for item in self._queue:
                    if item.state is _State.QUEUED:
                        item.state = _State.DROPPED
                        self._dropped += 1
                        if not item.future.done():
                            item.future.set_exception(
                                LaneClosed("embedding lane closed before this text was embedded")
                            )
                self._queue.clear()
                self._live = self._dead = 0
            # Wake the dispatcher wherever it waits; it returns once the queue is empty.
            self._has_items.set()
            self._batch_full.set()
        pending: set[asyncio.Task[None]] = set(self._running)
        if self._dispatcher is not None and not self._dispatcher.done():
            pending.add(self._dispatcher)
        while pending:
            # asyncio.wait, not gather: if our caller is cancelled, the lane's
            # own tasks must go on.
            await asyncio.wait(pending)
            pending = {t for t in self._running if not t.done()}

    async def __aenter__(self) -> EmbeddingLane:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -------------------------------------------------------------- admission

    def _check_text(self, text: object, where: str) -> str:
        if not isinstance(text, str):
            raise TypeError(f"{where}: must be a str, got {type(text).__name__}")
        if not text.strip():
            raise ValueError(f"{where}: empty or whitespace-only text has no embedding")
        if len(text) > self.max_chars:
            if self.overlong == "error":
                raise TextTooLong(
                    f"{where}: {len(text)} characters, over the limit of {self.max_chars}"
                )
            self._truncated += 1
            return text[: self.max_chars]
        return text

    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("an EmbeddingLane is bound to the event loop that first used it")
        if self._dispatcher is None and not self._closing:
            self._dispatcher = loop.create_task(self._dispatch(), name="embedding-lane-dispatch")
            self._dispatcher.add_done_callback(self._on_dispatcher_done)
        return loop

    async def _submit(self, texts: list[str], nowait: bool) -> list[Vector]:
        loop = self._bind()
        if self._closing:
            raise LaneClosed("embedding lane closed")
        now = loop.time()
        items = [_Item(text, loop.create_future(), now) for text in texts]
        try:
            await self._admit(items, nowait, loop)
            # In order: the call returns when its last text is done anyway.
            return [await item.future for item in items]
        except BaseException:
            self._abandon(items)
            raise

    def _room(self) -> int:
        return self.max_queue - self._live

    async def _admit(
        self, items: list[_Item], nowait: bool, loop: asyncio.AbstractEventLoop
    ) -> None:
        if nowait:
            if self._space_waiters or self._room() < len(items):
                self._rejected += len(items)
                raise LaneFull(
                    f"embedding queue full: {self._live}/{self.max_queue} texts queued, "
                    f"{len(items)} offered"
                )
            for item in items:
                self._enqueue(item, loop)
            return
        i = 0
        while i < len(items):
            # Callers already waiting go first: no overtaking the pushed back.
            room = 0 if self._space_waiters else self._room()
            if room > 0:
                for item in items[i : i + room]:
                    self._enqueue(item, loop)
                i += room
                continue
            waiter: asyncio.Future[None] = loop.create_future()
            self._space_waiters.append((waiter, items[i]))
            self._pushbacks += 1
            try:
                # Resolved once items[i] has been queued for us.
                await waiter
            except BaseException:
                if waiter.cancelled():  # cancelled while waiting: leave the line
                    # (unless a wake-up already skipped over it)
                    with contextlib.suppress(ValueError):
                        self._space_waiters.remove((waiter, items[i]))
                # Anything of ours already queued is dropped by _submit.
                raise
            i += 1

    def _enqueue(self, item: _Item, loop: asyncio.AbstractEventLoop) -> None:
        item.state = _State.QUEUED
        item.enqueued = loop.time()
        self._queue.append(item)
        self._live += 1
        self._accepted += 1
        self._peak_queue = max(self._peak_queue, self._live)
        self._has_items.set()
        if self._live >= self.max_batch:
            self._batch_full.set()

    def _wake_space_waiters(self) -> None:
        loop = self._loop
        assert loop is not None  # there are waiters only once bound
        while self._space_waiters and self._room() > 0:
            waiter, item = self._space_waiters.popleft()
            if waiter.done():  # cancelled while waiting
                continue
            self._enqueue(item, loop)
            waiter.set_result(None)

    def _abandon(self, items: list[_Item]) -> None:
        """The caller of ``items`` is gone (cancelled, or one of its texts failed)."""
        freed = False
        for item in items:
            future = item.future
            if not future.done():
                future.cancel()
            elif not future.cancelled():
                future.exception()  # retrieved: no "exception never retrieved" warning
            if item.state is _State.QUEUED:
                item.state = _State.DROPPED
                self._live -= 1
                self._dead += 1
                self._dropped += 1
                freed = True
        if freed:
            if self._dead >= _COMPACT_MIN_DEAD and self._dead > self._live:
                self._queue = deque(i for i in self._queue if i.state is _State.QUEUED)
                self._dead = 0
            self._wake_space_waiters()

    # --------------------------------------------------------------- batching

    async def _dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self._live == 0:
                if self._closing:
                    return
                self._has_items.clear()
                await self._has_items.wait()
                continue
            await self._slots.acquire()
            try:
                await self._fill(loop)
                batch = self._take()
            except BaseException:
                self._slots.release()
                raise
            if not batch:  # every queued text was dropped meanwhile
                self._slots.release()
                continue
            task = loop.create_task(self._run(batch, loop), name="embedding-lane-batch")
            self._running.add(task)
            self._in_flight_batches += 1
            self._in_flight_texts += len(batch)
            self._peak_in_flight = max(self._peak_in_flight, self._in_flight_batches)
            task.add_done_callback(self._running.discard)

    async def _fill(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait until a full batch is queued or the oldest text has waited ``max_wait``."""
        if self._closing or self._live >= self.max_batch:
            return
        oldest = self._oldest()
        if oldest is None:
            return
        deadline = oldest.enqueued + self.max_wait
        if deadline <= loop.time():
            return
        self._batch_full.clear()
        try:
            async with asyncio.timeout_at(deadline):
                await self._batch_full.wait()
        except TimeoutError:
            pass

    def _oldest(self) -> _Item | None:
        while self._queue and self._queue[0].state is _State.DROPPED:
            self._queue.popleft()
            self._dead -= 1
        return self._queue[0] if self._queue else None

    def _take(self) -> list[_Item]:
        batch: list[_Item] = []
        while self._queue and len(batch) < self.max_batch:
            item = self._queue.popleft()
            if item.state is _State.DROPPED:
                self._dead -= 1
                continue
            item.state = _State.STARTED
            self._live -= 1
            batch.append(item)
        if batch:
            self._wake_space_waiters()
        return batch

    async def _run(self, batch: list[_Item], loop: asyncio.AbstractEventLoop) -> None:
        try:
            try:
                vectors = await self._call_embedder([item.text for item in batch])
            except asyncio.CancelledError:
                # Only the loop's shutdown cancels a batch; tell its callers.
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(
                            LaneClosed("embedding lane stopped while this text's batch ran")
                        )
                raise
            except Exception as exc:
                self._failed_batches += 1
                self._failed += len(batch)
                for item in batch:
                    if not item.future.done():
                        error = EmbeddingFailed(
                            f"embedder failed on a batch of {len(batch)} texts: {exc!r}"
                        )
                        error.__cause__ = exc
                        item.future.set_exception(error)
                return
            now = loop.time()
            self._embedded += len(batch)
            for item, vector in zip(batch, vectors, strict=True):
                self._record_latency(now - item.submitted)
                if not item.future.done():
                    item.future.set_result(vector)
        finally:
            self._batches += 1
            self._batch_sizes[len(batch)] = self._batch_sizes.get(len(batch), 0) + 1
            self._in_flight_batches -= 1
            self._in_flight_texts -= len(batch)
            self._slots.release()

    async def _call_embedder(self, texts: list[str]) -> list[Vector]:
        if self._async_embedder:
            result: Any = self.embedder.embed_batch(texts)
        else:
            result = await asyncio.to_thread(self.embedder.embed_batch, texts)
        if inspect.isawaitable(result):
            result = await result
        return self._check_vectors(result, len(texts))

    def _check_vectors(self, result: Any, count: int) -> list[Vector]:
        vectors = list(result)
        if len(vectors) != count:
            raise EmbeddingError(f"embedder returned {len(vectors)} vectors for {count} texts")
        checked: list[Vector] = []
        for vector in vectors:
            if not isinstance(vector, list):
                # e.g. a numpy row: callers get plain floats, as the protocol says.
                vector = list(map(float, vector))
            if len(vector) != self.dim:
                raise EmbeddingError(
                    f"embedder returned a vector of {len(vector)} dimensions, expected {self.dim}"
                )
            checked.append(vector)
        return checked

    def _record_latency(self, seconds: float) -> None:
        self._latency_count += 1
        self._latency_sum += seconds
        self._recent_latencies.append(seconds)
        for index, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                self._latency_bucket_counts[index] += 1
                break

    def _on_dispatcher_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        # A bug in the dispatcher must not leave callers waiting forever.
        self._closing = True
        error = task.exception()
        for item in self._queue:
            if item.state is _State.QUEUED and not item.future.done():
                item.state = _State.DROPPED
                failure = LaneClosed("embedding lane dispatcher crashed")
                failure.__cause__ = error
                item.future.set_exception(failure)
        self._queue.clear()
        self._live = self._dead = 0
        while self._space_waiters:
            waiter, _ = self._space_waiters.popleft()
            if not waiter.done():
                waiter.set_exception(LaneClosed("embedding lane dispatcher crashed"))


def _percentile(ordered: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an already sorted list."""
    if not ordered:
        return None
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]
