"""Prometheus metrics at /metrics, in a registry of the app's own.

Counters and histograms are fed by scheduler events and by the gateway's jobs;
the values that are a state (queue depth per tier, budget share, vruntime,
the loaded model) are read from a scheduler snapshot at scrape time, so they
are exact when scraped and cost nothing between scrapes.

Series (all prefixed ``tierlm_``):

- ``queue_depth{tier}``, ``queued_jobs{class}``, ``running{class}``;
- ``wait_seconds{class}`` (submit to first start) and
  ``time_to_first_token_seconds{class}`` histograms;
- ``generated_tokens_total{class,model}``; the per-request series
  (``prompt_tokens_total``, ``e2e_request_latency_seconds``,
  ``inter_token_latency_seconds``: ``request_metrics``) and the device's
  (``tokens_per_second`` over 10 s, the KV cache in use: ``device_metrics``);
- ``preemptions_total{class}`` (the preempted job's class);
- ``swaps_total{model}``, ``swap_seconds_total{model}`` (the model swapped to);
- ``budget_share{class}`` and ``budget_cap{class}`` for budgeted classes;
- ``vruntime_seconds{producer}``;
- ``jobs_total{class,outcome}`` (completed, failed, cancelled, requeued);
- ``client_disconnects_total{class,state}`` (queued or running when the client left);
- ``rejected_requests_total{reason}``;
- ``loaded_model{model}`` (1 for the loaded one), ``paused``;
- with a llama-cpp worker: ``worker_pid`` and ``worker_restarts_total`` (read
  from the runner at scrape time).

For routers that place requests by the model server's metrics (llm-d's
endpoint picker; ``serve_routers``), from the routing stats, cheap enough to
scrape every 50 ms (counters and one pass over the queue, no snapshot):

- ``requests_waiting`` and ``requests_running``: unlabeled totals (a router's
  metric spec selects ONE series);
- ``waiting_ahead_of_chat``: the jobs a new chat would wait behind here
  (chats queued and running, less the spare slots): what a picker placing a
  chat should read; ``requests_waiting`` counts background work a chat jumps
  (docs/distributed.md "llm-d");
- ``models_info{running_lora_adapters, waiting_lora_adapters, max_lora}``: the
  model the device holds (or loads), the other models with queued work, and
  ``max_lora="1"`` (one model at a time), read by llm-d's
  ``lora-affinity-scorer``; its value is the Unix time this label set first
  showed, as vLLM's ``lora_requests_info`` (the router reads the newest);
- with ``vllm_compat``, the same under vLLM's names too
  (``vllm:num_requests_waiting``, ``vllm:num_requests_running``,
  ``vllm:lora_requests_info``), and the KV usage and per-request series
  under vLLM's names (``device_metrics``, ``request_metrics``).

With embeddings on, the embedding lane's ``embedding_*`` series too
(``LaneMetrics``): its queue and counts read from ``lane.stats()`` at scrape
time, and two histograms (batch size, latency) fed batch by batch through the
lane's ``BatchObserver`` hook.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tierlm.embedding import LaneStats
from tierlm.server.gateway.device_metrics import DeviceCollector
from tierlm.server.gateway.request_metrics import RequestMetrics
from tierlm.shell.events import (
    JobCancelled,
    JobCompleted,
    JobFailed,
    JobStarted,
    ModelReturned,
    Preempting,
    Requeued,
    RunEnded,
    SchedulerEvent,
    SwapFinished,
)
from tierlm.shell.snapshot import SchedulerSnapshot

__all__ = ["REJECT_REASONS", "LaneMetrics", "Metrics"]

# From a fast local token (10 ms) past the affinity starvation bound
# (SchedulerConfig.max_affinity_wait, 120 s) to a background job's long wait.
WAIT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)

# A text's time in the embedding lane: from one warm MiniLM call (~5 ms) to a
# queue that took a minute to drain.
EMBED_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

PRODUCER_SERIES = 50
"""Producers with a ``tierlm_vruntime_seconds`` series of their own, the most
served first: a dashboard's worth. 5 000 invented ids made /metrics 1 MB."""
OTHER_PRODUCERS = "other"

REJECT_REASONS = (
    "invalid_request",
    "invalid_json",
    "body_too_large",
    "unknown_model",
    "unknown_class",
    "max_tokens",
    "unsupported",
    "unauthorized",
    "class_not_allowed",
    "admin_required",
    "deadline_not_allowed",
    "queue_full",
    "shutting_down",
    "too_many_connections",
    "embedding_queue_full",
    "embeddings_disabled",
    "unknown_url",
    "method_not_allowed",
    "storage_full",
    "store_unavailable",
)

_OUTCOMES = tuple(end.outcome for end in (JobCompleted, JobFailed, JobCancelled, Requeued))


class Metrics:
    def __init__(
        self,
        snapshot: Callable[[], SchedulerSnapshot | None],
        classes: Iterable[str],
        runner_state: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.wait = Histogram(
            "tierlm_wait_seconds",
            "Seconds from submit to a job's first start, per class",
            ["class"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "tierlm_time_to_first_token_seconds",
            "Seconds from submit to the first generated token of a gateway request, per class",
            ["class"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "tierlm_generated_tokens", "Tokens generated", ["class", "model"], registry=r
        )
        self.requests = RequestMetrics(r, classes)
        self.preemptions = Counter(
            "tierlm_preemptions", "Running jobs preempted, by their class", ["class"], registry=r
        )
        self.swaps = Counter("tierlm_swaps", "Model swaps, by model loaded", ["model"], registry=r)
        self.swap_seconds = Counter(
            "tierlm_swap_seconds", "Seconds spent swapping, by model loaded", ["model"], registry=r
        )
        self.jobs = Counter(
            "tierlm_jobs", "Jobs ended or re-queued, by outcome", ["class", "outcome"], registry=r
        )
        self.disconnects = Counter(
            "tierlm_client_disconnects",
            "Clients that went away before their job ended (the job was cancelled)",
            ["class", "state"],
            registry=r,
        )
        self.rejected_requests = Counter(
            "tierlm_rejected_requests",
            "Requests answered with an error, by reason",
            ["reason"],
            registry=r,
        )
        for name in classes:
            self.wait.labels(name)
            self.ttft.labels(name)
            self.preemptions.labels(name)
            for outcome in _OUTCOMES:
                self.jobs.labels(name, outcome)
            for state in ("queued", "running"):
                self.disconnects.labels(name, state)
        for reason in REJECT_REASONS:
            self.rejected_requests.labels(reason)
        r.register(_StateCollector(snapshot, list(classes)))
        if runner_state is not None:
            r.register(_RunnerCollector(runner_state))

    # -- feeds --------------------------------------------------------------

    def on_event(self, event: SchedulerEvent) -> None:
        match event:
            case JobStarted(job=job, attempt=1):
                waited = max(0.0, event.time - job.submitted_at)
                self.wait.labels(job.class_name).observe(waited)
                self.requests.waited(job.class_name, waited)
            case Preempting(job=job):
                self.preemptions.labels(job.class_name).inc()
            case SwapFinished(job=job, seconds=seconds):
                self.swaps.labels(job.model_id).inc()
                self.swap_seconds.labels(job.model_id).inc(seconds)
            case ModelReturned(model_id=model_id, seconds=seconds):
                self.swaps.labels(model_id).inc()
                self.swap_seconds.labels(model_id).inc(seconds)
            case RunEnded(job=job):
                self.jobs.labels(job.class_name, event.outcome).inc()

    def rejected(self, reason: str) -> None:
        self.rejected_requests.labels(reason).inc()

    def first_token(self, class_name: str, seconds: float, model: str = "") -> None:
        self.ttft.labels(class_name).observe(max(0.0, seconds))
        self.requests.first_token(class_name, model, seconds)

    def generation(self, class_name: str, model: str, tokens: int, decode_seconds: float) -> None:
        """One run of a generation ended (completed, preempted or cancelled)."""
        if tokens:
            self.tokens.labels(class_name, model).inc(tokens)
            self.requests.generated(model, tokens)

    def disconnected(self, class_name: str, state: str) -> None:
        self.disconnects.labels(class_name, state).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def serve_routers(
        self, routing: Callable[[], Mapping[str, Any]], *, vllm_compat: bool = False
    ) -> None:
        """Register the series routers read (module docstring); ``routing``
        returns the routing stats (``tierlm.server.ops.routing``)."""
        self.registry.register(_RouterCollector(routing, vllm_compat))
        if vllm_compat:
            self.requests.vllm_names()

    def serve_device(
        self, figures: Callable[[], Mapping[str, Any]], *, vllm_compat: bool = False
    ) -> None:
        """Register the device's series (``device_metrics``), read from ``figures``."""
        self.registry.register(DeviceCollector(figures, vllm_compat))

    def embedding_lane(self, stats: Callable[[], LaneStats | None], max_batch: int) -> LaneMetrics:
        """Register an embedding lane's series; the result is its ``BatchObserver``."""
        return LaneMetrics(self.registry, stats, max_batch)


class LaneMetrics:
    """The embedding lane's series; a ``BatchObserver`` for its histograms."""

    def __init__(
        self,
        registry: CollectorRegistry,
        stats: Callable[[], LaneStats | None],
        max_batch: int,
    ) -> None:
        self.batch_size = Histogram(
            "tierlm_embedding_batch_size",
            "Texts per embedding batch",
            buckets=batch_size_buckets(max_batch),
            registry=registry,
        )
        self.latency = Histogram(
            "tierlm_embedding_latency_seconds",
            "Seconds from a text's arrival in the lane to its vector",
            buckets=EMBED_LATENCY_BUCKETS,
            registry=registry,
        )
        registry.register(_LaneCollector(stats))

    def batch_ran(self, size: int, latencies: Sequence[float]) -> None:
        self.batch_size.observe(size)
        for seconds in latencies:
            self.latency.observe(seconds)


def batch_size_buckets(max_batch: int) -> list[int]:
    """Powers of two up to ``max_batch``, and ``max_batch`` itself: size 1 means
    no batching happened, ``max_batch`` that the lane was saturated."""
    bounds = []
    bound = 1
    while bound < max_batch:
        bounds.append(bound)
        bound *= 2
    bounds.append(max_batch)
    return bounds


class _StateCollector(Collector):
    """Scrape-time values read from the scheduler's snapshot."""

    def __init__(
        self, snapshot: Callable[[], SchedulerSnapshot | None], classes: list[str]
    ) -> None:
        self._snapshot = snapshot
        self._classes = classes

    def describe(self) -> Iterable[Metric]:
        return []  # dynamic: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        if snap is None:
            return
        depth = GaugeMetricFamily(
            "tierlm_queue_depth", "Queued jobs per effective tier", labels=["tier"]
        )
        for tier, jobs in sorted(snap.queued.items()):
            depth.add_metric([f"T{tier}"], len(jobs))
        yield depth
        per_class = dict.fromkeys(self._classes, 0)
        for jobs in snap.queued.values():
            for job in jobs:
                per_class[job.class_name] = per_class.get(job.class_name, 0) + 1
        queued = GaugeMetricFamily("tierlm_queued_jobs", "Queued jobs per class", labels=["class"])
        for name, count in sorted(per_class.items()):
            queued.add_metric([name], count)
        yield queued
        running = GaugeMetricFamily(
            "tierlm_running", "Running jobs (slots held) per class", labels=["class"]
        )
        held = dict.fromkeys(self._classes, 0)
        for info in snap.running_jobs:
            held[info.class_name] = held.get(info.class_name, 0) + 1
        for name, count in held.items():
            running.add_metric([name], count)
        yield running
        yield GaugeMetricFamily(
            "tierlm_slots", "Sequences the device decodes at once", value=snap.slots
        )
        yield GaugeMetricFamily(
            "tierlm_batch_size",
            "Sequences in the batch now (slots in use)",
            value=len(snap.running_jobs),
        )
        share = GaugeMetricFamily(
            "tierlm_budget_share",
            "Share of busy device time in the budget window",
            labels=["class"],
        )
        cap = GaugeMetricFamily(
            "tierlm_budget_cap", "Budget cap (share of busy time)", labels=["class"]
        )
        for name, value in sorted(snap.budget_cap.items()):
            cap.add_metric([name], value)
            share.add_metric([name], snap.budget_share.get(name, 0.0))
        yield share
        yield cap
        vr = GaugeMetricFamily(
            "tierlm_vruntime_seconds", "Fair-pool virtual runtime per producer", labels=["producer"]
        )
        # Producer ids are the client's choice: a series each would let any
        # client grow /metrics without bound. The most served keep theirs;
        # the rest share "other" (their largest value).
        ranked = sorted(snap.vruntime.items(), key=lambda kv: (-kv[1], kv[0]))
        for producer, value in sorted(ranked[:PRODUCER_SERIES]):
            vr.add_metric([producer], value)
        if len(ranked) > PRODUCER_SERIES:
            vr.add_metric([OTHER_PRODUCERS], ranked[PRODUCER_SERIES][1])
        yield vr
        yield GaugeMetricFamily(
            "tierlm_fair_producers",
            "Producers the fair pool remembers (active, or away less than idle_reset)",
            value=len(ranked),
        )
        loaded = GaugeMetricFamily(
            "tierlm_loaded_model", "1 for the model the device holds", labels=["model"]
        )
        if snap.loaded_model is not None:
            loaded.add_metric([snap.loaded_model], 1)
        yield loaded
        yield GaugeMetricFamily(
            "tierlm_paused", "1 while the scheduler is paused", value=int(snap.paused)
        )


class _RunnerCollector(Collector):
    """The runner's own state (a llama.cpp worker's pid and restarts), read at
    scrape time; nothing for runners that report none."""

    def __init__(self, state: Callable[[], Mapping[str, Any]]) -> None:
        self._state = state

    def describe(self) -> Iterable[Metric]:
        return []  # dynamic: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        state = self._state()
        if "worker_pid" in state:
            pid = state["worker_pid"]
            yield GaugeMetricFamily(
                "tierlm_worker_pid",
                "The model worker process's pid (0 while none runs)",
                value=pid or 0,
            )
        if "restarts" in state:
            yield CounterMetricFamily(
                "tierlm_worker_restarts",
                "Model worker processes started again after a crash",
                value=state["restarts"],
            )


class _LaneCollector(Collector):
    """The embedding lane's state and counts, read from ``lane.stats()`` at scrape
    time (the lane keeps its own counts; nothing is counted twice)."""

    def __init__(self, stats: Callable[[], LaneStats | None]) -> None:
        self._stats = stats

    def describe(self) -> Iterable[Metric]:
        return []  # dynamic: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        s = self._stats()
        if s is None:
            return
        for name, doc, value in (
            ("queue_depth", "Texts waiting in the embedding queue for a batch", s.queue_depth),
            ("queue_limit", "Texts the embedding queue holds (embeddings.max_queue)", s.max_queue),
            ("in_flight_batches", "Embedding batches running now", s.in_flight_batches),
            ("in_flight_texts", "Texts in the embedding batches running now", s.in_flight_texts),
        ):
            yield GaugeMetricFamily(f"tierlm_embedding_{name}", doc, value=value)
        texts = CounterMetricFamily(
            "tierlm_embedding_texts",
            "Texts offered to the embedding lane, by outcome (embedded; failed: its "
            "batch failed; rejected: the queue was full; dropped: the client left first)",
            labels=["outcome"],
        )
        for outcome, count in (
            ("embedded", s.embedded),
            ("failed", s.failed),
            ("rejected", s.rejected),
            ("dropped", s.dropped),
        ):
            texts.add_metric([outcome], count)
        yield texts
        yield CounterMetricFamily(
            "tierlm_embedding_truncated_texts",
            "Texts cut to embeddings.max_chars (overlong = truncate)",
            value=s.truncated,
        )


class _RouterCollector(Collector):
    """What llm-d's endpoint picker reads (module docstring), from the routing
    stats: counters, no snapshot."""

    def __init__(self, routing: Callable[[], Mapping[str, Any]], vllm_compat: bool) -> None:
        self._routing = routing
        self._vllm = vllm_compat
        self._models: tuple[tuple[str, str], float] | None = None
        """The last models_info label values, and the Unix time they first showed."""

    def describe(self) -> Iterable[Metric]:
        return []  # dynamic: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        stats = self._routing()
        if not stats:
            return  # not started
        waiting = sum(stats.get("queued_by_class", {}).values())
        running = sum(stats.get("running", {}).values())
        active = stats.get("swapping_to") or stats.get("loaded_model") or ""
        queued = sorted(m for m, n in stats.get("queued_by_model", {}).items() if n and m != active)
        labels = (active, ",".join(queued))
        if self._models is None or self._models[0] != labels:
            self._models = (labels, float(stats.get("at") or 0.0))
        since = self._models[1]
        names = [("tierlm_", "requests_waiting", "requests_running", "models_info")]
        if self._vllm:
            names.append(
                ("vllm:", "num_requests_waiting", "num_requests_running", "lora_requests_info")
            )
        chat_classes = stats.get("chat_classes") or ()
        chats_running = sum(n for c, n in stats.get("running", {}).items() if c in chat_classes)
        spare = max(0, int(stats.get("slots") or 1) - 1)
        ahead = max(0, int(stats.get("chat_queued") or 0) + chats_running - spare)
        yield GaugeMetricFamily(
            "tierlm_waiting_ahead_of_chat",
            "Jobs a new chat waits behind here (chats queued and running, less spare slots); "
            "background work is not counted: a chat preempts it",
            value=ahead,
        )
        for prefix, waiting_name, running_name, info_name in names:
            yield GaugeMetricFamily(
                prefix + waiting_name, "Requests queued, all classes", value=waiting
            )
            yield GaugeMetricFamily(prefix + running_name, "Requests generating now", value=running)
            info = GaugeMetricFamily(
                prefix + info_name,
                "The model the device holds and the models waiting for it (one at a "
                "time: max_lora 1); the value is when this set first showed (Unix time)",
                labels=["running_lora_adapters", "waiting_lora_adapters", "max_lora"],
            )
            info.add_metric([labels[0], labels[1], "1"], since)
            yield info
