"""Run one workload under several policies, side by side, and measure each."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tierlm.core.config import SchedulerConfig
from tierlm.sim.device import DeviceModel
from tierlm.sim.engine import simulate
from tierlm.sim.metrics import compute_metrics
from tierlm.sim.records import SimRecords
from tierlm.sim.seeds import worst_over_seeds
from tierlm.sim.targets import TargetCheck, check_targets, story_checks
from tierlm.sim.workload import Workload

__all__ = ["Comparison", "compare"]

PolicyProgress = Callable[[str, float], None]
"""Called with (policy, simulated seconds done)."""


@dataclass
class Comparison:
    workload: Workload
    seed: int
    duration: float
    device: DeviceModel
    records: dict[str, SimRecords] = field(default_factory=dict)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    targets: list[TargetCheck] = field(default_factory=list)


def compare(
    workload: Workload,
    policies: Sequence[str],
    *,
    seed: int = 1,
    duration: float | None = None,
    device: DeviceModel | None = None,
    config: SchedulerConfig | None = None,
    progress: PolicyProgress | None = None,
    target_seeds: Sequence[int] = (),
) -> Comparison:
    """Simulate ``workload`` under each policy (same seed, same device); with
    ``target_seeds``, tierlm's targets are its worst over those seeds too
    (``tierlm.sim.seeds``)."""
    device = device or DeviceModel()
    horizon = float(duration if duration is not None else workload.default_duration)
    result = Comparison(workload, seed, horizon, device)
    for name in policies:
        report: Callable[[float], None] | None = None
        if progress is not None:
            report = _bind(progress, name)
        records = simulate(
            workload,
            name,
            seed=seed,
            duration=horizon,
            device=device,
            config=config,
            progress=report,
        )
        result.records[name] = records
        result.metrics[name] = compute_metrics(records)
    result.targets = [
        *story_checks(workload, result.metrics),
        *check_targets(workload.name, result.metrics, device.token_interval, device.step_seconds),
    ]
    if target_seeds and "tierlm" in policies:
        result.targets = worst_over_seeds(
            workload,
            result.targets,
            seed=seed,
            seeds=target_seeds,
            duration=horizon,
            device=device,
            config=config,
        )
    return result


def _bind(progress: PolicyProgress, name: str) -> Callable[[float], None]:
    return lambda now: progress(name, now)
