"""Per-request series of ``/metrics`` (docs/gateway.md "Metrics"), named as
Prometheus names them and, with ``[metrics] vllm_compat``, as vLLM does, so
a Grafana board or a router built for vLLM reads tierlm unchanged:

- ``tierlm_prompt_tokens_total{class,model}``: the prompts' tokens (exact
  where the runner counts them, ``intake.counted``), counted once a request
  ends; vLLM: ``vllm:prompt_tokens_total{model_name}``;
- ``tierlm_e2e_request_latency_seconds{class}``: a completed request, from
  its submission (its wait in the queue included, as a client sees it) to its
  last token; vLLM: ``vllm:e2e_request_latency_seconds{model_name}``;
- ``tierlm_inter_token_latency_seconds{class}``: each gap between two tokens
  of a request as its client sees them (a preemption's pause included: that
  is what a person waits); vLLM: ``vllm:inter_token_latency_seconds``;
- vLLM's ``vllm:generation_tokens_total`` and
  ``vllm:time_to_first_token_seconds`` beside tierlm's own
  (``tierlm_generated_tokens_total``, ``tierlm_time_to_first_token_seconds``).

Per class, because a class is who waits (docs/design.md §4): a chat's
latency and a backfill's are different questions. The wait and the time to
first token are also kept over the last minutes for the dashboard
(``latency_window``).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram

from tierlm.server.gateway.latency_window import LatencyWindow

__all__ = ["ITL_BUCKETS", "RequestMetrics"]

# From a fast local token (1 ms) past a preempted chat's pause (a few seconds).
ITL_BUCKETS = (
    *(0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3),
    *(0.5, 0.75, 1.0, 2.5, 5.0, 10.0),
)
# A request's whole life: from a one-token answer to a long wait behind a backfill.
E2E_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)


class _Vllm:
    """The same figures under vLLM's names (``vllm_compat``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        label = ["model_name"]
        self.prompt = Counter(
            "vllm:prompt_tokens", "Prefill tokens processed", label, registry=registry
        )
        self.generation = Counter(
            "vllm:generation_tokens", "Generation tokens processed", label, registry=registry
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "End-to-end request latency in seconds",
            label,
            buckets=E2E_BUCKETS,
            registry=registry,
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Inter-token latency in seconds",
            label,
            buckets=ITL_BUCKETS,
            registry=registry,
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Time to first token in seconds",
            label,
            buckets=E2E_BUCKETS,
            registry=registry,
        )


class RequestMetrics:
    def __init__(self, registry: CollectorRegistry, classes: Iterable[str]) -> None:
        self._registry = registry
        self.prompt_tokens = Counter(
            "tierlm_prompt_tokens",
            "Prompt tokens of the requests that ended",
            ["class", "model"],
            registry=registry,
        )
        self.e2e = Histogram(
            "tierlm_e2e_request_latency_seconds",
            "Seconds from a request's submission to its last token, completed requests",
            ["class"],
            buckets=E2E_BUCKETS,
            registry=registry,
        )
        self.itl = Histogram(
            "tierlm_inter_token_latency_seconds",
            "Seconds between two tokens of a request, as its client receives them",
            ["class"],
            buckets=ITL_BUCKETS,
            registry=registry,
        )
        for name in classes:
            self.e2e.labels(name)
            self.itl.labels(name)
        self.vllm: _Vllm | None = None
        self.window = LatencyWindow()
        """The wait and time to first token over the dashboard's window."""

    def vllm_names(self) -> None:
        """Also under vLLM's names (module docstring); once."""
        if self.vllm is None:
            self.vllm = _Vllm(self._registry)

    # -- feeds ---------------------------------------------------------------

    def ended(self, class_name: str, model: str, prompt_tokens: int, seconds: float | None) -> None:
        """A request ended; ``seconds``: its end-to-end latency if it completed."""
        self.prompt_tokens.labels(class_name, model).inc(prompt_tokens)
        if seconds is not None:
            self.e2e.labels(class_name).observe(max(0.0, seconds))
        if self.vllm is not None:
            self.vllm.prompt.labels(model).inc(prompt_tokens)
            if seconds is not None:
                self.vllm.e2e.labels(model).observe(max(0.0, seconds))

    def token_gap(self, class_name: str, model: str, seconds: float) -> None:
        self.itl.labels(class_name).observe(max(0.0, seconds))
        if self.vllm is not None:
            self.vllm.itl.labels(model).observe(max(0.0, seconds))

    def waited(self, class_name: str, seconds: float) -> None:
        """A job's first start, ``seconds`` after its submission."""
        self.window.observe("wait", class_name, seconds)

    def first_token(self, class_name: str, model: str, seconds: float) -> None:
        self.window.observe("ttft", class_name, seconds)
        if self.vllm is not None:
            self.vllm.ttft.labels(model).observe(max(0.0, seconds))

    def generated(self, model: str, tokens: int) -> None:
        if self.vllm is not None and tokens:
            self.vllm.generation.labels(model).inc(tokens)
