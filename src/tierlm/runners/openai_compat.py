"""A runner for any OpenAI-compatible server, streaming over HTTP (issue 4).

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

The helpers at the bottom (racing a stream against a cancel token, reading a
server's error message) are shared with ``tierlm.runners.ollama``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import httpx

from tierlm.runners.protocol import CancelToken, GenerationRequest, Message, RunnerError

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["DEFAULT_TIMEOUT", "OpenAIRunner", "ResumeMode", "post_stream", "render_chat_template"]

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

# Connect/write/pool: 30 s is generous for a local server. Read: a phone-class
# device can take minutes to evaluate a long prompt before the first byte, and a
# cancel never relies on this timeout (reads race the cancel token).
DEFAULT_TIMEOUT = httpx.Timeout(30.0, read=600.0)

_T = TypeVar("_T")


class OpenAIRunner:
    """Stream from an OpenAI-compatible server.

    ``base_url`` is the server's root, with or without ``/v1``
    (``http://127.0.0.1:8080``). ``models`` maps tierlm model ids to the
    server's model names (default: the id is the name); when given, other ids
    are rejected. ``resume`` picks how a preempted chat is continued
    (``ResumeMode``); ``"completions"`` needs ``chat_template`` (a Jinja chat
    template, e.g. the model's ``tokenizer.chat_template``) or ``render_chat``
    (messages -> prompt text ending with the assistant's generation prompt).
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
    ) -> None:
        base = base_url.rstrip("/")
        if not base.endswith("/v1"):
            base += "/v1"
        self.base_url = base
        self.models = dict(models) if models is not None else None
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
        self.timeout = timeout
        self._headers = dict(headers or {})
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._clients = LoopClients(self._headers, timeout)
        self.loaded_model: str | None = None
        self.loads = 0
        """How many times ``load`` switched the model."""

    # -- lifecycle ---------------------------------------------------------

    async def aclose(self) -> None:
        """Close the HTTP connections of the running event loop."""
        await self._clients.aclose()

    async def __aenter__(self) -> OpenAIRunner:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- protocol ----------------------------------------------------------

    def server_model(self, model_id: str) -> str:
        """The server's name for ``model_id``; RunnerError if it is unknown."""
        if self.models is None:
            return model_id
        try:
            return self.models[model_id]
        except KeyError:
            known = ", ".join(sorted(self.models))
            raise RunnerError(
                f"model {model_id!r}: not configured on this runner (known: {known})",
                model_id=model_id,
            ) from None

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

    def generate(self, request: GenerationRequest, cancel: CancelToken) -> AsyncIterator[str]:
        return self._generate(request, cancel)

    async def _generate(
        self, request: GenerationRequest, cancel: CancelToken
    ) -> AsyncIterator[str]:
        model_id = request.model_id
        path, body = self.request_body(request)
        url = self.base_url + path
        chat = path.endswith("/chat/completions")
        pieces = 0
        finished = False
        lines = post_stream(self._clients.get(), url, body, cancel, model_id, lambda: pieces)
        async with contextlib.aclosing(lines):
            async for event in _sse_events(lines):
                if event == "[DONE]":
                    finished = True
                    break
                chunk = _parse_json(event, model_id, url)
                error = chunk.get("error")
                if error is not None:
                    raise RunnerError(
                        f"model {model_id!r}: {url} failed mid-stream: {_error_text(error)}",
                        model_id=model_id,
                    )
                for choice in chunk.get("choices") or ():
                    if chat:
                        text = (choice.get("delta") or {}).get("content")
                    else:
                        text = choice.get("text")
                    if choice.get("finish_reason"):
                        finished = True
                    if text:
                        if cancel.cancelled:
                            return
                        pieces += 1
                        yield text
        if not finished and not cancel.cancelled:
            raise RunnerError(
                f"model {model_id!r}: {url} ended the stream after {pieces} pieces "
                "without finishing the answer",
                model_id=model_id,
            )

    def request_body(self, request: GenerationRequest) -> tuple[str, dict[str, Any]]:
        """The endpoint path (under ``/v1``) and JSON body for ``request``."""
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


# -- shared HTTP helpers (also used by tierlm.runners.ollama) ---------------


class CancelRace:
    """Race awaits against a cancel token, inside one ``async with`` block.

    ``run(aw)`` returns ``aw``'s result, or None as soon as the token is
    cancelled (``aw`` is then cancelled). ``iterate(it)`` yields items of an
    async iterator until it ends or the token is cancelled. The token's callback
    may come from any thread; it wakes the loop thread-safely.
    """

    def __init__(self, cancel: CancelToken) -> None:
        self.cancel = cancel
        self._fut: asyncio.Future[None] | None = None
        self._remove: Callable[[], None] = lambda: None

    @property
    def cancelled(self) -> bool:
        return self.cancel.cancelled

    async def __aenter__(self) -> CancelRace:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._fut = fut
        owner = threading.get_ident()

        def settle() -> None:
            if not fut.done():
                fut.set_result(None)

        def on_cancel(_: CancelToken) -> None:
            if threading.get_ident() == owner:
                settle()
            else:
                with contextlib.suppress(RuntimeError):  # loop already closed
                    loop.call_soon_threadsafe(settle)

        self._remove = self.cancel.add_callback(on_cancel)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._remove()

    async def run(self, aw: Awaitable[_T]) -> _T | None:
        assert self._fut is not None, "use CancelRace inside 'async with'"
        if self.cancel.cancelled:
            if isinstance(aw, Coroutine):
                aw.close()  # never started: no "never awaited" warning
            return None
        task = asyncio.ensure_future(aw)
        waiters: set[asyncio.Future[Any]] = {task, self._fut}
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({task})
        if task.cancelled():
            return None
        # Done, possibly in the same instant as the cancel: the caller gets the
        # result (e.g. a response it must close) and sees the cancel next.
        return task.result()

    async def iterate(self, iterator: AsyncIterator[_T]) -> AsyncGenerator[_T, None]:
        end = _End()

        async def step() -> _T | _End:
            try:
                return await anext(iterator)
            except StopAsyncIteration:
                return end

        while not self.cancel.cancelled:
            item = await self.run(step())
            if item is None or isinstance(item, _End):
                return
            yield item


class _End:
    """Marks the end of an iterator raced by ``CancelRace.iterate``."""


async def post_stream(
    client: httpx.AsyncClient,
    url: str,
    body: Mapping[str, Any],
    cancel: CancelToken,
    model_id: str,
    pieces: Callable[[], int],
) -> AsyncGenerator[str, None]:
    """POST ``body`` and yield the response's lines until it ends or ``cancel``.

    Every wait (connecting, the headers, each line) races the cancel token, so a
    cancel ends the iteration at once and closes the connection, even while a
    server evaluates a long prompt before its first byte. Failures become a
    ``RunnerError`` naming the model and the cause; ``pieces()`` says how far the
    stream got, for the message.
    """
    async with CancelRace(cancel) as race:
        try:
            request = client.build_request("POST", url, json=body)
            response = await race.run(client.send(request, stream=True))
            if response is None:
                return
            try:
                if response.status_code >= 400:
                    detail = await race.run(response.aread())
                    if detail is None:
                        return
                    raise RunnerError(
                        f"model {model_id!r}: {url} answered "
                        f"{http_error_message(response.status_code, detail)}",
                        model_id=model_id,
                    )
                async with contextlib.aclosing(race.iterate(response.aiter_lines())) as lines:
                    async for line in lines:
                        yield line
            finally:
                await response.aclose()
        except httpx.TimeoutException as exc:
            raise RunnerError(
                f"model {model_id!r}: {url} timed out ({type(exc).__name__})", model_id=model_id
            ) from exc
        except httpx.TransportError as exc:
            if pieces() or isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
                raise RunnerError(
                    f"model {model_id!r}: {url} broke the stream after {pieces()} pieces: "
                    f"{describe_exception(exc)}",
                    model_id=model_id,
                ) from exc
            raise RunnerError(
                f"model {model_id!r}: cannot reach {url}: {describe_exception(exc)}",
                model_id=model_id,
            ) from exc


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


def _parse_json(text: str, model_id: str, url: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunnerError(
            f"model {model_id!r}: {url} sent malformed JSON in the stream: {text[:200]!r}",
            model_id=model_id,
        ) from exc
    if not isinstance(value, dict):
        raise RunnerError(
            f"model {model_id!r}: {url} sent {type(value).__name__} instead of an object",
            model_id=model_id,
        )
    return value


def _error_text(error: Any) -> str:
    if isinstance(error, Mapping):
        message = error.get("message") or error.get("error") or error.get("detail")
        if message:
            return str(message)
    return str(error)


def http_error_message(status: int, body: bytes) -> str:
    """``"404 Not Found: <the server's message>"`` from a failed response."""
    try:
        reason = httpx.codes(status).name.replace("_", " ").title()
    except ValueError:
        reason = "error"
    text = body.decode("utf-8", "replace").strip()
    message = text
    with contextlib.suppress(ValueError):
        value = json.loads(text)
        if isinstance(value, Mapping):
            for key in ("error", "detail", "message"):
                if key in value:
                    message = _error_text(value[key])
                    break
    if len(message) > 500:
        message = message[:500] + "..."
    return f"{status} {reason}: {message}" if message else f"{status} {reason}"


def describe_exception(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class LoopClients:
    """One ``httpx.AsyncClient`` per event loop.

    A client's pooled connections belong to the loop that opened them; a runner
    used from several ``asyncio.run`` calls (tests, scripts) must not reuse them.
    """

    def __init__(self, headers: Mapping[str, str], timeout: httpx.Timeout) -> None:
        self._headers = dict(headers)
        self._timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx.AsyncClient | None = None

    def get(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop or self._client.is_closed:
            # The old loop is gone or elsewhere; its connections cannot be
            # closed from here and are dropped with it.
            self._client = httpx.AsyncClient(headers=self._headers, timeout=self._timeout)
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await client.aclose()
