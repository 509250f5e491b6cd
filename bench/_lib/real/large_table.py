"""bench/real_model.py's ``large`` section: its table.

Latencies in ms and in token intervals, the throughput share and the
scheduler's own cost, swap times, and what resume saved, from the results
``bench`` (bench/_lib/real/large.py) returns.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from rich.table import Table

from _lib.real.common import PRESET, TARGET_SHARE, THREADS, console


def print_table(r: dict[str, Any], seconds: float, load: tuple[float, float]) -> None:
    p = r["preemption"]
    interval = r["token_interval_ms"]
    table = Table(
        title=f"Real model: generated '{PRESET}' llama (8x1024, f16), llama.cpp worker process, "
        f"{THREADS} thread, {os.cpu_count()} cores (load average {load[0]:.1f} -> {load[1]:.1f}), "
        f"{seconds:.0f} s"
    )
    for column, justify in (("measure", "left"), ("p50", "right"), ("p99", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    table.add_column("", justify="left")

    def latency(name: str, key: str, note: str = "") -> None:
        v = p[key]
        table.add_row(
            name,
            f"{v['p50_ms']:.1f} ms = {v['p50_intervals']:.2f} tok",
            f"{v['p99_ms']:.1f} ms = {v['p99_intervals']:.2f} tok",
            note,
        )

    table.add_row(
        "token interval (bare runner)",
        f"{interval:.1f} ms",
        "",
        f"{r['tokens_per_s']:.1f} tokens/s; in the trials: {p['interval_ms_p50']:.1f} ms p50",
    )
    n = p["trials"]
    latency("chat arrival -> preempt decision", "decision", f"{n} trials; p99 = max")
    latency("chat arrival -> background stopped", "stop", "runner stream ended, device free")
    latency("chat arrival -> background re-queued", "requeue")
    latency("chat arrival -> chat started", "chat_start", "the chat's wait for the device")
    latency(
        "chat arrival -> chat's first token",
        "first_token",
        f"incl. its own prompt: {p['chat_own_ttft_ms_p50']:.1f} ms p50 "
        f"(idle device: {r['idle_chat_ttft_ms']:.1f})",
    )
    t = r["throughput"]
    table.add_row(
        "throughput through scheduler / bare",
        f"{t['share_median']:.4f}",
        "",
        f"{t['pairs']} A/B pairs of {t['tokens_per_run']} tokens; mean {t['share_mean']:.3f} "
        f"+- {t['share_mean_ci95']:.3f}; target >= {TARGET_SHARE}: {t['target_met']}",
    )
    table.add_row(
        "  runner's time / caller's time, same run",
        f"{t['runner_share_median']:.4f}",
        f"min {t['runner_share_min']:.4f}",
        "the scheduler's own delay, without the machine's noise",
    )
    extra = t["loop_cpu_us_per_token_scheduler"] - t["loop_cpu_us_per_token_bare"]
    table.add_row(
        "  event-loop CPU per token, bare / sched.",
        f"{t['loop_cpu_us_per_token_bare']:.0f} / {t['loop_cpu_us_per_token_scheduler']:.0f} us",
        "",
        f"scheduler adds {extra:.0f} us a token: share >= {t['cpu_bound_share']:.4f}",
    )
    table.add_row(
        "  bare / scheduler tokens/s (median)",
        f"{statistics.median(t['bare_tokens_per_s']):.2f} / "
        f"{statistics.median(t['scheduler_tokens_per_s']):.2f}",
        "",
        "",
    )
    for pair, v in r["swaps_ms"].items():
        table.add_row(f"swap {pair}", f"{v['p50']:.0f} ms", f"{v['max']:.0f} ms", f"n={v['n']}")
    table.add_row("first load (a, page cache warm)", f"{r['first_load_ms']:.0f} ms", "", "")
    s = r["resume_vs_restart"]
    table.add_row(
        "resume: tokens kept per preemption",
        f"{s['tokens_kept_p50']:.0f}",
        "",
        f"total {s['tokens_kept_total']} kept; {s['tokens_discarded_total']} decoded "
        "after the cancel were dropped",
    )
    table.add_row(
        "resume: prefill, fresh vs resumed",
        f"{s['fresh_prefill_ms']:.0f} / {s['resumed_prefill_ms_p50']:.0f} ms",
        "",
        "prompt vs prompt + partial output",
    )
    table.add_row(
        "resume: device time saved per preemption",
        f"{s['time_saved_s_p50']:.2f} s",
        "",
        f"kept tokens x interval - extra prefill; total {s['time_saved_s_total']:.1f} s "
        f"(full run {s['full_run_s']:.2f} s vs resumed run {s['resumed_run_s_p50']:.2f} s p50)",
    )
    table.add_row(
        "resumed text == uninterrupted greedy text",
        f"{p['resume_exact']}/{n}",
        "",
        f"chats exact {p['chat_exact']}/{n}",
    )
    console.print(table)
