"""What a workload is: named producers that submit jobs over simulated time."""

from __future__ import annotations

import abc
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from tierlm.sim.context import SimContext
    from tierlm.sim.story import Story

__all__ = ["Workload"]


class Workload(abc.ABC):
    """A seeded, deterministic set of producers.

    Producers are open loop (arrivals do not wait for completions) except where
    a producer is naturally sequential: a chat turn waits for its reply, a deck
    is filled card by card. Every producer draws from its own random stream
    (``sim.rng(name)``), so a policy that changes the timing never changes what
    the producers ask for.

    ``parameters`` names the keyword arguments a workload takes (``tierlm
    simulate --set name=value``, ``--sweep name=v1,v2``) with a line of help;
    each is a float.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    default_duration: ClassVar[float]
    initial_model: ClassVar[str | None] = "m1"
    """The model the device holds at t = 0 (the app's active chat model)."""
    requires_trace: ClassVar[bool] = False
    credit: ClassVar[str | None] = None
    """The credit line of the data the workload replays, printed with its results."""
    parameters: ClassVar[Mapping[str, str]] = {}

    @abc.abstractmethod
    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        """The producer coroutines, started together at t = 0."""

    def hints(self, duration: float) -> dict[str, Any]:
        """Facts the metrics need and cannot see in the records (``min_swaps``,
        ``stated_load``: the offered load per class the workload claims, as a
        fraction of the device's capacity, which the report sets beside the load
        the run actually generated)."""
        return {}

    def params(self) -> dict[str, Any]:
        """The workload's parameters, for results.json."""
        return {}

    def story(self) -> Story | None:
        """The one number this workload is about, and its bound (``tierlm.sim.story``)."""
        return None
