"""The simulated device: decode and prefill speed, swap cost."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from tierlm.runners.simulated import SimulatedRunner

__all__ = ["DeviceModel"]

# Phone-class defaults: 15 tokens/s decode, 150 tokens/s
# prefill, and the seed's "~10 s to unload + load on flutter_gemma 1.1.x".
DEFAULT_DECODE_TPS = 15.0
DEFAULT_PREFILL_TPS = 150.0
DEFAULT_SWAP_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class DeviceModel:
    """How fast the simulated device is; every workload runs on one of these."""

    decode_tps: float = DEFAULT_DECODE_TPS
    prefill_tps: float = DEFAULT_PREFILL_TPS
    swap_seconds: float = DEFAULT_SWAP_SECONDS

    def __post_init__(self) -> None:
        for name in ("decode_tps", "prefill_tps"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"device.{name}: must be a number > 0, got {value!r}")
        swap = self.swap_seconds
        if not isinstance(swap, int | float) or not math.isfinite(swap) or swap < 0:
            raise ValueError(f"device.swap_seconds: must be a number >= 0, got {swap!r}")

    @property
    def token_interval(self) -> float:
        """Seconds per generated token."""
        return 1.0 / self.decode_tps

    @property
    def prefill_per_token(self) -> float:
        """Seconds per prompt token."""
        return 1.0 / self.prefill_tps

    def prefill_seconds(self, prompt_tokens: int) -> float:
        return prompt_tokens * self.prefill_per_token

    def job_seconds(self, prompt_tokens: int, output_tokens: int) -> float:
        """A job's device time when nothing interrupts it (no swap)."""
        return self.prefill_seconds(prompt_tokens) + output_tokens * self.token_interval

    def runner(self, initial_model: str | None) -> SimulatedRunner:
        return SimulatedRunner(
            token_interval=self.token_interval,
            prefill_per_token=self.prefill_per_token,
            swap_seconds=self.swap_seconds,
            initial_model=initial_model,
        )

    def to_dict(self) -> dict[str, float]:
        return asdict(self)
