"""Helpers for testing code that uses tierlm: a virtual-time event loop, and
driving a policy by hand."""

from tierlm.testing.policy import next_start
from tierlm.testing.virtual import VirtualDeadlock, VirtualTimeLoop, run_virtual

__all__ = ["VirtualDeadlock", "VirtualTimeLoop", "next_start", "run_virtual"]
