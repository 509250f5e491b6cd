"""The Azure LLM inference trace (2023, conversation service), shipped with tierlm.

Source: Azure Public Dataset (AzureLLMInferenceDataset2023), licensed CC-BY 4.0.
Attribution: Patel et al., "Splitwise: Efficient generative LLM inference using
phase splitting", ISCA 2024. One row per request: ``TIMESTAMP, ContextTokens,
GeneratedTokens`` (19,366 requests over about an hour); no prompt text.

The file is package data (``tierlm/sim/data/``, gzip-compressed, with its
attribution), read through ``importlib.resources``, so the workloads that
replay it work from any install. ``$TIERLM_TRACE`` or ``--trace`` may point at
another CSV of the same columns (plain or ``.gz``).

``replay_plan`` fits the whole trace to a simulated run (docs/design.md §8.5): its hour is
time-scaled onto the run, and an evenly spaced
sample of its requests is kept so that they offer a stated load.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import functools
import gzip
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO

__all__ = [
    "ATTRIBUTION",
    "ENV_VAR",
    "TRACE_FILE",
    "ReplayPlan",
    "TraceMissingError",
    "TraceRequest",
    "load_trace",
    "replay_plan",
]

TRACE_FILE = "azure-llm-2023-conv.csv"
PACKAGED = ("data", TRACE_FILE + ".gz")  # under tierlm/sim/
ATTRIBUTION = (
    "Azure LLM inference trace 2023 (conversation), Azure Public Dataset, CC-BY 4.0; "
    'Patel et al., "Splitwise: Efficient generative LLM inference using phase '
    'splitting", ISCA 2024'
)
ENV_VAR = "TIERLM_TRACE"


class TraceMissingError(FileNotFoundError):
    """A trace file named by ``--trace`` or ``$TIERLM_TRACE`` is not there."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    at: float
    """Seconds after the trace's first request."""
    context_tokens: int
    generated_tokens: int


def _parse_time(text: str) -> dt.datetime:
    # "2023-11-16 18:15:46.6805900": seven fractional digits; fromisoformat
    # takes at most six, and 100 ns do not matter here.
    text = text.strip()
    base, dot, fraction = text.partition(".")
    return dt.datetime.fromisoformat(base + dot + fraction[:6] if dot else base)


@contextlib.contextmanager
def _open_text(path: Path | None) -> Iterator[IO[str]]:
    """The CSV as text: the packaged copy, or the file at ``path`` (gz or not)."""
    if path is None:
        resource = resources.files("tierlm.sim").joinpath(*PACKAGED)
        with resource.open("rb") as raw, gzip.open(raw, "rt", newline="") as text:
            yield text
        return
    if not path.is_file():
        raise TraceMissingError(
            f"trace: {path} not found (given by --trace or ${ENV_VAR}); it must be a CSV "
            f"with TIMESTAMP, ContextTokens, GeneratedTokens columns, like {TRACE_FILE}. "
            f"Without either, the copy shipped with tierlm is used."
        )
    if path.suffix == ".gz":
        with gzip.open(path, "rt", newline="") as text:
            yield text
    else:
        with path.open(newline="") as text:
            yield text


def default_trace_path() -> Path | None:
    """``$TIERLM_TRACE`` if set (another CSV), else None: the packaged trace."""
    override = os.environ.get(ENV_VAR)
    return Path(override) if override else None


@functools.lru_cache(maxsize=4)
def _load(path: Path | None) -> tuple[TraceRequest, ...]:
    rows: list[tuple[dt.datetime, int, int]] = []
    where = str(path) if path is not None else "the packaged trace"
    with _open_text(path) as text:
        reader = csv.DictReader(text)
        missing = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"trace {where}: missing column(s) {', '.join(sorted(missing))}")
        for row in reader:
            rows.append(
                (
                    _parse_time(row["TIMESTAMP"]),
                    int(row["ContextTokens"]),
                    int(row["GeneratedTokens"]),
                )
            )
    if not rows:
        raise ValueError(f"trace {where}: no requests")
    rows.sort(key=lambda r: r[0])
    first = rows[0][0]
    return tuple(
        TraceRequest((stamp - first).total_seconds(), context, generated)
        for stamp, context, generated in rows
    )


def load_trace(path: Path | None = None) -> tuple[TraceRequest, ...]:
    """The trace's requests in arrival order: ``path``, else ``$TIERLM_TRACE``,
    else the copy shipped in the package. A clear error if a named file is missing."""
    return _load(path if path is not None else default_trace_path())


# -- replay at a stated offered load ---------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """Which trace requests a run replays, and when (docs/design.md §8.5)."""

    arrivals: tuple[tuple[float, TraceRequest], ...]
    """(simulated time, request), in time order, all within [0, duration)."""
    duration: float
    time_scale: float
    """Simulated seconds per trace second: the trace's span maps onto the run."""
    stated_load: float
    offered_load: float
    """The load the kept requests offer: their device seconds / duration."""
    trace_requests: int

    @property
    def kept(self) -> int:
        return len(self.arrivals)


def replay_plan(
    requests: Sequence[TraceRequest],
    service: Callable[[TraceRequest], float],
    *,
    load: float,
    duration: float,
    phase: float,
) -> ReplayPlan:
    """Replay the WHOLE trace over ``duration`` at offered ``load``.

    The trace's span (first to last request, plus one mean gap so that a run
    longer than the trace is not needed) is stretched or compressed onto
    ``duration``: an hour of the trace is the run, whatever its length, so the
    run sees the trace's arrival pattern (its bursts and lulls) at the run's
    scale. The datacentre's 5 requests/s would offer a phone far more than it
    can serve, so the replay keeps an evenly spaced sample: request
    ``floor((j + phase) * N / n)`` for j < n, ``phase`` in [0, 1) fixed by the
    seed. An even sample by index thins the arrivals in proportion to the
    trace's own rate, and keeps prompt and output sizes unbiased. ``n`` is the
    sample size whose device seconds (``service``) come closest to ``load`` x
    ``duration``. Where whole requests still miss the load by more than
    ``CLOSE_ENOUGH``, a few kept requests are exchanged for a neighbour in the
    trace (one that arrived within a quarter of the sampling step) whose size
    closes the gap (``_close_the_gap``). ``offered_load`` says what the kept
    requests offer.
    """
    if not load > 0:
        raise ValueError(f"load: must be a fraction of the device's capacity > 0, got {load!r}")
    if not 0 <= phase < 1:
        raise ValueError(f"phase: must be in [0, 1), got {phase!r}")
    total = len(requests)
    if total == 0:
        raise ValueError("trace: no requests")
    start = requests[0].at
    gap = (requests[-1].at - start) / max(1, total - 1)
    span = requests[-1].at - start + gap
    scale = duration / span if span > 0 else 0.0
    costs = [service(r) for r in requests]
    target = load * duration
    guess = max(1, round(target / (sum(costs) / total)))

    def pick(n: int) -> list[int]:
        return [math.floor((j + phase) * total / n) for j in range(n)]

    def offered(indices: list[int]) -> float:
        return sum(costs[i] for i in indices)

    best = pick(min(guess, total))
    best_gap = abs(offered(best) - target)
    # The offered load moves by one request's worth per step of n: search the
    # neighbourhood of the guess (a quarter either way covers the size noise of
    # any sample big enough to be within a few percent at all).
    for n in range(max(1, guess - guess // 4 - 1), min(total, guess + guess // 4 + 1) + 1):
        indices = pick(n)
        miss = abs(offered(indices) - target)
        if miss < best_gap:
            best, best_gap = indices, miss
    best = _close_the_gap(best, costs, target, total)
    arrivals = tuple(((requests[i].at - start) * scale, requests[i]) for i in best)
    return ReplayPlan(
        arrivals=arrivals,
        duration=duration,
        time_scale=scale,
        stated_load=load,
        offered_load=offered(best) / duration,
        trace_requests=total,
    )


CLOSE_ENOUGH = 0.01
"""Offered load within 1 % of the stated one needs no exchange of requests."""


def _close_the_gap(picked: list[int], costs: list[float], target: float, total: int) -> list[int]:
    """Exchange kept requests for trace neighbours until the offered device
    time is within ``CLOSE_ENOUGH`` of ``target`` (or no exchange helps)."""
    picked = list(picked)
    gap = target - sum(costs[i] for i in picked)
    reach = max(1, total // (4 * max(1, len(picked))))
    taken = set(picked)
    for j, index in enumerate(picked):
        if abs(gap) <= CLOSE_ENOUGH * target:
            break
        best, best_gap = index, gap
        for other in range(max(0, index - reach), min(total, index + reach + 1)):
            if other in taken:
                continue
            after = gap - (costs[other] - costs[index])
            if abs(after) < abs(best_gap):
                best, best_gap = other, after
        if best != index:
            taken.discard(index)
            taken.add(best)
            picked[j], gap = best, best_gap
    return sorted(picked)
