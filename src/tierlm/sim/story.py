"""The one number a workload is about, and the bound it must meet.

Each case of docs/design.md §8's adversarial table is a workload whose story
is one measured number (an honest producer's share of the device, the pool's
share of every 300 s window, a wait) and the bound tierlm must meet; the
report shows it for every policy side by side, and checks tierlm's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Metrics",
    "Story",
    "class_share",
    "class_wait",
    "min_window_share",
    "others_wait",
    "producer_share",
    "wasted_share",
    "work_share",
]

Metrics = Mapping[str, Any]
_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Story:
    label: str
    """What is measured, in words ("gana:honest's share of the device")."""
    read: Callable[[Metrics], float | None]
    bound: float
    at_least: bool
    """True: the value must be >= bound; False: <= bound."""
    percent: bool = True
    """Shown as a percentage (a share); else in seconds."""
    note: str = ""

    @property
    def target(self) -> str:
        sign = ">=" if self.at_least else "<="
        return f"{self.label} {sign} {self.show(self.bound)}"

    def show(self, value: float | None) -> str:
        if value is None:
            return "–"
        return f"{value * 100:.1f} %" if self.percent else f"{value:.1f} s"

    def met(self, value: float | None) -> bool | None:
        if value is None:
            return None
        return value >= self.bound - _EPS if self.at_least else value <= self.bound + _EPS


def producer_share(producer: str) -> Callable[[Metrics], float | None]:
    """A producer's device time over the run, as a share of it."""

    def read(m: Metrics) -> float | None:
        entry = m["fairness"]["producers"].get(producer)
        return None if entry is None else float(entry["device_share"])

    return read


def class_share(class_name: str) -> Callable[[Metrics], float | None]:
    """A class's device time over the run, as a share of it."""

    def read(m: Metrics) -> float | None:
        return float(m["service_by_class"].get(class_name, 0.0)) / float(m["horizon"])

    return read


def min_window_share(producer: str) -> Callable[[Metrics], float | None]:
    """A producer's smallest share of a 300 s window it was backlogged throughout."""

    def read(m: Metrics) -> float | None:
        entry = m["fairness"]["producers"].get(producer)
        return None if entry is None else entry["min_share_300s"]

    return read


def class_wait(class_name: str) -> Callable[[Metrics], float | None]:
    """The longest a job of the class waited for its first dispatch."""

    def read(m: Metrics) -> float | None:
        waits = m["waits"].get(class_name)
        return None if waits is None else float(waits["max"])

    return read


def others_wait(prefix: str, but: str) -> Callable[[Metrics], float | None]:
    """The longest first-dispatch wait of the producers named ``prefix...``
    other than ``but``."""

    def read(m: Metrics) -> float | None:
        waits = [
            float(w["max"])
            for producer, w in m["waits_by_producer"].items()
            if producer.startswith(prefix) and producer != but
        ]
        return max(waits) if waits else None

    return read


def work_share(m: Metrics) -> float | None:
    """The device's time doing work (busy, less swaps), as a share of the run."""
    return (float(m["busy_seconds"]) - float(m["swaps"]["seconds"])) / float(m["horizon"])


def wasted_share(m: Metrics) -> float | None:
    return float(m["waste"]["wasted_share"])
