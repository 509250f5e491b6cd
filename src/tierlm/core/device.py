"""What the policy sees of the device, and the one typed answer it gives.

vLLM v1's ``SchedulerOutput`` is the model: the shell describes the device
(``Device``: the model it holds, its slots, who holds them), the policy answers
one plan for this step (``Decision``: who starts, who stops and why, when to ask
again), and the shell applies it (docs/design.md §2.2). A policy never
hands state to the shell any other way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tierlm.core.jobs import Job
from tierlm.core.stop_reasons import CancelReason

__all__ = ["Decision", "Device"]


@dataclass(frozen=True, slots=True, init=False)
class Device:
    """The device as the shell sees it at a decision (docs/design.md §2.2).

    Built at every decision: its ``__init__`` is written out (the frozen
    dataclass's sets each field through ``object.__setattr__``, twice the
    cost of the slots' own setters, ``_set_device``)."""

    loaded_model: str | None
    """The model the device holds, or is swapping to."""
    slots: int = 1
    """Sequences it decodes at once (``Runner.slots``)."""
    running: Sequence[Job] = ()
    """The jobs holding a slot, in the order they started."""
    stopping: Mapping[int, CancelReason] = field(default_factory=dict)
    """Running jobs already told to stop (by job id), and why: they hold their
    slot until they end. Only a ``YIELD`` may still be turned into a
    ``PREEMPTED`` (docs/design.md §4.6 (preemption kinds)); any other stop is
    final."""
    can_start: bool = True
    """False while paused, held for a load or unload, swapping or closing:
    nothing new may start (running jobs may still be stopped)."""
    swap_estimate: float | None = None
    """The runner's own estimate of a swap's seconds before any is measured
    (``Abilities.swap_estimate``; the ski-rental cap reads it, docs/design.md §4.8)."""
    step_cost: Sequence[float] = ()
    """The runner's step time with n sequences, relative to one (index n - 1):
    ``(1.0, 1.1, 1.3, ...)``. Empty: unknown, taken as flat. The chat latency
    guard reads it (docs/design.md §4.7)."""

    decoding: frozenset[int] = frozenset()
    """Running jobs whose current run has produced a token: the others are
    still evaluating their prompt (the guard protects a person's, §4.7)."""
    evaluations: Mapping[int, float] = field(default_factory=dict)
    """Seconds each running job's current run spent before its first token
    (so far, while it has none): the evaluation a resume without its KV state
    would redo. A fair slice grows to be worth it (docs/design.md §4.6 (a slice worth its resume)).
    Empty when the runner restores KV state
    (``Abilities.restores_kv``); a job still swapping is absent."""

    def __init__(
        self,
        loaded_model: str | None,
        slots: int = 1,
        running: Sequence[Job] = (),
        stopping: Mapping[int, CancelReason] | None = None,
        can_start: bool = True,
        swap_estimate: float | None = None,
        step_cost: Sequence[float] = (),
        decoding: frozenset[int] = frozenset(),
        evaluations: Mapping[int, float] | None = None,
    ) -> None:
        """The fields in order; ``stopping`` and ``evaluations`` default to
        new empty dicts."""
        if slots < 1:
            raise ValueError(f"Device.slots: must be >= 1, got {slots!r}")
        (
            set_loaded_model,
            set_slots,
            set_running,
            set_stopping,
            set_can_start,
            set_swap_estimate,
            set_step_cost,
            set_decoding,
            set_evaluations,
        ) = _set_device
        set_loaded_model(self, loaded_model)
        set_slots(self, slots)
        set_running(self, running)
        set_stopping(self, {} if stopping is None else stopping)
        set_can_start(self, can_start)
        set_swap_estimate(self, swap_estimate)
        set_step_cost(self, step_cost)
        set_decoding(self, decoding)
        set_evaluations(self, {} if evaluations is None else evaluations)

    @property
    def free(self) -> int:
        """Slots no job holds."""
        return self.slots - len(self.running)


@dataclass(frozen=True, slots=True, init=False)
class Decision:
    """The policy's plan for one step (docs/design.md §2.2); its
    ``__init__`` written out, as ``Device``'s."""

    start: tuple[Job, ...] = ()
    """Jobs to run now, already out of the queue, best first. A job on another
    model than the loaded one starts alone, on an empty device (its swap)."""
    stop: tuple[tuple[Job, CancelReason], ...] = ()
    """Running jobs to stop, and why: ``CancelReason.YIELD`` (for fairness) or
    ``CancelReason.PREEMPTED`` (a person is waiting), docs/design.md §4.6 (preemption kinds). The
    shell cancels the job's token with that reason."""
    wake_at: float | None = None
    """When to ask again with no event (a hold ending, a deadline, a slice)."""
    load: str | None = None
    """With nothing to start on an empty device: load this model, with no job
    (the model a person may type on, after an excursion to another one,
    docs/design.md §4.8 (excursions))."""

    def __init__(
        self,
        start: tuple[Job, ...] = (),
        stop: tuple[tuple[Job, CancelReason], ...] = (),
        wake_at: float | None = None,
        load: str | None = None,
    ) -> None:
        set_start, set_stop, set_wake_at, set_load = _set_decision
        set_start(self, start)
        set_stop(self, stop)
        set_wake_at(self, wake_at)
        set_load(self, load)


def _setters(cls: type, names: tuple[str, ...]) -> tuple[Callable[[object, object], None], ...]:
    """The slots' own setters of ``cls``'s fields (a frozen class's
    ``__setattr__`` refuses; its slots' descriptors do not)."""
    return tuple(cls.__dict__[name].__set__ for name in names)


_set_device = _setters(
    Device,
    (
        "loaded_model",
        "slots",
        "running",
        "stopping",
        "can_start",
        "swap_estimate",
        "step_cost",
        "decoding",
        "evaluations",
    ),
)
_set_decision = _setters(Decision, ("start", "stop", "wake_at", "load"))
