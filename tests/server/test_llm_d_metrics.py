"""``/metrics`` read as llm-d's endpoint picker reads a model server
(docs/distributed.md "llm-d"): its core metrics extractor selects ONE series
per spec, by name and equality labels (the newest by timestamp: with none in
the exposition, the first), and the LoRA-info series with the largest value;
``lora-affinity-scorer`` then scores 1.0 (model active), 0.8 (room to load
one: active + waiting < max_lora), 0.6 (already waiting), else 0."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.payloads import chat_body
from tests.server.helpers import Gateway, serve, sim_settings
from tierlm.runners.requests import GenerationRequest
from tierlm.runners.simulated import SimulatedRunner
from tierlm.server.gateway.admission import RunTimes
from tierlm.server.gateway.metrics import Metrics
from tierlm.server.ops.routing import RoutingStats
from tierlm.shell.scheduler import Scheduler

# The engine config docs/distributed.md gives llm-d for tierlm's own names.
TIERLM_ENGINE = {
    "queuedRequestsSpec": "tierlm_requests_waiting",
    "runningRequestsSpec": "tierlm_requests_running",
    "loraSpec": "tierlm_models_info",
}
# llm-d's built-in vLLM engine config (what `vllm_compat` answers), less the
# cache-info spec tierlm has no counterpart of.
VLLM_ENGINE = {
    "queuedRequestsSpec": "vllm:num_requests_waiting",
    "runningRequestsSpec": "vllm:num_requests_running",
    "kvUsageSpec": "vllm:kv_cache_usage_perc",
    "loraSpec": "vllm:lora_requests_info",
}

Sample = tuple[dict[str, str], float]


def families(text: str) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """``name{a=b,c="d"}``: a name and equality labels (PromQL selector syntax)."""
    match = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?", spec)
    assert match, spec
    labels = {}
    for part in filter(None, (match.group(2) or "").split(",")):
        key, _, value = part.partition("=")
        labels[key.strip()] = value.strip().strip('"')
    return match.group(1), labels


def select(found: dict[str, list[Sample]], spec: str, *, lora: bool = False) -> Sample:
    name, wanted = parse_spec(spec)
    matching = [s for s in found.get(name, []) if wanted.items() <= s[0].items()]
    assert matching, f"no series for {spec!r}"
    if lora:
        return max(matching, key=lambda s: s[1])  # the newest by its value
    return matching[0]  # no timestamps: the first series wins


@dataclass
class Endpoint:
    """What the extractor stores for one model server."""

    waiting: int
    running: int
    active: set[str] = field(default_factory=set)
    waiting_models: set[str] = field(default_factory=set)
    max_active: int = 0


def extract(text: str, engine: dict[str, str]) -> Endpoint:
    found = families(text)
    labels, _ = select(found, engine["loraSpec"], lora=True)
    return Endpoint(
        waiting=int(select(found, engine["queuedRequestsSpec"])[1]),
        running=int(select(found, engine["runningRequestsSpec"])[1]),
        active={a for a in labels["running_lora_adapters"].split(",") if a},
        waiting_models={a for a in labels["waiting_lora_adapters"].split(",") if a},
        max_active=int(labels["max_lora"]),
    )


def lora_affinity(endpoint: Endpoint, model: str) -> float:
    if model in endpoint.active:
        return 1.0
    if len(endpoint.active) + len(endpoint.waiting_models) < endpoint.max_active:
        return 0.8
    if model in endpoint.waiting_models:
        return 0.6
    return 0.0


def scrape(gw: Gateway) -> str:
    response = gw.http.get("/metrics")
    assert response.status_code == 200, response.text
    return response.text


def test_the_endpoint_picker_reads_queue_running_and_models(gateway: Gateway) -> None:
    idle = extract(scrape(gateway), TIERLM_ENGINE)
    assert (idle.waiting, idle.running, idle.active, idle.max_active) == (0, 0, {"sim-a"}, 1)
    assert lora_affinity(idle, "sim-a") == 1.0
    client = gateway.openai(X_Tierlm_Class="gana")

    def create(model: str) -> object:
        return client.chat.completions.create(**chat_body(model, max_tokens=300))

    jobs = [gateway.background(lambda: create("sim-a"))]
    gateway.wait_running("gana")
    jobs += [gateway.background(lambda: create("sim-b")) for _ in range(2)]
    gateway.wait(lambda s: s["queue_depth"] == 2, "two queued")
    text = scrape(gateway)
    busy = extract(text, TIERLM_ENGINE)
    assert (busy.waiting, busy.running) == (2, 1)
    # A chat jumps all three: nothing is ahead of it here.
    assert select(families(text), "tierlm_waiting_ahead_of_chat")[1] == 0
    assert busy.active == {"sim-a"} and busy.waiting_models == {"sim-b"}
    assert lora_affinity(busy, "sim-a") == 1.0  # tierlm's order: the holder...
    assert lora_affinity(busy, "sim-b") == 0.6  # ...then one already queuing it
    assert lora_affinity(busy, "sim-c") == 0.0
    for job in jobs:
        job.result()


def test_an_empty_device_has_room_to_load_a_model() -> None:
    with serve(sim_settings({"backend": {"preload": False}})) as gw:
        empty = extract(scrape(gw), TIERLM_ENGINE)
        assert empty.active == set() and lora_affinity(empty, "sim-b") == 0.8


def test_vllm_compat_answers_the_built_in_vllm_engine_config() -> None:
    with serve(sim_settings({"metrics": {"vllm_compat": True}})) as gw:
        text = scrape(gw)
        endpoint = extract(text, VLLM_ENGINE)
        assert endpoint.active == {"sim-a"} and endpoint.max_active == 1
        assert select(families(text), VLLM_ENGINE["kvUsageSpec"])[1] == 0.0
    with serve() as gw:
        assert "vllm:num_requests_waiting" not in scrape(gw)


def test_metrics_without_a_key_only_when_the_operator_says_so() -> None:
    keys = [{"name": "ops", "key": "sk-ops", "admin": True}]
    with serve(sim_settings({"keys": keys})) as gw:
        assert httpx.get(f"{gw.url}/metrics").status_code == 401
    with serve(sim_settings({"keys": keys, "metrics": {"public": True}})) as gw:
        assert httpx.get(f"{gw.url}/metrics").status_code == 200
        # Only /metrics: the scheduler API still needs the admin key.
        assert httpx.get(f"{gw.url}/v1/scheduler/routing").status_code == 401


async def test_the_router_series_cost_no_snapshot() -> None:
    """A picker scrapes every 50 ms: the series come from counters and one pass
    over the queue, never the snapshot's dispatch-order replay."""

    scheduler = Scheduler(SimulatedRunner(swap_seconds=1.0))
    run_times = RunTimes()
    stats = RoutingStats(lambda: scheduler, run_times, lambda _: 1000)
    scheduler.add_listener(stats.on_event)
    metrics = Metrics(lambda: None, [])
    metrics.serve_routers(stats.read)
    for i in range(500):
        request = GenerationRequest(model_id=f"m{i % 3}", prompt="p", max_tokens=50)
        scheduler.submit_generation("gana", request, lambda _: None)
    await asyncio.sleep(0.5)

    def no_snapshot() -> None:
        raise AssertionError("the router series read the snapshot")

    scheduler.snapshot = no_snapshot  # type: ignore[method-assign,assignment]
    text = metrics.render().decode()
    await scheduler.aclose()
    endpoint = extract(text, TIERLM_ENGINE)
    assert (endpoint.waiting, endpoint.running) == (499, 1)
    assert endpoint.active == {"m0"} and endpoint.waiting_models == {"m1", "m2"}
