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
  the order given; a batch whose embedder call fails is retried in halves down
  to single texts (``isolation.py``), so only a text the embedder cannot take
  fails, never its batch-mates; a caller cancelled before its batch starts has
  its text dropped.
- **Clean shutdown.** ``aclose()`` refuses new texts, fails queued ones and
  pushed-back callers with :class:`LaneClosed` (or runs the queued ones first
  with ``drain=True``) and waits for the batches already running.

Input rules (checked before anything is queued, so a bad call queues nothing):

- a text must be a ``str`` (``TypeError`` otherwise) and must contain something
  other than whitespace (``ValueError``): an empty text has no meaning, yet the
  models would still return a vector for it that pollutes similarity search;
  and it must be text: a lone UTF-16 surrogate (``"x\ud800"``, which JSON's
  ``\ud800`` escape gives) is a ``ValueError``, not a batch failure;
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
import inspect
from typing import TYPE_CHECKING, Any, Literal

from tierlm.embedding import machine
from tierlm.embedding.admission import QueuedText, TextQueue
from tierlm.embedding.errors import EmbeddingError, EmbeddingFailed, LaneClosed, TextTooLong
from tierlm.embedding.isolation import embed_isolating, failed_alone
from tierlm.embedding.stats import BatchObserver, LaneCounters, LaneStats

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tierlm.embedding.embedders import Embedder, Vector

__all__ = ["DEFAULT_MAX_BATCH", "DEFAULT_MAX_QUEUE", "DEFAULT_MAX_WAIT_MS", "EmbeddingLane"]

# docs/design.md §5's signature. 32 is sentence-transformers' own default batch size,
# past which MiniLM's cost per text stops falling on a small CPU.
DEFAULT_MAX_BATCH = 32
# A single call waits this long at most for company: small next to one MiniLM
# call (~9 ms), long enough for callers woken by the same event to join.
DEFAULT_MAX_WAIT_MS = 5.0
# A flood of 200 notes/s (the seed's figure) fills this in 50 s if the embedder
# stalled completely; ~10 000 short strings are a few MB.
DEFAULT_MAX_QUEUE = 10_000
# English averages ~4 characters per token; with 8x margin, any natural text
# that fits the model's window also fits ``max_input_tokens * 32`` characters
# (8 192 for MiniLM's 256 tokens), and a text cut there had most of it
# discarded by the model's own truncation anyway.
CHARS_PER_TOKEN_BOUND = 32


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
        observer: BatchObserver | None = None,
    ) -> None:
        if concurrency is None:
            concurrency = machine.default_concurrency()
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
        self._counts = LaneCounters()
        self._queue = TextQueue(max_queue, self._counts, self._on_enqueue)
        self._closing = False

        self._in_flight_batches = 0  # counted here: a task's done callback runs late
        self._in_flight_texts = 0
        self._observer = observer

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
        c = self._counts
        p50, p99 = c.percentiles()
        return LaneStats(
            queue_depth=self._queue.live,
            max_queue=self.max_queue,
            waiting_callers=self._queue.waiting_callers(),
            in_flight_batches=self._in_flight_batches,
            in_flight_texts=self._in_flight_texts,
            concurrency=self.concurrency,
            max_batch=self.max_batch,
            accepted=c.accepted,
            embedded=c.embedded,
            failed=c.failed,
            dropped=c.dropped,
            rejected=c.rejected,
            pushbacks=c.pushbacks,
            truncated=c.truncated,
            batches=c.batches,
            failed_batches=c.failed_batches,
            batch_sizes=dict(sorted(c.batch_sizes.items())),
            peak_queue_depth=c.peak_queue,
            peak_in_flight_batches=c.peak_in_flight,
            latency_count=c.latency_count,
            latency_sum=c.latency_sum,
            latency_p50=p50,
            latency_p99=p99,
            closed=self._closing,
        )

    async def aclose(self, *, drain: bool = False) -> None:
        """Close the lane and wait until nothing of it runs.

        New calls get :class:`LaneClosed`, and so do callers waiting for room.
        Queued texts get :class:`LaneClosed` too, or with ``drain=True`` are
        embedded first. Batches already running finish and deliver their
        vectors. Safe to call more than once.
        """
        if not self._closing:
            self._closing = True
            self._queue.refuse_waiters("embedding lane closed")
            if not drain:
                self._queue.drop_all("embedding lane closed before this text was embedded")
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
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            # A lone surrogate ("\ud800"): no tokenizer takes it (docs/design.md §5).
            raise ValueError(
                f"{where}: contains a lone UTF-16 surrogate at character {exc.start}, not text"
            ) from None
        if len(text) > self.max_chars:
            if self.overlong == "error":
                raise TextTooLong(
                    f"{where}: {len(text)} characters, over the limit of {self.max_chars}"
                )
            self._counts.truncated += 1
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
        items = [QueuedText(text, loop.create_future(), now) for text in texts]
        try:
            await self._queue.admit(items, nowait, loop)
            # In order: the call returns when its last text is done anyway.
            vectors = []
            for index, item in enumerate(items):
                try:
                    vectors.append(await item.future)
                except EmbeddingFailed as exc:
                    exc.index = index
                    raise
            return vectors
        except BaseException:
            self._queue.abandon(items)
            raise

    def _on_enqueue(self, queued: int) -> None:
        self._has_items.set()
        if queued >= self.max_batch:
            self._batch_full.set()

    # --------------------------------------------------------------- batching

    async def _dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self._queue.live == 0:
                if self._closing:
                    return
                self._has_items.clear()
                await self._has_items.wait()
                continue
            await self._slots.acquire()
            try:
                await self._fill(loop)
                batch = self._queue.take(self.max_batch)
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
            self._counts.peak_in_flight = max(self._counts.peak_in_flight, self._in_flight_batches)
            task.add_done_callback(self._running.discard)

    async def _fill(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait until a full batch is queued or the oldest text has waited ``max_wait``."""
        if self._closing or self._queue.live >= self.max_batch:
            return
        oldest = self._queue.oldest()
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

    async def _run(self, batch: list[QueuedText], loop: asyncio.AbstractEventLoop) -> None:
        latencies: list[float] = []
        failed = 0
        try:
            try:
                results = await embed_isolating(self._call_embedder, [i.text for i in batch])
            except asyncio.CancelledError:
                # Only the loop's shutdown cancels a batch; tell its callers.
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(
                            LaneClosed("embedding lane stopped while this text's batch ran")
                        )
                raise
            now = loop.time()
            for item, result in zip(batch, results, strict=True):
                if isinstance(result, Exception):
                    failed += 1
                    if not item.future.done():
                        item.future.set_exception(failed_alone(result, len(batch)))
                    continue
                latencies.append(now - item.submitted)
                if not item.future.done():
                    item.future.set_result(result)
        finally:
            self._counts.batch_ran(len(batch), latencies, failed=failed)
            if self._observer is not None:
                self._observer.batch_ran(len(batch), latencies)
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

    def _on_dispatcher_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        # A bug in the dispatcher must not leave callers waiting forever.
        self._closing = True
        self._queue.drop_all("embedding lane dispatcher crashed", task.exception())
        self._queue.refuse_waiters("embedding lane dispatcher crashed")
