"""A person's chat during a running batch waits for its first token as during
any background work (docs/design.md §4.6: a chat preempts background work at
its next token boundary). Measured in tokens of the simulated device, against
a baseline taken in the same test: the same chats beside background requests
held open over HTTP."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.payloads import MESSAGES
from tests.server.batch_helpers import chat_line, start, wait_batch
from tests.server.helpers import Gateway, serve, sim_settings

TOKEN = 0.02  # seconds a token: the wait is read in these
CHATS = 5


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Gateway]:
    raw = {"backend": {"token_interval": TOKEN}, "batches": {"data_dir": str(tmp_path)}}
    with serve(sim_settings(raw)) as g:
        yield g


def first_token_waits(gw: Gateway, busy: Callable[[dict[str, object]], bool]) -> list[float]:
    """Time to first token of ``CHATS`` chats, each sent while background work
    runs (``busy`` on the state), in tokens."""
    waits = []
    chat = gw.openai()
    for _ in range(CHATS):
        gw.wait(busy, "background work running")
        answer = chat.chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=1)
        waited = (answer.model_extra or {})["tierlm"]["time_to_first_token"]
        waits.append(waited / TOKEN)
    return waits


def running_producer(prefix: str) -> Callable[[dict[str, object]], bool]:
    def check(state: dict[str, object]) -> bool:
        running = state["running"]
        return isinstance(running, dict) and str(running["producer"]).startswith(prefix)

    return check


def test_a_chat_during_a_batch_waits_as_during_any_background(gw: Gateway) -> None:
    background = gw.openai(X_Tierlm_Class="nataraj", X_Tierlm_Producer="http")
    held = [
        gw.background(
            lambda: background.chat.completions.create(
                model="sim-a", messages=MESSAGES, max_tokens=60
            )
        )
        for _ in range(4)
    ]
    over_http = first_token_waits(gw, running_producer("http"))
    for future in held:
        future.result()

    batch = start(gw.openai(), [chat_line(i, max_tokens=60) for i in range(8)])
    during_batch = first_token_waits(gw, running_producer("batches/"))
    gw.openai().batches.cancel(batch.id)
    wait_batch(gw.openai(), batch.id)

    # The chat preempts at the next token boundary: about a token, either way.
    assert statistics.median(during_batch) <= statistics.median(over_http) + 1.0, (
        during_batch,
        over_http,
    )
    assert statistics.median(during_batch) <= 3.0, during_batch
