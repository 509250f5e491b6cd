"""``frequent-chat``: a chat every few seconds over 10 s agent rounds.

The person keeps the chat open and sends a message every ``chat_every``
seconds (default 13), open loop: prompts of 150-250 tokens, replies of 20-40
(~3 s on the default device). Two Ganas stay backlogged with closure rounds
of ``round_seconds`` (default 10 s) on average: three ``ctx.generate`` calls
in a row, each on the round's prompt (100 tokens on average), as an agent
round of three steps. Prompt and output sizes vary by ``spread`` either way
(default 40 %), as agent steps do; with ``spread=0`` every call takes the
same 3.3 s, and a 4 s slice of the fair pool (docs/design.md §4) then lands
in the second call's prompt evaluation about half the time, which shows what
cutting a prompt evaluation costs. Every chat
preempts a round; what that costs is what preemption wastes: a round that
restarts loses everything it did, one that replays its journal loses only the
interrupted call's re-evaluation or restore (docs/design.md §4.9). ``tierlm simulate --workload
frequent-chat --sweep
chat_every=5,10,15,20,25,30`` is the sweep of docs/design.md §8.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from typing import Any, ClassVar

from tierlm.sim.context import SimContext
from tierlm.sim.jobspec import JobSpec
from tierlm.sim.story import Story, wasted_share
from tierlm.sim.workload import Workload
from tierlm.sim.workloads.producers import backlogged

__all__ = ["FrequentChat"]

CHAT_PROMPT = (150, 250)
CHAT_OUTPUT = (20, 40)
ROUND_PROMPT = 100
ROUND_CALLS = 3


class FrequentChat(Workload):
    name = "frequent-chat"
    description = "a chat every 13 s (open loop) over two Ganas' backlogged 10 s agent rounds"
    default_duration = 1200.0
    parameters: ClassVar[Mapping[str, str]] = {
        "chat_every": "seconds between chat messages (default 13)",
        "round_seconds": "device seconds of one agent round of 3 calls (default 10)",
        "spread": "how much prompt and output sizes vary either way, a fraction (default 0.4)",
    }

    def __init__(
        self, chat_every: float = 13.0, round_seconds: float = 10.0, spread: float = 0.4
    ) -> None:
        if not chat_every > 0:
            raise ValueError(f"chat_every: must be > 0 seconds, got {chat_every!r}")
        if not round_seconds > 0:
            raise ValueError(f"round_seconds: must be > 0 seconds, got {round_seconds!r}")
        if not 0 <= spread < 1:
            raise ValueError(f"spread: must be a fraction in [0, 1), got {spread!r}")
        self.spread = spread
        self.chat_every = chat_every
        self.round_seconds = round_seconds

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        device = sim.device
        prompts = ROUND_CALLS * device.prefill_seconds(ROUND_PROMPT)
        output = (self.round_seconds - prompts) / device.token_interval
        rounds = [
            backlogged(
                sim,
                producer,
                outstanding=1,
                prompt=_spread(ROUND_PROMPT, self.spread, 1),
                output=_spread(output, self.spread, ROUND_CALLS),
                calls=ROUND_CALLS,
            )
            for producer in ("gana:a", "gana:b")
        ]
        return [self._chats(sim), *rounds]

    async def _chats(self, sim: SimContext) -> None:
        sim.set_foreground("chat")
        rng = sim.rng("chat")
        at = rng.uniform(0.0, self.chat_every)
        while True:
            await sim.sleep_until(at)
            sim.submit(
                JobSpec(
                    "chat",
                    "m1",
                    rng.randint(*CHAT_PROMPT),
                    rng.randint(*CHAT_OUTPUT),
                    producer="chat",
                    generation=True,
                )
            )
            at += self.chat_every

    def params(self) -> dict[str, Any]:
        return {
            "chat_every": self.chat_every,
            "round_seconds": self.round_seconds,
            "spread": self.spread,
        }

    def story(self) -> Story:
        return Story("wasted share of busy time", wasted_share, 0.05, False)


def _spread(mean: float, spread: float, least: int) -> tuple[int, int]:
    """Token counts within ``spread`` of ``mean`` either way, at least ``least``."""
    return max(least, round(mean * (1 - spread))), max(least, round(mean * (1 + spread)))
