"""The second half of ``tierlm demo``: the fair pool tried as a hostile user
would, and what frequent chats cost background work, one line each.

Every case of docs/design.md §8 runs under tierlm and the baselines that tell
its story, at its own default length; each line is the case's one number
(``Workload.story``) per policy, with the bound tierlm must meet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.table import Table

from tierlm.sim.cli_common import SimProgress
from tierlm.sim.compare import Comparison, compare
from tierlm.sim.device import DeviceModel
from tierlm.sim.workloads import CASES, get_workload

__all__ = ["CASE_POLICIES", "CHAT_EVERY", "WASTE_POLICIES", "Summary", "run_summary"]

CASE_POLICIES = ("tierlm", "fifo", "strict-priority", "seed-literal")
# The frequent-chat sweep's ends and middle (docs/design.md §8): restarting
# and resuming side by side, so the gain of zero-loss preemption shows apart
# from the policy's.
CHAT_EVERY = (5.0, 13.0, 30.0)
WASTE_POLICIES = ("tierlm", "strict-priority", "strict-priority+resume", "seed-literal")


@dataclass
class Summary:
    cases: list[Comparison]
    chats: list[Comparison]

    def tables(self) -> list[Table]:
        cases = _table(
            "The fair pool tried as a hostile user would (docs/design.md §8): each "
            "case's number per policy",
            "case",
            CASE_POLICIES,
        )
        for comparison in self.cases:
            _row(cases, comparison, comparison.workload.name, CASE_POLICIES)
        chats = _table(
            "Frequent chats over 10 s agent rounds: wasted share of busy time, restarting "
            "and resuming side by side",
            "a chat every",
            WASTE_POLICIES,
        )
        for comparison in self.chats:
            every = comparison.workload.params()["chat_every"]
            _row(chats, comparison, f"{every:g} s", WASTE_POLICIES)
        return [cases, chats]

    def legend(self) -> list[str]:
        """What each case measures, one line each."""
        lines = []
        for comparison in self.cases:
            story = comparison.workload.story()
            assert story is not None
            lines.append(f"  {comparison.workload.name}: {story.label}")
        return lines


# Column heads short enough for an 80-column terminal.
SHORT = {
    "strict-priority": "strict",
    "strict-priority+resume": "strict+resume",
    "seed-literal": "seed",
    "seed-literal+resume": "seed+resume",
}


def _table(title: str, first: str, policies: Sequence[str]) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("")
    table.add_column(first)
    table.add_column("must be", justify="right")
    for name in policies:
        table.add_column(SHORT.get(name, name), justify="right")
    return table


def _row(table: Table, comparison: Comparison, case: str, policies: Sequence[str]) -> None:
    story = comparison.workload.story()
    assert story is not None
    ours = story.read(comparison.metrics["tierlm"])
    mark = {True: "[green]✓[/]", False: "[red]✗[/]", None: "·"}[story.met(ours)]
    sign = ">=" if story.at_least else "<="
    cells = [story.show(story.read(comparison.metrics[name])) for name in policies]
    table.add_row(mark, case, f"{sign} {story.show(story.bound)}", *cells)


def run_summary(device: DeviceModel, seed: int, bars: SimProgress) -> Summary:
    cases = []
    for name in CASES:
        workload = get_workload(name)
        horizon = workload.default_duration
        cases.append(
            compare(
                workload,
                CASE_POLICIES,
                seed=seed,
                device=device,
                progress=bars.comparison(name, CASE_POLICIES, horizon),
            )
        )
    chats = []
    for every in CHAT_EVERY:
        workload = get_workload("frequent-chat", params={"chat_every": every})
        chats.append(
            compare(
                workload,
                WASTE_POLICIES,
                seed=seed,
                device=device,
                progress=bars.comparison(
                    f"chat every {every:g} s", WASTE_POLICIES, workload.default_duration
                ),
            )
        )
    return Summary(cases, chats)
