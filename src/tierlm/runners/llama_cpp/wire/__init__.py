"""What crosses the process boundary between the runner and its worker.

The messages (``messages.py``, pickled over a socket pair), the shared control
block (``control.py``: cancel flags, pieces taken, the heartbeat) and the
fault injections tests send (``faults.py``). Imported by both sides;
imports neither.
"""
