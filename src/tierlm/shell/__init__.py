"""The asyncio shell around the sans-I/O policy (docs/design.md §1, §2).

``Scheduler`` owns the queues and the clock; the ``Dispatcher`` applies the
policy's decisions to the runner (starts, preemptions, swaps); ``handles`` are
what callers hold; ``journal`` replays a closure job's ``ctx.generate`` calls;
``events`` are the frozen records listeners get; ``snapshot`` is the state
read-out. Everything public is re-exported from ``tierlm``. The shell imports
only ``tierlm.core``, ``tierlm.runners`` and itself (tests/test_architecture.py).
"""
