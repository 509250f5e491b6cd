"""The cluster: R tierlms on simulated devices behind a router, virtual and on Ray.

Runs ``tierlm.sim.virtual_cluster``'s cluster (one virtual-time loop,
deterministic) with tierlm's router (``tierlm.cluster.rank`` on routing stats
polled every 10 s, as Ray Serve polls them) and with Ray Serve's default
router (power of two choices on the live queue lengths, model-blind), and
records:

- swaps over 10 minutes at 60 % load for 1..2R models (at most R models at
  once: two waves when there are more), and with 2R models all at once
  (where any router must rotate models on a device);
- a chat's first-token wait on m0 under a 170 % background flood with queues
  capped at 30 per class, and the requests refused (429);
- refusals while some replica still had room (should be none);
- a replica removed at t = 300 s: the jobs lost against its queue then.

With ``--ray``, the same questions on a real local Ray Serve (127.0.0.1):
3 replicas behind the ingress, tierlm's router and Ray's default one in the
same run (bench/_lib/cluster_ray.py): a chat's first token through a rolling
update, swaps, a chat's first token under a flood, and a replica killed
under load. ``--ray-scale`` stretches its phases (1 = 30 s steady before the
rollout, then 60 + 40 + 30 s per router); ``--ray-phases rollout`` runs only
the rolling update (into cluster_ray_rollout.json).

    python bench/cluster.py [--replicas 3] [--seed 1] [--ray [--ray-scale 1] [--ray-phases ...]]

Writes cluster.json (and cluster_ray.json with --ray) to the results folder
(bench/_lib/results.py) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from _lib.results import load_now, machine, results_file
from tierlm.sim.virtual_cluster import background, chats, run_cluster
from tierlm.testing import run_virtual

RESULTS = results_file("cluster")
ROUTERS = ("tierlm", "p2c")
DURATION = 600.0


def swaps(replicas: int, seed: int, waves: bool) -> list[dict[str, Any]]:
    rows = []
    models_range = range(1, 2 * replicas + 1) if waves else range(replicas + 1, 2 * replicas + 1)
    for models in models_range:
        arrivals = background(models, replicas, load=0.6, duration=DURATION, seed=seed, waves=waves)
        row: dict[str, Any] = {"models": models, "jobs": len(arrivals), "bound": models + 2}
        for router in ROUTERS:
            result = run_virtual(
                run_cluster(arrivals, replicas=replicas, router=router, until=900.0, seed=seed)
            )
            row[router] = result.swaps
        rows.append(row)
    return rows


def flood(replicas: int, seed: int) -> dict[str, Any]:
    arrivals = background(replicas, replicas, load=1.7, duration=DURATION, seed=seed) + chats(
        "m0", every=20.0, duration=DURATION
    )
    out: dict[str, Any] = {"background_load": 1.7, "queue_limit": 30, "chats": 30}
    for router in ROUTERS:
        result = run_virtual(
            run_cluster(
                arrivals, replicas=replicas, router=router, until=700.0, queue_limit=30, seed=seed
            )
        )
        waits = result.waits("chat")
        out[router] = {
            "chat_first_token_p50_s": round(statistics.median(waits), 3),
            "chat_first_token_max_s": round(max(waits), 3),
            "chats_refused": sum(1 for a in result.refused if a.class_name == "chat"),
            "background_refused": sum(1 for a in result.refused if a.class_name != "chat"),
            "refused_while_a_replica_had_room": result.refused_while_open,
            "swaps": result.swaps,
        }
    return out


def lost_replica(replicas: int, seed: int) -> dict[str, Any]:
    arrivals = background(replicas, replicas, load=1.0, duration=DURATION, seed=seed)
    out: dict[str, Any] = {"removed": "r1", "at_s": 300.0, "load": 1.0}
    for router in ROUTERS:
        result = run_virtual(
            run_cluster(
                arrivals,
                replicas=replicas,
                router=router,
                until=1500.0,
                remove=(300.0, "r1"),
                seed=seed,
            )
        )
        out[router] = {
            "its_queue_then": result.lost_expected,
            "lost": result.lost,
            "others_failed": result.others_failed,
            "unfinished": result.unfinished,
            "swaps": result.swaps,
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--ray", action="store_true", help="also on a real local Ray Serve")
    parser.add_argument("--ray-only", action="store_true", help="only on Ray")
    parser.add_argument("--ray-scale", type=float, default=1.0)
    parser.add_argument(
        "--ray-phases",
        default="rollout,swaps,flood,kill",
        help="the Ray phases to run, comma-separated (cluster_ray_<phases>.json when not all)",
    )
    parser.add_argument(
        "--ray-routers",
        default="tierlm,ray_default",
        help="the routers to run the Ray phases with, comma-separated",
    )
    args = parser.parse_args()
    if args.ray or args.ray_only:
        phases, routers = (frozenset(a.split(",")) for a in (args.ray_phases, args.ray_routers))
        ray_main(args.ray_scale, args.seed, phases, routers)
        if args.ray_only:
            return 0
    load_before = load_now()
    started = time.perf_counter()
    data = {
        "what": __doc__.split("\n\n")[0],
        "replicas": args.replicas,
        "seed": args.seed,
        "device": {"token_interval_s": 0.05, "swap_s": 10.0, "job_tokens": 40},
        "stats_period_s": 10.0,
        "routers": {
            "tierlm": "tierlm.cluster.rank on polled routing stats + placements since",
            "p2c": "power of two choices on live queue length (Ray Serve's default router)",
        },
        "swaps_vs_models_at_most_R_active": swaps(args.replicas, args.seed, waves=True),
        "swaps_vs_models_all_active": swaps(args.replicas, args.seed, waves=False),
        "chat_under_flood": flood(args.replicas, args.seed),
        "lost_replica": lost_replica(args.replicas, args.seed),
        "machine": machine(load_before),
    }
    data["wall_seconds"] = round(time.perf_counter() - started, 1)
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")
    console = Console()
    table = Table(title=f"swaps in 10 min, {args.replicas} replicas, 60 % load")
    for column in ("models", "active at once", "tierlm", "p2c (Ray default)", "bound M+2"):
        table.add_column(column)
    for key, label in (
        ("swaps_vs_models_at_most_R_active", "<= R"),
        ("swaps_vs_models_all_active", "all"),
    ):
        for row in data[key]:
            table.add_row(
                str(row["models"]), label, str(row["tierlm"]), str(row["p2c"]), str(row["bound"])
            )
    console.print(table)
    console.print_json(json.dumps({k: data[k] for k in ("chat_under_flood", "lost_replica")}))
    console.print(f"written {RESULTS} in {data['wall_seconds']} s")
    return 0


def ray_main(scale: float, seed: int, phases: frozenset[str], routers: frozenset[str]) -> None:
    from _lib import cluster_ray

    unknown = phases - cluster_ray.PHASES
    if unknown:
        raise SystemExit(
            f"--ray-phases: unknown {sorted(unknown)}; of {sorted(cluster_ray.PHASES)}"
        )
    load_before = load_now()
    started = time.perf_counter()
    data: dict[str, Any] = {
        "what": "bench/_lib/cluster_ray.py: " + cluster_ray.__doc__.splitlines()[0],
        "command": "python bench/cluster.py " + " ".join(sys.argv[1:]),
    }
    data.update(cluster_ray.run(scale, seed, phases, routers))
    data["python"] = platform.python_version()
    data["machine"] = machine(load_before)
    data["wall_seconds"] = round(time.perf_counter() - started, 1)
    every = phases == cluster_ray.PHASES
    name = "cluster_ray" if every else "cluster_ray_" + "_".join(sorted(phases))
    path = results_file(
        name if routers == cluster_ray.ALL else f"{name}_{'_'.join(sorted(routers))}"
    )
    path.write_text(json.dumps(data, indent=2) + "\n")
    table = Table(title="on Ray Serve: 3 replicas, 3 models (sim devices)")
    table.add_column("")
    for router in ("tierlm", "ray_default"):
        if router in data:
            table.add_column(router)
    rows = [
        ("swaps at 60 % load", "swaps", "swaps"),
        ("background latency p50 (s)", "swaps", "job_latency_p50_s"),
        ("chat first token p50 (s), flood", "flood", "chat_first_token_p50_s"),
        ("chat first token p95 (s), flood", "flood", "chat_first_token_p95_s"),
        ("kill: requests on the replica", "kill", "requests_placed_on_it"),
        ("kill: of those completed", "kill", "of_those_completed"),
        ("kill: failed, all", "kill", "all_failed"),
        ("rollout: chat first token p95 steady (s)", "rollout", "chat_first_token_p95_steady_s"),
        ("rollout: chat first token p95 during (s)", "rollout", "chat_first_token_p95_during_s"),
        ("rollout: requests failed", "rollout", "failed"),
        ("rollout: chats that waited for a swap", "rollout", "chats_that_waited_for_a_swap_during"),
    ]
    rows += [
        (label.replace("rollout", "rollout after kills"), "rollout_after_kills", key)
        for label, phase, key in rows
        if phase == "rollout"
    ]
    for label, phase, key in rows:
        if phase in data["tierlm"]:
            ran = (r for r in ("tierlm", "ray_default") if r in data)
            table.add_row(label, *(str(data[r][phase][key]) for r in ran))
    Console().print(table)
    Console().print(f"written {path} in {data['wall_seconds']} s")


if __name__ == "__main__":
    raise SystemExit(main())
