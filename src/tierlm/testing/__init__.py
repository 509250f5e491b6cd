"""Helpers for testing code that uses tierlm: a virtual-time event loop."""

from tierlm.testing.virtual import VirtualDeadlock, VirtualTimeLoop, run_virtual

__all__ = ["VirtualDeadlock", "VirtualTimeLoop", "run_virtual"]
