"""The device's state on ``/metrics``, read at each scrape from
``resources.device_figures`` (no snapshot), the same figures the dashboard's
resources panel shows:

- ``tierlm_tokens_per_second{model}``: tokens generated a second over the
  last 10 s, every slot of a batch together (``throughput``);
- ``tierlm_kv_cache_usage_ratio``: the running jobs' tokens over the KV
  cache's capacity (context x slots), 0 to 1;
- ``tierlm_kv_cache_used_bytes``, ``tierlm_kv_cache_allocated_bytes``:
  where the KV size of a token is known (a GGUF's header, the sim);
- with ``vllm_compat``, the ratio as ``vllm:kv_cache_usage_perc`` (vLLM's
  name for a 0-1 ratio), which a router's KV scorer reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["DeviceCollector"]


class DeviceCollector(Collector):
    def __init__(self, figures: Callable[[], Mapping[str, Any]], vllm_compat: bool) -> None:
        self._figures = figures
        self._vllm = vllm_compat

    def describe(self) -> Iterable[Metric]:
        return []  # dynamic: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        try:
            figures = self._figures()
        except RuntimeError:  # the gateway is not started: nothing to report
            return
        rate = GaugeMetricFamily(
            "tierlm_tokens_per_second",
            "Tokens generated a second over the last 10 s, all slots, by the model loaded",
            labels=["model"],
        )
        if figures.get("model") is not None:
            rate.add_metric([figures["model"]], figures.get("tokens_per_s") or 0.0)
        yield rate
        usage = figures.get("kv_usage")
        if usage is not None:
            yield GaugeMetricFamily(
                "tierlm_kv_cache_usage_ratio",
                "KV cache in use by the running jobs, of context x slots (0-1)",
                value=usage,
            )
        for key, name, doc in (
            ("kv_in_use_bytes", "used", "KV cache bytes in use by the running jobs"),
            ("kv_allocated_bytes", "allocated", "KV cache bytes allocated for the slots"),
        ):
            if figures.get(key) is not None:
                yield GaugeMetricFamily(f"tierlm_kv_cache_{name}_bytes", doc, value=figures[key])
        if self._vllm:
            yield GaugeMetricFamily(
                "vllm:kv_cache_usage_perc",
                "KV-cache usage; 1 means 100 percent usage",
                value=usage or 0.0,
            )
