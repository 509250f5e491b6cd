"""A runner for any OpenAI-compatible server, streaming over HTTP.

llama.cpp's ``llama-server``, llama-cpp-python's ``llama_cpp.server``, vLLM,
LM Studio, Ollama's ``/v1`` and llama-swap all speak ``/v1/chat/completions``
and ``/v1/completions``. ``OpenAIRunner`` always streams (``stream: true``,
server-sent events): a server that is streaming notices a client that goes away,
whereas llama-cpp-python's server keeps generating a non-streamed answer nobody
will read.

Cancel closes the stream at once: each read of the next event races the cancel
token, so a cancel never waits for the server's next token, and closing the
connection tells the server to stop.

The device is the server's, so ``load`` cannot swap anything itself. By default
it only records the model (``loaded_model``, which the scheduler uses for
affinity); with ``warmup=True`` it also sends a one-token request, so that a
server which swaps models on demand (llama-swap, Ollama, LM Studio, or
llama-cpp-python's multi-model config) does the swap inside ``load``, where the
scheduler accounts for it, and not inside the next job.

Resume (``GenerationRequest.resume_text``) of a prompt is a completion of prompt
+ resume_text. Resume of a chat depends on the server; see ``ResumeMode``.

Every option in ``GenerationRequest.extra`` goes into the request body as it
is (``response_format``, ``tools``, ``tool_choice``, ``logit_bias``...): the
server honours it or answers an error. The server's streamed ``tool_calls``
come back as text in tierlm's tool-call format (``tierlm.runners.tool_calls``),
which the gateway turns into ``tool_calls`` again.

What it shares with ``OllamaRunner`` (racing a stream against a cancel token,
one client per loop, readable server errors) is in ``tierlm.runners.http``.
"""

from __future__ import annotations

import contextlib
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, Literal

import httpx

from tierlm.runners.cancellation import CancelToken
from tierlm.runners.endings import Ending, Finish, Stream
from tierlm.runners.http import (
    DEFAULT_STALL_TIMEOUT,
    DEFAULT_TIMEOUT,
    HttpRunner,
    StallLimits,
    UpstreamError,
    chunk_pieces,
    error_text,
    list_names,
    parse_json_object,
    post_stream,
    upstream_ending,
)
from tierlm.runners.requests import GenerationRequest, Message
from tierlm.runners.tool_calls import ToolCallWriter, check_resumable

if TYPE_CHECKING:
    pass

__all__ = ["DEFAULT_TIMEOUT", "OpenAIRunner", "ResumeMode", "render_chat_template"]

ResumeMode = Literal["prefill", "continue_final_message", "completions"]
"""How ``OpenAIRunner`` continues a preempted chat answer.

Servers differ, so this is a choice (the default is ``"prefill"``):

- ``"prefill"``: send the messages plus a final assistant message holding the
  partial answer. llama.cpp's ``llama-server`` continues such a message (since
  ggml-org/llama.cpp PR #13174, 2025, unless started with
  ``--no-prefill-assistant``), as does Ollama with templates that leave a
  trailing assistant message open. llama-cpp-python's server does NOT: it
  closes that message and starts a new assistant turn (tested), and vLLM needs
  the next mode.
- ``"continue_final_message"``: the same, plus vLLM's documented extension
  ``continue_final_message: true, add_generation_prompt: false``.
- ``"completions"``: render the chat template on the client (``chat_template``
  or ``render_chat`` is then required), append the partial answer, and use
  ``/v1/completions``. Works with any server that accepts raw prompts; the one
  to use with llama-cpp-python's server (tested: with greedy sampling the
  resumed answer equals the uninterrupted one). The rendering must match the
  server's for the continuation to be exact.
"""


class OpenAIRunner(HttpRunner):
    """Stream from an OpenAI-compatible server.

    ``base_url`` is the server's root, with or without ``/v1``
    (``http://127.0.0.1:8080``). ``models`` maps tierlm model ids to the
    server's model names (default: the id is the name); when given, other ids
    are rejected. ``resume`` picks how a preempted chat is continued
    (``ResumeMode``); ``"completions"`` needs ``chat_template`` (a Jinja chat
    template, e.g. the model's ``tokenizer.chat_template``) or ``render_chat``
    (messages -> prompt text ending with the assistant's generation prompt).
    ``stall_timeout`` and ``first_byte_timeout`` bound the upstream's silence
    (``tierlm.runners.http.StallLimits``); it never streams more than
    ``max_tokens`` pieces, whatever the server does.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        models: Mapping[str, str] | None = None,
        warmup: bool = False,
        resume: ResumeMode = "prefill",
        chat_template: str | None = None,
        render_chat: Callable[[Sequence[Message]], str] | None = None,
        bos_token: str = "",
        eos_token: str = "",
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
        first_byte_timeout: float | None = None,
    ) -> None:
        base = base_url.rstrip("/")
        if not base.endswith("/v1"):
            base += "/v1"
        self.base_url = base
        self.warmup = warmup
        if resume not in ("prefill", "continue_final_message", "completions"):
            raise ValueError(f"resume: unknown mode {resume!r}")
        self.resume: ResumeMode = resume
        if render_chat is None and chat_template is not None:
            template = chat_template

            def render(messages: Sequence[Message]) -> str:
                return render_chat_template(
                    template, messages, bos_token=bos_token, eos_token=eos_token
                )

            render_chat = render
        if resume == "completions" and render_chat is None:
            raise ValueError('resume="completions": needs chat_template or render_chat')
        self.render_chat = render_chat
        request_headers = dict(headers or {})
        if api_key:
            request_headers["Authorization"] = f"Bearer {api_key}"
        stall = StallLimits(stall_timeout, first_byte_timeout)
        super().__init__(models, request_headers, timeout, stall)

    async def list_models(self) -> list[str]:
        """The server's model names (``GET /v1/models``); RunnerError if it cannot say."""
        url = f"{self.base_url}/models"
        return await list_names(self._clients.get(), url, items="data", name="id")

    async def load(self, model_id: str) -> None:
        if model_id == self.loaded_model:
            return
        self.server_model(model_id)
        self.loaded_model = None
        if self.warmup:
            request = GenerationRequest(
                model_id=model_id,
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=1,
                temperature=0.0,
            )
            async for _ in self.generate(request, CancelToken()):
                pass
        self.loaded_model = model_id
        self.loads += 1

    def generate(self, request: GenerationRequest, cancel: CancelToken) -> Stream:
        return Stream(self._generate(request, cancel))

    async def _generate(
        self, request: GenerationRequest, cancel: CancelToken
    ) -> AsyncIterator[str | Ending]:
        model_id = request.model_id
        path, body = self.request_body(request)
        url = self.base_url + path
        chat = path.endswith("/chat/completions")
        pieces = 0
        finished = False
        word: str | None = None  # the upstream's finish_reason
        prompt_tokens: int | None = None  # its usage, if it sends one
        calls = ToolCallWriter()
        # docs/design.md §4.6: a yield lets the prompt's
        # evaluation finish and ends the stream after its first token.
        stop = cancel.for_call(lambda: pieces)
        lines = post_stream(
            self._clients.get(), url, body, stop, model_id, lambda: pieces, self.stall
        )
        async with contextlib.aclosing(lines):
            async for event in _sse_events(lines):
                if event == "[DONE]":
                    finished = True
                    break
                chunk = parse_json_object(event, model_id, url)
                error = chunk.get("error")
                if error is not None:
                    raise UpstreamError(
                        f"model {model_id!r}: {url} failed mid-stream: {error_text(error)}",
                        model_id=model_id,
                    )
                usage = chunk.get("usage")
                if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
                    prompt_tokens = usage["prompt_tokens"]
                for choice in chunk.get("choices") or ():
                    if chat:
                        delta = choice.get("delta") or {}
                        texts = [delta.get("content"), *_call_texts(delta, calls)]
                    else:
                        texts = [choice.get("text")]
                    if choice.get("finish_reason"):
                        finished = True
                        word = str(choice["finish_reason"])
                        texts.append(calls.close())
                    for text in chunk_pieces(texts, pieces, request.max_tokens):
                        if stop.cancelled:
                            yield Ending(Finish.CANCELLED, pieces)
                            return
                        pieces += 1
                        yield text
                    if pieces >= request.max_tokens:
                        yield upstream_ending(word, pieces, request.max_tokens, prompt_tokens)
                        return
        if not finished and not cancel.cancelled:
            raise UpstreamError(
                f"model {model_id!r}: {url} ended the stream after {pieces} pieces "
                "without finishing the answer",
                model_id=model_id,
            )
        if finished:
            yield upstream_ending(word, pieces, request.max_tokens, prompt_tokens)
        else:
            yield Ending(Finish.CANCELLED, pieces)

    def request_body(self, request: GenerationRequest) -> tuple[str, dict[str, Any]]:
        """The endpoint path (under ``/v1``) and JSON body for ``request``."""
        check_resumable(request)
        body: dict[str, Any] = {
            "model": self.server_model(request.model_id),
            "max_tokens": request.max_tokens,
            "stream": True,
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.stop:
            body["stop"] = list(request.stop)
        if request.prompt is not None:
            body["prompt"] = request.prompt + request.resume_text
            path = "/completions"
        else:
            assert request.messages is not None
            messages = [dict(m) for m in request.messages]
            if not request.resume_text:
                body["messages"] = messages
                path = "/chat/completions"
            elif self.resume == "completions":
                assert self.render_chat is not None
                body["prompt"] = self.render_chat(messages) + request.resume_text
                path = "/completions"
            else:
                body["messages"] = [
                    *messages,
                    {"role": "assistant", "content": request.resume_text},
                ]
                if self.resume == "continue_final_message":
                    body["continue_final_message"] = True
                    body["add_generation_prompt"] = False
                path = "/chat/completions"
        body.update(request.extra)
        return path, body


def _call_texts(delta: Mapping[str, Any], calls: ToolCallWriter) -> list[str]:
    """A delta's tool calls, as text (``tierlm.runners.tool_calls``)."""
    texts = []
    for call in delta.get("tool_calls") or ():
        function = call.get("function") or {}
        index = call.get("index", calls.calls)
        if function.get("name") and index != calls.open:
            texts.append(calls.start(index, function["name"]))
        texts.append(function.get("arguments") or "")
    return texts


def render_chat_template(
    template: str,
    messages: Sequence[Message],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
) -> str:
    """Render a Hugging Face style Jinja chat template, as llama-cpp-python does.

    Same environment as llama-cpp-python's ``Jinja2ChatFormatter`` (sandboxed,
    ``trim_blocks``, ``lstrip_blocks``, loop controls), so the text matches what
    its server renders for the same messages.
    """
    try:
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as exc:  # pragma: no cover - jinja2 comes with the extras
        raise RuntimeError("render_chat_template needs jinja2 (pip install jinja2)") from exc

    def raise_exception(message: str) -> str:
        raise jinja2.TemplateError(message)

    env = ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(),
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[jinja2.ext.loopcontrols],
    )
    return env.from_string(template).render(
        messages=[dict(m) for m in messages],
        bos_token=bos_token,
        eos_token=eos_token,
        add_generation_prompt=add_generation_prompt,
        raise_exception=raise_exception,
    )


async def _sse_events(lines: AsyncIterator[str]) -> AsyncGenerator[str, None]:
    """The ``data`` of each server-sent event (comments and pings skipped)."""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)
