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

__all__ = ["keep_watch"]

logger = logging.getLogger("tierlm.ray")


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
        for keep in keeper.look(stats, complete, time.time()):
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
