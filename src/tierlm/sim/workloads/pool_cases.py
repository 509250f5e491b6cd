"""The fair pool tried as a hostile or careless user would (docs/design.md §8.7): one workload per
case, each with the number it is about.

Job sizes are in seconds on the simulated device (``output_for``): a short
prompt (60 tokens) and enough output to last the stated time, +-10 %.

- ``deadline-abuse``: ``gana:abuser`` submits every job with a deadline
  already past (what ``X-Tierlm-Deadline: 0`` asks); ``gana:honest``, in the
  same class, submits plain jobs. Both keep two 10 s jobs queued.
- ``overdue-flood``: cron work arrives faster than the device serves it
  (``load``, default 125 % of the device) and is due 20 s after it fires;
  a Nataraj deck nobody swipes is backlogged beside it.
- ``swarm``: one kind uses eight producer ids (``swarm/1`` .. ``swarm/8``),
  against one producer, ``solo``; all keep two 10 s jobs queued.
- ``ganas-vs-nataraj``: four Ganas against one Nataraj deck, all backlogged
  (the seed's fairness is per kind first).
- ``one-at-a-time``: ``gana:steady`` submits one 5 s job at a time (the next
  when the last ends) against ``gana:busy``, backlogged with 20 s jobs.
- ``two-sizes``: two backlogged producers, 5 s and 20 s jobs: the largest
  difference in device time between them over a 60 s window.
- ``long-prompt``: an agent whose prompts take longer to evaluate than a
  slice of the fair pool (800 tokens: 5.3 s on the default device), one job
  at a time, against a backlogged peer (10 s jobs): a slice that stopped a
  job in its prompt evaluation threw the evaluation away, at every slice; a
  slice now yields after the first token (docs/design.md §4.6, §8).
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from typing import Any, ClassVar

from tierlm.sim.context import SimContext
from tierlm.sim.story import (
    Story,
    class_share,
    min_window_share,
    producer_share,
    wasted_share,
)
from tierlm.sim.workload import Workload
from tierlm.sim.workloads.producers import Deck, backlogged, deck_filler, gana_cron, output_for

__all__ = [
    "DeadlineAbuse",
    "GanasVsNataraj",
    "LongPrompt",
    "OneAtATime",
    "OverdueFlood",
    "Swarm",
    "TwoSizes",
]

PROMPT = 60  # tokens: 0.4 s of prefill on the default device


def _jobs(sim: SimContext, producer: str, seconds: float, **kw: Any) -> Coroutine[Any, Any, None]:
    kw.setdefault("outstanding", 2)
    return backlogged(
        sim,
        producer,
        prompt=(PROMPT, PROMPT),
        output=output_for(sim.device, seconds, PROMPT),
        **kw,
    )


class DeadlineAbuse(Workload):
    name = "deadline-abuse"
    description = (
        "a producer submits every job with a deadline already past, against an honest "
        "peer in the same class (10 s jobs, both backlogged)"
    )
    default_duration = 1800.0  # "0 % of the device for 30 min"

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        return [
            _jobs(sim, "gana:abuser", 10.0, deadline=0.0),
            _jobs(sim, "gana:honest", 10.0),
        ]

    def story(self) -> Story:
        return Story("gana:honest's share of the device", producer_share("gana:honest"), 0.40, True)


class OverdueFlood(Workload):
    name = "overdue-flood"
    description = (
        "overdue cron work arriving at 125 % of the device (4 crons, 10 s rounds due 20 s "
        "after they fire) beside a backlogged Nataraj deck"
    )
    default_duration = 1200.0
    parameters: ClassVar[Mapping[str, str]] = {
        "load": "the crons' offered load, a fraction of the device (default 1.25)"
    }
    CRONS = 4
    ROUND = 10.0
    SLACK = 20.0

    def __init__(self, load: float = 1.25) -> None:
        if not load > 0:
            raise ValueError(f"load: must be a fraction of the device > 0, got {load!r}")
        self.load = load

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        period = self.CRONS * self.ROUND / self.load
        crons = [
            gana_cron(
                sim,
                f"gana:cron{k + 1}",
                period=period,
                first=k * period / self.CRONS,
                slack=self.SLACK,
                prompt=(PROMPT, PROMPT),
                output=output_for(sim.device, self.ROUND, PROMPT),
            )
            for k in range(self.CRONS)
        ]
        return [*crons, deck_filler(sim, Deck(target=10**9))]

    def hints(self, duration: float) -> dict[str, Any]:
        return {"stated_load": {"gana": self.load}}

    def params(self) -> dict[str, Any]:
        return {"load": self.load, "crons": self.CRONS, "round_s": self.ROUND}

    def story(self) -> Story:
        return Story(
            "Nataraj's least share of a 300 s window",
            min_window_share("nataraj:deck"),
            0.10,
            True,
            note="docs/design.md §4.5",
        )


class Swarm(Workload):
    name = "swarm"
    description = "one kind uses 8 producer ids (swarm/1 .. swarm/8) against one producer"
    default_duration = 1200.0

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        swarm = [_jobs(sim, f"swarm/{k}", 10.0) for k in range(1, 9)]
        return [*swarm, _jobs(sim, "solo", 10.0)]

    def story(self) -> Story:
        return Story("solo's share of the device", producer_share("solo"), 0.45, True)


class GanasVsNataraj(Workload):
    name = "ganas-vs-nataraj"
    description = "4 Ganas against one Nataraj deck, all backlogged"
    default_duration = 1200.0

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        ganas = [_jobs(sim, f"gana:{k}", 10.0) for k in range(1, 5)]
        return [*ganas, deck_filler(sim, Deck(target=10**9))]

    def story(self) -> Story:
        return Story("Nataraj's share of the device", class_share("nataraj"), 0.40, True)


class OneAtATime(Workload):
    name = "one-at-a-time"
    description = "a producer submitting one 5 s job at a time against a backlogged peer (20 s)"
    default_duration = 1200.0

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        return [
            _jobs(sim, "gana:steady", 5.0, outstanding=1),
            _jobs(sim, "gana:busy", 20.0),
        ]

    def story(self) -> Story:
        return Story("gana:steady's share of the device", producer_share("gana:steady"), 0.40, True)


class TwoSizes(Workload):
    name = "two-sizes"
    description = "two backlogged producers, 5 s and 20 s jobs"
    default_duration = 1200.0

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        return [_jobs(sim, "gana:small", 5.0), _jobs(sim, "gana:large", 20.0)]

    def story(self) -> Story:
        return Story(
            "max difference in device time over a 60 s window",
            lambda m: m["fairness"]["max_diff_60s"],
            12.0,
            False,
            percent=False,
        )


class LongPrompt(Workload):
    name = "long-prompt"
    description = (
        "an agent whose 800-token prompts take longer to evaluate than a slice (5.3 s), "
        "one job at a time, against a backlogged peer (10 s jobs)"
    )
    default_duration = 1200.0
    LONG_PROMPT = 800

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        long = backlogged(
            sim,
            "gana:long",
            outstanding=1,
            prompt=(self.LONG_PROMPT, self.LONG_PROMPT),
            output=(10, 20),
        )
        return [long, _jobs(sim, "gana:busy", 10.0, outstanding=1)]

    def story(self) -> Story:
        return Story("wasted share of busy time", wasted_share, 0.05, False)
