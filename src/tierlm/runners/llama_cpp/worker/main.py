"""The llama.cpp worker process: ``python -m tierlm.runners.llama_cpp.worker.main CONN CONTROL``.

Started by the runner (``transport.WorkerProcess``) with two inherited file
descriptors: ``CONN``, its end of a socket pair carrying pickled commands and
events (``messages.py``), and ``CONTROL``, the shared control block
(``control.py``). Its main thread reads commands and hands them to a
``DecodeService``; when the runner goes away (the pipe closes) it exits at
once, so a worker never outlives its runner. Its log records go to the runner
as ``Log`` events.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from multiprocessing.connection import Connection

from tierlm.runners.llama_cpp.wire.control import HEARTBEAT_SECONDS, ControlBlock
from tierlm.runners.llama_cpp.wire.messages import Event, Log, Reply, Shutdown
from tierlm.runners.llama_cpp.worker.service import DecodeService

__all__ = ["main"]


def _heartbeat(control: ControlBlock) -> None:
    while True:
        control.beat()
        time.sleep(HEARTBEAT_SECONDS)


class _Forward(logging.Handler):
    """Send this process's log records to the runner."""

    def __init__(self, send: Sender) -> None:
        super().__init__()
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._send(Log(record.levelno, self.format(record)))
        except Exception:
            self.handleError(record)


class Sender:
    """``conn.send`` from several threads; exits when the runner is gone."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        try:
            with self._lock:
                self._conn.send(event)
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            os._exit(0)  # the runner closed the pipe: nobody to work for


def main(argv: list[str]) -> int:
    conn = Connection(int(argv[1]))
    control = ControlBlock(int(argv[2]))
    control.release_fd()
    # Before anything slow (importing llama.cpp): the watchdog counts from spawn.
    threading.Thread(target=_heartbeat, args=(control,), name="heartbeat", daemon=True).start()
    send = Sender(conn)
    root = logging.getLogger()
    root.addHandler(_Forward(send))
    root.setLevel(logging.INFO)
    service = DecodeService(control, send)
    service.start()
    while True:
        try:
            command = conn.recv()
        except (EOFError, OSError):
            # The runner is gone. Exit without waiting for a generation in
            # flight: its tokens have no reader.
            os._exit(0)
        if isinstance(command, Shutdown):
            service.stop()
            send(Reply(command.call_id))
            conn.close()
            return 0
        service.handle(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
