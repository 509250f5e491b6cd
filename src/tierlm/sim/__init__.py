"""The simulator: the REAL scheduler, a simulated device, virtual time (docs/design.md §1.1).

Workloads (``tierlm.sim.workloads``) are producers that submit jobs over time;
``tierlm.sim.engine`` runs one workload under one policy, ours or a baseline
(``tierlm.sim.baselines``), through the same :class:`tierlm.Scheduler` with a
:class:`tierlm.runners.SimulatedRunner` on a virtual-time loop, and records
every job; ``tierlm.sim.metrics`` turns the records into the numbers docs/design.md §8
asks for, whichever policy ran; ``report`` and ``charts`` show them.
"""

from tierlm.sim.device import DeviceModel
from tierlm.sim.engine import simulate
from tierlm.sim.metrics import compute_metrics
from tierlm.sim.records import JobRecord, RunRecord, SimRecords

__all__ = [
    "DeviceModel",
    "JobRecord",
    "RunRecord",
    "SimRecords",
    "compute_metrics",
    "simulate",
]
