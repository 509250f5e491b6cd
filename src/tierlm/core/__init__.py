"""The policy core, sans-I/O: no asyncio, no clock reads, no HTTP (docs/design.md §1).

Time is an argument of every call; the same inputs give the same decisions.
"""

from tierlm.core.classes import Budget, TaskClass, Tier, default_classes, resolve_classes
from tierlm.core.config import SchedulerConfig
from tierlm.core.jobs import Foreground, Job, Subject
from tierlm.core.policy import Policy
from tierlm.core.stop_reasons import CancelReason
from tierlm.core.tiered import TieredPolicy

__all__ = [
    "Budget",
    "CancelReason",
    "Foreground",
    "Job",
    "Policy",
    "SchedulerConfig",
    "Subject",
    "TaskClass",
    "Tier",
    "TieredPolicy",
    "default_classes",
    "resolve_classes",
]
