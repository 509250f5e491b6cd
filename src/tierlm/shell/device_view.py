"""What the policy sees of the device at a decision (docs/design.md §2.2):
the running jobs' state as the shell knows it, in a ``Device``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tierlm.core.policy import Device
from tierlm.core.stop_reasons import CancelReason
from tierlm.shell.entries import Entry

__all__ = ["describe"]


def describe(
    now: float,
    model: str | None,
    slots: int,
    running: Mapping[int, Entry[Any]],
    *,
    can_start: bool,
    restores_kv: bool,
    swap_estimate: float | None,
    step_cost: Sequence[float],
) -> Device:
    stopping: dict[int, CancelReason] = {}
    evaluations = {}
    decoding = set()
    for job_id, entry in running.items():
        ctx = entry.context
        if ctx is not None and ctx.first_live_at is not None:
            decoding.add(job_id)
        if ctx is not None:
            # docs/design.md §4.6: what this run redid before it made new
            # progress, what its next resume redoes too. A device that
            # restores KV evaluates nothing again; only the calls a closure
            # job's journal could not keep are generated again.
            progress = now if ctx.progress_at is None else ctx.progress_at
            if not restores_kv:
                evaluations[job_id] = progress - ctx.started_at
            elif ctx.first_live_at is not None and progress > ctx.first_live_at:
                evaluations[job_id] = progress - ctx.first_live_at
        assert entry.token is not None
        reason = entry.token.reason
        if reason is not None:
            stopping[job_id] = reason
    return Device(
        model,
        slots,
        tuple(entry.job for entry in running.values()),
        stopping,
        can_start=can_start,
        swap_estimate=swap_estimate,
        step_cost=step_cost,
        decoding=frozenset(decoding),
        evaluations=evaluations,
    )
