"""Building the Serve application, and a local Ray bound to 127.0.0.1.

``build(args)`` is the recipe of docs/distributed.md, and a Serve application
builder: one argument (a dict, or ``FleetArgs``), so it is also an
``import_path`` of a Serve config file (``serve run`` / ``serve deploy``,
KubeRay's RayService) with ``args:`` beside it. It makes ``replicas``
``TierlmReplica`` (one per device: give each the device's resources with
``replica_options``, and its own settings with ``devices``), routed by
``TierlmRequestRouter``, behind ``ingress_replicas`` ``TierlmIngress``.

``max_ongoing_requests`` is set above what tierlm itself admits (every
class's queue limit, twice for the keys' fair share, plus the running job),
so a request is never held in Ray's FIFO queue, which knows no priority:
tierlm answers 429 first. ``graceful_shutdown_timeout_s`` covers the
gateway's own ``shutdown_grace`` plus the longest generation Serve waits for
when it stops a replica (a rolling update): a stream is not cut at Serve's
default 20 s.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from tierlm.ray.affinity import DEFAULT_AFFINITY_SLACK_S
from tierlm.ray.fleet_health import DEFAULT_OPS_TIMEOUT_S
from tierlm.ray.liveness import DEFAULT_STALL_AFTER_S

if TYPE_CHECKING:
    from tierlm.server.settings.sources import ServerSettings

__all__ = ["LOOPBACK_ENV", "FleetArgs", "build", "max_ongoing", "start_local"]

_log = logging.getLogger(__name__)

# Ray on Linux binds the host's address unless told it is a single machine
# (ray_constants.ENABLE_RAY_CLUSTER, read when ray is imported); no usage
# reports leave the machine.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
RAY_DEFAULT_ROUTER = "ray.serve._private.request_router:PowerOfTwoChoicesRequestRouter"
"""Ray Serve's default request router (``FleetArgs.request_router = "ray-default"``)."""
# Seconds Serve waits, when it stops a replica, beyond the gateway's own
# shutdown_grace: a long generation in flight finishes (default 20 s in Serve).
GENERATION_ALLOWANCE_S = 300.0


class FleetArgs(BaseModel):
    """The application's arguments (``args:`` of a Serve config file)."""

    model_config = ConfigDict(extra="forbid")

    settings: dict[str, Any] = Field(default_factory=dict)
    """The gateway's configuration (the TOML file's structure): every replica's."""
    replicas: int = Field(1, ge=1)
    """Replicas of tierlm: one per device."""
    autoscaling: dict[str, Any] | None = None
    """Serve's ``autoscaling_config`` of the tierlm replicas (``min_replicas``,
    ``max_replicas``, ``target_ongoing_requests``...), in place of a fixed
    ``replicas``: Serve adds a replica (a device) when the requests each one
    holds, queued ones included, pass the target; the ingress then moves
    queued requests to it (``tierlm.ray.moves``, docs/distributed.md
    "Autoscaling")."""
    devices: list[dict[str, Any]] = Field(default_factory=list)
    """Each replica's own settings, by Serve replica rank (0, 1, ...), merged
    into ``settings`` table by table: its model paths, its backend options."""
    replica_options: dict[str, Any] = Field(default_factory=lambda: {"num_cpus": 0})
    """Ray's ``ray_actor_options`` of each replica (``{"num_gpus": 1}``)."""
    ingress_replicas: int = Field(1, ge=1)
    """Replicas of the OpenAI-compatible ingress (Serve's proxy spreads the
    requests over them; each routes to every tierlm replica)."""
    stats_period_s: float = Field(1.0, gt=0)
    """Seconds between the router's reads of each replica's routing stats."""
    health_check_period_s: float = Field(10.0, gt=0)
    health_check_timeout_s: float = Field(30.0, gt=0)
    stall_after_s: float = Field(DEFAULT_STALL_AFTER_S, gt=0)
    """A replica with work waiting and no event nor token for this long is
    unhealthy (Serve replaces it)."""
    affinity_slack_s: float = Field(DEFAULT_AFFINITY_SLACK_S, ge=0)
    """A person's turn goes to the replica of their last turn (their KV is
    there) unless it would wait more than this longer there than on the best
    replica: about what evaluating their history again costs
    (``tierlm.ray.affinity``). 0: only when it is as good as the best."""
    ops_timeout_s: float = Field(DEFAULT_OPS_TIMEOUT_S, gt=0)
    """Each replica's answer to the ingress's /health, /ready and /metrics is
    waited for this long at most (a frozen replica costs this, and shows as
    ``not_answering``): keep a load balancer's probe timeout above it."""
    request_router: str | None = None
    """Another Serve ``RequestRouter`` (its import path; ``"ray-default"``:
    Ray's own, power of two choices); default: tierlm's. The operations
    endpoints work with any (they do not go through it)."""
    graceful_shutdown_timeout_s: float | None = Field(None, gt=0)
    """How long Serve waits for a stopping replica's requests; default: the
    gateway's ``shutdown_grace`` plus 300 s for the longest generation."""
    max_surge_percent: int = Field(0, ge=0, le=100)
    """Serve's ``max_surge_percent`` of the tierlm replicas: in a rolling
    update, this many more replicas (of ``replicas``, rounded up) start
    before old ones stop, so the model persons use is loaded on a new one
    before its holder stops. Each needs a spare device: without one, Serve
    waits for it and the update never ends. Default 0 (Serve's): an old
    replica stops, then its successor starts."""


def max_ongoing(settings: ServerSettings) -> int:
    """Above everything the replica's tierlm admits (module docstring)."""
    queued = sum(settings.queue_limit(name) for name in settings.classes)
    return 2 * queued + 16


def build(args: FleetArgs | Mapping[str, Any]) -> Any:
    """The Serve application (``serve.run(build({...}))``, or the import path
    ``tierlm.ray:build`` of a Serve config file): module docstring."""
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    from tierlm.ray.ingress import TierlmIngress
    from tierlm.ray.replica import TierlmReplica, device_settings
    from tierlm.ray.router import TierlmRequestRouter
    from tierlm.server.settings.sources import settings_from_dict

    fleet = args if isinstance(args, FleetArgs) else FleetArgs.model_validate(dict(args))
    parsed = settings_from_dict(fleet.settings)
    limit = max(
        [max_ongoing(parsed)]
        + [
            max_ongoing(settings_from_dict(device_settings(fleet.settings, fleet.devices, rank)))
            for rank in range(len(fleet.devices))
        ]
    )
    grace = fleet.graceful_shutdown_timeout_s
    if grace is None:
        grace = parsed.server.shutdown_grace + GENERATION_ALLOWANCE_S
    chosen = fleet.request_router
    router: dict[str, Any] = {
        "request_router_class": (
            RAY_DEFAULT_ROUTER if chosen == "ray-default" else chosen or TierlmRequestRouter
        ),
        "request_routing_stats_period_s": fleet.stats_period_s,
        "request_routing_stats_timeout_s": max(1.0, fleet.stats_period_s),
    }
    if chosen is None:
        router["request_router_kwargs"] = {"affinity_slack_s": fleet.affinity_slack_s}
    scaling: dict[str, Any] = (
        {"num_replicas": "auto", "autoscaling_config": dict(fleet.autoscaling)}
        if fleet.autoscaling is not None
        else {"num_replicas": fleet.replicas}
    )
    replica = serve.deployment(
        name="tierlm-replica",
        **scaling,
        max_ongoing_requests=limit,
        ray_actor_options=dict(fleet.replica_options),
        request_router_config=RequestRouterConfig(**router),
        health_check_period_s=fleet.health_check_period_s,
        health_check_timeout_s=fleet.health_check_timeout_s,
        graceful_shutdown_timeout_s=grace,
        max_surge_percent=fleet.max_surge_percent,
    )(TierlmReplica)
    ingress = serve.deployment(
        name="tierlm-ingress",
        num_replicas=fleet.ingress_replicas,
        max_ongoing_requests=limit * _most_replicas(fleet),
        ray_actor_options={"num_cpus": 0},
        graceful_shutdown_timeout_s=grace,
        # A new ingress starts before the old one stops (it needs no device):
        # with one ingress, Serve's default left none for the seconds the new
        # one took to start, and every request waited at the proxy.
        max_surge_percent=100,
    )(TierlmIngress)
    bound = replica.bind(fleet.settings, fleet.devices, fleet.stall_after_s)
    return ingress.bind(bound, fleet.settings, fleet.ops_timeout_s)


def _most_replicas(fleet: FleetArgs) -> int:
    """The most tierlm replicas the fleet runs (its autoscaling's maximum)."""
    if fleet.autoscaling is None:
        return fleet.replicas
    return max(fleet.replicas, int(fleet.autoscaling.get("max_replicas", 1)))


def start_local(port: int, *, num_cpus: int = 2, temp_dir: str | None = None) -> None:
    """A one-machine Ray on 127.0.0.1 and Serve's HTTP proxy on ``port`` there;
    its session folder (logs, sockets) under ``temp_dir`` (Ray's default:
    /tmp/ray). Set ``LOOPBACK_ENV`` before ray is first imported (this does,
    if it is not)."""
    for key, value in LOOPBACK_ENV.items():
        os.environ.setdefault(key, value)
    # Serve's proxy must answer its readiness check within 5 s (Ray's default);
    # on two busy cores (the suite beside CPU hogs) it missed it three times
    # and start-up failed. The processes ray.init starts inherit this.
    os.environ.setdefault("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "30")
    import ray
    from ray import serve

    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        configure_logging=False,
        _temp_dir=temp_dir,
    )
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
    except TimeoutError:
        # Serve waits a fixed 60 s for its HTTP proxy (HTTP_PROXY_TIMEOUT, no
        # setting); at load 10 on two cores it took longer, and every Ray test
        # of the suite failed at start-up. The controller and the proxy keep
        # starting: wait for the proxy ourselves, and say so.
        _wait_for_proxy(PROXY_START_LIMIT_S)


PROXY_START_LIMIT_S = 600.0
"""How long ``start_local`` waits for Serve's HTTP proxy past Serve's own 60 s
before it gives up: ten times Serve's figure, a machine ten times as busy."""


def _wait_for_proxy(limit: float) -> None:
    from ray import serve
    from ray.serve.schema import ProxyStatus

    _log.warning(
        "Serve's HTTP proxy is not ready after Serve's 60 s (a busy machine?); "
        "waiting up to %.0f s more",
        limit,
    )
    deadline = time.monotonic() + limit
    while True:
        proxies = serve.status().proxies
        if proxies and all(status == ProxyStatus.HEALTHY for status in proxies.values()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"Serve's HTTP proxy is not ready after {limit:.0f} s more than Serve's 60 s: "
                f"{dict(proxies)}"
            )
        time.sleep(1.0)
