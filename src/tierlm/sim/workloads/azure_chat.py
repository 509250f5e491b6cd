"""``azure-chat``: chat arrivals and sizes replayed from the Azure LLM trace.

Trace: Azure LLM inference trace 2023, conversation service (Azure Public
Dataset, CC-BY 4.0; Patel et al., "Splitwise", ISCA 2024), read in place from
``../shared/traces/`` (``tierlm.sim.trace``); this workload fails with a clear
error when it is missing.

The trace is a datacentre's (5 requests/s of ~1 150-token prompts); the
simulated device is a phone. Replayed "rate scaled to the
simulated device": a window of consecutive requests, starting at a seeded
offset, with the gaps between arrivals stretched so that the chats alone
would keep the device busy ``chat_load`` of the time (default 30 %, a person
who chats a lot), prompt and output sizes as recorded (prompts capped at a
phone-class model's 4 096-token context). The chat surface stays open
throughout (foreground ``chat``). Background: Nataraj filling a 10-card deck
nobody swipes, a 500-note extraction backfill at 1/s, and the Gana cron ticks
of ``issue118`` (one on a second model).
"""

from __future__ import annotations

from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from tierlm.sim.context import SimContext
from tierlm.sim.device import DeviceModel
from tierlm.sim.jobspec import JobSpec
from tierlm.sim.trace import ATTRIBUTION, TraceRequest, load_trace
from tierlm.sim.workload import Workload
from tierlm.sim.workloads.producers import Deck, deck_filler, extraction, gana_cron

__all__ = ["AzureChat"]

DEFAULT_CHAT_LOAD = 0.3
CONTEXT_CAP = 4096


class AzureChat(Workload):
    name = "azure-chat"
    description = (
        "chat arrivals and prompt/output sizes from the Azure LLM 2023 conversation "
        "trace, rate-scaled to the device, over background load"
    )
    # An hour: ~50 chats at the default 30 % chat load.
    default_duration = 3600.0
    requires_trace = True

    def __init__(self, trace: Path | None = None, chat_load: float = DEFAULT_CHAT_LOAD) -> None:
        if not 0 < chat_load < 1:
            raise ValueError(f"chat_load: must be a fraction in (0, 1), got {chat_load!r}")
        self.requests = load_trace(trace)  # raises TraceMissingError now, not mid-run
        self.chat_load = chat_load

    def scale(self, device: DeviceModel) -> float:
        """Stretch factor for the trace's gaps: chats alone load the device ``chat_load``."""
        requests = self.requests
        service = sum(
            device.job_seconds(min(r.context_tokens, CONTEXT_CAP), r.generated_tokens)
            for r in requests
        ) / len(requests)
        gap = (requests[-1].at - requests[0].at) / max(1, len(requests) - 1)
        return service / (self.chat_load * gap)

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        return [
            _chats(sim, self.requests, self.scale(sim.device)),
            deck_filler(sim, Deck(target=10)),
            extraction(sim, notes=500, interval=1.0, start=1.0),
            gana_cron(sim, "gana:digest", period=180.0, first=30.0, slack=60.0),
            gana_cron(sim, "gana:inbox", period=240.0, first=100.0, slack=60.0),
            gana_cron(sim, "gana:translate", model="m2", period=300.0, first=150.0, slack=120.0),
        ]

    def params(self) -> dict[str, Any]:
        return {
            "chat_load": self.chat_load,
            "context_cap": CONTEXT_CAP,
            "trace_requests": len(self.requests),
            "trace": ATTRIBUTION,
        }


async def _chats(sim: SimContext, requests: tuple[TraceRequest, ...], scale: float) -> None:
    sim.set_foreground("chat")
    rng = sim.rng("trace-offset")
    n = len(requests)
    i = rng.randrange(n)
    span = requests[-1].at - requests[0].at
    base = requests[i].at
    laps = 0.0  # wrapping around the end of the trace
    while True:
        request = requests[i]
        await sim.sleep_until((request.at + laps - base) * scale)
        sim.submit(
            JobSpec(
                "chat",
                "m1",
                prompt_tokens=min(request.context_tokens, CONTEXT_CAP),
                output_tokens=max(1, request.generated_tokens),
                producer="chat:trace",
            )
        )
        i += 1
        if i == n:
            i = 0
            laps += span + span / max(1, n - 1)
