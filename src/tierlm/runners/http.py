"""What the HTTP runners share: a stream whose every read races the cancel token
and a stall timeout, one client per event loop, readable server errors, and the
lifecycle of a runner whose device is a server (``OpenAIRunner``,
``OllamaRunner``).

A stalled upstream must not hold the device: an upstream that stops sending
(before its headers, or mid-stream) fails its job with ``UpstreamTimeout``
after ``StallLimits`` seconds without a token, and the scheduler moves on. The
runners also stop at ``max_tokens`` pieces whatever the upstream does (one that
ignores ``max_tokens`` would otherwise hold the device as long as it likes).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self, TypeVar

import anyio
import httpx

from tierlm.runners.cancel_scope import until_cancelled
from tierlm.runners.cancellation import Cancellable
from tierlm.runners.endings import Ending, Finish
from tierlm.runners.errors import RunnerError, unknown_model
from tierlm.runners.protocol import Abilities

if TYPE_CHECKING:
    from types import TracebackType

__all__ = [
    "DEFAULT_STALL_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "HttpRunner",
    "LoopClients",
    "StallLimits",
    "UpstreamError",
    "UpstreamTimeout",
    "describe_exception",
    "error_text",
    "http_error_message",
    "list_names",
    "parse_json_object",
    "post_stream",
    "upstream_ending",
]

# Connect/write/pool: 30 s is generous for a local server. Read: a phone-class
# device can take minutes to evaluate a long prompt before the first byte, and a
# cancel never relies on this timeout (reads race the cancel token).
DEFAULT_TIMEOUT = httpx.Timeout(30.0, read=600.0)
# Listing models is a quick question: an upstream that takes longer is down for it.
LIST_TIMEOUT = 5.0
# An upstream silent this long holds the device for nothing: 30 s is far beyond
# a token's time on any device that is still working (a phone-class device makes
# a token in ~0.1 s), short enough that the chats waiting behind notice little.
DEFAULT_STALL_TIMEOUT = 30.0

MAX_LINE_BYTES = 1 << 20
"""Longest line of an upstream's stream (an SSE line, an NDJSON object): 1 MiB.
A streamed token's event is a few hundred bytes; a line past this is a broken
or hostile upstream, and reading it whole would grow the gateway's memory
without bound (one 64 MiB line without a newline grew it by 68 MiB)."""
MAX_ERROR_BYTES = 64 << 10
"""How much of an upstream's error body is read (64 KiB): its message is in the
first few hundred bytes."""

_T = TypeVar("_T")


class UpstreamError(RunnerError):
    """The upstream server failed the request (refused, broke off, answered an
    error): not the client's fault and not tierlm's, so a gateway answers 502."""

    status_hint = 502


class UpstreamTimeout(UpstreamError):
    """The upstream sent no token for too long (``StallLimits``): its job fails
    and the device is free again. The gateway answers 504 ``upstream_timeout``."""

    status_hint = 504
    code = "upstream_timeout"


@dataclass(frozen=True, slots=True)
class StallLimits:
    """How long an upstream may stay silent."""

    between_tokens: float = DEFAULT_STALL_TIMEOUT
    """Seconds from one token to the next (``stall_timeout``)."""
    first_token: float | None = None
    """Seconds from the request to its first token: the headers and the prompt's
    evaluation (``first_byte_timeout``; None: ``between_tokens``)."""

    def __post_init__(self) -> None:
        for name, value in (
            ("between_tokens", self.between_tokens),
            ("first_token", self.first_token),
        ):
            if value is not None and not value > 0:
                raise ValueError(f"{name}: must be > 0 seconds, got {value!r}")

    def limit(self, tokens: int) -> float:
        if tokens == 0 and self.first_token is not None:
            return self.first_token
        return self.between_tokens


class _StallClock:
    """The time left before the upstream counts as stalled: reset by each new token."""

    def __init__(self, limits: StallLimits, pieces: Callable[[], int]) -> None:
        self.limits = limits
        self._pieces = pieces
        self._seen = pieces()
        self._since = asyncio.get_running_loop().time()

    def left(self) -> float:
        now = asyncio.get_running_loop().time()
        seen = self._pieces()
        if seen != self._seen:
            self._seen, self._since = seen, now
        return self._since + self.limits.limit(seen) - now

    def error(self, model_id: str, url: str) -> UpstreamTimeout:
        seen = self._pieces()
        if seen == 0:
            what = f"no token for {self.limits.limit(0):g} s after the request"
            setting = (
                "first_byte_timeout" if self.limits.first_token is not None else "stall_timeout"
            )
        else:
            what = f"no token for {self.limits.limit(seen):g} s after {seen} tokens"
            setting = "stall_timeout"
        return UpstreamTimeout(
            f"model {model_id!r}: {url} stalled: {what} ({setting}); the job is stopped",
            model_id=model_id,
        )


class HttpRunner:
    """The parts of a server-backed runner that do not depend on its API.

    ``models`` maps tierlm model ids to the server's names (None: the id is the
    name; when given, other ids are rejected).
    """

    def __init__(
        self,
        models: Mapping[str, str] | None,
        headers: Mapping[str, str],
        timeout: httpx.Timeout,
        stall: StallLimits | None = None,
    ) -> None:
        self.models = dict(models) if models is not None else None
        self.timeout = timeout
        self.stall = stall if stall is not None else StallLimits()
        """How long the upstream may stay silent before the job fails."""
        self._clients = LoopClients(headers, timeout)
        self.loaded_model: str | None = None
        self.slots = 1
        """Streams the upstream serves at once (its parallel slots: ``llama-server
        -np N``, vLLM's batch); the shell keeps at most this many open
        (docs/design.md §2.3)."""
        self.loads = 0
        """How many times ``load`` switched the model."""

    @property
    def abilities(self) -> Abilities:
        """Its slots; nothing else is known of a device another server runs."""
        return Abilities(slots=self.slots)

    async def aclose(self) -> None:
        """Close the HTTP connections of the running event loop."""
        await self._clients.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def server_model(self, model_id: str) -> str:
        """The server's name for ``model_id``; RunnerError if it is unknown."""
        if self.models is None:
            return model_id
        try:
            return self.models[model_id]
        except KeyError:
            raise unknown_model(model_id, self.models) from None


async def post_stream(
    client: httpx.AsyncClient,
    url: str,
    body: Mapping[str, Any],
    cancel: Cancellable,
    model_id: str,
    pieces: Callable[[], int],
    stall: StallLimits | None = None,
) -> AsyncGenerator[str, None]:
    """POST ``body`` and yield the response's lines until it ends or ``cancel``.

    Every wait (connecting, the headers, each line) races the cancel token, so a
    cancel ends the iteration at once and closes the connection, even while a
    server evaluates a long prompt before its first byte; and races ``stall``:
    ``pieces()`` (the tokens the caller took from the stream) must grow within
    its limits, else ``UpstreamTimeout``. Failures become a ``RunnerError``
    naming the model and the cause.
    """
    clock = _StallClock(stall or StallLimits(), pieces)

    async def wait(work: Awaitable[_T]) -> _T | None:
        with anyio.move_on_after(clock.left()) as scope:
            return await until_cancelled(cancel, work)
        if scope.cancelled_caught:
            raise clock.error(model_id, url)
        return None  # pragma: no cover - the block returns or raises

    try:
        request = client.build_request("POST", url, json=body)
        response = await wait(client.send(request, stream=True))
        if response is None:
            return
        try:
            if response.status_code >= 400:
                detail = await wait(_read_at_most(response, MAX_ERROR_BYTES))
                if detail is None:
                    return
                raise UpstreamError(
                    f"model {model_id!r}: {url} answered "
                    f"{http_error_message(response.status_code, detail)}",
                    model_id=model_id,
                )
            lines = bounded_lines(response, MAX_LINE_BYTES, model_id, url)
            # Each read races the token, never the yield (docs/design.md §2.9).
            while (line := await wait(anext(lines, None))) is not None:
                yield line
        finally:
            await response.aclose()
    except httpx.TimeoutException as exc:
        raise UpstreamError(
            f"model {model_id!r}: {url} timed out ({type(exc).__name__})", model_id=model_id
        ) from exc
    except httpx.TransportError as exc:
        if pieces() or isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
            raise UpstreamError(
                f"model {model_id!r}: {url} broke the stream after {pieces()} pieces: "
                f"{describe_exception(exc)}",
                model_id=model_id,
            ) from exc
        raise UpstreamError(
            f"model {model_id!r}: cannot reach {url}: {describe_exception(exc)}",
            model_id=model_id,
        ) from exc


async def bounded_lines(
    response: httpx.Response, limit: int, model_id: str, url: str
) -> AsyncIterator[str]:
    """The response's lines (``\n``, ``\r\n``), none longer than ``limit``
    bytes: a longer one fails the job (``UpstreamError``, a 502) before it is
    read whole (``MAX_LINE_BYTES``)."""
    buffer = bytearray()
    async for chunk in response.aiter_bytes():
        searched = len(buffer)
        buffer += chunk
        while (end := buffer.find(b"\n", searched)) >= 0:
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            searched = 0
            yield line.rstrip(b"\r").decode("utf-8", "replace")
        if len(buffer) > limit:
            raise UpstreamError(
                f"model {model_id!r}: {url} sent a line longer than {limit} bytes "
                "(MAX_LINE_BYTES); the stream was closed",
                model_id=model_id,
            )
    if buffer:
        yield buffer.decode("utf-8", "replace")


async def _read_at_most(response: httpx.Response, limit: int) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= limit:
            break
    return bytes(body[:limit])


async def list_names(client: httpx.AsyncClient, url: str, items: str, name: str) -> list[str]:
    """The ``name`` of each object in ``GET url``'s ``items`` list (a server's
    models); RunnerError naming the URL and the cause."""
    try:
        response = await client.get(url, timeout=LIST_TIMEOUT)
        response.raise_for_status()
        return [str(item[name]) for item in response.json().get(items, [])]
    except (httpx.HTTPError, ValueError, AttributeError, KeyError, TypeError) as exc:
        raise UpstreamError(f"GET {url} failed: {describe_exception(exc)}") from exc


def error_text(error: Any) -> str:
    """The message inside a server's error object (OpenAI's, Ollama's, FastAPI's)."""
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
                    message = error_text(value[key])
                    break
    message = summarize(message)
    return f"{status} {reason}: {message}" if message else f"{status} {reason}"


# A file system path of two parts or more (``/srv/models/x.gguf``, ``C:\\m\\x``).
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.@+-]+){2,}[\\/]?")
SUMMARY_CHARS = 200
"""An upstream's own error message as a client sees it: its first 200
characters, enough for "model 'x' not found" or a context-length complaint."""


def summarize(message: str) -> str:
    """An upstream's error text fit for a client: one line, paths replaced by
    ``<path>`` (they tell a client the upstream's layout), at most
    ``SUMMARY_CHARS`` characters."""
    line = " ".join(message.split())
    line = _PATH.sub("<path>", line)
    return line if len(line) <= SUMMARY_CHARS else line[: SUMMARY_CHARS - 3] + "..."


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


def chunk_pieces(texts: Iterable[str | None], delivered: int, max_tokens: int) -> list[str]:
    """The pieces of one upstream chunk to pass on: its non-empty texts, cut so
    that no more than ``max_tokens`` are passed on in all (``delivered`` so
    far). The runner ends the stream once it has passed on ``max_tokens``,
    whatever the upstream does: closing the stream stops it."""
    return [text for text in texts if text][: max(0, max_tokens - delivered)]


def parse_json_object(text: str, model_id: str, url: str) -> dict[str, Any]:
    """One JSON object from a stream line; RunnerError naming the model otherwise."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UpstreamError(
            f"model {model_id!r}: {url} sent malformed JSON in the stream: {text[:200]!r}",
            model_id=model_id,
        ) from exc
    if not isinstance(value, dict):
        raise UpstreamError(
            f"model {model_id!r}: {url} sent {type(value).__name__} instead of an object",
            model_id=model_id,
        )
    return value


_UPSTREAM_FINISH: dict[str, Finish] = {
    "stop": Finish.STOP,
    "length": Finish.LENGTH,
    "content_filter": Finish.CONTENT_FILTER,
    "tool_calls": Finish.STOP,  # the answer tells its calls from the text
    "function_call": Finish.STOP,
}


def upstream_ending(
    word: str | None, pieces: int, max_tokens: int, prompt_tokens: int | None = None
) -> Ending:
    """How an upstream's stream ended, from its own word (OpenAI's
    ``finish_reason``, Ollama's ``done_reason``; docs/design.md §2.7): passed
    on, a content filter's included. A stream cut at ``max_tokens`` here, or
    one whose server said nothing, is ``LENGTH`` at ``max_tokens`` pieces, else
    the model's stop; a word no API defines is the model's stop, kept as
    ``detail``."""
    finish = _UPSTREAM_FINISH.get(word or "")
    if finish is None:
        finish = Finish.LENGTH if pieces >= max_tokens and not word else Finish.STOP
    return Ending(finish, pieces, prompt_tokens, word or "")
