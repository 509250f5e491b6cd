"""results.json and the rich table: what a comparison measured, in words and numbers."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

import tierlm
from tierlm.sim.compare import Comparison
from tierlm.sim.policies import POLICIES
from tierlm.sim.trace import ATTRIBUTION

__all__ = ["RESULTS_FILE", "metrics_tables", "print_report", "results_dict", "write_results"]

RESULTS_FILE = "results.json"
# Enough digits for any figure we report; fewer than a float's repr, so the
# file reads well and never depends on the last bit of a sum's order.
DIGITS = 6


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return round(value, DIGITS)
    if isinstance(value, dict):
        return {str(k): _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value


def results_dict(comparison: Comparison) -> dict[str, Any]:
    """Everything measured, JSON-ready and deterministic (no wall-clock values)."""
    workload = comparison.workload
    data: dict[str, Any] = {
        "tierlm_version": tierlm.__version__,
        "workload": {
            "name": workload.name,
            "description": workload.description,
            "params": workload.params(),
            "hints": workload.hints(comparison.duration),
        },
        "seed": comparison.seed,
        "duration_s": comparison.duration,
        "device": comparison.device.to_dict(),
        "policy_order": list(comparison.metrics),
        "policies": {
            name: {"summary": POLICIES[name].summary, "resumes": POLICIES[name].resumes}
            for name in comparison.metrics
        },
        "metrics": comparison.metrics,
        "targets": [t.to_dict() for t in comparison.targets],
    }
    if workload.requires_trace:
        data["trace_attribution"] = ATTRIBUTION
    rounded: dict[str, Any] = _rounded(data)
    return rounded


def write_results(comparison: Comparison, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULTS_FILE
    text = json.dumps(results_dict(comparison), indent=2, sort_keys=True)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def _s(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "–"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f}%"


def _table(title: str, headers: Sequence[str]) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i == 0 else "right", no_wrap=True)
    return table


def metrics_tables(comparison: Comparison) -> list[Table]:
    """Three narrow tables (they fit an 80-column terminal): chat, device, sharing."""
    head = (
        f"{comparison.workload.name}, {comparison.duration:.0f} simulated s, seed {comparison.seed}"
    )
    chat = _table(
        f"{head}: chat time to first token (s)",
        ("policy", "chats", "p50", "p95", "p99", "max", "wait p99", "wait max"),
    )
    device = _table(
        "the device",
        ("policy", "busy", "wasted", "preempts", "lost tok", "swaps", "swapping"),
    )
    sharing = _table(
        "sharing: Jain's index and max 60 s service difference (s) of backlogged fair-pool "
        "producers, extraction's max share of a contended 300 s window, deadline lateness "
        "p95 (s), jobs completed",
        ("policy", "Jain", "60 s diff", "extract", "late p95", "done"),
    )
    for name, m in comparison.metrics.items():
        c, fair, waste, swaps = m["chat"], m["fairness"], m["waste"], m["swaps"]
        budget = m["budget"].get("extract", {})
        chat.add_row(
            name,
            str(c["count"]),
            _s(c["ttft_p50"]),
            _s(c["ttft_p95"]),
            _s(c["ttft_p99"]),
            _s(c["ttft_max"]),
            _s(c["wait_p99"], 3),
            _s(c["wait_max"], 3),
        )
        device.add_row(
            name,
            _pct(m["utilisation"]),
            _pct(waste["wasted_share"]),
            str(waste["preemptions"]),
            str(waste["tokens_discarded"]),
            str(swaps["count"]),
            _pct(swaps["share"]),
        )
        sharing.add_row(
            name,
            _s(fair["jain"], 3),
            _s(fair["max_diff_60s"], 1),
            _pct(budget.get("max_share_contended")),
            _s(m["deadlines"]["lateness_p95"], 0),
            f"{m['jobs']['completed']}/{m['jobs']['submitted']}",
        )
    return [chat, device, sharing]


def targets_table(comparison: Comparison) -> Table | None:
    if not comparison.targets:
        return None
    table = Table(title="targets", title_justify="left", box=box.SIMPLE_HEAD)
    for header in ("", "policy", "target", "measured", "bound", "note"):
        table.add_column(header)
    for check in comparison.targets:
        mark = {True: "[green]✓[/]", False: "[red]✗[/]", None: "·"}[check.met]
        table.add_row(
            mark,
            check.policy,
            check.target,
            _s(check.measured, 3),
            _s(check.bound, 3),
            check.note,
        )
    return table


def print_report(comparison: Comparison, console: Console) -> None:
    for table in metrics_tables(comparison):
        console.print(table)
    targets = targets_table(comparison)
    if targets is not None:
        console.print(targets)
    if comparison.workload.requires_trace:
        console.print(f"Trace: {ATTRIBUTION}.")
