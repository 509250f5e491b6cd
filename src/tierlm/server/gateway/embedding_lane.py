"""The embedding lane behind ``/v1/embeddings`` (docs/design.md §5), as the app
runs it: built by ``create_app``, started and closed by its lifespan, reported
in ``/metrics``, the state API and the dashboard. Embeddings never go through
the LLM scheduler: the lane runs beside it, with its own embedder and threads.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

from tierlm.embedding import BatchObserver, Embedder, EmbeddingLane, LaneStats
from tierlm.server.gateway.gateway import RETRY_AFTER_MAX, RETRY_AFTER_MIN, Gateway
from tierlm.server.settings.sections import ConfigError, ServerSettings

__all__ = ["EmbeddingService"]

logger = logging.getLogger("tierlm.server")

# Its section in the state API and the dashboard.
_EXTENSION = "embeddings"


class EmbeddingService:
    """The lane behind ``/v1/embeddings``: built by ``create_app``, started and
    closed by its lifespan, reported in ``/metrics``, the state API and the dashboard."""

    def __init__(self, settings: ServerSettings, embedder: Embedder | None = None) -> None:
        self.settings = settings.embeddings
        self.model = self.settings.served_model()
        # What the state API shows: an embedder handed to create_app while the
        # settings turn embeddings off is the program's own.
        self.kind: str = self.settings.backend if self.settings.enabled else "custom"
        self._given = embedder
        self.embedder: Embedder | None = embedder
        self.lane: EmbeddingLane | None = None
        self._observer: BatchObserver | None = None

    @classmethod
    def from_settings(
        cls, settings: ServerSettings, embedder: Embedder | None = None
    ) -> EmbeddingService | None:
        """None when embeddings are off (and no embedder is given)."""
        if embedder is None:
            if not settings.embeddings.enabled:
                return None
            reason = settings.embeddings.unavailable()
            if reason is not None:
                raise ConfigError(f"embeddings.backend: {reason}")
        return cls(settings, embedder)

    def mount(self, gateway: Gateway) -> None:
        gateway.extensions[_EXTENSION] = self.state
        gateway.embedding_model = self.model
        self._observer = gateway.metrics.embedding_lane(self.stats, self.settings.max_batch)

    async def start(self) -> None:
        if self.embedder is None:
            # Loading a model takes seconds: off the loop, like a model preload.
            self.embedder = await asyncio.to_thread(self.settings.make_embedder)
            logger.info(
                "embeddings: %s served as %r (%d dimensions)",
                self.kind,
                self.model,
                self.embedder.dim,
            )
        s = self.settings
        self.lane = EmbeddingLane(
            self.embedder,
            concurrency=s.concurrency,
            max_batch=s.max_batch,
            max_wait_ms=s.max_wait_ms,
            max_queue=s.max_queue,
            max_chars=s.max_chars,
            overlong=s.overlong,
            observer=self._observer,
        )

    async def aclose(self) -> None:
        """Close the lane (queued texts get 503), then free a model the app loaded."""
        if self.lane is not None:
            await self.lane.aclose()
        if self._given is None and self.embedder is not None:
            close = getattr(self.embedder, "close", None)
            if close is not None:
                await asyncio.to_thread(close)

    def stats(self) -> LaneStats | None:
        """The lane's stats, None before the lane starts."""
        return None if self.lane is None else self.lane.stats()

    def running_lane(self) -> EmbeddingLane:
        if self.lane is None:
            raise RuntimeError("the embedding lane is not started (the app's lifespan did not run)")
        return self.lane

    def state(self) -> dict[str, Any]:
        """The state API's and the dashboard's ``embeddings`` section (JSON-ready, flat:
        the dashboard shows it as a table; ``*_seconds`` values are shown as times)."""
        head: dict[str, Any] = {"backend": self.kind, "model": self.model}
        if self.lane is None:
            return {**head, "status": "starting"}
        lane = self.lane
        s = lane.stats()
        return {
            **head,
            "status": "closed" if s.closed else "serving",
            "dimensions": lane.dim,
            "queue_depth": s.queue_depth,
            "max_queue": s.max_queue,
            "in_flight_batches": s.in_flight_batches,
            "in_flight_texts": s.in_flight_texts,
            "concurrency": s.concurrency,
            "max_batch": s.max_batch,
            "embedded": s.embedded,
            "failed": s.failed,
            "rejected": s.rejected,
            "dropped": s.dropped,
            "truncated": s.truncated,
            "batches": s.batches,
            "mean_batch_size": s.mean_batch_size,
            "peak_queue_depth": s.peak_queue_depth,
            "latency_p50_seconds": s.latency_p50,
            "latency_p99_seconds": s.latency_p99,
            "max_chars": lane.max_chars,
            "overlong": lane.overlong,
        }

    def retry_after(self, stats: LaneStats) -> int:
        """Seconds until a full queue has likely drained: what a text recently took
        from arrival to vector (its time in the queue, mostly)."""
        seconds = stats.latency_p50 if stats.latency_p50 is not None else RETRY_AFTER_MIN
        return int(min(RETRY_AFTER_MAX, max(RETRY_AFTER_MIN, math.ceil(seconds))))
