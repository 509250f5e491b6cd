"""The recently rejected requests, for the state API and the dashboard: dozens
of 400s to a client were invisible there, only counted by
``tierlm_rejected_requests_total``. A bounded list, newest first, of what each
was refused for: the status, the error's code and ``param``, and its message
(the one the client got: it names the field, never a secret)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from typing import Any

__all__ = ["RECENT_REJECTIONS", "RecentRejections", "rejections_of"]

# Enough for a screenful on the dashboard.
RECENT_REJECTIONS = 50
# A message is cut here: a dashboard row, not a log.
MAX_MESSAGE = 300


class RecentRejections:
    def __init__(self, size: int = RECENT_REJECTIONS) -> None:
        self._entries: deque[dict[str, Any]] = deque(maxlen=size)

    def record(self, method: str, path: str, error: Any) -> None:
        """``error`` (an ``APIError``) answered ``method path``."""
        message = str(error.message)
        self._entries.appendleft(
            {
                "at": time.time(),
                "method": method,
                "path": path,
                "status": error.status,
                "reason": error.reason,
                "code": error.code,
                "param": error.param,
                "message": message[:MAX_MESSAGE],
            }
        )

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def rejections_of(state: Any) -> RecentRejections:
    """The app's list (``app.state.rejections``), made at its first use."""
    found: RecentRejections | None = getattr(state, "rejections", None)
    if found is None:
        found = RecentRejections()
        state.rejections = found
    return found
