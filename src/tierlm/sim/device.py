"""The simulated device: decode and prefill speed, swap cost, what a resume costs."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

from tierlm.runners.simulated import (
    DEFAULT_KV_BYTES_PER_TOKEN,
    DEFAULT_N_BATCH,
    DEFAULT_RESTORE_SECONDS,
    DEFAULT_SNAPSHOT_POOL_BYTES,
    LLAMA_CPP_CPU_BATCH_COST,
    SimulatedRunner,
)

__all__ = ["RESUME_COSTS", "DeviceModel", "ResumeCost"]

# Phone-class defaults: 15 tokens/s decode, 150 tokens/s
# prefill, and the seed's "~10 s to unload + load on flutter_gemma 1.1.x".
DEFAULT_DECODE_TPS = 15.0
DEFAULT_PREFILL_TPS = 150.0
DEFAULT_SWAP_SECONDS = 10.0

ResumeCost = Literal["restart", "re-evaluate", "restore"]
"""What a preempted job costs to resume, by what the runner can do
(docs/design.md §8.2):

- ``restart``: nothing is kept; the job runs again from scratch (a closure job
  without a journal; every job of the baselines that restart, as the seed does);
- ``re-evaluate``: generations resume and closure jobs replay their journal,
  but the interrupted call evaluates its prompt + partial output again;
- ``restore``: as ``re-evaluate``, but the interrupted call's KV state is
  restored from a snapshot (a small fixed cost), while the snapshot pool holds it;
  a prompt evaluation cut short keeps its finished batches (``n_batch`` tokens
  each) and the resume evaluates the rest; with ``yields_at_chunks``, on one
  slot a yield (a slice, the pool floor) stops a prompt evaluation at the end
  of a batch, which is kept (docs/design.md §4.6).

Under ``restart`` and ``re-evaluate`` a prompt evaluation cut short is lost.
"""
RESUME_COSTS: tuple[str, ...] = get_args(ResumeCost)
# llama.cpp with KV snapshots (docs/design.md §4.9) is the
# runner tierlm ships for local models.
DEFAULT_RESUME: ResumeCost = "restore"


@dataclass(frozen=True, slots=True)
class DeviceModel:
    """How fast the simulated device is; every workload runs on one of these."""

    decode_tps: float = DEFAULT_DECODE_TPS
    prefill_tps: float = DEFAULT_PREFILL_TPS
    swap_seconds: float = DEFAULT_SWAP_SECONDS
    resume: ResumeCost = DEFAULT_RESUME
    restore_seconds: float = DEFAULT_RESTORE_SECONDS
    snapshot_pool_bytes: int = DEFAULT_SNAPSHOT_POOL_BYTES
    kv_bytes_per_token: int = DEFAULT_KV_BYTES_PER_TOKEN
    n_batch: int = DEFAULT_N_BATCH
    slots: int = 1
    """Sequences decoded at once (docs/design.md §4.7)."""
    batch_cost: float = LLAMA_CPP_CPU_BATCH_COST
    """With ``slots`` > 1: a step of n costs ``1 + batch_cost (n - 1)`` of one's."""
    yields_at_chunks: bool = False
    """On one slot under ``restore``, a yield (a slice, the pool floor) stops a
    prompt evaluation at the end of the ``n_batch`` chunk under way, which is
    kept (docs/design.md §4.6). Off by default: the llama.cpp engine stops a
    yielded generation only after its first token, and the simulated device
    models the runner tierlm ships. On: what a chunk-yielding engine gives."""

    def __post_init__(self) -> None:
        for name in ("decode_tps", "prefill_tps"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"device.{name}: must be a number > 0, got {value!r}")
        for name in (
            "swap_seconds",
            "restore_seconds",
            "snapshot_pool_bytes",
            "kv_bytes_per_token",
        ):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ValueError(f"device.{name}: must be a number >= 0, got {value!r}")
        if not isinstance(self.slots, int) or self.slots < 1:
            raise ValueError(f"device.slots: must be an int >= 1, got {self.slots!r}")
        if not math.isfinite(self.batch_cost) or self.batch_cost < 0:
            raise ValueError(f"device.batch_cost: must be a number >= 0, got {self.batch_cost!r}")
        if not isinstance(self.n_batch, int) or self.n_batch < 1:
            raise ValueError(f"device.n_batch: must be an int >= 1, got {self.n_batch!r}")
        if self.resume not in RESUME_COSTS:
            raise ValueError(
                f"device.resume: must be one of {', '.join(RESUME_COSTS)}, got {self.resume!r}"
            )

    @property
    def token_interval(self) -> float:
        """Seconds per generated token."""
        return 1.0 / self.decode_tps

    @property
    def step_seconds(self) -> float:
        """The longest decode step: every slot full (one token interval on
        one slot). A running batch stops at its next step boundary, so a
        person's chat may wait that long for the device (docs/design.md §8)."""
        return self.token_interval * (1.0 + self.batch_cost * (self.slots - 1))

    @property
    def prefill_per_token(self) -> float:
        """Seconds per prompt token."""
        return 1.0 / self.prefill_tps

    def prefill_seconds(self, prompt_tokens: int) -> float:
        return prompt_tokens * self.prefill_per_token

    def job_seconds(self, prompt_tokens: int, output_tokens: int, calls: int = 1) -> float:
        """A job's device time when nothing interrupts it (no swap): each of its
        ``calls`` evaluates the prompt, and together they generate the output."""
        return calls * self.prefill_seconds(prompt_tokens) + output_tokens * self.token_interval

    def runner(self, initial_model: str | None, *, keeps: bool = True) -> SimulatedRunner:
        """The device as a runner; ``keeps=False``: it keeps nothing of a
        preempted call (a column whose jobs restart, as the seed's do)."""
        return SimulatedRunner(
            token_interval=self.token_interval,
            prefill_per_token=self.prefill_per_token,
            swap_seconds=self.swap_seconds,
            initial_model=initial_model,
            resume="restore" if self.resume == "restore" and keeps else "re-evaluate",
            restore_seconds=self.restore_seconds,
            snapshot_pool_bytes=self.snapshot_pool_bytes,
            kv_bytes_per_token=self.kv_bytes_per_token,
            n_batch=self.n_batch,
            per_token=False,
            slots=self.slots,
            batch_cost=self.batch_cost,
            yields_at_chunks=self.yields_at_chunks,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
