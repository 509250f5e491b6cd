"""OpenAIRunner against a REAL llama-cpp-python server (``python -m llama_cpp.server``)
on 127.0.0.1 serving the generated models, plus the fake server of
``fake_servers.py`` for failures a real server does not produce on demand.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from tests.helpers import HANG_GUARD, wait_until
from tests.payloads import STORY
from tests.runners.helpers import disconnected, free_port, run
from tierlm.runners.cancellation import CancelReason, CancelToken
from tierlm.runners.errors import RunnerError
from tierlm.runners.openai_compat import OpenAIRunner, render_chat_template
from tierlm.runners.requests import GenerationRequest
from tierlm.testing.gguf_model import CHATML_TEMPLATE

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tests.runners.helpers import FakeServer, LlamaServer

# Greedy, and no repeat penalty (the server's default is 1.1, the runner's 1.0),
# so the server's text can be compared with the in-process runner's.
GREEDY: Mapping[str, object] = {"repeat_penalty": 1.0}


def chat(model: str = "a", max_tokens: int = 40, resume_text: str = "") -> GenerationRequest:
    return GenerationRequest(
        model_id=model,
        messages=STORY,
        max_tokens=max_tokens,
        temperature=0.0,
        resume_text=resume_text,
        extra=GREEDY,
    )


async def collect(
    runner: OpenAIRunner,
    request: GenerationRequest,
    *,
    cancel_after: int | None = None,
) -> list[str]:
    token = CancelToken()
    pieces: list[str] = []
    async for piece in runner.generate(request, token):
        pieces.append(piece)
        if cancel_after is not None and len(pieces) == cancel_after:
            token.cancel(CancelReason.PREEMPTED)
    return pieces


async def in_process_text(path: object, request: GenerationRequest) -> str:
    """The same request through LlamaCppRunner, for comparison."""
    from tierlm.runners.llama_cpp import LlamaCppRunner, LlamaModelSpec

    runner = LlamaCppRunner({request.model_id: LlamaModelSpec(str(path), n_threads=1)})
    await runner.load(request.model_id)
    pieces = [p async for p in runner.generate(request, CancelToken())]
    await runner.aclose()
    return "".join(pieces)


# -- against llama-cpp-python's server -----------------------------------------


@pytest.mark.llama
def test_chat_and_completion_stream_one_piece_per_token(llama_server: LlamaServer) -> None:
    async def main() -> None:
        async with OpenAIRunner(llama_server.url) as runner:
            await runner.load("a")
            assert runner.loaded_model == "a"
            pieces = await collect(runner, chat(max_tokens=40))
            assert len(pieces) == 40
            # The same tokens as the model run in-process: same template, same model.
            assert "".join(pieces) == await in_process_text(llama_server.models.a, chat())
            prompt = GenerationRequest(model_id="a", prompt="Once upon", max_tokens=25)
            assert len(await collect(runner, prompt)) == 25

    run(main())


@pytest.mark.llama
def test_client_that_goes_away_mid_stream_leaves_the_server_serving(
    llama_server: LlamaServer,
) -> None:
    async def main() -> None:
        async with OpenAIRunner(llama_server.url) as runner:
            await runner.load("a")
            # Cancel a long answer early: the stream is closed at once.
            token = CancelToken()
            pieces: list[str] = []
            async for piece in runner.generate(chat(max_tokens=1900), token):
                pieces.append(piece)
                if len(pieces) == 5:
                    token.cancel(CancelReason.PREEMPTED)
            assert len(pieces) == 5
            # A consumer that just stops reading (the stream is closed for it).
            stream = runner.generate(chat(max_tokens=1900), CancelToken())
            async for _ in stream:
                break
            await stream.aclose()  # type: ignore[attr-defined]
            # The server carries on: the next request is served in full.
            assert len(await collect(runner, chat(max_tokens=30))) == 30

    run(main())


@pytest.mark.llama
def test_resume_through_completions_continues_the_answer_exactly(
    llama_server: LlamaServer,
) -> None:
    async def main() -> None:
        runner = OpenAIRunner(llama_server.url, resume="completions", chat_template=CHATML_TEMPLATE)
        await runner.load("a")
        full = "".join(await collect(runner, chat(max_tokens=60)))
        partial = "".join(await collect(runner, chat(max_tokens=60), cancel_after=20))
        assert partial == full[:20]
        rest = await collect(runner, chat(max_tokens=40, resume_text=partial))
        assert len(rest) == 40
        assert partial + "".join(rest) == full
        await runner.aclose()

    run(main())


@pytest.mark.llama
def test_prefill_resume_is_a_new_turn_on_llama_cpp_python(llama_server: LlamaServer) -> None:
    """Documents why ``resume="completions"`` exists: llama-cpp-python's server
    closes a trailing assistant message and starts a new turn, so "prefill"
    resume does not continue the text there (llama-server and Ollama do)."""

    async def main() -> None:
        async with OpenAIRunner(llama_server.url, resume="prefill") as runner:
            await runner.load("a")
            full = "".join(await collect(runner, chat(max_tokens=60)))
            partial = full[:20]
            rest = "".join(await collect(runner, chat(max_tokens=40, resume_text=partial)))
            assert partial + rest != full
            # What it generated is the answer to a closed assistant turn.
            new_turn = render_chat_template(
                CHATML_TEMPLATE, [*STORY, {"role": "assistant", "content": partial}]
            )
            assert new_turn.endswith(f"{partial}<|im_end|>\n<|im_start|>assistant\n")
            request = GenerationRequest(
                model_id="a", prompt=new_turn, max_tokens=40, temperature=0.0, extra=GREEDY
            )
            assert rest == "".join(await collect(runner, request))

    run(main())


@pytest.mark.llama
def test_warmup_load_makes_the_server_swap_models(llama_server: LlamaServer) -> None:
    async def main() -> None:
        async with OpenAIRunner(llama_server.url, warmup=True) as runner:
            await runner.load("b")
            assert (runner.loaded_model, runner.loads) == ("b", 1)
            text_b = "".join(await collect(runner, chat("b")))
            assert text_b == await in_process_text(llama_server.models.b, chat("b"))
            await runner.load("a")
            assert (runner.loaded_model, runner.loads) == ("a", 2)
            assert "".join(await collect(runner, chat("a"))) != text_b

    run(main())


@pytest.mark.llama
def test_server_rejection_names_the_model_and_the_servers_message(
    llama_server: LlamaServer,
) -> None:
    async def main() -> None:
        async with OpenAIRunner(llama_server.url) as runner:
            bad = GenerationRequest(
                model_id="a", messages=STORY, max_tokens=5, extra={"temperature": "hot"}
            )
            with pytest.raises(
                RunnerError, match=r"(?s)model 'a'.*answered 500.*temperature.*valid number"
            ) as info:
                await collect(runner, bad)
            assert info.value.model_id == "a"

    run(main())


# -- errors and cancel timing, against the fake --------------------------------


def test_unreachable_server_is_named() -> None:
    async def main() -> None:
        url = f"http://127.0.0.1:{free_port()}"
        async with OpenAIRunner(url) as runner:
            with pytest.raises(RunnerError, match=rf"model 'a': cannot reach {url}/v1"):
                await collect(runner, chat())

    run(main())


@pytest.mark.parametrize(
    ("model", "pattern"),
    [
        ("missing", r"'missing'.*404 Not Found: The model `missing` does not exist"),
        ("broken", r"'broken'.*broke the stream after 3 pieces"),
        ("erroring", r"'erroring'.*failed mid-stream: fake: the model runner crashed"),
        ("nodone", r"'nodone'.*ended the stream after 8 pieces without finishing"),
    ],
)
def test_failing_server_fails_the_generation_with_model_and_cause(
    fake: FakeServer, model: str, pattern: str
) -> None:
    async def main() -> None:
        async with OpenAIRunner(fake.url) as runner:
            with pytest.raises(RunnerError, match=pattern) as info:
                await collect(runner, chat(model, max_tokens=16))
            assert info.value.model_id == model

    run(main())


def test_cancel_closes_the_stream_without_waiting_for_the_next_token(fake: FakeServer) -> None:
    """The ``stuck`` model sends one token and no other until the client
    leaves: the stream can only end if the cancel did not wait for a token."""

    async def main() -> None:
        async with OpenAIRunner(fake.url) as runner:
            token = CancelToken()
            pieces: list[str] = []
            first = asyncio.Event()

            async def consume() -> None:
                async for piece in runner.generate(chat("stuck", max_tokens=100), token):
                    pieces.append(piece)
                    first.set()

            task = asyncio.create_task(consume())
            await first.wait()
            token.cancel(CancelReason.PREEMPTED)
            async with asyncio.timeout(HANG_GUARD):
                await task
            assert pieces == ["t0 "]
            # The server sees the client go away (it would stop generating).
            await disconnected(fake.state, "stuck")

    run(main())


def test_prefill_resume_sends_the_partial_answer_as_an_assistant_message(
    fake: FakeServer,
) -> None:
    async def main() -> None:
        async with OpenAIRunner(fake.url, resume="continue_final_message") as runner:
            partial = "".join(await collect(runner, chat("m", max_tokens=10), cancel_after=4))
            assert partial == "t0 t1 t2 t3 "
            rest = "".join(await collect(runner, chat("m", max_tokens=6, resume_text=partial)))
            assert partial + rest == " ".join(f"t{i}" for i in range(10)) + " "
            path, body = fake.state.requests[-1]
            assert path == "/v1/chat/completions"
            assert body["messages"][-1] == {"role": "assistant", "content": partial}
            assert body["continue_final_message"] is True
            assert body["add_generation_prompt"] is False
            assert body["stream"] is True

    run(main())


def test_model_names_are_mapped_and_unknown_ids_rejected(fake: FakeServer) -> None:
    async def main() -> None:
        async with OpenAIRunner(fake.url, models={"small": "qwen2.5:0.5b"}) as runner:
            await runner.load("small")
            assert runner.loaded_model == "small"
            assert len(await collect(runner, chat("small", max_tokens=3))) == 3
            assert fake.state.requests[-1][1]["model"] == "qwen2.5:0.5b"
            with pytest.raises(RunnerError, match=r"'large'.*not configured.*small"):
                await runner.load("large")

    run(main())


def test_completions_mode_renders_the_chat_template_client_side(fake: FakeServer) -> None:
    async def main() -> None:
        runner = OpenAIRunner(fake.url, resume="completions", chat_template=CHATML_TEMPLATE)
        async with runner:
            await collect(runner, chat("m", max_tokens=3, resume_text="t0 "))
            path, body = fake.state.requests[-1]
            assert path == "/v1/completions"
            assert body["prompt"] == render_chat_template(CHATML_TEMPLATE, STORY) + "t0 "
            assert body["prompt"].endswith("<|im_start|>assistant\nt0 ")

    run(main())


def test_completions_mode_needs_a_template() -> None:
    with pytest.raises(ValueError, match="chat_template"):
        OpenAIRunner("http://127.0.0.1:1", resume="completions")


def test_warmup_load_asks_the_server_for_one_token(fake: FakeServer) -> None:
    async def main() -> None:
        async with OpenAIRunner(fake.url, warmup=True) as runner:
            await runner.load("m1")
            assert runner.loaded_model == "m1"
            path, body = fake.state.requests[-1]
            assert (path, body["model"], body["max_tokens"]) == ("/v1/chat/completions", "m1", 1)
            with pytest.raises(RunnerError, match=r"'missing'.*404"):
                await runner.load("missing")
            assert runner.loaded_model is None

    run(main())


def test_cancel_before_the_server_answers_at_all(fake: FakeServer) -> None:
    """A server evaluating a long prompt may not send even its headers yet;
    ``silent`` never does, so the call ends only because the cancel ended it."""

    async def main() -> None:
        async with OpenAIRunner(fake.url) as runner:
            token = CancelToken()
            before = silent_requests()

            async def cancel_once_it_arrived() -> None:
                # The request reached the server (a fixed delay may fire before
                # it does on a busy machine, and test nothing).
                await wait_until(lambda: silent_requests() != before, "the request to arrive")
                token.cancel(CancelReason.PREEMPTED)

            async with asyncio.timeout(HANG_GUARD):
                canceller = asyncio.create_task(cancel_once_it_arrived())
                assert await collect_with(runner, chat("silent"), token) == []
                await canceller
            await disconnected(fake.state, "silent")

    def silent_requests() -> int:
        return sum(body.get("model") == "silent" for _, body in list(fake.state.requests))

    run(main())


async def collect_with(
    runner: OpenAIRunner, request: GenerationRequest, token: CancelToken
) -> list[str]:
    return [piece async for piece in runner.generate(request, token)]


def test_a_preempted_tool_call_is_not_continued_upstream() -> None:
    """The server sent the call structured; continuing its text as a prefill
    would give it a half-written call it cannot read. A clear error instead."""
    from tierlm.runners.errors import RunnerError
    from tierlm.runners.ollama import OllamaRunner
    from tierlm.runners.requests import GenerationRequest

    tool = {"type": "function", "function": {"name": "f"}}
    request = GenerationRequest(
        model_id="m",
        messages=[{"role": "user", "content": "hi"}],
        resume_text='<tool_call>\n{"name": "f", "arguments": {',
        extra={"tools": [tool]},
    )
    for runner in (OpenAIRunner("http://127.0.0.1:9"), OllamaRunner("http://127.0.0.1:9")):
        with pytest.raises(RunnerError, match="preempted in the middle of a tool call"):
            runner.request_body(request)
    # Text answered with tools at hand resumes as usual.
    text = GenerationRequest(
        model_id="m",
        messages=[{"role": "user", "content": "hi"}],
        resume_text="It is",
        extra={"tools": [tool]},
    )
    path, body = OpenAIRunner("http://127.0.0.1:9").request_body(text)
    assert path == "/chat/completions" and body["messages"][-1]["content"] == "It is"
