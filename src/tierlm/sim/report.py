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
from rich.text import Text

import tierlm
from tierlm.sim.compare import Comparison
from tierlm.sim.device import DeviceModel
from tierlm.sim.policies import column

__all__ = [
    "RESULTS_FILE",
    "device_line",
    "metrics_tables",
    "offered_line",
    "print_report",
    "results_dict",
    "rounded",
    "write_results",
]

RESULTS_FILE = "results.json"
# Enough digits for any figure we report; fewer than a float's repr, so the
# file reads well and never depends on the last bit of a sum's order.
DIGITS = 6


def rounded(value: Any) -> Any:
    """Floats to ``DIGITS`` decimals (None if not finite), in any nesting."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return round(value, DIGITS)
    if isinstance(value, dict):
        return {str(k): rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v) for v in value]
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
            name: {"summary": column(name).summary, "resumes": column(name).resumes}
            for name in comparison.metrics
        },
        "metrics": comparison.metrics,
        "targets": [t.to_dict() for t in comparison.targets],
    }
    if workload.credit is not None:
        data["credit"] = workload.credit
    result: dict[str, Any] = rounded(data)
    return result


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
    """Numbers are never cut (no_wrap); headers of two lines keep the columns
    as narrow as their numbers, so every table fits 80 columns, a terminal's
    or a pipe's (rich's default width); narrower, the policy names wrap."""
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for i, header in enumerate(headers):
        if i == 0:
            table.add_column(header, justify="left", overflow="fold")
        else:
            table.add_column(header, justify="right", no_wrap=True)
    return table


def metrics_tables(comparison: Comparison) -> list[Table]:
    """Narrow tables (they fit an 80-column terminal): chat (when the workload
    has chats), device, sharing, and the workload's case."""
    head = (
        f"{comparison.workload.name}, {comparison.duration:.0f} simulated s, seed {comparison.seed}"
    )
    chats = any(m["chat"]["count"] for m in comparison.metrics.values())
    chat = _table(
        f"{head}: chat time to first token (s)",
        ("policy", "sent", "p50", "p95", "p99", "max", "wait\np99", "wait\nmax"),
    )
    sent = [m["chat"]["count"] for m in comparison.metrics.values()]
    chat.caption = (
        "sent: the person's messages; each is sent after the previous answer, so a slow "
        f"scheduler gets fewer ({min(sent, default=0)} to {max(sent, default=0)} here); one "
        "unanswered at the end counts its wait so far. wait: beyond the chat's own prompt "
        "evaluation and first token."
    )
    chat.caption_justify = "left"
    device = _table(
        "the device" if chats else f"{head}: the device",
        ("policy", "busy", "wasted", "preempts", "lost\ntokens", "swaps", "swapping"),
    )
    sharing = _table(
        "sharing",
        ("policy", "pool", "Jain", "least", "60 s\ndiff", "extract", "late\np95", "done"),
    )
    sharing.caption = "\n".join(
        [
            "pool: the fair pool's share of the device",
            "Jain: how evenly the pool's producers got their fair share (1 = evenly)",
            "least: the worst-served producer's service / its fair share",
            "60 s diff: the largest gap in service (s) between two waiting producers",
            "  over any 60 s",
            "extract: extraction's largest share of a contended 300 s window",
            "late p95: how late deadline jobs finished, p95 (s)",
            "done: jobs completed / submitted. It counts jobs, not work: a scheduler",
            "  that gives extraction's short notes more of the device completes more",
        ]
    )
    sharing.caption_justify = "left"
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
            _pct(fair["pool_share"]),
            _s(fair["jain"], 3),
            _s(fair["min_ratio"], 2),
            _s(fair["max_diff_60s"], 1),
            _pct(budget.get("max_share_contended")),
            _s(m["deadlines"]["lateness_p95"], 0),
            f"{m['jobs']['completed']}/{m['jobs']['submitted']}",
        )
    tables = [chat, device, sharing] if chats else [device, sharing]
    story = comparison.workload.story()
    if story is not None:
        sign = ">=" if story.at_least else "<="
        case = _table(
            f"the case: {story.label} (tierlm must be {sign} {story.show(story.bound)})",
            ("policy", "measured"),
        )
        for name, m in comparison.metrics.items():
            case.add_row(name, story.show(story.read(m)))
        tables.append(case)
    return tables


def device_line(device: DeviceModel) -> str:
    resume = {
        "restart": "restart (a preempted job is redone from scratch)",
        "re-evaluate": "re-evaluate (prompt + partial output evaluated again)",
        "restore": f"restore (a KV snapshot, {device.restore_seconds:g} s; "
        "re-evaluation if evicted)",
    }[device.resume]
    return (
        f"Device: {device.decode_tps:g} tokens/s decode, {device.prefill_tps:g} tokens/s "
        f"prefill, {device.swap_seconds:g} s swap; resuming a preempted job: {resume}."
    )


def offered_line(comparison: Comparison) -> str | None:
    """The load the workload states, beside the load the run generated."""
    first = next(iter(comparison.metrics.values()), None)
    if first is None:
        return None
    offered = first["offered_load"]
    if not offered["stated"]:
        return None
    parts = [
        f"{name} {offered['by_class'].get(name, 0.0) * 100:.1f} % (stated {stated * 100:.1f} %)"
        for name, stated in offered["stated"].items()
    ]
    return (
        "Offered load (device time of the jobs submitted / the run's length): "
        + "; ".join(parts)
        + "."
    )


def targets_table(comparison: Comparison) -> Table | None:
    if not comparison.targets:
        return None
    # Four columns, the note under its target: six side by side wrapped every
    # cell into a column of single words at 80 columns.
    table = Table(
        title="targets",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("")
    table.add_column("policy: target (how it is read)", overflow="fold")
    table.add_column("measured", justify="right", no_wrap=True)
    table.add_column("bound", justify="right", no_wrap=True)
    for check in comparison.targets:
        mark = {True: "[green]✓[/]", False: "[red]✗[/]", None: "·"}[check.met]
        text = Text(f"{check.policy}: {check.target}")
        if check.note:
            text.append(f"\n  {check.note}", style="dim")
        table.add_row(mark, text, _s(check.measured, 3), _s(check.bound, 3))
    return table


def print_report(comparison: Comparison, console: Console) -> None:
    console.print(device_line(comparison.device))
    offered = offered_line(comparison)
    if offered is not None:
        console.print(offered)
    for table in metrics_tables(comparison):
        console.print(table)
    targets = targets_table(comparison)
    if targets is not None:
        console.print(targets)
    if comparison.workload.credit is not None:
        console.print(comparison.workload.credit)
