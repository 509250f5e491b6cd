"""What a client is told when its job ended without an answer.

In OpenAI's error format, with the status an OpenAI client acts on correctly: a
client mistake is 4xx (not retried), a stalled upstream 504, a server that
shuts down 503. A message never shows what only the operator should see (an
upstream's address: ``BackendSettings.public``); the log has the full error.
"""

from __future__ import annotations

import logging

from tierlm.errors import TierlmError
from tierlm.runners.cancellation import Cancelled, CancelReason
from tierlm.server.edge.errors import APIError, api_error, internal_error
from tierlm.server.gateway.jobs import GatewayJob
from tierlm.server.gateway.shutdown import shutting_down

__all__ = ["job_error"]

logger = logging.getLogger("tierlm.server")


def job_error(job: GatewayJob) -> APIError | None:
    """The error to answer for an ended job, None if it completed."""
    gateway = job.gateway
    try:
        job.handle.result()
    except Cancelled as exc:
        if exc.reason is CancelReason.SHUTDOWN:
            return shutting_down("the job was cancelled")
        if exc.reason is CancelReason.PREEMPTED:
            retry = gateway.admission.retry_after(job.meta.class_name)
            return APIError(
                503,
                f"job {job.id} ({job.meta.class_name}) was preempted by higher-tier work and "
                "its class is not re-queued (requeue = false); retry",
                code="preempted",
                headers={"Retry-After": str(retry)},
            )
        return APIError(409, f"job {job.id} was cancelled", code="cancelled")
    except TierlmError as exc:
        # The error says what kind of failure it is (tierlm.errors): a request
        # the runner cannot do (400, found only as it ran: most are refused when
        # the prompt is counted), an upstream that failed (502) or stalled (504),
        # tierlm's or the device's fault (500).
        return api_error(exc, gateway.settings.backend.public)
    except Exception as exc:
        # Its text may hold paths or URLs: logged, not answered.
        logger.error("job %d failed", job.id, exc_info=exc)
        return internal_error()
    return None
