"""tierlm: share one inference device between a person chatting and background work.

A person chatting never waits behind background work; background producers
share the rest fairly; overdue cron work is promoted; extraction stays within its
budget; and a model swap is spent only when it is worth it. See docs/design.md.
"""

from tierlm.core.classes import Budget, TaskClass, Tier, default_classes
from tierlm.core.config import SchedulerConfig
from tierlm.core.jobs import Foreground
from tierlm.embedding import EmbeddingLane
from tierlm.runners.cancellation import Cancelled, CancelReason, CancelToken
from tierlm.runners.errors import RunnerError
from tierlm.shell.events import (
    Event,
    ForegroundChanged,
    JobCancelled,
    JobCompleted,
    JobEnded,
    JobEvent,
    JobFailed,
    JobStarted,
    JobStuck,
    JobSubmitted,
    Paused,
    Preempting,
    Requeued,
    Resumed,
    RunEnded,
    SchedulerEvent,
    SwapFinished,
    SwapStarted,
)
from tierlm.shell.handles import GenerationHandle, GenerationRun, JobContext, JobHandle, JobState
from tierlm.shell.scheduler import Scheduler, SchedulerClosedError
from tierlm.shell.snapshot import JobInfo, SchedulerSnapshot

__version__ = "0.1.0"

__all__ = [
    "Budget",
    "CancelReason",
    "CancelToken",
    "Cancelled",
    "EmbeddingLane",
    "Event",
    "Foreground",
    "ForegroundChanged",
    "GenerationHandle",
    "GenerationRun",
    "JobCancelled",
    "JobCompleted",
    "JobContext",
    "JobEnded",
    "JobEvent",
    "JobFailed",
    "JobHandle",
    "JobInfo",
    "JobStarted",
    "JobState",
    "JobStuck",
    "JobSubmitted",
    "Paused",
    "Preempting",
    "Requeued",
    "Resumed",
    "RunEnded",
    "RunnerError",
    "Scheduler",
    "SchedulerClosedError",
    "SchedulerConfig",
    "SchedulerEvent",
    "SchedulerSnapshot",
    "SwapFinished",
    "SwapStarted",
    "TaskClass",
    "Tier",
    "default_classes",
]
