"""The fleet's ``/health`` and ``/ready``, from what each replica answered.

A load balancer's probe of the ingress must not pull the whole fleet for
one bad replica (docs/distributed.md "Health"). So:

- **200 while at least one replica is live** (``/ready``: can serve now).
  ``status`` is ``ok`` (``ready``) when every replica is, else ``degraded``,
  with ``live_replicas`` (``ready_replicas``) of ``replicas_total``;
- **503 only when none is**: no replica runs, or none answered live;
- every replica has an entry: its own ``/health`` answer, or, for one that
  did not answer in time, ``not_answering`` (a frozen replica: Serve still
  counts it running until its health checks fail) and since when it is
  silent, or ``unreachable`` when the call failed (it died under it).

Pure: the answers, the silent replicas' names and the clock are arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tierlm.ray.roster import Seen

__all__ = ["DEFAULT_OPS_TIMEOUT_S", "fleet_health"]

DEFAULT_OPS_TIMEOUT_S = 2.0
"""Each replica's answer to /health, /ready, /metrics is waited for at most
this (``FleetArgs.ops_timeout_s``): well under a load balancer's probe
timeout (5 s is common; Kubernetes' default is 1 s: raise it, docs)."""


def fleet_health(
    path: str,
    answers: Mapping[str, tuple[int, Any]],
    missing: Sequence[tuple[str, str]],
    seen: Mapping[str, Seen],
    now: float,
) -> tuple[int, dict[str, Any]]:
    """The status and body of ``path`` (``/health`` or ``/ready``): ``answers``
    maps a replica to its status and decoded body; ``missing`` lists the
    replicas that gave none, with why (``not_answering``, ``unreachable``:
    the reason); ``seen`` when each was last heard from, on ``now``'s clock."""
    live = path == "/health"
    replicas: dict[str, Any] = {name: body for name, (_, body) in sorted(answers.items())}
    for name, why in missing:
        entry: dict[str, Any] = {"status": why.split(":", 1)[0], "reason": why}
        last = seen.get(name)
        if last is not None:
            entry["silent_for_s"] = round(max(0.0, now - last.at), 1)
            if last.pid is not None:
                entry["pid"] = last.pid
        replicas[name] = entry
    good = [name for name, (status, _) in answers.items() if status == 200]
    total = len(answers) + len(missing)
    count = "live_replicas" if live else "ready_replicas"
    if not good:
        reason = (
            "no replica runs" if total == 0 else "no replica is " + ("live" if live else "ready")
        )
        body = {"status": "unavailable", "reason": reason, count: 0, "replicas_total": total}
        return 503, {**body, "replicas": replicas}
    degraded = len(good) < total or any(
        isinstance(r, dict) and r.get("status") == "degraded" for r in replicas.values()
    )
    word = "degraded" if degraded else ("ok" if live else "ready")
    body = {"status": word, count: len(good), "replicas_total": total, "replicas": replicas}
    return 200, body
