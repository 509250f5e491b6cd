"""``tierlm simulate --sweep name=v1,v2,...``: one workload parameter varied,
every value under every policy, the workload's story in one table.

Each value's full results go to ``<out>/<name>=<value>/results.json``; the
table's numbers, with the chat TTFT p99 and the preemptions beside them, to
``<out>/sweep.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from tierlm.sim.cli_common import sim_progress
from tierlm.sim.compare import Comparison, compare
from tierlm.sim.device import DeviceModel
from tierlm.sim.report import device_line, offered_line, results_dict, rounded, write_results
from tierlm.sim.story import Story, wasted_share
from tierlm.sim.workloads import get_workload

__all__ = ["SWEEP_FILE", "parse_sweep", "run_sweep"]

SWEEP_FILE = "sweep.json"


def parse_sweep(text: str) -> tuple[str, list[float]]:
    """``"chat_every=5,10,15"`` -> ``("chat_every", [5.0, 10.0, 15.0])``."""
    name, sep, values = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"--sweep: expected NAME=V1,V2,..., got {text!r}")
    try:
        numbers = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--sweep {name}: values must be numbers, got {values!r}") from None
    if not numbers:
        raise ValueError(f"--sweep {name}: give at least one value")
    return name.strip(), numbers


def run_sweep(
    workload_name: str,
    parameter: str,
    values: Sequence[float],
    policies: Sequence[str],
    *,
    params: Mapping[str, float],
    trace: Path | None,
    seed: int,
    duration: float | None,
    device: DeviceModel,
    out: Path,
    console: Console,
    quiet: bool = False,
) -> list[Comparison]:
    workloads = [
        get_workload(workload_name, trace=trace, params={**params, parameter: value})
        for value in values  # all built first: a bad value fails before any run
    ]
    results: list[Comparison] = []
    with sim_progress(quiet) as bars:
        for value, workload in zip(values, workloads, strict=True):
            horizon = float(duration if duration is not None else workload.default_duration)
            label = f"{parameter}={value:g}"
            results.append(
                compare(
                    workload,
                    policies,
                    seed=seed,
                    duration=horizon,
                    device=device,
                    progress=bars.comparison(label, policies, horizon),
                )
            )
    story = workloads[0].story() or Story("wasted share of busy time", wasted_share, 1.0, False)
    console.print(device_line(device))
    table = _sweep_table(workload_name, parameter, values, policies, results, story)
    console.print(table)
    for workload, comparison in zip(workloads, results, strict=True):
        offered = offered_line(comparison)
        if offered is not None:
            console.print(f"{parameter}={getattr(workload, parameter, '?')}: {offered}")
    if workloads[0].credit is not None:
        console.print(workloads[0].credit)
    paths = [
        write_results(c, out / f"{parameter}={v:g}") for v, c in zip(values, results, strict=True)
    ]
    summary = _summary(workload_name, parameter, values, results, story)
    out.mkdir(parents=True, exist_ok=True)
    (out / SWEEP_FILE).write_text(json.dumps(rounded(summary), indent=2, sort_keys=True) + "\n")
    console.print(f"Wrote {out / SWEEP_FILE} and {len(paths)} results.json under {out}.")
    return results


def _sweep_table(
    workload: str,
    parameter: str,
    values: Sequence[float],
    policies: Sequence[str],
    results: Sequence[Comparison],
    story: Story,
) -> Table:
    sign = ">=" if story.at_least else "<="
    table = Table(
        title=f"{workload}, {parameter} swept: {story.label} "
        f"(tierlm must be {sign} {story.show(story.bound)})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    table.add_column(f"policy \\ {parameter}")
    for value in values:
        table.add_column(f"{value:g}", justify="right")
    for name in policies:
        cells = []
        for comparison in results:
            measured = story.read(comparison.metrics[name])
            cell = story.show(measured)
            if name == "tierlm" and story.met(measured) is False:
                cell = f"[red]{cell}[/]"
            cells.append(cell)
        table.add_row(name, *cells)
    return table


def _summary(
    workload: str,
    parameter: str,
    values: Sequence[float],
    results: Sequence[Comparison],
    story: Story,
) -> dict[str, Any]:
    rows = []
    for value, comparison in zip(values, results, strict=True):
        row: dict[str, Any] = {parameter: value, "policies": {}}
        for name, m in comparison.metrics.items():
            row["policies"][name] = {
                "story": story.read(m),
                "wasted_share": m["waste"]["wasted_share"],
                "preemptions": m["waste"]["preemptions"],
                "chat_ttft_p99": m["chat"]["ttft_p99"],
                "utilisation": m["utilisation"],
            }
        rows.append(row)
    first = results_dict(results[0]) if results else {}
    return {
        "workload": workload,
        "parameter": parameter,
        "story": {"label": story.label, "bound": story.bound, "at_least": story.at_least},
        "device": first.get("device"),
        "seed": first.get("seed"),
        "duration_s": first.get("duration_s"),
        "rows": rows,
    }
