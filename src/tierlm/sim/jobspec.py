"""What a workload asks the simulated device to do: one job's shape."""

from __future__ import annotations

from dataclasses import dataclass

from tierlm.core.jobs import Subject

__all__ = ["JobSpec"]


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job of ``prompt_tokens`` in and ``output_tokens`` out.

    ``resumable``: a generate-style job (a chat turn, a Nataraj card), which
    resumes after a preemption under policies that resume; otherwise a closure
    job (an extraction, a Gana round), which restarts (docs/design.md §4 re-queue).
    ``deadline`` is absolute, in simulated seconds.
    """

    class_name: str
    model_id: str
    prompt_tokens: int
    output_tokens: int
    producer: str | None = None
    subject: Subject | None = None
    deadline: float | None = None
    resumable: bool = False

    def __post_init__(self) -> None:
        if self.prompt_tokens < 0:
            raise ValueError(f"prompt_tokens: must be >= 0, got {self.prompt_tokens}")
        if self.output_tokens < 1:
            raise ValueError(f"output_tokens: must be >= 1, got {self.output_tokens}")
