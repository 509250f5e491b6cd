"""The Azure LLM inference trace (2023, conversation service), read in place.

Source: Azure Public Dataset (AzureLLMInferenceDataset2023), licensed CC-BY 4.0.
Attribution: Patel et al., "Splitwise: Efficient generative LLM inference using
phase splitting", ISCA 2024. One row per request: ``TIMESTAMP, ContextTokens,
GeneratedTokens`` (19,366 requests over about an hour); no prompt text.

The file is not copied into the repository: it is read from
``../shared/traces/`` relative to the repository root (or from
``$TIERLM_TRACE``, or a path given on the command line).
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ATTRIBUTION",
    "TRACE_FILE",
    "TraceMissingError",
    "TraceRequest",
    "default_trace_path",
    "load_trace",
]

TRACE_FILE = "azure-llm-2023-conv.csv"
ATTRIBUTION = (
    "Azure LLM inference trace 2023 (conversation), Azure Public Dataset, CC-BY 4.0; "
    'Patel et al., "Splitwise: Efficient generative LLM inference using phase '
    'splitting", ISCA 2024'
)
ENV_VAR = "TIERLM_TRACE"


class TraceMissingError(FileNotFoundError):
    """The trace is not where the workload looks for it."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    at: float
    """Seconds after the trace's first request."""
    context_tokens: int
    generated_tokens: int


def repo_root() -> Path:
    """The checkout this package was installed from (editable, src layout)."""
    return Path(__file__).resolve().parents[3]


def default_trace_path() -> Path:
    """``$TIERLM_TRACE`` if set, else ``<repo>/../shared/traces/azure-llm-2023-conv.csv``."""
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override)
    return repo_root().parent / "shared" / "traces" / TRACE_FILE


def _parse_time(text: str) -> dt.datetime:
    # "2023-11-16 18:15:46.6805900": seven fractional digits, more than
    # strptime's %f accepts.
    base, _, fraction = text.strip().partition(".")
    stamp = dt.datetime.strptime(base, "%Y-%m-%d %H:%M:%S")
    return stamp + dt.timedelta(seconds=float(f"0.{fraction or '0'}"))


@functools.lru_cache(maxsize=4)
def load_trace(path: Path | None = None) -> tuple[TraceRequest, ...]:
    """The trace's requests in arrival order; a clear error if the file is missing."""
    path = path or default_trace_path()
    if not path.is_file():
        raise TraceMissingError(
            f"the azure-chat workload needs the Azure LLM trace {TRACE_FILE} "
            f"({ATTRIBUTION}); not found at {path}. Put it in ../shared/traces/ "
            f"beside the repository, or point ${ENV_VAR} or --trace at it."
        )
    rows: list[tuple[dt.datetime, int, int]] = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            rows.append(
                (
                    _parse_time(row["TIMESTAMP"]),
                    int(row["ContextTokens"]),
                    int(row["GeneratedTokens"]),
                )
            )
    if not rows:
        raise ValueError(f"trace {path}: no requests")
    rows.sort(key=lambda r: r[0])
    first = rows[0][0]
    return tuple(
        TraceRequest((stamp - first).total_seconds(), context, generated)
        for stamp, context, generated in rows
    )
