"""A runner for Ollama's native API: ``/api/chat`` and ``/api/generate``.

Ollama streams newline-delimited JSON objects, one per token
(``{"message": {"content": "The"}, "done": false}`` from ``/api/chat``,
``{"response": "The", "done": false}`` from ``/api/generate``) and ends with one
that has ``"done": true``. An error after the stream started arrives as a line
``{"error": "..."}``.

Unlike ``OpenAIRunner``, the swap is explicit: ``load`` first unloads the
previous model (an empty generate request with ``keep_alive: 0``) and then
preloads the new one (an empty generate request with ``keep_alive``), so the
time of a swap is spent, and measured (``last_load_seconds``), inside ``load``.
Every request also carries ``keep_alive``, so Ollama never unloads the model
behind the scheduler's back after its default five idle minutes.

OpenAI's options map to Ollama's: ``response_format`` to ``format`` (``"json"``,
or the JSON schema), ``tools`` as they are (not sent with ``tool_choice:
"none"``), a past call's ``arguments`` as an object, ``mirostat_mode`` to
``options.mirostat``, other sampling options into ``options``. What Ollama has
no field for (``logit_bias``, ``grammar``, ``parallel_tool_calls``, a
``tool_choice`` that forces a call, ``logprobs``, llama-server's
``input_extra`` files) is refused (``InvalidRequest``), never sent to be
ignored. Fill-in-the-middle (``extra["suffix"]``) is Ollama's own ``suffix``
on ``/api/generate`` (its *insert*, with the model's template, so never
``raw``); a model without it answers 400 ``does not support insert``, which
is the client's 400 naming ``suffix`` (``InvalidRequest``), not an upstream
failure. A start of the middle (``infill_middle``) and a resumed one's
partial text continue the text before the gap. The calls Ollama answers
(``message.tool_calls``) come back as text in tierlm's tool-call format
(``tierlm.runners.tool_calls``).

Resume: a chat continues as a final assistant message holding the partial
answer (Ollama renders a trailing assistant message open, so the model
continues it, with the templates that support it; the tests can only check
this against a fake server, as Ollama cannot be installed here). A raw prompt
(``extra={"raw": True}``) continues as prompt + partial text. A templated
prompt (Ollama's default for ``/api/generate``) continues through ``/api/chat``
as [user: prompt, assistant: partial], which is how Ollama renders a generate
request anyway.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import httpx

from tierlm.runners.cancellation import CancelToken
from tierlm.runners.endings import Ending, Finish, Stream
from tierlm.runners.errors import InvalidRequest
from tierlm.runners.http import (
    DEFAULT_STALL_TIMEOUT,
    DEFAULT_TIMEOUT,
    HttpRunner,
    StallLimits,
    UpstreamError,
    chunk_pieces,
    describe_exception,
    http_error_message,
    list_names,
    parse_json_object,
    post_stream,
    upstream_ending,
)
from tierlm.runners.requests import FIM_FILES, FIM_MIDDLE, FIM_SUFFIX, GenerationRequest
from tierlm.runners.tool_calls import ToolCallWriter, check_resumable

if TYPE_CHECKING:
    pass

__all__ = ["DEFAULT_KEEP_ALIVE", "DEFAULT_OLLAMA_URL", "OllamaRunner"]

# Ollama's default listen address (OLLAMA_HOST).
DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"
# -1 = keep the model loaded until told otherwise: tierlm decides when to swap.
# (Ollama's own default is "5m", after which it would unload on its own.)
DEFAULT_KEEP_ALIVE: int | str = -1

# Options of GenerationRequest.extra that are top-level request fields in
# Ollama's API; every other key goes into "options" (num_ctx, top_p, seed...).
_TOP_LEVEL = frozenset(
    {"format", "raw", "system", "template", "images", "think", "tools", FIM_SUFFIX}
)
# OpenAI options that Ollama's API has no field for.
_REFUSED = frozenset({"logit_bias", "grammar", "parallel_tool_calls", "logprobs", "top_logprobs"})
# OpenAI names of Ollama options.
_RENAMED = {"mirostat_mode": "mirostat"}


class OllamaRunner(HttpRunner):
    """Stream from an Ollama server through its native API.

    ``models`` maps tierlm model ids to Ollama model names (``"llama3.2:1b"``);
    default: the id is the name, and when given, other ids are rejected.
    ``stall_timeout`` and ``first_byte_timeout`` bound the server's silence
    while it generates (``tierlm.runners.http.StallLimits``); it never streams
    more than ``max_tokens`` pieces, whatever the server does.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_OLLAMA_URL,
        *,
        models: Mapping[str, str] | None = None,
        keep_alive: int | str = DEFAULT_KEEP_ALIVE,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
        first_byte_timeout: float | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.keep_alive = keep_alive
        stall = StallLimits(stall_timeout, first_byte_timeout)
        super().__init__(models, dict(headers or {}), timeout, stall)
        self.last_load_seconds: float | None = None
        """Wall time of the last swap (unload + load)."""

    async def list_models(self) -> list[str]:
        """The server's model names (``GET /api/tags``); RunnerError if it cannot say."""
        url = f"{self.base_url}/api/tags"
        return await list_names(self._clients.get(), url, items="models", name="name")

    # -- load --------------------------------------------------------------

    async def load(self, model_id: str) -> None:
        if model_id == self.loaded_model:
            return
        name = self.server_model(model_id)
        started = time.perf_counter()
        previous, self.loaded_model = self.loaded_model, None
        if previous is not None:
            # Free the device first: it holds one model at a time.
            await self._post_load(previous, self.server_model(previous), keep_alive=0)
        await self._post_load(model_id, name, keep_alive=self.keep_alive)
        self.loaded_model = model_id
        self.loads += 1
        self.last_load_seconds = time.perf_counter() - started

    async def unload(self) -> None:
        """Ask Ollama to free the model now (``keep_alive: 0``)."""
        previous, self.loaded_model = self.loaded_model, None
        if previous is not None:
            await self._post_load(previous, self.server_model(previous), keep_alive=0)

    async def _post_load(self, model_id: str, name: str, *, keep_alive: int | str) -> None:
        # A generate request without a prompt loads (or, with keep_alive 0,
        # unloads) the model and answers one object with done_reason load/unload.
        url = f"{self.base_url}/api/generate"
        body = {"model": name, "keep_alive": keep_alive, "stream": False}
        action = "unload" if keep_alive == 0 else "load"
        try:
            response = await self._clients.get().post(url, json=body)
        except httpx.TimeoutException as exc:
            raise UpstreamError(
                f"model {model_id!r}: {action} timed out at {url}", model_id=model_id
            ) from exc
        except httpx.TransportError as exc:
            raise UpstreamError(
                f"model {model_id!r}: cannot reach {url} to {action}: {describe_exception(exc)}",
                model_id=model_id,
            ) from exc
        if response.status_code >= 400:
            raise UpstreamError(
                f"model {model_id!r}: {action} failed, {url} answered "
                f"{http_error_message(response.status_code, response.content)}",
                model_id=model_id,
            )

    # -- generate ----------------------------------------------------------

    def generate(self, request: GenerationRequest, cancel: CancelToken) -> Stream:
        return Stream(self._generate(request, cancel))

    def request_body(self, request: GenerationRequest) -> tuple[str, dict[str, Any]]:
        """The endpoint path and JSON body for ``request``."""
        check_resumable(request)
        options: dict[str, Any] = {"num_predict": request.max_tokens}
        if request.temperature is not None:
            options["temperature"] = request.temperature
        if request.stop:
            options["stop"] = list(request.stop)
        body: dict[str, Any] = {
            "model": self.server_model(request.model_id),
            "stream": True,
            "keep_alive": self.keep_alive,
        }
        extra = dict(request.extra)
        choice = extra.pop("tool_choice", "auto")
        if choice == "none":
            extra.pop("tools", None)
        elif choice != "auto":
            raise self._refuse("tool_choice", "only auto and none")
        response_format = extra.pop("response_format", None)
        if response_format is not None:
            body["format"] = _format(response_format)
        if extra.pop(FIM_FILES, None):
            raise self._refuse(FIM_FILES, "files of context (input_extra) have no field")
        middle = str(extra.pop(FIM_MIDDLE, None) or "")
        for key, value in extra.items():
            if key in _REFUSED:
                raise self._refuse(key, "no such field")
            if key in _TOP_LEVEL:
                body[key] = value
            elif key == "options" and isinstance(value, Mapping):
                options.update(value)
            else:
                options[_RENAMED.get(key, key)] = value
        body["options"] = options
        if body.get(FIM_SUFFIX) and request.prompt is not None:
            # Ollama's insert: its template lays out the gap (raw would skip
            # it, and the suffix with it); the middle so far ends the prefix.
            body.pop("raw", None)
            body["prompt"] = request.prompt + middle + request.resume_text
            return "/api/generate", body
        body.pop(FIM_SUFFIX, None)
        raw = bool(body.get("raw"))
        if request.prompt is not None and (raw or not request.resume_text):
            body["prompt"] = request.prompt + request.resume_text
            return "/api/generate", body
        if request.prompt is not None:
            # A templated prompt is one user turn; continue it as a chat.
            body.pop("raw", None)
            messages: list[dict[str, Any]] = []
            if "system" in body:
                messages.append({"role": "system", "content": body.pop("system")})
            messages.append({"role": "user", "content": request.prompt})
        else:
            assert request.messages is not None
            messages = [_ollama_message(m) for m in request.messages]
        if request.resume_text:
            messages.append({"role": "assistant", "content": request.resume_text})
        body["messages"] = messages
        return "/api/chat", body

    async def _generate(
        self, request: GenerationRequest, cancel: CancelToken
    ) -> AsyncIterator[str | Ending]:
        model_id = request.model_id
        path, body = self.request_body(request)
        url = self.base_url + path
        chat = path == "/api/chat"
        pieces = 0
        finished = False
        word: str | None = None  # the upstream's done_reason
        prompt_tokens: int | None = None  # its prompt_eval_count
        calls = ToolCallWriter()
        # docs/design.md §4.6: a yield lets the prompt's
        # evaluation finish and ends the stream after its first token.
        stop = cancel.for_call(lambda: pieces)
        lines = post_stream(
            self._clients.get(), url, body, stop, model_id, lambda: pieces, self.stall
        )
        if body.get(FIM_SUFFIX):
            lines = _insert_refused(lines, model_id)
        async with contextlib.aclosing(lines):
            async for line in lines:
                if not line.strip():
                    continue
                chunk = parse_json_object(line, model_id, url)
                if "error" in chunk:
                    raise UpstreamError(
                        f"model {model_id!r}: {url} failed mid-stream: {chunk['error']}",
                        model_id=model_id,
                    )
                if chat:
                    message = chunk.get("message") or {}
                    texts = [message.get("content"), *_call_texts(message, calls)]
                else:
                    texts = [chunk.get("response")]
                if chunk.get("done"):
                    texts.append(calls.close())
                    word = chunk.get("done_reason") or None
                    count = chunk.get("prompt_eval_count")
                    prompt_tokens = count if isinstance(count, int) else None
                for text in chunk_pieces(texts, pieces, request.max_tokens):
                    if stop.cancelled:
                        yield Ending(Finish.CANCELLED, pieces)
                        return
                    pieces += 1
                    yield text
                if pieces >= request.max_tokens:
                    yield upstream_ending(word, pieces, request.max_tokens, prompt_tokens)
                    return
                if chunk.get("done"):
                    finished = True
                    break
        if not finished and not cancel.cancelled:
            raise UpstreamError(
                f"model {model_id!r}: {url} ended the stream after {pieces} pieces "
                'without a "done" message',
                model_id=model_id,
            )
        if finished:
            yield upstream_ending(word, pieces, request.max_tokens, prompt_tokens)
        else:
            yield Ending(Finish.CANCELLED, pieces)

    def _refuse(self, key: str, why: str) -> InvalidRequest:
        return InvalidRequest(
            f"{key}: not supported by Ollama's API ({why})", param=key, model_id=None
        )


async def _insert_refused(lines: AsyncGenerator[str, None], model_id: str) -> AsyncGenerator[str]:
    """``lines``, with the upstream's refusal of a suffix (a 400 saying Ollama's
    ``"..." does not support insert``, or naming ``suffix`` as a tierlm
    upstream does) as the client's error naming ``suffix``."""
    async with contextlib.aclosing(lines):
        try:
            async for line in lines:
                yield line
        except UpstreamError as exc:
            _, answered, said = str(exc).partition(" answered 400 ")
            if not answered or ("insert" not in said and FIM_SUFFIX not in said):
                raise
            raise InvalidRequest(
                f"{FIM_SUFFIX}: model {model_id!r} does not support insert (fill-in-the-middle) "
                f"on the upstream Ollama ({exc}); serve a code model that has it there, or send "
                "the text before the gap alone as the prompt",
                param=FIM_SUFFIX,
                model_id=model_id,
            ) from exc


def _format(response_format: Mapping[str, Any]) -> Any:
    """OpenAI's ``response_format`` as Ollama's ``format``."""
    if response_format.get("type") == "json_schema":
        return (response_format.get("json_schema") or {}).get("schema") or "json"
    return "json"


def _ollama_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A chat message as Ollama takes it: a past call's arguments are an object."""
    out = dict(message)
    calls = out.get("tool_calls")
    if calls:
        out["tool_calls"] = [
            {"function": {"name": c["function"]["name"], "arguments": _object(c["function"])}}
            for c in calls
        ]
    return out


def _object(function: Mapping[str, Any]) -> Any:
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _call_texts(message: Mapping[str, Any], calls: ToolCallWriter) -> list[str]:
    """A message's tool calls (Ollama sends each whole), as text."""
    texts = []
    for index, call in enumerate(message.get("tool_calls") or (), start=calls.calls):
        function = call.get("function") or {}
        arguments = function.get("arguments")
        text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        texts += [calls.start(index, function.get("name", "")), text]
    return texts
