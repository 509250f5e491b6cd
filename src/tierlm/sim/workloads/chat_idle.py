"""``chat-idle``: the chat page left open, nobody typing, a job on another model.

The person chats for about a minute on ``m1`` and leaves the chat page open
(foreground ``chat``) for the rest of the hour. A Gana round on a second
model, ``m2``, arrives 10 s after the last reply, then every 20 minutes. The
open chat page holds the device on the chat's model (docs/design.md §4.8: no swap away while the
chat surface is open), but not forever: the
person stopped typing, and the device is otherwise idle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from tierlm.sim.context import SimContext
from tierlm.sim.jobspec import JobSpec
from tierlm.sim.story import Story, class_wait
from tierlm.sim.workload import Workload
from tierlm.sim.workloads.producers import GANA_OUTPUT, GANA_PROMPT, chat_session

__all__ = ["ChatIdle"]

AFTER_CHAT = 10.0  # the first round arrives this long after the last reply
EVERY = 1200.0


class ChatIdle(Workload):
    name = "chat-idle"
    description = (
        "a minute of chat, then the chat page left open for an hour; a Gana round on "
        "another model arrives 10 s after the last reply, then every 20 min"
    )
    default_duration = 3600.0

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        quiet = asyncio.Event()
        return [self._person(sim, quiet), self._rounds(sim, quiet)]

    async def _person(self, sim: SimContext, quiet: asyncio.Event) -> None:
        sim.set_foreground("chat")
        await chat_session(sim, sim.rng("person"), messages=3, think=(8.0, 15.0))
        quiet.set()  # the last reply is in; the page stays open

    async def _rounds(self, sim: SimContext, quiet: asyncio.Event) -> None:
        rng = sim.rng("gana:translate")
        await quiet.wait()
        at = sim.now() + AFTER_CHAT
        while True:
            await sim.sleep_until(at)
            sim.submit(
                JobSpec(
                    "gana",
                    "m2",
                    rng.randint(*GANA_PROMPT),
                    rng.randint(*GANA_OUTPUT),
                    producer="gana:translate",
                )
            )
            at += EVERY

    def story(self) -> Story:
        return Story(
            "longest wait of a Gana round on m2", class_wait("gana"), 200.0, False, percent=False
        )
