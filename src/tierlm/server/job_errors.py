"""What a client is told when its job ended without an answer.

In OpenAI's error format, with the status an OpenAI client acts on correctly: a
client mistake is 4xx (not retried), a stalled upstream 504, a server that
shuts down 503. A message never shows what only the operator should see (an
upstream's address: ``BackendSettings.public``); the log has the full error.
"""

from __future__ import annotations

import logging

from tierlm.runners.http import UpstreamTimeout
from tierlm.runners.protocol import Cancelled, CancelReason, InvalidRequest, RunnerError
from tierlm.server.errors import APIError, internal_error
from tierlm.server.jobs import GatewayJob
from tierlm.server.shutdown import shutting_down

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
    except InvalidRequest as exc:
        # Found only as it ran (most are refused when the prompt is counted).
        return APIError(400, str(exc), param=exc.param, code="invalid_request")
    except UpstreamTimeout as exc:
        return APIError(
            504,
            gateway.settings.backend.public(f"backend: {exc}"),
            code="upstream_timeout",
            type="server_error",
        )
    except RunnerError as exc:
        backend = gateway.settings.backend
        upstream = backend.capabilities.upstream
        return APIError(
            502 if upstream else 500,
            backend.public(f"backend: {exc}"),
            code="backend_error",
            type="server_error",
        )
    except Exception as exc:
        # Its text may hold paths or URLs: logged, not answered.
        logger.error("job %d failed", job.id, exc_info=exc)
        return internal_error()
    return None
