"""The runners' errors: a backend that failed, and a request a runner cannot do
as asked. Both are ``TierlmError``s with their HTTP status hint (tierlm.errors)."""

from __future__ import annotations

from collections.abc import Iterable

from tierlm.errors import TierlmError

__all__ = ["CrashedTwice", "DeviceCrashed", "InvalidRequest", "RunnerError", "unknown_model"]


class RunnerError(TierlmError):
    """A backend failed: a model that cannot be loaded, a server that broke.

    The message names the model and the cause; it fails only the job that hit it.
    A gateway answers 500 (502 in front of an upstream: ``UpstreamError``).
    """

    code = "backend_error"

    def __init__(self, message: str, *, model_id: str | None = None) -> None:
        self.model_id = model_id
        super().__init__(message)


class DeviceCrashed(RunnerError):
    """The process running the model died under this job (a native crash, the
    OOM killer, the watchdog's kill of a stalled worker) and was restarted.

    Nothing the job asked for caused it, as far as anyone knows yet, so the
    shell re-queues the job once, to continue from its partial output; a job
    that cannot resume fails with this (docs/design.md §4.9 (re-queue after a crash))."""


class CrashedTwice(DeviceCrashed):
    """The device crashed a second time under this job, which had been
    re-admitted alone among the jobs of the first crash: it is taken for the
    cause, fails, and is not tried again; the others of that crash continue
    (docs/design.md §4.9 (re-queue after a crash)). 500: the backend broke on it,
    not a request proven invalid."""

    code = "worker_crashed_twice"

    @classmethod
    def of(cls, job_id: int, crash: DeviceCrashed) -> CrashedTwice:
        """The error of job ``job_id``, whose second crash was ``crash``."""
        return cls(
            f"the device crashed twice while running this request (job {job_id}), the second "
            f"time when it was re-admitted alone of the first crash's jobs: it is taken for "
            f"the cause and not tried again; the second crash: {crash}",
            model_id=crash.model_id,
        )


class InvalidRequest(RunnerError):
    """The request asks for something the runner cannot do as asked: a JSON
    schema its grammar cannot express, a token id its vocabulary does not have.
    The request's fault, not the backend's: the gateway answers 400 naming
    ``param`` (the request field, dotted: ``response_format.json_schema.schema``)."""

    status_hint = 400
    code = "invalid_request"

    def __init__(
        self, message: str, *, param: str | None = None, model_id: str | None = None
    ) -> None:
        self.param = param
        super().__init__(message, model_id=model_id)


def unknown_model(model_id: str, known: Iterable[str]) -> RunnerError:
    """The error every runner raises for a model id it was not configured with."""
    return RunnerError(
        f"model {model_id!r}: not configured on this runner (known: {', '.join(sorted(known))})",
        model_id=model_id,
    )
