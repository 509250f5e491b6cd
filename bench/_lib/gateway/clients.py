"""bench/gateway_load.py's load generator: the clients of both variants.

The in-process variant calls ``Scheduler.generate`` from one task per request;
the gateway variant streams chat completions over HTTP with httpx (the
background requests from this process, the chats from a process of their own,
see ``chat_clients``). Each client fills its ``Record``; ``run_inprocess`` and
``run_gateway`` release them all at once and return the raw records and costs
that bench/_lib/gateway/stats.py summarises.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import time
from collections.abc import Sequence
from dataclasses import fields
from multiprocessing.connection import Connection
from typing import Any

import httpx

from _lib.gateway.plan import MESSAGES, MODEL, Record, Spec, check
from _lib.gateway.server import SERVER_START_TIMEOUT, Server, scrape, server_view
from _lib.gateway.stats import LagProbe
from tierlm.runners.cancellation import Cancelled
from tierlm.server.serve_cli import add_arguments, settings_from_args
from tierlm.server.settings.backends import make_runner
from tierlm.shell.scheduler import Scheduler

# Lead time between creating the client tasks and releasing them, so creating
# 530 tasks is not inside anyone's measured time.
LEAD = 0.3
# Per-request HTTP timeouts: a queued stream gets a position comment at least
# every 0.25 s while the queue moves, so a 60 s silence is a hang.
HTTP_TIMEOUT = httpx.Timeout(connect=30.0, read=60.0, write=30.0, pool=60.0)


async def sleep_until(when: float) -> None:
    delay = when - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


# -- the in-process variant ------------------------------------------------------


async def inprocess_client(
    scheduler: Scheduler, spec: Spec, tokens: int, release: float, rec: Record
) -> None:
    await sleep_until(release + spec.offset)
    rec.start = time.perf_counter()
    try:
        stream = scheduler.generate(
            spec.class_name, MODEL, messages=MESSAGES, max_tokens=tokens, producer=spec.producer
        )
        async with contextlib.aclosing(stream):
            async for piece in stream:
                if rec.first is None:
                    rec.first = time.perf_counter()
                rec.tokens += 1
                rec.text.append(piece)
    except Cancelled as exc:
        rec.error = f"Cancelled({exc.reason.value})"
    except asyncio.CancelledError:
        rec.error = "unfinished at the hard timeout"
        raise
    except Exception as exc:
        rec.error = type(exc).__name__
    finally:
        rec.end = time.perf_counter()
    check(rec, tokens)


async def run_inprocess(
    serve_argv: list[str], specs: Sequence[Spec], tokens: int, budget: float
) -> dict[str, Any]:
    # The gateway's own construction (Gateway.start): same runner, classes, config.
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    settings = settings_from_args(parser.parse_args(serve_argv))
    runner = make_runner(settings.backend)
    records = [Record(spec) for spec in specs]
    cpu_before = time.process_time()
    async with Scheduler(runner, settings.classes, settings.scheduler) as scheduler:
        # Warm-up, not measured: first-call costs (lazy imports, caches).
        async for _ in scheduler.generate("gana", MODEL, messages=MESSAGES, max_tokens=2):
            pass
        release = time.perf_counter() + LEAD
        tasks = [
            asyncio.create_task(inprocess_client(scheduler, s, tokens, release, r))
            for s, r in zip(specs, records, strict=True)
        ]
        probe = LagProbe()
        probe.start()
        timed_out = await wait_bounded(tasks, release + budget)
        loop_lag = await probe.stop()
        stats = scheduler.stats
    return {
        "records": records,
        "release": release,
        "timed_out": timed_out,
        "loop_lag": loop_lag,
        "bench_cpu_seconds": time.process_time() - cpu_before,
        "scheduler": {
            "preemptions": stats.preemptions,
            "requeues": stats.requeues,
            "completed": stats.completed,
            "cancelled": stats.cancelled,
            "failed": stats.failed,
            "swaps": stats.swaps,
        },
    }


async def wait_bounded(tasks: list[asyncio.Task[None]], deadline: float) -> bool:
    """Wait for every task until ``deadline``; cancel the rest. True if any was."""
    _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.perf_counter()))
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return bool(pending)


# -- the gateway variant ---------------------------------------------------------


async def gateway_client(
    client: httpx.AsyncClient,
    spec: Spec,
    tokens: int,
    release: float,
    rec: Record,
) -> None:
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": tokens, "stream": True}
    headers = {"X-Tierlm-Class": spec.class_name, "X-Tierlm-Producer": spec.producer}
    await sleep_until(release + spec.offset)
    rec.start = time.perf_counter()
    try:
        async with client.stream(
            "POST", "/v1/chat/completions", json=body, headers=headers
        ) as response:
            rec.headers_at = time.perf_counter()
            if response.status_code != 200:
                await response.aread()
                try:
                    code = response.json()["error"].get("code")
                except (ValueError, KeyError, TypeError, AttributeError):
                    code = None
                rec.error = f"HTTP {response.status_code}" + (f" {code}" if code else "")
                return
            done = await read_sse(response, rec)
        if rec.error is None and not done:
            rec.error = "stream ended without [DONE]"
    except asyncio.CancelledError:
        rec.error = "unfinished at the hard timeout"
        raise
    except httpx.HTTPError as exc:
        rec.error = type(exc).__name__
    except ValueError as exc:  # a data line that is not JSON
        rec.error = f"bad event: {exc}"
    finally:
        rec.end = time.perf_counter()
    check(rec, tokens)


async def read_sse(response: httpx.Response, rec: Record) -> bool:
    """Read a chat-completion stream into ``rec``; True if it ended with [DONE]."""
    async for line in response.aiter_lines():
        if not line:
            continue
        if line[0] == ":":
            rec.comments += 1
            # ": tierlm queued job=.. tier=.. position=.." / ": tierlm running job=.."
            if rec.running_at is None and line.startswith(": tierlm running"):
                rec.running_at = time.perf_counter()
            continue
        if not line.startswith("data: "):
            rec.error = rec.error or f"unexpected line {line[:40]!r}"
            continue
        payload = line[6:]
        if payload == "[DONE]":
            return True
        event = json.loads(payload)
        if "error" in event:
            error = event["error"]
            rec.error = f"error event: {error.get('code') or error.get('type')}"
            continue
        for choice in event.get("choices", ()):
            content = (choice.get("delta") or {}).get("content")
            if content:
                if rec.first is None:
                    rec.first = time.perf_counter()
                rec.tokens += 1
                rec.text.append(content)
    return False


def chat_clients(url: str, specs: list[Spec], tokens: int, budget: float, conn: Connection) -> None:
    """The gateway variant's chat clients, in a process of their own.

    The 500 background streams keep the main event loop busy (reading ~4
    queue-position comments per token, and collecting their garbage): it stalls
    for tens of ms, at times hundreds. A chat timed on that loop would time the
    benchmark's own client; here the chats have a loop to themselves, as a chat
    UI would. ``time.perf_counter`` is CLOCK_MONOTONIC, one clock for every
    process, so the parent's release time and the records' times hold here too.
    """
    asyncio.run(_chat_clients(url, specs, tokens, budget, conn))


async def _chat_clients(
    url: str, specs: list[Spec], tokens: int, budget: float, conn: Connection
) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=HTTP_TIMEOUT) as client:
        warm = Record(Spec(-1, "gana", "warm-up (chat process)", 0.0))
        await gateway_client(client, warm.spec, 2, time.perf_counter(), warm)
        conn.send(warm.error)
        release: float = conn.recv()
        records = [Record(spec) for spec in specs]
        tasks = [
            asyncio.create_task(gateway_client(client, s, tokens, release, r))
            for s, r in zip(specs, records, strict=True)
        ]
        probe = LagProbe()
        probe.start()
        timed_out = await wait_bounded(tasks, release + budget)
        lag = await probe.stop()
    # Plain data, not Records: the parent copies these fields onto its own Records.
    names = [f.name for f in fields(Record) if f.name != "spec"]
    rows = [{name: getattr(r, name) for name in names} for r in records]
    conn.send((rows, timed_out, lag))


def receive(conn: Connection, timeout: float) -> Any:
    """The next message from a child, or TimeoutError / EOFError (it died)."""
    if not conn.poll(max(0.0, timeout)):
        raise TimeoutError(f"no answer within {timeout:.0f} s")
    return conn.recv()


async def run_gateway(
    server: Server, specs: Sequence[Spec], tokens: int, budget: float
) -> dict[str, Any]:
    records = [Record(spec) for spec in specs]
    background = [r for r in records if r.spec.class_name != "chat"]
    chats = [r for r in records if r.spec.class_name == "chat"]
    # spawn, not fork: this process has threads (the RSS sampler, the watchdog).
    mp = multiprocessing.get_context("spawn")
    ours, theirs = mp.Pipe()
    chat_proc = mp.Process(
        target=chat_clients,
        args=(server.url, [r.spec for r in chats], tokens, budget, theirs),
        daemon=True,
    )
    chat_proc.start()
    limits = httpx.Limits(
        max_connections=len(specs) + 16, max_keepalive_connections=len(specs) + 16
    )
    try:
        async with httpx.AsyncClient(
            base_url=server.url, limits=limits, timeout=HTTP_TIMEOUT
        ) as client:
            # Warm-up, not measured (first-request costs in every process).
            warm = Record(Spec(-1, "gana", "warm-up", 0.0))
            await gateway_client(client, warm.spec, 2, time.perf_counter(), warm)
            chat_warm = await asyncio.to_thread(receive, ours, SERVER_START_TIMEOUT)
            for error in (warm.error, chat_warm):
                if error is not None:
                    raise RuntimeError(f"warm-up request failed: {error}\n{server.tail()}")
            rss_idle = server.rss()
            cpu_server = server.cpu_seconds()
            cpu_bench = time.process_time()
            release = time.perf_counter() + LEAD
            ours.send(release)
            chat_result = asyncio.ensure_future(
                asyncio.to_thread(receive, ours, LEAD + budget + 10.0)
            )
            tasks = [
                asyncio.create_task(gateway_client(client, r.spec, tokens, release, r))
                for r in background
            ]
            probe = LagProbe()
            probe.start()
            timed_out = await wait_bounded(tasks, release + budget)
            loop_lag = await probe.stop()
            chat_lag: dict[str, Any] | None = None
            try:
                rows, chats_timed_out, chat_lag = await chat_result
                for record, row in zip(chats, rows, strict=True):
                    for name, value in row.items():
                        setattr(record, name, value)
                timed_out = timed_out or chats_timed_out
            except (TimeoutError, EOFError, OSError) as exc:
                for record in chats:
                    record.error = f"chat process: {type(exc).__name__}"
            cpu_bench = time.process_time() - cpu_bench
            cpu_server = server.cpu_seconds() - cpu_server
            try:
                metrics = (await client.get("/metrics", timeout=10.0)).text
                view = server_view(scrape(metrics))
            except httpx.HTTPError as exc:
                view = {"error": f"/metrics: {type(exc).__name__}"}
    finally:
        chat_proc.join(5.0)
        if chat_proc.is_alive():
            chat_proc.kill()
            chat_proc.join()
    return {
        "records": records,
        "release": release,
        "timed_out": timed_out,
        "loop_lag": loop_lag,
        "chat_process_loop_lag": chat_lag,
        "bench_cpu_seconds": cpu_bench,
        "server_cpu_seconds": cpu_server,
        "server_rss_idle_bytes": rss_idle,
        "server_view": view,
    }
