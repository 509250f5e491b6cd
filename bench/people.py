"""Who is a person (docs/design.md §4.11), measured.

1. **The gateway** (``gateway``): the real app (``create_app``, the sim
   backend, 8 slots, 20 ms a token, as ``tierlm serve --backend sim --slots 8
   --token-interval 0.02``), driven by httpx through its ASGI interface in
   virtual time: deterministic, seconds to run. Eight background producers
   (``X-Tierlm-Class: gana``, a producer id each, one request at a time)
   alone, then beside 1, 2 and 8 keyless agent loops (the next request as
   soon as the answer ends), and beside a keyless person who reads 3-8 s
   between messages (keyless, behind a key, and naming themselves with the
   OpenAI ``user`` field). Each with the pacing judge (``keyless = auto``,
   the default) and with the rule before it (``keyless = person``), in the
   same run. Reported over four consecutive 30 s windows (median, worst):
   the producers' tokens in a window over alone, the device's tokens over
   alone (an answer's tokens spread over its decode, see ``Tally``), and the
   person's first token over the idle gateway's, in decode steps.
2. **The rule's errors** (``errors``): the judge alone (``core.people``) on
   built workloads, many seeds: people reading and typing (the
   keystroke-level model), people who type "continue" three times in a row,
   a chat front-end that sends a follow-up after each answer, agent loops with
   and without tool calls, fan-outs, a script that sleeps between calls.
   Reported: the share of people's messages judged a program's, and of
   programs' requests judged a person's.

    python bench/people.py [--seeds 20] [--window 30]

Writes people.json to the results folder (bench/_lib/results.py).
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import json
import random
import statistics
import tempfile
from collections.abc import Callable
from typing import Any, NamedTuple

import httpx

from _lib.results import load_now, machine, results_file
from tierlm.core.people import PeopleJudge
from tierlm.server.app import create_app
from tierlm.server.settings.sources import settings_from_dict
from tierlm.testing import run_virtual

TOKEN = 0.02
SLOTS = 8
PRODUCERS = 8
WARM_UP = 5.0
WINDOWS = 4
"""Consecutive measured windows after the warm-up: the median and the worst reported."""
KEY = "sk-bench"


def settings(keyless: str, keys: list[dict[str, Any]] | None = None) -> Any:
    return settings_from_dict(
        {
            "backend": {"kind": "sim", "slots": SLOTS, "token_interval": TOKEN},
            "server": {"sse_heartbeat": 600},
            "people": {"keyless": keyless},
            "keys": keys or [],
            # Never the user's own data directory (the Batch API's store).
            "batches": {"data_dir": tempfile.mkdtemp(prefix="tierlm-bench-people-")},
            "embeddings": {"backend": "none"},
        }
    )


def keyed_settings() -> Any:
    return settings("auto", [{"key": KEY, "name": "app", "classes": ["chat", "gana"]}])


def body(tokens: int, text: str = "hi", **more: Any) -> dict[str, Any]:
    return {
        "model": "sim-a",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": tokens,
        **more,
    }


class Tally:
    """What each kind of client was served, with an answer's tokens spread
    evenly between its first token and its end: a window counts what was
    decoded inside it, not the whole answers that happen to end in it (a
    50-token answer ends in lumps: eight producers in step make a 30 s
    window's count swing by 400 tokens)."""

    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = start, end
        self.spans: list[tuple[str, float, float, int]] = []
        self.first_tokens: list[float] = []
        self.served: dict[str, int] = {}

    def add(self, who: str, sent: float, when: float, reply: httpx.Response) -> None:
        if reply.status_code != 200:
            return
        data = reply.json()
        first = sent + data["tierlm"]["time_to_first_token"]
        self.spans.append((who, first, when, data["usage"]["completion_tokens"]))
        if self.start <= when < self.end:
            served = reply.headers.get("x-tierlm-served-as", "?").split(";")[0]
            self.served[served] = self.served.get(served, 0) + 1

    def tokens(self, start: float, end: float) -> dict[str, float]:
        """Each kind's tokens decoded in [start, end)."""
        out: dict[str, float] = {}
        for who, first, last, n in self.spans:
            if last <= first:
                share = 1.0 if start <= last < end else 0.0
            else:
                share = max(0.0, min(last, end) - max(first, start)) / (last - first)
            out[who] = out.get(who, 0.0) + n * share
        return out


async def scenario(
    app_settings: Any,
    agents: int,
    person: str | None,
    window: float,
    seed: int,
) -> dict[str, Any]:
    """One run: the producers, ``agents`` agent loops, maybe a person."""
    rng = random.Random(seed)
    app = create_app(app_settings)
    loop = asyncio.get_running_loop()
    async with app.router.lifespan_context(app):  # type: ignore[attr-defined]
        transport = httpx.ASGITransport(app=app)
        # Behind keys, every client has the key (the person's scenario "key").
        auth = {"Authorization": f"Bearer {KEY}"} if person == "key" else {}
        client = httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", timeout=600, headers=auth
        )
        t0 = loop.time()
        stop = t0 + WARM_UP + WINDOWS * window
        tally = Tally(t0 + WARM_UP, stop)

        async def producer(i: int) -> None:
            headers = {"X-Tierlm-Class": "gana", "X-Tierlm-Producer": f"agent{i}"}
            while loop.time() < stop:
                sent = loop.time()
                reply = await client.post(
                    "/v1/chat/completions", json=body(50, f"job {i}"), headers=headers
                )
                reply.raise_for_status()  # a refusal would spin at one virtual instant
                tally.add("producers", sent, loop.time(), reply)

        async def agent(i: int) -> None:
            headers = {"User-Agent": f"agent-framework-{i}/1.0"}
            while loop.time() < stop:
                sent = loop.time()
                reply = await client.post(
                    "/v1/chat/completions", json=body(30, f"step {i}"), headers=headers
                )
                tally.add("agents", sent, loop.time(), reply)

        async def reader(kind: str) -> None:
            headers = {"User-Agent": "chat-app/2.0"}
            more: dict[str, Any] = {}
            if kind == "user":
                more["user"] = "alice"
            await asyncio.sleep(WARM_UP)
            while loop.time() < stop:
                sent = loop.time()
                reply = await client.post(
                    "/v1/chat/completions", json=body(20, "hello", **more), headers=headers
                )
                tally.add("person", sent, loop.time(), reply)
                if tally.start <= loop.time() < tally.end:
                    tally.first_tokens.append(reply.json()["tierlm"]["time_to_first_token"])
                await asyncio.sleep(rng.uniform(3.0, 8.0))  # reads, then types

        tasks = [producer(i) for i in range(PRODUCERS)]
        tasks += [agent(i) for i in range(agents)]
        if person is not None:
            tasks.append(reader(person))
        await asyncio.gather(*tasks)
        await client.aclose()
    windows = [t0 + WARM_UP + i * window for i in range(WINDOWS + 1)]
    return {
        "tokens": [tally.tokens(a, b) for a, b in itertools.pairwise(windows)],
        "served": tally.served,
        "first_tokens": tally.first_tokens,
    }


async def idle_first_token(app_settings: Any) -> float:
    app = create_app(app_settings)
    async with app.router.lifespan_context(app):  # type: ignore[attr-defined]
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            reply = await client.post("/v1/chat/completions", json=body(20, "hello"))
            return float(reply.json()["tierlm"]["time_to_first_token"])


def shares(run: list[dict[str, float]], alone: list[dict[str, float]], who: str) -> list[float]:
    """Per window, ``who``'s tokens (all, for "device") over the producers' alone."""
    return [
        (sum(r.values()) if who == "device" else r.get(who, 0.0)) / a["producers"]
        for r, a in zip(run, alone, strict=True)
    ]


def spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def gateway(window: float, seed: int) -> dict[str, Any]:
    idle = run_virtual(idle_first_token(settings("auto")))
    rows: dict[str, Any] = {"idle_first_token": idle, "windows": WINDOWS, "window_s": window}
    for rule in ("auto", "person"):
        alone = run_virtual(scenario(settings(rule), 0, None, window, seed))["tokens"]
        for agents in (1, 2, 8):
            run = run_virtual(scenario(settings(rule), agents, None, window, seed))
            rows[f"{rule}/agents={agents}"] = {
                "producers_share": spread(shares(run["tokens"], alone, "producers")),
                "device_share": spread(shares(run["tokens"], alone, "device")),
                "fair_share": round(PRODUCERS / (PRODUCERS + agents), 3),
                "served": run["served"],
            }
        for kind in ("keyless", "key", "user"):
            app_settings = keyed_settings() if kind == "key" else settings(rule)
            run = run_virtual(scenario(app_settings, 0, kind, window, seed))
            firsts = run["first_tokens"]
            rows[f"{rule}/person={kind}"] = {
                "producers_share": spread(shares(run["tokens"], alone, "producers")),
                "first_token_max_steps_over_idle": round((max(firsts) - idle) / TOKEN, 2),
                "messages": len(firsts),
            }
    return rows


# -- the rule's errors on built workloads ------------------------------------


def klm_typing(rng: random.Random, keys: int) -> float:
    """Keystroke-level model: 1.35 s to decide, 0.2-0.28 s a keystroke."""
    return 1.35 + sum(rng.uniform(0.2, 0.28) for _ in range(keys + 1))


class Asked(NamedTuple):
    """One request of a built workload."""

    gap: float
    """Seconds since the last answer ended."""
    answer: float
    """Seconds its answer takes."""
    person: bool
    """A person's message (else a program's request)."""
    tool_result: bool = False
    """It carries a tool's result (an agent going on after a tool call)."""


Workload = Callable[[random.Random], list[Asked]]


def people_reading(rng: random.Random) -> list[Asked]:
    return [
        Asked(rng.lognormvariate(2.5, 0.8) + klm_typing(rng, rng.randint(2, 60)), 3.0, True)
        for _ in range(20)
    ]


def typing_continue(rng: random.Random) -> list[Asked]:
    # Reads nothing, types "continue" (8 keys) and Enter, three times in a row.
    return [Asked(klm_typing(rng, 8), rng.uniform(0.5, 4.0), True) for _ in range(4)]


def front_end(rng: random.Random) -> list[Asked]:
    out: list[Asked] = []
    for _ in range(10):
        out.append(Asked(rng.lognormvariate(2.0, 0.7) + klm_typing(rng, 20), 3.0, True))
        out.append(Asked(rng.uniform(0.01, 0.2), 0.5, False))  # its title / follow-ups call
    return out


def agent_loop(rng: random.Random) -> list[Asked]:
    return [Asked(rng.lognormvariate(-3.0, 1.0), rng.uniform(0.3, 3.0), False) for _ in range(30)]


def agent_with_tools(rng: random.Random) -> list[Asked]:
    """A quarter of its calls follow a tool call of 0.5-10 s and carry its result."""
    out = []
    for _ in range(30):
        tool = rng.random() < 0.25
        gap = rng.uniform(0.5, 10.0) if tool else rng.lognormvariate(-3.0, 1.0)
        out.append(Asked(gap, rng.uniform(0.3, 3.0), False, tool_result=tool))
    return out


def sleepy_script(rng: random.Random) -> list[Asked]:
    # A script that sleeps 2 s between calls: paces like a person (counted).
    return [Asked(2.0, rng.uniform(0.3, 1.0), False) for _ in range(20)]


WORKLOADS: dict[str, Workload] = {
    "people reading": people_reading,
    "typing continue x3": typing_continue,
    "front-end follow-ups": front_end,
    "agent loop": agent_loop,
    "agent with tool calls, pacing alone": agent_with_tools,
    "agent with tool calls": agent_with_tools,
    "script sleeping 2 s": sleepy_script,
}


def fan_out(judge: PeopleJudge, rng: random.Random) -> tuple[int, int]:
    """Four requests at once, then a pause of 2-5 s, ten times: programs."""
    now, wrong, total = 0.0, 0, 0
    for _ in range(10):
        for i in range(4):
            wrong += judge.arrived("fan", now + i * 0.001).person
            total += 1
        now += rng.uniform(0.5, 3.0)
        for _ in range(4):
            judge.ended("fan", now)
        now += rng.uniform(2.0, 5.0)
    return wrong, total


def invented_names(judge: PeopleJudge, rng: random.Random) -> tuple[int, int]:
    """A keyless client looping with a new ``user`` each request: programs."""
    now, wrong = 0.0, 0
    for i in range(40):
        wrong += judge.arrived(f"-|bot|u{i}|", now, client="-|bot").person
        now += rng.uniform(0.3, 3.0)
        judge.ended(f"-|bot|u{i}|", now)
        now += rng.lognormvariate(-3.0, 1.0)
    return wrong, 40


def front_end_people(judge: PeopleJudge, rng: random.Random, arrival: float) -> tuple[int, int]:
    """Thirty people behind one front-end (a ``user`` each), arriving
    ``arrival`` s apart on average (Poisson), each sending five messages and
    reading between them: persons."""
    events: list[tuple[float, int, bool]] = []  # (when, who, an answer's end)
    start = 0.0
    for person in range(30):
        start += rng.expovariate(1 / arrival)
        events.append((start, person, False))
    heapq.heapify(events)
    sent: dict[int, int] = {}
    wrong = total = 0
    while events:
        now, person, ended = heapq.heappop(events)
        identity = f"app|webui|p{person}|"
        if ended:
            judge.ended(identity, now)
            if sent[person] < 5:
                reads = rng.lognormvariate(2.5, 0.8) + klm_typing(rng, rng.randint(2, 60))
                heapq.heappush(events, (now + reads, person, False))
            continue
        wrong += not judge.arrived(identity, now, client="app|webui").person
        total += 1
        sent[person] = sent.get(person, 0) + 1
        heapq.heappush(events, (now + rng.uniform(1.0, 6.0), person, True))
    return wrong, total


def errors(seeds: int) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for name, workload in WORKLOADS.items():
        wrong = total = 0
        for seed in range(seeds):
            rng = random.Random(seed)
            judge, now = PeopleJudge(), 0.0
            # The judge told which requests carry a tool's result (the
            # gateway reads it off the last message) or, the row before it,
            # judging by pacing alone.
            told = not name.endswith("pacing alone")
            for i, (gap, answer, person, tool) in enumerate(workload(rng)):
                now += gap if i else 0.0
                verdict = judge.arrived("who", now, tool_result=told and tool)
                now += answer
                judge.ended("who", now)
                if person or not name.startswith(("people", "typing", "front")):
                    total += 1
                    wrong += verdict.person != person
        judged = "program" if name.startswith(("people", "typing", "front")) else "person"
        rows[name] = {f"judged_{judged}": round(wrong / total, 4), "requests": total}
    wrong = total = 0
    for seed in range(seeds):
        w, t = fan_out(PeopleJudge(), random.Random(seed))
        wrong, total = wrong + w, total + t
    rows["fan-out of 4"] = {"judged_person": round(wrong / total, 4), "requests": total}
    wrong = total = 0
    for seed in range(seeds):
        w, t = invented_names(PeopleJudge(), random.Random(seed))
        wrong, total = wrong + w, total + t
    rows["a new user each request"] = {
        "judged_person": round(wrong / total, 4),
        "requests": total,
    }
    for arrival in (10.0, 3.0, 1.0):
        wrong = total = 0
        for seed in range(seeds):
            w, t = front_end_people(PeopleJudge(), random.Random(seed), arrival)
            wrong, total = wrong + w, total + t
        rows[f"a front-end's people arriving {arrival:g} s apart"] = {
            "judged_program": round(wrong / total, 4),
            "requests": total,
        }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds of the error workloads")
    parser.add_argument("--window", type=float, default=30.0, help="measured seconds")
    parser.add_argument("--seed", type=int, default=7, help="the person's reading seed")
    args = parser.parse_args()
    load = load_now()
    result = {
        "gateway": gateway(args.window, args.seed),
        "errors": errors(args.seeds),
        "machine": machine(load, window=args.window, seeds=args.seeds),
    }
    path = results_file("people")
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
