"""Who is a person (docs/design.md §4.11), on the real default model.

``bench/people.py``'s table, through ``tierlm serve`` (SmolLM2-135M-Instruct,
its default 8 slots) over loopback, with httpx as the clients. Eight
background producers (``X-Tierlm-Class: gana``, a producer id each, one
streamed request at a time) run for the whole benchmark. Beside them, in
turn, ``--cycles`` times: 1, 2 and 8 keyless agent loops (the next request as soon as
the answer ends, a ``User-Agent`` each, as agent frameworks send), and a
keyless person who reads 3-8 s between messages, each window with company
between two windows alone, and compared with their mean (the machine is
shared: ratios in one run, never fixed figures; the median over cycles).

A request's tokens are spread evenly between its first token and its end, so
that a window counts what was decoded inside it, not whole answers that happen
to end in it. The first ``--settle`` seconds of a window are not counted:
an agent back after a window alone is judged afresh (its gap reads as a
person's, its first request served as one), and the queue fills.

Run with the pacing judge (``[people] keyless = auto``, the default) and with
the rule before it (``keyless = person``), each on a gateway of its own.

    python bench/people_real.py [--phase 25] [--cycles 3] [--threads 1] [--rules auto,person]
        [--company agents=8] [--settle 5] [--name people_real]

Writes people_real.json to the results folder (bench/_lib/results.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from _lib.gateway.server import Server
from _lib.results import load_now, machine, results_file
from _lib.streamed_chat import read_chat

MODEL = "smollm2-135m"
PRODUCERS = 8
PRODUCER_TOKENS = 64
AGENT_TOKENS = 32
PERSON_TOKENS = 32
SETTLE = 5.0
KINDS = ("agents=1", "agents=2", "agents=8", "person")
NO_END = {"0": -100, "2": -100}  # SmolLM2's end tokens: every answer runs its length


def body(tokens: int, text: str) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": tokens,
        "temperature": 0.0,
        "logit_bias": NO_END,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


@dataclass
class Span:
    """One answer: who asked, when it was sent, its first token, its end, its tokens."""

    who: str
    sent: float
    first: float
    end: float
    tokens: int
    served_as: str


@dataclass
class Log:
    spans: list[Span] = field(default_factory=list)

    def tokens(self, who: str, start: float, end: float) -> float:
        """``who``'s tokens decoded in [start, end), each answer's spread
        evenly over [first token, end]."""
        total = 0.0
        for s in self.spans:
            if s.who != who:
                continue
            if s.end <= s.first:
                total += s.tokens if start <= s.end < end else 0
                continue
            inside = max(0.0, min(s.end, end) - max(s.first, start))
            total += s.tokens * inside / (s.end - s.first)
        return total

    def decoding(self, who: str, start: float, end: float) -> float:
        """``who``'s sequence-seconds streaming in [start, end): each answer
        counted from its first token to its end (its prompt's evaluation
        before is left out; a pause, when the guard cuts the batch, is
        counted in). Against the others', the pool's split of the slots,
        which the machine's load does not move as it moves tokens/s."""
        return sum(
            max(0.0, min(s.end, end) - max(s.first, start)) for s in self.spans if s.who == who
        )


async def ask(
    client: httpx.AsyncClient, url: str, who: str, text: str, tokens: int, headers: dict[str, str]
) -> Span:
    read = await read_chat(client, url, body(tokens, text), headers)
    return Span(who, read.sent, read.first, read.end, read.tokens, read.served_as)


async def loop_of(
    client: httpx.AsyncClient,
    url: str,
    log: Log,
    who: str,
    tokens: int,
    headers: dict[str, str],
    stop: asyncio.Event,
    pause: tuple[float, float] | None = None,
    rng: random.Random | None = None,
) -> None:
    """Requests one after another until ``stop``; ``pause``: reads between them."""
    n = 0
    while not stop.is_set():
        log.spans.append(await ask(client, url, who, f"{who} step {n}: go on.", tokens, headers))
        n += 1
        if pause is not None and rng is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), rng.uniform(*pause))


async def idle_first_token(client: httpx.AsyncClient, url: str, repeats: int = 5) -> float:
    """A keyless person's first token on the idle gateway (median)."""
    firsts = []
    for i in range(repeats):
        span = await ask(client, url, "idle", f"Hello {i}", PERSON_TOKENS, {})
        firsts.append(span.first - span.sent)
    return statistics.median(firsts)


async def run_rule(
    url: str,
    phase: float,
    cycles: int,
    seed: int,
    settle: float = SETTLE,
    kinds: tuple[str, ...] = KINDS,
) -> dict[str, Any]:
    rng = random.Random(seed)
    log = Log()
    windows: list[tuple[str, float, float]] = []
    async with httpx.AsyncClient(timeout=None) as client:
        idle = await idle_first_token(client, url)
        stop_all = asyncio.Event()
        producers = [
            asyncio.create_task(
                loop_of(
                    client,
                    url,
                    log,
                    "producers",
                    PRODUCER_TOKENS,
                    {"X-Tierlm-Class": "gana", "X-Tierlm-Producer": f"p{i}"},
                    stop_all,
                )
            )
            for i in range(PRODUCERS)
        ]
        await asyncio.sleep(settle)

        async def window(name: str, company: list[asyncio.Task[None]], stop: asyncio.Event) -> None:
            start = time.perf_counter()
            await asyncio.sleep(phase)
            windows.append((name, start + settle, time.perf_counter()))
            stop.set()
            await asyncio.gather(*company)

        def company(name: str, stop: asyncio.Event) -> list[asyncio.Task[None]]:
            if name == "person":  # reads 3-8 s between messages
                headers = {"User-Agent": "chat-app/2.0"}
                return [
                    asyncio.create_task(
                        loop_of(
                            client, url, log, name, PERSON_TOKENS, headers, stop, (3.0, 8.0), rng
                        )
                    )
                ]
            agents = int(name.split("=")[1])
            return [
                asyncio.create_task(
                    loop_of(
                        client,
                        url,
                        log,
                        name,
                        AGENT_TOKENS,
                        {"User-Agent": f"agent-framework-{agents}-{i}/1.0"},
                        stop,
                    )
                )
                for i in range(agents)
            ]

        # Alone, then with company, ``cycles`` times each, the kinds of
        # company in turn: every window with company has an alone on either side.
        await window("alone", [], asyncio.Event())
        for _ in range(cycles):
            for name in kinds:
                stop = asyncio.Event()
                await window(name, company(name, stop), stop)
                await window("alone", [], asyncio.Event())
        stop_all.set()
        await asyncio.gather(*producers)

    def rate(who: str, a: float, b: float) -> float:
        return log.tokens(who, a, b) / (b - a)

    rows: dict[str, Any] = {"idle_first_token_s": round(idle, 3)}
    for i, (name, a, b) in enumerate(windows):
        if name == "alone":
            continue
        before, after = windows[i - 1], windows[i + 1]
        base = (rate("producers", *before[1:]) + rate("producers", *after[1:])) / 2
        row = rows.setdefault(
            name,
            {"producers_share": [], "device_share": [], "producers_slot_share": [], "served": {}},
        )
        row["producers_share"].append(round(rate("producers", a, b) / base, 3))
        row["device_share"].append(round((rate("producers", a, b) + rate(name, a, b)) / base, 3))
        held = log.decoding("producers", a, b)
        row["producers_slot_share"].append(round(held / (held + log.decoding(name, a, b)), 3))
    for name, row in rows.items():
        if name == "idle_first_token_s":
            continue
        for key in ("producers_share", "device_share", "producers_slot_share"):
            row[f"{key}_median"] = round(statistics.median(row[key]), 3)
        for span in log.spans:
            if span.who == name:
                row["served"][span.served_as] = row["served"].get(span.served_as, 0) + 1
    person = rows.get("person")
    if person is not None:
        firsts = [s.first - s.sent for s in log.spans if s.who == "person"]
        person["first_token_over_idle_s"] = {
            "p50": round(statistics.median(firsts) - idle, 3),
            "max": round(max(firsts) - idle, 3),
            "messages": len(firsts),
        }
    rows["spans"] = [
        [s.who, round(s.sent, 3), round(s.first, 3), round(s.end, 3), s.tokens, s.served_as]
        for s in log.spans
    ]
    rows["windows"] = [[name, round(a, 3), round(b, 3)] for name, a, b in windows]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", type=float, default=25.0, help="seconds per window")
    parser.add_argument("--cycles", type=int, default=3, help="windows of each kind of company")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rules", default="auto,person", help="[people] keyless settings")
    parser.add_argument("--seed", type=int, default=7, help="the person's reading seed")
    parser.add_argument("--settle", type=float, default=SETTLE, help="seconds not counted")
    parser.add_argument("--name", default="people_real", help="the results file's name")
    parser.add_argument(
        "--company", default=",".join(KINDS), help=f"kinds of company, of {', '.join(KINDS)}"
    )
    args = parser.parse_args()
    kinds = tuple(args.company.split(","))
    if unknown := set(kinds) - set(KINDS):
        parser.error(f"--company: {sorted(unknown)} unknown; accepted: {', '.join(KINDS)}")
    load_before = load_now()
    result: dict[str, Any] = {"what": __doc__.splitlines()[0]}
    for rule in args.rules.split(","):
        server = Server(
            ["--n-threads", str(args.threads), "--log-level", "warning", "--keyless-person", rule]
        )
        server.start()
        try:
            run = run_rule(server.url, args.phase, args.cycles, args.seed, args.settle, kinds)
            result[rule] = asyncio.run(run)
        finally:
            server.stop()
        print(rule, json.dumps(result[rule], indent=1), flush=True)
    result["machine"] = machine(
        load_before, phase=args.phase, cycles=args.cycles, threads=args.threads
    )
    result["command"] = ["python", "people_real.py", *sys.argv[1:]]
    out = results_file(args.name)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
