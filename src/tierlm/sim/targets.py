"""The simulator's targets, checked against measured metrics (never tuned to pass).

Each check says what it measured and against what bound; where a target's
wording admits two readings, the check states the one it applies and the
metrics hold the numbers for the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tierlm.sim.workload import Workload
__all__ = ["TargetCheck", "check_targets", "story_checks"]

Metrics = Mapping[str, Any]
_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class TargetCheck:
    workload: str
    policy: str
    target: str
    measured: float | None
    bound: float | None
    met: bool | None
    """None: informational (a departure of seed-literal), or not measurable."""
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_targets(
    workload: str,
    metrics: Mapping[str, Metrics],
    token_interval: float,
    step_seconds: float | None = None,
) -> list[TargetCheck]:
    """The targets for ``workload``, for the policies that ran;
    ``step_seconds``: the device's longest decode step (one token interval
    on one slot), the wait a running batch's step boundary allows."""
    checks: list[TargetCheck] = []
    if workload == "issue118":
        step = step_seconds or token_interval
        checks += _issue118(metrics, token_interval, step, batched=step > token_interval)
    if workload in ("issue118", "backfill-flood"):
        checks += _budget("tierlm", workload, metrics)
    if workload == "backfill-flood":
        checks += _budget("seed-literal", workload, metrics, informational=True)
        checks += _seed_waste(workload, metrics)
    if workload == "fair-pool":
        checks += _fair_pool(metrics)
    if workload == "mixed-models":
        checks += _mixed_models(metrics)
    return checks


def story_checks(workload: Workload, metrics: Mapping[str, Metrics]) -> list[TargetCheck]:
    """The workload's story (``Workload.story``), checked for tierlm: the
    baselines' values are in the report beside it."""
    story = workload.story()
    ours = metrics.get("tierlm")
    if story is None or ours is None:
        return []
    value = story.read(ours)
    return [
        _check(
            workload.name, "tierlm", story.target, value, story.bound, story.met(value), story.note
        )
    ]


def _check(
    workload: str,
    policy: str,
    target: str,
    measured: float | None,
    bound: float | None,
    ok: bool | None,
    note: str = "",
) -> TargetCheck:
    return TargetCheck(workload, policy, target, measured, bound, ok, note)


def _issue118(
    metrics: Mapping[str, Metrics], token_interval: float, step: float, *, batched: bool
) -> list[TargetCheck]:
    out = []
    ours = metrics.get("tierlm")
    if ours is not None:
        chat = ours["chat"]
        # TTFT over (the chat's idle TTFT + one token interval): a running job
        # stops at its next token boundary, so up to one token of waiting is
        # the rule itself, not a miss (docs/design.md §8.8).
        ratio = chat["ratio_boundary_p99"]
        out.append(
            _check(
                "issue118",
                "tierlm",
                "chat TTFT p99 <= 1.05 x (own prefill + 1 token + 1 token boundary) [ratio]",
                ratio,
                1.05,
                None if ratio is None else ratio <= 1.05 + _EPS,
                "p99 of TTFT / (TTFT on an idle device + one token interval)",
            )
        )
        wait = chat["wait_max"]
        out.append(
            _check(
                "issue118",
                "tierlm",
                "chat waits <= one device step [max wait, s]",
                wait,
                step,
                None if wait is None else wait <= step + _EPS,
                "a running batch stops at its next step boundary: one token "
                "interval on one slot, longer with every slot full",
            )
        )
        waste = ours["waste"]
        busy = ours["busy_seconds"]
        cut = waste["cut_prompt_seconds"] / busy if busy > 0 else 0.0
        out.append(
            _check(
                "issue118",
                "tierlm",
                "wasted <= 2 % of busy time",
                waste["wasted_share"],
                0.02,
                waste["wasted_share"] <= 0.02 + _EPS,
                f"{cut:.1%} prompt evaluations cut before their first token; "
                f"{waste['restores']} restores",
            )
        )
    lane = metrics.get("two-lane")
    if lane is not None:
        worst = lane["chat"]["ttft_max"]
        out.append(
            _check(
                "issue118",
                "two-lane",
                "reproduces the bug: a chat waits >= 30 s [max TTFT, s]",
                worst,
                30.0,
                # The bug was a phone's, one sequence at a time; on a batched
                # device the old queue gives the chat a free slot too, so there
                # it is context, not a target (docs/design.md §4.7).
                None if worst is None or batched else worst >= 30.0,
                f"p99 {_fmt(lane['chat']['ttft_p99'])} s, p50 {_fmt(lane['chat']['ttft_p50'])} s"
                + ("; on one slot it is a target, here context" if batched else ""),
            )
        )
    seed = metrics.get("seed-literal")
    if seed is not None:
        out.append(
            _check(
                "issue118",
                "seed-literal",
                "wasted share (docs/design.md §6.6, §6.8)",
                seed["waste"]["wasted_share"],
                None,
                None,
                f"{seed['waste']['preemptions']} preemptions, "
                f"{seed['waste']['tokens_discarded']} tokens discarded",
            )
        )
    return out


def _budget(
    policy: str, workload: str, metrics: Mapping[str, Metrics], *, informational: bool = False
) -> list[TargetCheck]:
    m = metrics.get(policy)
    if m is None:
        return []
    out = []
    for name, budget in m["budget"].items():
        share = budget["max_share_contended"]
        bound = budget["cap"] + budget["longest_job_seconds"] / 300.0
        ok = None if share is None or informational else share <= bound + _EPS
        out.append(
            _check(
                workload,
                policy,
                f"{name} share <= {budget['cap']:.0%} + 1 job / 300 s [max, contended]",
                share,
                bound,
                ok,
                (
                    "docs/design.md §6.2: the opened note hoists the whole backfill to T1"
                    if informational
                    else f"{budget['contended_windows']} contended windows"
                ),
            )
        )
    return out


def _seed_waste(workload: str, metrics: Mapping[str, Metrics]) -> list[TargetCheck]:
    seed = metrics.get("seed-literal")
    if seed is None:
        return []
    return [
        _check(
            workload,
            "seed-literal",
            "wasted share (docs/design.md §6.6: arrivals cancel, then restart)",
            seed["waste"]["wasted_share"],
            None,
            None,
            f"{seed['waste']['preemptions']} preemptions",
        )
    ]


def _fair_pool(metrics: Mapping[str, Metrics]) -> list[TargetCheck]:
    out: list[TargetCheck] = []
    ours = metrics.get("tierlm")
    if ours is None:
        return out
    fairness = ours["fairness"]
    jain = fairness["jain"]
    out.append(
        _check(
            "fair-pool",
            "tierlm",
            "Jain's index >= 0.99 (backlogged fair pool)",
            jain,
            0.99,
            None if jain is None else jain >= 0.99 - _EPS,
            f"least served producer: {fairness['worst_producer']}",
        )
    )
    diff = fairness["max_diff_60s"]
    for other in ("fifo", "strict-priority"):
        theirs = metrics.get(other)
        if theirs is None:
            continue
        bound = theirs["fairness"]["max_diff_60s"]
        out.append(
            _check(
                "fair-pool",
                "tierlm",
                f"max 60 s service diff < {other}'s [s]",
                diff,
                bound,
                None if diff is None or bound is None else diff < bound,
            )
        )
    seed = metrics.get("seed-literal")
    if seed is not None:
        out.append(
            _check(
                "fair-pool",
                "seed-literal",
                "Jain's index (docs/design.md §6.1: vruntime per kind)",
                seed["fairness"]["jain"],
                None,
                None,
            )
        )
    return out


def _mixed_models(metrics: Mapping[str, Metrics]) -> list[TargetCheck]:
    ours = metrics.get("tierlm")
    if ours is None:
        return []
    swaps = ours["swaps"]
    minimum = swaps["min_possible"]
    bound = 1.1 * minimum if minimum else None
    return [
        _check(
            "mixed-models",
            "tierlm",
            "swaps <= 1.1 x the minimum possible",
            float(swaps["count"]),
            bound,
            None if bound is None else swaps["count"] <= bound + _EPS,
            f"minimum {minimum} with foresight; "
            f"{swaps.get('min_work_conserving')} for any work-conserving policy",
        )
    ]


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
