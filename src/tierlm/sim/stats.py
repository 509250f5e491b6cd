"""Percentiles and Jain's index, as every metric uses them."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["jain_index", "percentile"]


def percentile(values: Sequence[float], p: float) -> float | None:
    """The ``p``-th percentile (0-100), linear between order statistics; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * p / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def jain_index(values: Sequence[float]) -> float | None:
    """Jain's fairness index: (sum x)^2 / (n sum x^2); 1 is equal shares.

    Over allocations normalised by each one's fair share (x = service / fair
    share), as Jain et al. define it for unequal demands, 1 means everyone got
    the same fraction of what they were owed."""
    if not values:
        return None
    square_sum = sum(v * v for v in values)
    if square_sum == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * square_sum)
