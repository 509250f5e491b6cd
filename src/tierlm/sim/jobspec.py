"""What a workload asks the simulated device to do: one job's shape."""

from __future__ import annotations

from dataclasses import dataclass

from tierlm.core.jobs import Subject

__all__ = ["JobSpec"]


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job of ``prompt_tokens`` in and ``output_tokens`` out.

    ``generation``: a streamed generation (a chat turn, a Nataraj card),
    submitted through ``Scheduler.submit_generation``. Otherwise a closure job
    (an extraction, a Gana round): ``work(ctx)`` making ``calls``
    ``ctx.generate`` calls in a row, each on a prompt of ``prompt_tokens``,
    sharing the output between them (an agent round of several steps). Whether
    a preempted job resumes is the simulated column's (``tierlm.sim.policies``).
    ``deadline`` is absolute, in simulated seconds.
    """

    class_name: str
    model_id: str
    prompt_tokens: int
    output_tokens: int
    producer: str | None = None
    subject: Subject | None = None
    deadline: float | None = None
    generation: bool = False
    calls: int = 1

    def __post_init__(self) -> None:
        if self.prompt_tokens < 0:
            raise ValueError(f"prompt_tokens: must be >= 0, got {self.prompt_tokens}")
        if self.output_tokens < 1:
            raise ValueError(f"output_tokens: must be >= 1, got {self.output_tokens}")
        if not 1 <= self.calls <= self.output_tokens:
            raise ValueError(
                f"calls: must be between 1 and output_tokens ({self.output_tokens}), "
                f"got {self.calls}"
            )
        if self.generation and self.calls != 1:
            raise ValueError("calls: a generation is one call")

    def call_outputs(self) -> list[int]:
        """The output tokens of each call: an equal split, the rest to the last."""
        share, rest = divmod(self.output_tokens, self.calls)
        return [share] * (self.calls - 1) + [share + rest]
