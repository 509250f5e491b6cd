"""Durations in the settings: seconds, or Ollama's forms (``"90s"``, ``"10m"``, ``"1h"``).

Beside the schema, not in ``gateway.keep_alive`` (which uses them), so that the
backends' model tables can declare a ``keep_alive`` without the settings
importing the gateway.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator

from tierlm.server.settings.schema import Expect

__all__ = ["Duration", "parse_duration"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(value: Any) -> float | None:
    """Seconds of a ``keep_alive``: a number of seconds or a string such as
    ``"90s"``, ``"10m"``, ``"1h"`` (Ollama's forms). Negative: forever (None)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(
            f"must be seconds or a duration such as '10m' or '1h', got {type(value).__name__}"
        )
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match is None:
            raise ValueError(f"must be seconds or a duration such as '10m' or '1h', got {value!r}")
        seconds = float(match[1]) * _UNITS[match[2] or "s"]
    else:
        seconds = float(value)
    return None if seconds < 0 else seconds


Duration = Annotated[
    float | None,
    BeforeValidator(lambda v: v if v is None else parse_duration(v)),
    Expect("seconds, or a duration such as '10m' or '1h'"),
]
"""A ``keep_alive`` in a model's table."""
