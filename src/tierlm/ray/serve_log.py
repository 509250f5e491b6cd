"""tierlm's log lines in Serve's log of the replica.

Serve writes its own lines (``ray.serve``) to ``logs/serve/replica_<app>_<deployment>_<id>.log``;
any other logger reaches only the worker's stderr file (``logs/worker-*.err``),
where an operator does not look. ``join_serve_log`` gives tierlm's loggers
Serve's handlers.
"""

from __future__ import annotations

import logging

__all__ = ["join_serve_log"]


def join_serve_log() -> None:
    """Send tierlm's log lines to Serve's log of this replica (its handlers
    on ``ray.serve``), not to the worker's stderr file only."""
    serve_logger = logging.getLogger("ray.serve")
    ours = logging.getLogger("tierlm")
    for handler in serve_logger.handlers:
        if handler not in ours.handlers:
            ours.addHandler(handler)
    if serve_logger.handlers:
        ours.propagate = False
    if ours.level == logging.NOTSET or ours.level > logging.INFO:
        ours.setLevel(logging.INFO)
