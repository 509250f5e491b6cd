"""``azure-chat``: chat arrivals and sizes replayed from the Azure LLM trace.

Trace: Azure LLM inference trace 2023, conversation service (Azure Public
Dataset, CC-BY 4.0; Patel et al., "Splitwise", ISCA 2024), shipped with tierlm
(``tierlm.sim.trace``).

The trace is a datacentre's (5 requests/s of ~1 150-token prompts); the
simulated device is a phone. The WHOLE trace is replayed over the run at a
stated offered load (``chat_load``, default 30 % of the device: a person who
chats a lot): its hour is time-scaled onto the run and an evenly spaced sample
of its requests is kept (``tierlm.sim.trace.replay_plan``), prompt and output
sizes as recorded (prompts capped at a phone-class model's 4 096-token
context). The chat surface stays open throughout (foreground ``chat``).
Background: Nataraj filling a 10-card deck nobody swipes, a 500-note
extraction backfill at 1/s, and the Gana cron ticks of ``issue118`` (one on a
second model).
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from tierlm.sim.context import SimContext
from tierlm.sim.device import DeviceModel
from tierlm.sim.jobspec import JobSpec
from tierlm.sim.trace import ATTRIBUTION, ReplayPlan, TraceRequest, load_trace, replay_plan
from tierlm.sim.workload import Workload
from tierlm.sim.workloads.producers import Deck, deck_filler, extraction, gana_cron

__all__ = ["AzureChat", "trace_chats", "trace_plan"]

DEFAULT_CHAT_LOAD = 0.3
CONTEXT_CAP = 4096


class AzureChat(Workload):
    name = "azure-chat"
    description = (
        "the whole Azure LLM 2023 conversation trace replayed over the run at a stated "
        "chat load (default 30 % of the device), over background load"
    )
    # An hour: ~50 chats at the default 30 % chat load.
    default_duration = 3600.0
    requires_trace = True
    parameters: ClassVar[Mapping[str, str]] = {
        "chat_load": "the chats' offered load, a fraction of the device (default 0.3)",
        "background": "1 (default): the deck, extraction and cron beside the chats; "
        "0: the chats alone (what the device gives people with nothing else)",
    }
    credit = f"Trace: {ATTRIBUTION}."

    def __init__(
        self, trace: Path | None = None, chat_load: float = DEFAULT_CHAT_LOAD, background: float = 1
    ) -> None:
        if not 0 < chat_load < 1:
            raise ValueError(f"chat_load: must be a fraction in (0, 1), got {chat_load!r}")
        if background not in (0, 1):
            raise ValueError(f"background: must be 0 or 1, got {background!r}")
        self.requests = load_trace(trace)  # raises TraceMissingError now, not mid-run
        self.chat_load = chat_load
        self.background = bool(background)

    def plan(self, device: DeviceModel, duration: float, seed: int) -> ReplayPlan:
        """The requests this run replays (the same for every policy)."""
        return trace_plan(self.name, self.requests, device, self.chat_load, duration, seed)

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        plan = self.plan(sim.device, sim.duration, sim.seed)
        if not self.background:
            return [trace_chats(sim, plan)]
        return [
            trace_chats(sim, plan),
            deck_filler(sim, Deck(target=10)),
            extraction(sim, notes=500, interval=1.0, start=1.0),
            gana_cron(sim, "gana:digest", period=180.0, first=30.0, slack=60.0),
            gana_cron(sim, "gana:inbox", period=240.0, first=100.0, slack=60.0),
            gana_cron(sim, "gana:translate", model="m2", period=300.0, first=150.0, slack=120.0),
        ]

    def hints(self, duration: float) -> dict[str, Any]:
        return {"stated_load": {"chat": self.chat_load}}

    def params(self) -> dict[str, Any]:
        return {
            "chat_load": self.chat_load,
            "background": int(self.background),
            "context_cap": CONTEXT_CAP,
            "trace_requests": len(self.requests),
            "trace": ATTRIBUTION,
        }


def trace_plan(
    name: str,
    requests: Sequence[TraceRequest],
    device: DeviceModel,
    load: float,
    duration: float,
    seed: int,
) -> ReplayPlan:
    """The trace's requests a run of workload ``name`` replays as chats, at
    offered ``load`` (the same for every policy: the phase is the seed's)."""
    phase = SimContext.random_stream(name, seed, "trace-phase").random()
    return replay_plan(
        requests, lambda r: _service(device, r), load=load, duration=duration, phase=phase
    )


def _service(device: DeviceModel, request: TraceRequest) -> float:
    prompt, output = _sizes(request)
    return device.job_seconds(prompt, output)


def _sizes(request: TraceRequest) -> tuple[int, int]:
    return min(request.context_tokens, CONTEXT_CAP), max(1, request.generated_tokens)


async def trace_chats(sim: SimContext, plan: ReplayPlan) -> None:
    """The plan's requests as chats of one person, the chat surface open."""
    sim.set_foreground("chat")
    for at, request in plan.arrivals:
        await sim.sleep_until(at)
        prompt, output = _sizes(request)
        sim.submit(JobSpec("chat", "m1", prompt, output, producer="chat:trace", generation=True))
