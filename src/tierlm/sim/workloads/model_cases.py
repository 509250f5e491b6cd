"""Scheduling across models and people, tried as careless clients would
(docs/design.md §8.7, §4.2, §4.3, §4.8): one workload per
case, each with the number it is about.

- ``two-model-agents``: two agents on two models, each sending its next 5 s
  job the moment its last ends. Deciding in the instant between, the device
  swapped after every job (work a third of the time); anticipatory holds keep
  each model for its agent's next job (docs/design.md §4.8).
- ``four-models``: four models with two backlogged producers each (10 s
  jobs). ``max_affinity_wait`` was checked only for the pool's top pick, and
  jobs waited 364-478 s for their swap.
- ``chat-crowd``: one person queues 20 chats at once, then nine others send
  one each. Chat was first come first served across people: the nine waited
  behind all twenty (docs/design.md §4.2).
- ``chat-over-backfill``: a person chatting 40 % of the time, an extraction
  backlog within its budget and a backlogged Nataraj deck: the pool got 1.3 %
  (docs/design.md §4.3).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from tierlm.sim.context import SimContext
from tierlm.sim.jobspec import JobSpec
from tierlm.sim.story import Story, class_share, class_wait, others_wait, work_share
from tierlm.sim.workload import Workload
from tierlm.sim.workloads.producers import Deck, backlogged, deck_filler, extraction, output_for

__all__ = ["ChatCrowd", "ChatOverBackfill", "FourModels", "TwoModelAgents"]

PROMPT = 60  # tokens: 0.4 s of prefill on the default device


def one_at_a_time(
    sim: SimContext, models: dict[str, str], seconds: float
) -> list[Coroutine[Any, Any, None]]:
    """Producers (name: model) each sending its next ``seconds`` job the
    moment its last ends."""
    output = output_for(sim.device, seconds, PROMPT)
    return [
        backlogged(sim, name, model=model, outstanding=1, prompt=(PROMPT, PROMPT), output=output)
        for name, model in models.items()
    ]


class TwoModelAgents(Workload):
    name = "two-model-agents"
    description = "two agents on two models, each sending its next 5 s job the moment its last ends"
    default_duration = 1800.0  # "121 swaps in 30 min"

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        return one_at_a_time(sim, {f"gana:agent-{m}": m for m in ("m1", "m2")}, 5.0)

    def story(self) -> Story:
        return Story(
            "the device's share doing work (not swapping or idle)",
            work_share,
            0.80,
            True,
            note="docs/design.md §4.8 (anticipatory holds)",
        )


class FourModels(Workload):
    name = "four-models"
    description = "four models with two backlogged producers each (10 s jobs)"
    default_duration = 1800.0
    MODELS = ("m1", "m2", "m3", "m4")

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        producers = {f"gana:{m}-{k}": m for m in self.MODELS for k in (1, 2)}
        return one_at_a_time(sim, producers, 10.0)

    def story(self) -> Story:
        # max_affinity_wait (120 s) + (models - 1) x (two 10 s jobs + a 10 s
        # swap) when all reach the bound at once, + the job in progress.
        bound = 120.0 + (len(self.MODELS) - 1) * (2 * 11.0 + 10.0) + 11.0
        return Story(
            "the longest wait for a first dispatch",
            class_wait("gana"),
            bound,
            False,
            percent=False,
            note="docs/design.md §4.8 (starvation bound)",
        )


class ChatCrowd(Workload):
    name = "chat-crowd"
    description = "one person queues 20 chats at once, then nine others send one each, 4 s apart"
    default_duration = 300.0
    ANSWER = 3.0  # s a chat's answer lasts

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        output = output_for(sim.device, self.ANSWER, PROMPT)[1]

        async def heavy() -> None:
            await sim.sleep_until(10.0)
            for _ in range(20):
                sim.submit(JobSpec("chat", "m1", PROMPT, output, producer="chat:heavy"))

        async def other(k: int) -> None:
            await sim.sleep_until(10.5 + 4.0 * k)  # one at a time: each meets only the queue
            await sim.run(JobSpec("chat", "m1", PROMPT, output, producer=f"chat:person{k}"))

        return [heavy(), *(other(k) for k in range(1, 10))]

    def story(self) -> Story:
        return Story(
            "the nine others' longest wait",
            others_wait("chat:", "chat:heavy"),
            2 * (self.ANSWER + 0.5),
            False,
            percent=False,
            note="docs/design.md §4.2",
        )


class ChatOverBackfill(Workload):
    name = "chat-over-backfill"
    description = "a person chatting 40 % of the time, an extraction backlog and a backlogged deck"
    default_duration = 1200.0
    CHAT_SHARE = 0.4
    CHAT = 2.0  # s a chat lasts

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        output = output_for(sim.device, self.CHAT, PROMPT)[1]

        async def person() -> None:
            while True:
                await sim.run(JobSpec("chat", "m1", PROMPT, output, producer="chat"))
                await sim.sleep(self.CHAT / self.CHAT_SHARE - self.CHAT)

        return [
            person(),
            extraction(sim, notes=10**6, interval=0.5),
            deck_filler(sim, Deck(target=10**9)),
        ]

    def story(self) -> Story:
        return Story(
            "the fair pool's (Nataraj's) share of the device",
            class_share("nataraj"),
            0.09,
            True,
            note="docs/design.md §4.3 (pool floor)",
        )
