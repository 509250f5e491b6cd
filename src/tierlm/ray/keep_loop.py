"""The ingress's keeper at work: it looks at the fleet and asks for keeps
(``tierlm.ray.keeping`` decides; this reaches the replicas, by broadcast)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from tierlm.ray.keeping import Keeper
from tierlm.ray.reach import each_replica

__all__ = ["keep_watch", "stop_order_of"]

logger = logging.getLogger("tierlm.ray")

_controller: list[Any] = []


async def stop_order_of(replicas: Any) -> list[str] | None:
    """The running replicas of ``replicas`` (a deployment handle) in the
    order a rolling update stops them: Serve's controller lists a
    deployment's replicas by state, its running ones in the order they came
    to run, and stops an old version's in that order (Ray 2.60's
    ``DeploymentState``: ``_stop_or_update_outdated_version_replicas`` pops
    them from the same list). The one step past Serve's public API besides
    ``tierlm.ray.reach``'s (the controller's details, which Serve's REST API
    serves; the extra pins Ray's minor version). None when it cannot be read."""
    try:
        import ray
        from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

        if not _controller:
            _controller.append(ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE))
        details = await _controller[0].get_serve_instance_details.remote()
        app = details["applications"][replicas.app_name]
        listed = app["deployments"][replicas.deployment_name]["replicas"]
    except Exception:
        _controller.clear()  # a new controller, maybe: look it up again
        return None
    state = "RUNNING"
    return [
        str(r["replica_id"])
        for r in listed
        if str(getattr(r["state"], "value", r["state"])) == state
    ]


async def keep_watch(replicas: Any, keeper: Keeper, timeout_s: float) -> None:
    """Look at the replicas' routing stats every ``Keeper.period`` (the first
    look at once: an ingress started in the middle of an update) and ask a
    replica to keep each model persons use when ``keeper`` says so; each
    replica's answer waited for ``timeout_s`` at most. Runs until cancelled."""
    first = True
    while True:
        if not first:
            await asyncio.sleep(keeper.period(time.time()))
        first = False
        try:
            reach = await each_replica(replicas, "record_routing_stats", timeout_s)
        except Exception as exc:  # no look this time
            logger.warning("the keeper could not read the replicas' stats: %s", exc)
            continue
        stats = {str(a["replica"]): a for a in reach.answers if isinstance(a, dict)}
        complete = reach.silent == 0 and not reach.failed
        order = await stop_order_of(replicas) if keeper.in_use(time.time()) else None
        for keep in keeper.look(stats, complete, time.time(), order):
            if keep.for_s > 0:
                logger.info(
                    "asking replica %s to keep %s loaded for persons (%.0f s)",
                    keep.replica,
                    keep.model,
                    keep.for_s,
                )
            else:
                logger.info("replica %s keeps %s no more: another does", keep.replica, keep.model)
            with contextlib.suppress(Exception):
                await each_replica(
                    replicas,
                    "keep",
                    timeout_s,
                    replica=keep.replica,
                    model=keep.model,
                    for_s=keep.for_s,
                )
