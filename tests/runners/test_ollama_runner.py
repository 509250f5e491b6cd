"""OllamaRunner against a FAKE Ollama server.

Ollama itself cannot be installed from the package registries here, so these
tests run against ``fake_servers.py``, a small Starlette app that follows
Ollama's documented API (NDJSON streaming of ``/api/chat`` and
``/api/generate``, load/unload through ``keep_alive``, ``{"error": ...}``
answers). They prove the runner speaks that protocol; they cannot prove Ollama
behaves as documented.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from tests.helpers import HANG_GUARD
from tests.payloads import STORY
from tests.runners.helpers import disconnected, free_port, run
from tierlm.runners.cancellation import CancelReason, CancelToken
from tierlm.runners.errors import RunnerError
from tierlm.runners.ollama import OllamaRunner
from tierlm.runners.requests import GenerationRequest

if TYPE_CHECKING:
    from tests.runners.helpers import FakeServer


def words(start: int, stop: int) -> str:
    """The fake model's text: ``t{n} `` for each token n."""
    return "".join(f"t{i} " for i in range(start, stop))


async def collect(
    runner: OllamaRunner, request: GenerationRequest, *, cancel_after: int | None = None
) -> list[str]:
    token = CancelToken()
    pieces: list[str] = []
    async for piece in runner.generate(request, token):
        pieces.append(piece)
        if cancel_after is not None and len(pieces) == cancel_after:
            token.cancel(CancelReason.PREEMPTED)
    return pieces


def test_chat_and_generate_stream_one_piece_per_token(fake: FakeServer) -> None:
    async def main() -> None:
        async with OllamaRunner(fake.url) as runner:
            await runner.load("m1")
            request = GenerationRequest(
                model_id="m1", messages=STORY, max_tokens=12, temperature=0.2, stop=("END",)
            )
            pieces = await collect(runner, request)
            assert pieces == [f"t{i} " for i in range(12)]
            path, body = fake.state.requests[-1]
            assert path == "/api/chat"
            assert body["stream"] is True
            assert body["messages"] == STORY
            assert body["options"] == {"num_predict": 12, "temperature": 0.2, "stop": ["END"]}
            assert body["keep_alive"] == -1  # stays loaded until tierlm swaps it out

            prompt = GenerationRequest(
                model_id="m1", prompt="Once", max_tokens=5, extra={"top_p": 0.9, "system": "Be."}
            )
            assert "".join(await collect(runner, prompt)) == words(0, 5)
            path, body = fake.state.requests[-1]
            assert path == "/api/generate"
            assert body["prompt"] == "Once"
            assert body["system"] == "Be."  # a top-level field of the API
            assert body["options"] == {"num_predict": 5, "top_p": 0.9}

    run(main())


def test_swap_unloads_the_previous_model_then_loads_the_next(fake: FakeServer) -> None:
    async def main() -> None:
        async with OllamaRunner(fake.url, keep_alive="30m") as runner:
            await runner.load("m1")
            assert fake.state.loaded == {"m1": "30m"}
            await runner.load("m1")  # already loaded: nothing sent
            await runner.load("m2")
            assert (runner.loaded_model, runner.loads) == ("m2", 2)
            assert runner.last_load_seconds is not None
            assert fake.state.loaded == {"m2": "30m"}  # the device holds one model
            sent = [(path, body["model"], body["keep_alive"]) for path, body in fake.state.requests]
            assert sent == [
                ("/api/generate", "m1", "30m"),
                ("/api/generate", "m1", 0),  # explicit unload first
                ("/api/generate", "m2", "30m"),
            ]
            assert all("prompt" not in body for _, body in fake.state.requests)

    run(main())


def test_cancel_closes_the_stream_without_waiting_for_the_next_token(fake: FakeServer) -> None:
    """The ``stuck`` model sends one token and no other until the client
    leaves: the stream can only end if the cancel did not wait for a token."""

    async def main() -> None:
        async with OllamaRunner(fake.url) as runner:
            token = CancelToken()
            pieces: list[str] = []
            first = asyncio.Event()

            async def consume() -> None:
                request = GenerationRequest(model_id="stuck", messages=STORY, max_tokens=100)
                async for piece in runner.generate(request, token):
                    pieces.append(piece)
                    first.set()

            task = asyncio.create_task(consume())
            await first.wait()
            # From another thread, as a scheduler running elsewhere might.
            await asyncio.to_thread(token.cancel, CancelReason.PREEMPTED)
            async with asyncio.timeout(HANG_GUARD):
                await task
            assert pieces == ["t0 "]
            await disconnected(fake.state, "stuck")

    run(main())


@pytest.mark.parametrize(
    ("request_kw", "path"),
    [
        ({"messages": STORY}, "/api/chat"),
        ({"prompt": "Once", "extra": {"raw": True}}, "/api/generate"),
        ({"prompt": "Once"}, "/api/chat"),
    ],
    ids=["chat", "raw prompt", "templated prompt"],
)
def test_resume_continues_after_the_partial_text(
    fake: FakeServer, request_kw: dict[str, object], path: str
) -> None:
    async def main() -> None:
        async with OllamaRunner(fake.url) as runner:
            first = GenerationRequest(model_id="m1", max_tokens=10, **request_kw)
            partial = "".join(await collect(runner, first, cancel_after=4))
            assert partial == words(0, 4)
            resumed = GenerationRequest(
                model_id="m1",
                max_tokens=6,
                resume_text=partial,
                **request_kw,
            )
            rest = "".join(await collect(runner, resumed))
            assert partial + rest == words(0, 10)  # nothing lost, nothing repeated
            sent_path, body = fake.state.requests[-1]
            assert sent_path == path
            if path == "/api/chat":
                assert body["messages"][-1] == {"role": "assistant", "content": partial}
                assert body["messages"][0]["role"] == "user"
            else:
                assert body["prompt"] == "Once" + partial

    run(main())


@pytest.mark.parametrize(
    ("model", "pattern"),
    [
        ("missing", r"'missing'.*404 Not Found: model \"missing\" not found, try pulling it"),
        ("broken", r"'broken'.*broke the stream after 3 pieces"),
        ("erroring", r"'erroring'.*failed mid-stream: fake: the model runner crashed"),
    ],
)
def test_failures_name_the_model_and_the_cause(fake: FakeServer, model: str, pattern: str) -> None:
    async def main() -> None:
        async with OllamaRunner(fake.url) as runner:
            request = GenerationRequest(model_id=model, messages=STORY, max_tokens=10)
            with pytest.raises(RunnerError, match=pattern) as info:
                await collect(runner, request)
            assert info.value.model_id == model

    run(main())


def test_failed_load_names_the_model_and_leaves_nothing_loaded(fake: FakeServer) -> None:
    async def main() -> None:
        async with OllamaRunner(fake.url) as runner:
            await runner.load("m1")
            with pytest.raises(RunnerError, match=r"'missing': load failed.*404.*not found"):
                await runner.load("missing")
            assert runner.loaded_model is None  # m1 was unloaded first
            await runner.load("m2")
            assert runner.loaded_model == "m2"

    run(main())


def test_unreachable_server_is_named() -> None:
    async def main() -> None:
        url = f"http://127.0.0.1:{free_port()}"
        async with OllamaRunner(url) as runner:
            with pytest.raises(
                RunnerError, match=rf"'m1': cannot reach {url}/api/generate to load"
            ):
                await runner.load("m1")
            request = GenerationRequest(model_id="m1", messages=STORY, max_tokens=3)
            with pytest.raises(RunnerError, match=rf"'m1': cannot reach {url}/api/chat"):
                await collect(runner, request)

    run(main())
