"""Each replica, reached without the request router.

The ingress's operations (``/health``, ``/metrics``, the scheduler API, the
dashboard) must reach every replica, or one named replica, whatever router
the deployment runs: Ray's default or any other knows nothing of a
``replica=`` argument, and a call it places lands on any replica. So these
calls go by Serve's ``DeploymentHandle.broadcast``: one call to each running
replica (the router's replica set, not its choice), and the answer of each
is awaited on its own, with a timeout of its own. A frozen replica (SIGSTOP,
a wedged event loop) then costs its timeout and shows as silent; it does
not hold the answers of the others (docs/distributed.md "Health").

``broadcast`` hands back its per-replica results only together
(``results_async``, which loses every answer when one times out): the one
step this module takes past Serve's public API is the list of per-replica
results behind it (``_fetch_replica_results_async``, Ray 2.60; the extra
pins the minor version, and a test runs it on a real Ray).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ray.serve.exceptions import DeploymentUnavailableError

__all__ = ["Reach", "each_replica", "one_replica"]


@dataclass
class Reach:
    """What one broadcast brought back: ``answers`` from the replicas that
    answered in time, ``silent`` replicas that did not answer within the
    timeout, ``failed`` the errors of the calls that raised (a replica that
    died under the call)."""

    answers: list[dict[str, Any]] = field(default_factory=list)
    silent: int = 0
    failed: list[str] = field(default_factory=list)

    @property
    def sent(self) -> int:
        return len(self.answers) + self.silent + len(self.failed)


async def _results(handle: Any, call: str, kwargs: dict[str, Any]) -> list[Any]:
    """The per-replica results of one broadcast (module docstring); [] when no
    replica runs."""
    try:
        response = handle.broadcast(call, **kwargs)
        results: list[Any] = await response._fetch_replica_results_async()
    except DeploymentUnavailableError:
        return []
    return results


async def each_replica(handle: Any, call: str, timeout_s: float, /, **kwargs: Any) -> Reach:
    """The replicas' method ``call(**kwargs)`` on every running replica at
    once; each answer waited for ``timeout_s`` at most, so the whole takes no
    longer (plus the fan-out itself)."""
    results = await asyncio.wait_for(_results(handle, call, kwargs), timeout_s)
    reach = Reach()

    async def one(result: Any) -> None:
        try:
            answer = await asyncio.wait_for(result.get_async(), timeout_s)
        except TimeoutError:
            reach.silent += 1
        except Exception as exc:  # the replica died under the call
            reach.failed.append(f"{type(exc).__name__}: {exc}"[:300])
        else:
            reach.answers.append(answer)

    await asyncio.gather(*(one(r) for r in results))
    return reach


async def one_replica(
    handle: Any,
    call: str,
    timeout_s: float,
    wanted: Callable[[dict[str, Any]], bool],
    /,
    **kwargs: Any,
) -> dict[str, Any] | None:
    """``call(**kwargs)`` on every running replica, and the first answer
    ``wanted`` (the named replica's: the others answer at once that they are
    not it); None when every replica answered otherwise, or none wanted
    answered within ``timeout_s``."""
    results = await asyncio.wait_for(_results(handle, call, kwargs), timeout_s)
    tasks = [asyncio.ensure_future(r.get_async()) for r in results]
    try:
        for done in asyncio.as_completed(tasks, timeout=timeout_s):
            try:
                answer: dict[str, Any] = await done
            except TimeoutError:
                return None  # as_completed's own: the time is up
            except Exception:  # a replica that died under the call: not it
                continue
            if wanted(answer):
                return answer
    finally:
        for task in tasks:
            task.cancel()
    return None
