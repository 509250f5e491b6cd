"""Keyless streams: eight requests as a plain OpenAI client sends them, against
the same eight as background producers, through one `tierlm serve` (real
SmolLM2-135M-Instruct, default 8 slots), in the same run (docs/design.md §4.7 (rule 3)).

A request with no ``X-Tierlm-*`` header is of the default class, ``chat``: a
person. The chat latency guard used to cut the batch around each person, so
eight keyless streams were served one at a time (0.49x ``llama-server -np 8``,
first token p50 19-20 s), while the same streams as background producers ran at
0.94-0.99x. The ratio keyless / background, measured alternately in one run, is
what this reports; ``bench/vs_llama_server.py`` measures background against
``llama-server`` itself.

It also times one person's chat (64 tokens, keyless) on the idle gateway and
among the eight streams as background producers, once they all stream: its
first token and its tokens/s among them over alone (targets: <= 1.5x in 4 of
5 repeats, >= 0.8x), a new message each time (nothing cached for either).

    python bench/keyless_streams.py [--streams 8] [--repeats 2] [--chats 5] [--threads 1]

Writes keyless_streams.json to the results folder (bench/_lib/results.py).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import time
from typing import Any

import httpx

from _lib.gateway.server import Server
from _lib.results import load_now, machine, results_file
from _lib.streamed_chat import read_chat

TOKENS = 256
NO_END = {"0": -100, "2": -100}  # SmolLM2's end tokens: every stream runs its length


def story(i: int, content: str = "Tell me a long story, number {i}.") -> dict[str, Any]:
    """A streamed request of ``TOKENS`` (``CHAT_TOKENS`` for the chat), its
    end banned so that it runs its length; usage in the last chunk."""
    return {
        "model": "smollm2-135m",
        "messages": [{"role": "user", "content": content.format(i=i)}],
        "max_tokens": TOKENS,
        "temperature": 0.0,
        "logit_bias": NO_END,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def run_streams(url: str, streams: int, keyless: bool) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=None) as client:
        firsts: list[float] = []

        async def one(i: int) -> int:
            body = story(i)
            headers = {} if keyless else {"X-Tierlm-Class": "gana", "X-Tierlm-Producer": f"a{i}"}
            read = await read_chat(client, url, body, headers)
            firsts.append(read.first - read.sent)
            return read.tokens

        started = time.perf_counter()
        counts = await asyncio.gather(*(one(i) for i in range(streams)))
        elapsed = time.perf_counter() - started
    return {
        "tokens_per_s": sum(counts) / elapsed,
        "first_token_p50_s": statistics.median(firsts),
        "first_token_max_s": max(firsts),
    }


CHAT_TOKENS = 64


CHATS = itertools.count(1)
READS = 3.0
"""Seconds the person reads between their chats (docs/design.md §4.11)."""


async def one_chat(client: httpx.AsyncClient, url: str) -> dict[str, float]:
    """A person's chat (keyless): its first token at the client and its
    tokens/s from the first token on. Each is a new message (as a person's
    next one is): alone and among the streams alike, no answer is cached."""
    text = f"Write a short poem about the sea, number {next(CHATS)}."
    body = story(0, text) | {"max_tokens": CHAT_TOKENS}
    # A chat app of its own (its User-Agent): the eight keyless streams before
    # it, sent alongside each other, made python-httpx a program (§4.11).
    read = await read_chat(client, url, body, {"User-Agent": "chat-app/1.0"})
    return {
        "first_token_s": read.first - read.sent,
        "tokens_per_s": (read.tokens - 1) / (read.end - read.first),
    }


async def chat_among(url: str, streams: int) -> dict[str, float]:
    """The chat alone, then among ``streams`` background streams (all of
    them streaming when it is sent)."""
    async with httpx.AsyncClient(timeout=None) as client:
        alone = await one_chat(client, url)
        started: set[int] = set()
        all_started = asyncio.Event()

        async def stream(i: int) -> None:
            body = story(i)
            headers = {"X-Tierlm-Class": "gana", "X-Tierlm-Producer": f"a{i}"}
            async with client.stream(
                "POST", f"{url}/v1/chat/completions", json=body, headers=headers
            ) as reply:
                reply.raise_for_status()
                async for line in reply.aiter_lines():
                    if line.startswith("data: {") and i not in started:
                        started.add(i)
                        if len(started) == streams:
                            all_started.set()

        background = [asyncio.create_task(stream(i)) for i in range(streams)]
        await all_started.wait()
        # The person reads their last answer first: a message sent less than
        # a second after it is no person's (docs/design.md §4.11).
        await asyncio.sleep(READS)
        among = await one_chat(client, url)
        await asyncio.gather(*background)
    return {
        "alone_first_token_s": alone["first_token_s"],
        "among_first_token_s": among["first_token_s"],
        "first_token_among_over_alone": among["first_token_s"] / alone["first_token_s"],
        "alone_tokens_per_s": alone["tokens_per_s"],
        "among_tokens_per_s": among["tokens_per_s"],
        "tokens_per_s_among_over_alone": among["tokens_per_s"] / alone["tokens_per_s"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--chats", type=int, default=5, help="repeats of the chat among streams")
    args = parser.parse_args()
    load_before = load_now()
    server = Server(["--n-threads", str(args.threads), "--log-level", "warning"])
    server.start()
    runs: dict[str, list[dict[str, float]]] = {"keyless": [], "background": [], "chat": []}
    try:
        for repeat in range(args.repeats):
            # Alternate which goes first: the machine is shared and noisy.
            order = ("keyless", "background") if repeat % 2 == 0 else ("background", "keyless")
            for kind in order:
                result = asyncio.run(run_streams(server.url, args.streams, kind == "keyless"))
                runs[kind].append(result)
                print(kind, {k: round(v, 2) for k, v in result.items()}, flush=True)
        for _ in range(args.chats):
            chat = asyncio.run(chat_among(server.url, args.streams))
            runs["chat"].append(chat)
            print("a chat", {k: round(v, 3) for k, v in chat.items()}, flush=True)
    finally:
        server.stop()
    ratios = [
        k["tokens_per_s"] / b["tokens_per_s"]
        for k, b in zip(runs["keyless"], runs["background"], strict=True)
    ] or [float("nan")]  # --repeats 0: the chats alone
    data = {
        "what": __doc__.splitlines()[0],
        "streams": args.streams,
        "tokens_per_stream": TOKENS,
        "runs": runs,
        "keyless_over_background_median": statistics.median(ratios),
        "chat_first_token_among_over_alone_median": statistics.median(
            c["first_token_among_over_alone"] for c in runs["chat"]
        ),
        "chats_within_1_5x_idle": sum(
            c["first_token_among_over_alone"] <= 1.5 for c in runs["chat"]
        ),
        "chat_tokens_per_s_among_over_alone_median": statistics.median(
            c["tokens_per_s_among_over_alone"] for c in runs["chat"]
        ),
        "machine": machine(load_before, threads=args.threads),
    }
    out = results_file("keyless_streams")
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"keyless / background: {statistics.median(ratios):.2f}; wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
