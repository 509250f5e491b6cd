"""Targets over several seeds (docs/design.md §8.8): a target met on one
seed is not met. The headline (``issue118``, a chat's wait for the device)
held on seed 1 and failed on half of seeds 1-10, and ``tierlm demo`` ran one.

The tables show the chosen seed's run under every policy; the targets table
checks tierlm's targets on each seed of ``seeds`` (tierlm alone: a baseline's
value is context, not a target) and reports, per target, the seed where it is
worst: one where it is missed, else the one closest to its bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from tierlm.core.config import SchedulerConfig
from tierlm.sim.device import DeviceModel
from tierlm.sim.engine import simulate
from tierlm.sim.metrics import compute_metrics
from tierlm.sim.targets import TargetCheck, check_targets, story_checks
from tierlm.sim.workload import Workload

__all__ = ["DEMO_SEEDS", "seed_range", "worst_over_seeds"]

DEMO_SEEDS = tuple(range(1, 11))
"""``tierlm demo``'s targets: seeds 1-10, where the headline once held on half."""

SeedProgress = Callable[[int], None]


def seed_range(first: int, count: int) -> tuple[int, ...]:
    """``count`` consecutive seeds from ``first`` (``tierlm simulate --target-seeds``)."""
    if count < 1:
        raise ValueError(f"--target-seeds: must be >= 1, got {count!r}")
    return tuple(range(first, first + count))


def worst_over_seeds(
    workload: Workload,
    first: Sequence[TargetCheck],
    *,
    seed: int,
    seeds: Sequence[int],
    duration: float,
    device: DeviceModel,
    config: SchedulerConfig | None = None,
    progress: SeedProgress | None = None,
) -> list[TargetCheck]:
    """``first`` (the checks of ``seed``'s comparison) with each of tierlm's
    targets replaced by its worst over ``seeds``; each note names the seeds."""
    others = [s for s in seeds if s != seed]
    if not others:
        return list(first)
    per_seed: dict[int, list[TargetCheck]] = {seed: list(first)}
    for other in others:
        records = simulate(
            workload, "tierlm", seed=other, duration=duration, device=device, config=config
        )
        metrics = {"tierlm": compute_metrics(records)}
        per_seed[other] = [
            *story_checks(workload, metrics),
            *check_targets(workload.name, metrics, device.token_interval, device.step_seconds),
        ]
        if progress is not None:
            progress(other)
    label = _label(sorted({seed, *others}))
    out = []
    for check in first:
        if check.policy != "tierlm" or check.met is None:
            out.append(check)
            continue
        same = [
            (s, c)
            for s, checks in per_seed.items()
            for c in checks
            if c.policy == check.policy and c.target == check.target
        ]
        worst_seed, worst = min(same, key=lambda sc: _tightness(sc[1]))
        missed = sum(1 for _s, c in same if c.met is False)
        verdict = f"met on {len(same) - missed} of {len(same)} seeds ({label})"
        note = f"{verdict}; worst: seed {worst_seed}"
        out.append(replace(worst, note=f"{note}. {worst.note}" if worst.note else note))
    return out


def _tightness(check: TargetCheck) -> tuple[int, float]:
    """Missed first, then the smallest margin to the bound."""
    if check.measured is None or check.bound is None:
        return (0 if check.met is False else 1, float("inf"))
    return (0 if check.met is False else 1, abs(check.bound - check.measured))


def _label(seeds: Sequence[int]) -> str:
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))
