"""Real model: preemption latency, throughput share, swap time, and what resume saves.

docs/design.md §8. The real ``Scheduler`` drives ``LlamaCppRunner`` on two
generated ``large``-preset models (8 layers, hidden 1024, f16, ~170 MB, random
weights; ``tierlm.testing.gguf_model``), whose tokens take tens of ms like a
phone's on-device model. All in ONE run, so every figure is against the same
machine state:

1. Preemption latency. A greedy background generation (``sched.generate``,
   class nataraj) is running; a chat arrives at a random point (after a random
   number of tokens, plus a random fraction of a token interval so the arrival
   falls anywhere inside a decode). Measured from the chat's submission:
   the preemption decision (PREEMPTING event), the runner's stream ending (its
   worker has left the device), the re-queue (REQUEUED event) and the
   chat's first token. In ms and in token intervals of the same model measured
   in the same run. The background job then resumes; its text is compared with
   the uninterrupted run's.
2. Throughput through the scheduler (``sched.generate``) as a share of the bare
   runner's tokens/s on the same request, in many short interleaved pairs
   (A/B, B/A, ...) so that machine noise hits both alike; the median of the
   pairs' ratios. Target >= 0.98. On a shared machine one pair's ratio swings
   by +-10 % or more, so the scheduler's own cost is also measured within each
   scheduled run: the runner's time (its ``generate`` called to its last
   piece) over the caller's (``sched.generate`` called to the last piece).
3. Swap time per model pair (a->b, b->a), from the scheduler's swap events.
4. Work saved by resume vs restart: tokens kept per preemption (already
   produced; a restart would generate them again), and the device time that
   saves: kept tokens x the trial's token interval, minus the longer prompt
   evaluation (prompt + partial output) the resumed run pays. Also recorded:
   the resumed run's duration against an uninterrupted full run (what a
   restart would take), measured minutes apart and so noisier.

Threads: one (``LlamaModelSpec(n_threads=1)``). This machine has 2 cores and
is shared with other processes; llama.cpp's threads spin-wait on each other
after every operation, so with 2 threads one descheduled thread stalls the
other and decode speed swings wildly (LlamaModelSpec.n_threads documents ~150
falling to 5-90 tokens/s), while one thread is steady. Latency in token
intervals would mean little with intervals that jump.

5. (``isolation``, on the real SmolLM2-135M-Instruct Q4_1) tokens/s with the
   model in the runner's worker process against the same decode code in this
   process, interleaved pairs; target >= 0.98 (bench/_real_smollm2.py).
6. (``resume``, ``chats``, SmolLM2) KV snapshots: a resumed job's time from
   resume to its next token against its fresh prompt evaluation (~1 500-token
   prompt; target <= 0.2); background tokens/s under a chat every 10 s against
   the run without chats minus the chats' device time (target >= 0.9); state
   bytes, save and restore times; resume exactness (bench/_lib/real/kv.py).

    python bench/real_model.py [--sections large,isolation,resume,chats]
                               [--trials 20] [--tokens 120] [--pairs 30]
                               [--throughput-tokens 50] [--swaps 4]
                               [--isolation-pairs 30] [--isolation-tokens 100]
                               [--resume-trials 10] [--resume-prompt-tokens 1500]
                               [--chats-seconds 60] [--chats-streams 4] [--chat-every 10]
                               [--models DIR] [--seed 1]

Writes ./bench-results/real_model.json (one entry per section, each with its
time, settings and load average; a run of some sections keeps the others')
and prints a table per section. ``large`` takes ~3-4 minutes here (writing the
two models ~10 s; ``--models DIR`` keeps them for next time).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from _lib.real.common import console
from _lib.real.large import run_large
from _lib.real.smollm2_sections import run_chats, run_isolation, run_resume
from _lib.results import load_now, machine, results_file

RESULTS = results_file("real_model")


SECTIONS = ("large", "isolation", "resume", "chats")
"""``large``: sections 1-4 above on the generated models; ``isolation``: the
worker process vs in-process on SmolLM2 (bench/_real_smollm2.py); ``resume``
and ``chats``: KV snapshots on SmolLM2 (bench/_lib/real/kv.py)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated, of {', '.join(SECTIONS)} (default: all); the others "
        "keep their last results in the output file",
    )
    parser.add_argument("--trials", type=int, default=20, help="preemption trials")
    parser.add_argument("--tokens", type=int, default=120, help="background tokens per trial")
    parser.add_argument("--pairs", type=int, default=30, help="throughput A/B pairs")
    parser.add_argument("--throughput-tokens", type=int, default=50)
    parser.add_argument("--swaps", type=int, default=4, help="swaps per direction")
    parser.add_argument("--isolation-pairs", type=int, default=30, help="process/thread pairs")
    parser.add_argument("--isolation-tokens", type=int, default=100, help="tokens per run")
    parser.add_argument("--resume-trials", type=int, default=10, help="per mode")
    parser.add_argument("--resume-prompt-tokens", type=int, default=1500)
    parser.add_argument("--chats-seconds", type=float, default=60.0, help="per runner")
    parser.add_argument("--chats-streams", type=int, default=4, help="background agents")
    parser.add_argument("--chat-every", type=float, default=10.0, help="seconds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--models", type=Path, help="directory to keep the models in")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_before = load_now()
    if args.tokens < 40:
        parser.error("--tokens: at least 40")
    sections = [name.strip() for name in args.sections.split(",") if name.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown or not sections:
        parser.error(f"--sections: unknown {', '.join(unknown)}; known: {', '.join(SECTIONS)}")

    import llama_cpp

    report: dict[str, Any] = {}
    if args.out.exists():
        previous = json.loads(args.out.read_text())
        if "sections" in previous:  # keep what this run does not measure again
            report = previous
    report.update(
        {
            "benchmark": "real_model",
            "machine": machine(load_before, llama_cpp_python=llama_cpp.__version__),
        }
    )
    report.setdefault("sections", {})
    runners = {
        "large": run_large,
        "isolation": run_isolation,
        "resume": run_resume,
        "chats": run_chats,
    }
    for name in sections:
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        report["sections"][name] = {
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "settings": settings,
            **runners[name](args),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    console.print(f"written to {args.out}", style="dim")


if __name__ == "__main__":
    main()
