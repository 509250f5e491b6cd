"""The first screen of ``tierlm demo``: the headline in plain words, one table
of what each scheduler cost the person and the background, and tierlm's
targets in one line.

A newcomer read 152 lines of five dense tables to find the one number the demo
exists for (a person's wait for a first token), among words of the project's
history (issue118, Nataraj, Gana, "seed" as a random seed and as a design).
Here every word is explained where it is printed, and everything else is
behind ``tierlm demo --details``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.table import Table

from tierlm.sim.compare import Comparison
from tierlm.sim.device import DeviceModel

Metrics = Mapping[str, Any]

__all__ = ["INTRO", "OVERVIEW_NOTE", "ROWS", "headline", "overview_table", "targets_line"]

INTRO = (
    "A person chats with a local model while background work keeps the device busy "
    "(cards for a deck, cron agents with deadlines, a 500-note backfill). The app "
    "tierlm was built for made them wait 30-110 s for a first word."
)

# The rows, in plain words (the names are `tierlm simulate --policies` names).
ROWS = {
    "tierlm": "this library",
    "fifo": "one queue, first come first served (Ollama's order)",
    "two-lane": "the app's old queue, chat and cards on one high lane",
    "strict-priority": "chat first, then by class; a chat interrupts at once",
    "seed-literal": "the app's own scheduler design, coded line by line",
    "+resume": "the same, interrupted work resumes instead of starting over",
}


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f} s" if value >= 100 else f"{value:.1f} s"


def headline(comparison: Comparison, device: DeviceModel, elapsed: float) -> tuple[str, Table]:
    """The person's slowest first word (p99) under tierlm, the old queue and
    one FIFO queue, each with why, in words: a sentence, and a grid whose
    third column wraps under itself."""
    metrics = comparison.metrics
    minutes = comparison.duration / 60
    said = (
        f"{len(metrics)} schedulers, each on the same {minutes:.0f} minutes of a phone-class "
        f"device ({device.decode_tps:g} tokens/s), simulated in {elapsed:.1f} s in all. The "
        "person's wait for the first word of an answer, the slowest 1 in 100 (p99):"
    )
    grid = Table.grid(padding=(0, 1), pad_edge=True)
    grid.add_column(no_wrap=True)
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(overflow="fold")
    for name, why in (
        ("tierlm", _tierlm_why(metrics["tierlm"])),
        ("two-lane", "the app's old queue: chats wait behind queued cards"),
        ("fifo", _fifo_why(metrics["fifo"], minutes)),
    ):
        grid.add_row(name, _seconds(metrics[name]["chat"]["ttft_p99"]), why)
    return said, grid


def _tierlm_why(m: Metrics) -> str:
    wait = m["chat"]["wait_p99"]
    if wait is None:
        return "no chat was answered"
    return f"{wait:.2f} s of it behind other work; the rest is reading the chat"


def _fifo_why(m: Metrics, minutes: float) -> str:
    chat = m["chat"]
    said = f"one queue: {chat['count']} messages sent in {minutes:.0f} min"
    if chat["unanswered"]:
        said += ", the last unanswered"
    return said


OVERVIEW_NOTE = (
    "sent: the person's messages, each after the previous answer (a slow scheduler gets "
    "fewer sent). median, p99: their wait for the first word. thrown away: device time "
    "spent on work interrupted and done again. cards, cron: their share of the device "
    "(chat and the note backfill had the rest)."
)


def overview_table(comparison: Comparison) -> Table:
    """Every row: the person's waits, and what the background paid for them
    (its columns explained by ``OVERVIEW_NOTE``, printed under it at the
    terminal's width: a caption wraps at the table's)."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, title_justify="left")
    table.add_column("scheduler", overflow="fold")
    for header in ("sent", "median", "p99", "thrown\naway", "cards,\ncron"):
        table.add_column(header, justify="right", no_wrap=True)
    for name, m in comparison.metrics.items():
        chat = m["chat"]
        table.add_row(
            name,
            str(chat["count"]),
            _seconds(chat["ttft_p50"]),
            _seconds(chat["ttft_p99"]),
            f"{m['waste']['wasted_share'] * 100:.1f}%",
            f"{m['fairness']['pool_share'] * 100:.0f}%",
        )
    return table


def targets_line(comparison: Comparison, seeds: int) -> str:
    """tierlm's targets in one line: how many held on every random workload."""
    checks = [t for t in comparison.targets if t.policy == "tierlm" and t.met is not None]
    met = sum(1 for t in checks if t.met)
    verdict = "all met" if met == len(checks) else f"{len(checks) - met} MISSED"
    return (
        f"tierlm's {len(checks)} targets (a chat's first word about as soon as on an idle "
        "device, little work thrown away, the backfill within its budget), checked on "
        f"{seeds} random workloads like this one: {verdict}."
    )
