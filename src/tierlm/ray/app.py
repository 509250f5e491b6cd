"""Building the Serve application, and a local Ray bound to 127.0.0.1.

``build(settings, replicas=N)`` is the recipe of docs/distributed.md: N
``TierlmReplica`` (one per device: give each the device's resources with
``ray_actor_options``), routed by ``TierlmRequestRouter``, behind one
``TierlmIngress``. ``max_ongoing_requests`` is set above what tierlm itself
admits (every class's queue limit, twice for the keys' fair share, plus the
running job), so a request is never held in Ray's FIFO queue, which knows no
priority: tierlm answers 429 first.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tierlm.server.settings.sources import ServerSettings

__all__ = ["LOOPBACK_ENV", "build", "max_ongoing", "start_local"]

# Ray on Linux binds the host's address unless told it is a single machine
# (ray_constants.ENABLE_RAY_CLUSTER, read when ray is imported); no usage
# reports leave the machine.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def max_ongoing(settings: ServerSettings) -> int:
    """Above everything the replica's tierlm admits (module docstring)."""
    queued = sum(settings.queue_limit(name) for name in settings.classes)
    return 2 * queued + 16


def build(
    settings: Mapping[str, Any],
    *,
    replicas: int = 1,
    stats_period_s: float = 1.0,
    replica_options: Mapping[str, Any] | None = None,
) -> Any:
    """The Serve application (``serve.run(build(...))``). ``settings`` is the
    gateway's configuration as a dict; every replica runs it (its backend is
    the device's)."""
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    from tierlm.ray.ingress import TierlmIngress
    from tierlm.ray.replica import TierlmReplica
    from tierlm.ray.router import TierlmRequestRouter
    from tierlm.server.settings.sources import settings_from_dict

    parsed = settings_from_dict(dict(settings))
    limit = max_ongoing(parsed)
    router: dict[str, Any] = {
        "request_router_class": TierlmRequestRouter,
        "request_routing_stats_period_s": stats_period_s,
        "request_routing_stats_timeout_s": max(1.0, stats_period_s),
    }
    replica = serve.deployment(
        name="tierlm-replica",
        num_replicas=replicas,
        max_ongoing_requests=limit,
        ray_actor_options=dict(replica_options or {"num_cpus": 0}),
        request_router_config=RequestRouterConfig(**router),
    )(TierlmReplica)
    ingress = serve.deployment(
        name="tierlm-ingress",
        max_ongoing_requests=limit * max(1, replicas),
        ray_actor_options={"num_cpus": 0},
    )(TierlmIngress)
    return ingress.bind(replica.bind(dict(settings)), dict(settings))


def start_local(port: int, *, num_cpus: int = 2) -> None:
    """A one-machine Ray on 127.0.0.1 and Serve's HTTP proxy on ``port`` there.
    Set ``LOOPBACK_ENV`` before ray is first imported (this does, if it is not)."""
    for key, value in LOOPBACK_ENV.items():
        os.environ.setdefault(key, value)
    import ray
    from ray import serve

    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        configure_logging=False,
    )
    serve.start(http_options={"host": "127.0.0.1", "port": port})
