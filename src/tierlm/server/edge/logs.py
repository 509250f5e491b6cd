"""``tierlm serve``'s logging: one handler on the root logger for tierlm's and
uvicorn's records alike, as text or as one JSON object per line
(``server.log_format``), each with its request's id (``request_id.py``).

uvicorn is then run with ``log_config=None``: its loggers (``uvicorn.error``,
``uvicorn.access``) have no handlers of their own and reach this one.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from tierlm.server.edge.request_id import RequestIdFilter

__all__ = ["JsonFormatter", "configure_logging", "text_formatter"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"
# uvicorn's access record: its message's arguments, in this order.
_ACCESS_FIELDS = ("client", "method", "path", "http_version", "status")


class JsonFormatter(logging.Formatter):
    """A record as one JSON object on one line: ``time`` (UTC, ISO 8601),
    ``level``, ``logger``, ``message``, ``request_id``; uvicorn's access
    records also as fields (``client``, ``method``, ``path``, ``status``...);
    an exception's traceback as ``exception`` (one string, still one line)."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        args = record.args
        if record.name == "uvicorn.access" and isinstance(args, tuple):
            data.update(zip(_ACCESS_FIELDS, args, strict=False))
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str, ensure_ascii=False)


class _UvicornName(logging.Filter):
    """uvicorn logs everything but its access lines, start-up included, as
    ``uvicorn.error``: shown as ``uvicorn``, so ``Uvicorn running on ...`` at
    INFO does not read as an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "uvicorn.error":
            record.name = "uvicorn"
        return True


def text_formatter() -> logging.Formatter:
    return logging.Formatter(TEXT_FORMAT)


def configure_logging(level: str, fmt: str, stream: TextIO | None = None) -> logging.Handler:
    """Route every record (tierlm's, uvicorn's) through one handler on the root
    logger, formatted as ``fmt`` (``text`` or ``json``). Replaces the root's
    handlers: ``tierlm serve`` owns its process's logging."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else text_formatter())
    handler.addFilter(RequestIdFilter())
    handler.addFilter(_UvicornName())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    # uvicorn's "trace" is below DEBUG; the standard levels are named alike.
    root.setLevel("DEBUG" if level == "trace" else level.upper())
    return handler
