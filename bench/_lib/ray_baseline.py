"""Ray Serve's default request router (power of two choices on the live queue
lengths, which knows no models), for bench/cluster.py --ray to compare with.

Only the generations are placed by it. The operations calls the bench reads
the replicas with (``/metrics`` through the ingress: a call for one named
replica, or the enumeration of the replicas) are placed as tierlm's router
places them, or the baseline could not be measured the same way. Serve
pickles this module by value (``RequestRouterConfig``): the replicas need not
import it.
"""

from __future__ import annotations

from typing import Any

from ray.serve._private.request_router.pow_2_router import PowerOfTwoChoicesRequestRouter
from ray.serve.request_router import PendingRequest, RunningReplica


class RayDefaultRouter(PowerOfTwoChoicesRequestRouter):  # type: ignore[misc]
    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        kwargs: dict[str, Any] = dict(pending_request.kwargs) if pending_request else {}
        if "model" in kwargs:
            return list(await super().choose_replicas(candidate_replicas, pending_request))
        if pending_request is not None:
            pending_request.routing_context.should_backoff = True
        by_name = {str(r.replica_id.unique_id): r for r in candidate_replicas}
        target = kwargs.get("replica")
        if target in by_name:
            return [[by_name[target]]]
        seen = set(kwargs.get("exclude", ()) or ())
        order = sorted(n for n in by_name if n not in seen) + sorted(
            n for n in by_name if n in seen
        )
        return [[by_name[n]] for n in order]
