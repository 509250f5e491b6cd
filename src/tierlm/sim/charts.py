"""The demo's two PNGs: a device timeline (one lane per policy) and the CDF of
chat time-to-first-token. matplotlib's Agg canvas, no pyplot: no display, no
global state, safe in tests and on servers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from tierlm.sim.metrics import CHAT_CLASS
from tierlm.sim.records import SimRecords

__all__ = ["CDF_FILE", "TIMELINE_FILE", "chat_cdf", "chat_cdf_figure", "timeline"]

TIMELINE_FILE = "timeline.png"
CDF_FILE = "chat_ttft_cdf.png"

CLASS_COLOURS = {
    "chat": "#d62728",
    "extract": "#1f77b4",
    "nataraj": "#2ca02c",
    "gana": "#ff7f0e",
}
OTHER_COLOUR = "#7f7f7f"
# The legend says what each class of the demo's workloads is: their names are
# the app's (the producers tierlm was built for), not words a reader knows.
CLASS_LABELS = {
    "chat": "chat (the person)",
    "extract": "extract (note backfill)",
    "nataraj": "nataraj (cards for a deck)",
    "gana": "gana (cron agents)",
}
PRODUCER_COLOURS = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#17becf",
    "#7f7f7f",
    "#aec7e8",
]
SWAP_COLOUR = "#222222"
CHAT_OPEN_COLOUR = "#f4c7c3"
POLICY_COLOURS = [
    "#d62728",
    "#7f7f7f",
    "#9467bd",
    "#8c564b",
    "#17becf",
    "#bcbd22",
    "#e377c2",
    "#1f77b4",
]
POLICY_STYLES = ["-", "-", "-", "--", ":", "-.", "--", ":"]
# Waits shorter than this (a preemption at a token boundary is ~0-67 ms) are
# drawn at it: a log axis has no zero.
WAIT_FLOOR = 0.001
# The zoom panel: from a little before the first chat to well after it, long
# enough to show a 30-110 s wait (the seed's scenario 1, the issue118 workload).
ZOOM_BEFORE = 20.0
ZOOM_AFTER = 130.0


def _colours(records: Mapping[str, SimRecords]) -> tuple[bool, dict[str, str]]:
    """Colour by class; when every job is of one class (fair-pool, mixed-models),
    by producer instead, so the chart shows who held the device."""
    classes = {job.class_name for rec in records.values() for job in rec.jobs}
    producers = sorted({job.producer for rec in records.values() for job in rec.jobs})
    # More producers than colours (many-producers: one per user) say nothing
    # apart: colour by class then.
    if len(classes) > 1 or len(producers) > len(PRODUCER_COLOURS):
        return False, {cls: CLASS_COLOURS.get(cls, OTHER_COLOUR) for cls in sorted(classes)}
    return True, {p: PRODUCER_COLOURS[i % len(PRODUCER_COLOURS)] for i, p in enumerate(producers)}


def _lanes(
    ax: Axes,
    records: Mapping[str, SimRecords],
    start: float,
    end: float,
    *,
    marker_size: float,
) -> None:
    by_producer, colours = _colours(records)
    names = list(records)
    for lane, name in enumerate(names):
        y = len(names) - 1 - lane
        rec = records[name]
        # Chat surface open (the foreground the person set): a faint band.
        opened: float | None = None
        for t, cls in [*rec.foreground, (rec.horizon, "")]:
            if cls == "chat" and opened is None:
                opened = t
            elif cls != "chat" and opened is not None:
                ax.fill_between(
                    [opened, t], y - 0.5, y + 0.5, color=CHAT_OPEN_COLOUR, alpha=0.35, lw=0
                )
                opened = None
        bars: dict[str, list[tuple[float, float]]] = {}
        swaps: list[tuple[float, float]] = []
        for job in rec.jobs:
            for run in job.runs:
                run_end = min(run.end if run.end is not None else rec.horizon, rec.horizon)
                if run_end <= start or run.start >= end or run_end <= run.start:
                    continue
                work_start = run.start
                if run.swap_start is not None:
                    swap_end = run.swap_end if run.swap_end is not None else run_end
                    swaps.append((run.swap_start, swap_end - run.swap_start))
                    work_start = swap_end
                if run_end > work_start:
                    key = job.producer if by_producer else job.class_name
                    bars.setdefault(key, []).append((work_start, run_end - work_start))
        for key, spans in bars.items():
            ax.broken_barh(spans, (y - 0.32, 0.64), facecolors=colours[key], lw=0)
        if swaps:
            ax.broken_barh(
                swaps,
                (y - 0.32, 0.64),
                facecolors="white",
                edgecolors=SWAP_COLOUR,
                hatch="////",
                lw=0.6,
            )
        # Chats: arrival (triangle), a line while waiting, first token (dot).
        chat_y = y + 0.42
        for job in rec.jobs:
            if job.class_name != CHAT_CLASS or not start <= job.submitted <= end:
                continue
            first = job.first_token if job.first_token is not None else rec.horizon
            ax.plot([job.submitted, min(first, end)], [chat_y, chat_y], color="black", lw=1.2)
            ax.plot(job.submitted, chat_y, marker="v", color="black", ms=marker_size)
            if job.first_token is not None and job.first_token <= end:
                ax.plot(
                    job.first_token,
                    chat_y,
                    marker="o",
                    color="#d62728",
                    ms=marker_size,
                    mec="black",
                    mew=0.5,
                )
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(list(reversed(names)))
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.set_xlim(start, end)
    ax.grid(axis="x", alpha=0.3)


def timeline(
    records: Mapping[str, SimRecords],
    path: Path,
    *,
    clock: str = "simulated seconds",
    title: str | None = None,
) -> Path:
    """One lane per policy: which class held the device when, swaps, chats.
    ``clock`` names the time axis (``tierlm demo --real`` runs in real seconds);
    ``title`` the workload (default: its name)."""
    first_chats = [
        job.submitted
        for rec in records.values()
        for job in rec.jobs
        if job.class_name == CHAT_CLASS
    ]
    horizon = max(rec.horizon for rec in records.values())
    lanes = len(records)
    t0 = max(0.0, min(first_chats, default=0.0) - ZOOM_BEFORE)
    t1 = min(horizon, t0 + ZOOM_BEFORE + ZOOM_AFTER)
    # A zoom that would show (nearly) the whole run repeats the top panel: none.
    zoom = bool(first_chats) and t1 - t0 < 0.8 * horizon
    fig = Figure(figsize=(16, 1.0 + 0.75 * lanes * (2 if zoom else 1) + 1.2), dpi=110)
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(2 if zoom else 1, 1, height_ratios=[1, 1] if zoom else [1])
    workload = title or next(iter(records.values())).workload
    ax = fig.add_subplot(grid[0])
    _lanes(ax, records, 0.0, horizon, marker_size=4)
    ax.set_title(f"{workload}: the device over {horizon:.0f} {clock}", loc="left")
    ax.set_xlabel(clock)
    if zoom:
        zax = fig.add_subplot(grid[1])
        _lanes(zax, records, t0, t1, marker_size=7)
        zax.set_title(
            f"zoom: the first chat session ({t0:.0f}-{t1:.0f} s); a line runs from each "
            "chat's arrival to its first token",
            loc="left",
        )
        zax.set_xlabel(clock)
    by_producer, colours = _colours(records)
    handles: list[Patch | Line2D] = [
        Patch(facecolor=colour, label=key if by_producer else CLASS_LABELS.get(key, key))
        for key, colour in colours.items()
    ]
    # The legend names only what the chart draws.
    jobs = [job for rec in records.values() for job in rec.jobs]
    if any(run.swap_start is not None for job in jobs for run in job.runs):
        handles.append(
            Patch(facecolor="white", edgecolor=SWAP_COLOUR, hatch="////", label="model swap")
        )
    if any(cls == "chat" for rec in records.values() for _, cls in rec.foreground):
        handles.append(Patch(facecolor=CHAT_OPEN_COLOUR, alpha=0.6, label="chat surface open"))
    if first_chats:
        handles.append(
            Line2D([], [], marker="v", color="black", lw=1.2, label="chat sent ... waiting")
        )
    if any(job.class_name == CHAT_CLASS and job.first_token is not None for job in jobs):
        handles.append(
            Line2D([], [], marker="o", color="#d62728", mec="black", lw=0, label="first token")
        )
    columns = min(len(handles), 5)
    rows = -(-len(handles) // columns)
    fig.legend(handles=handles, loc="lower center", ncol=columns, frameon=False)
    fig.tight_layout(rect=(0, 0.025 * rows + 0.01, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def chat_cdf(
    ttfts: Mapping[str, Sequence[float]],
    waits: Mapping[str, Sequence[float]],
    path: Path,
    *,
    workload: str,
    token_interval: float,
) -> Path:
    """CDFs of chat time-to-first-token and of the wait beyond the chat's own
    uncontended TTFT (its prefill + first token), one line per policy."""
    fig = chat_cdf_figure(ttfts, waits, workload=workload, token_interval=token_interval)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def chat_cdf_figure(
    ttfts: Mapping[str, Sequence[float]],
    waits: Mapping[str, Sequence[float]],
    *,
    workload: str,
    token_interval: float,
) -> Figure:
    """``chat_cdf``'s figure, drawn (a test measures where its legends fall)."""
    # The legends sit under the plots: inside, they covered the slow curves
    # (two-lane's, FIFO's) they name.
    rows = -(-sum(1 for values in ttfts.values() if values) // 2)
    fig = Figure(figsize=(14, 5.5 + 0.22 * rows), dpi=110)
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    _cdf(left, ttfts, floor=0.05)
    left.axvspan(30, 110, color=CHAT_OPEN_COLOUR, alpha=0.6, lw=0, zorder=0)
    left.text(
        32, 0.5, "the app's chats\nwaited 30-110 s\nbefore tierlm", fontsize=9, color="#a03030"
    )
    left.set_xlabel("time to first token, simulated s (log scale)")
    left.set_title(f"{workload}: chat time to first token", loc="left")
    _cdf(right, waits, floor=WAIT_FLOOR)
    right.axvline(token_interval, color="black", lw=0.8, ls="--")
    right.text(
        token_interval * 1.1, 0.03, f"one token\n({token_interval * 1000:.0f} ms)", fontsize=8
    )
    right.set_xlabel(
        f"wait beyond the chat's own prefill + first token, s (log; < {WAIT_FLOOR * 1000:.0f} ms "
        "drawn at the left edge)"
    )
    right.set_title("chat waiting time: what other work cost it", loc="left")
    fig.tight_layout()
    return fig


def _cdf(ax: Axes, samples: Mapping[str, Sequence[float]], *, floor: float) -> None:
    for i, (name, values) in enumerate(samples.items()):
        if not values:
            continue
        ordered = [max(floor, v) for v in sorted(values)]
        n = len(ordered)
        xs = [ordered[0], *ordered]
        ys = [0.0, *[(k + 1) / n for k in range(n)]]
        ax.step(
            xs,
            ys,
            where="post",
            lw=3.0 if name == "tierlm" else 1.6,
            ls="-" if name == "tierlm" else POLICY_STYLES[i % len(POLICY_STYLES)],
            color=POLICY_COLOURS[i % len(POLICY_COLOURS)],
            label=f"{name} (n={n}, p99 {_p99(values):.3g} s)",
            zorder=3 if name == "tierlm" else 2,
        )
    ax.set_xscale("log")
    ax.set_xlim(floor * 0.8, None)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("fraction of chats")
    ax.grid(alpha=0.3, which="both")
    if any(samples.values()):
        ax.legend(loc="upper left", bbox_to_anchor=(0.0, -0.16), ncol=2, fontsize=9, frameon=False)
    else:
        ax.text(0.5, 0.5, "no chats in this workload", ha="center", transform=ax.transAxes)


def _p99(values: Sequence[float]) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * 0.99
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)
