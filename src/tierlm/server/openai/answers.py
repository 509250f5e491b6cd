"""One request's answer in OpenAI's shapes, streamed and not.

The job's pieces (one per token) become a ``chat.completion`` (or
``text_completion``) and its streamed chunks: the text; the tool calls in it
(``tools.py``), as ``message.tool_calls`` or as OpenAI's deltas;
log-probabilities, when the runner attached them (``TokenPiece``); the usage;
the ``finish_reason``, from how the generation ended (``AnsweredJob.ending``,
mapped once in ``gateway/endings``: ``stop``, ``length``, ``content_filter``,
``tool_calls`` when the model stopped after calls).

``usage.prompt_tokens`` is exact when the runner could count it
(``GenerationRequest.prompt_tokens``, set from ``count_prompt_tokens``), else
an estimate of ~4 characters a token; ``completion_tokens`` is the number of
pieces, one per token.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tierlm.runners.requests import GenerationRequest, TokenLogprob, TokenPiece
from tierlm.server.gateway.endings import cut, finish_reason
from tierlm.server.gateway.jobs import AnsweredJob
from tierlm.server.openai.schema_check import schema_errors
from tierlm.server.openai.tools import Arguments, Call, Content, Event, ToolCallParser

__all__ = ["Answer", "Endpoint", "Params"]

Endpoint = Literal["chat", "completions"]


@dataclass(frozen=True, slots=True)
class Params:
    """A validated request."""

    endpoint: Endpoint
    model: str
    request: GenerationRequest
    stream: bool
    include_usage: bool
    user: str | None = None
    metadata: Mapping[str, str] | None = None
    default_max_tokens: bool = False
    """The client set no max_tokens: the gateway chose it."""
    n: int = 1
    """Choices asked for: each one a job of its own."""
    echo: bool = False
    """Completions: the prompt before each choice's text (streamed: its first chunk)."""

    @property
    def tool_calls(self) -> bool:
        """May the answer hold tool calls?"""
        extra = self.request.extra
        return bool(extra.get("tools")) and extra.get("tool_choice") != "none"

    @property
    def logprobs(self) -> bool:
        return bool(self.request.extra.get("logprobs"))


class Answer:
    """Renders one request's answer, streamed and not (``JobStream``'s ``SSEFormat``)."""

    def __init__(self, params: Params, index: int = 0) -> None:
        self.params = params
        self.index = index
        """The choice's index (``n`` > 1: one answer per choice)."""
        self.usage_chunk = params.include_usage
        prefix = "chatcmpl" if params.endpoint == "chat" else "cmpl"
        self.id = f"{prefix}-{secrets.token_hex(12)}"
        self.created = int(time.time())
        self.object = "chat.completion" if params.endpoint == "chat" else "text_completion"
        self.parser = ToolCallParser() if params.tool_calls else None
        """The streamed answer's parser (a non-streamed one parses the whole text)."""
        self._offset = 0  # legacy completions logprobs: characters so far
        self._text = ""  # the streamed text so far (without a parser)

    def usage(self, job: AnsweredJob) -> dict[str, int]:
        prompt = self.params.request.approx_prompt_tokens()
        completion = len(job.produced)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def schema_errors(self, job: AnsweredJob, content: str | None, calls: list[Call]) -> Any:
        """The output's violations of its schemas (``schema_check``); None when
        it was cut (``length``, ``content_filter``: not a whole value) or asked
        for no schema."""
        if cut(job.ending) or self.params.endpoint != "chat":
            return None
        done = [(call.name, call.arguments) for call in calls]
        return schema_errors(self.params.request.extra, content, done) or None

    def _base(self, obj: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.params.model,
            "system_fingerprint": None,
        }

    # -- not streamed -----------------------------------------------------------

    def render(self, job: AnsweredJob) -> dict[str, Any]:
        text = "".join(job.produced)
        logprobs = self._logprobs(job.produced) if self.params.logprobs else None
        if self.params.endpoint == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": text}
            calls: list[Call] = []
            if self.params.tool_calls:
                parser = ToolCallParser()
                parser.feed(text)
                parser.finish(cut=cut(job.ending))
                calls = parser.calls
                message["content"] = parser.content or (None if calls else "")
                if calls:
                    message["tool_calls"] = [call.as_openai() for call in calls]
            reason = finish_reason(job.ending, bool(calls))
            errors = self.schema_errors(job, message["content"], calls)
            choice: dict[str, Any] = {
                "index": self.index,
                "message": message,
                "finish_reason": reason,
                "logprobs": logprobs,
            }
        else:
            reason = finish_reason(job.ending)
            errors = None
            choice = {
                "index": self.index,
                "text": self._echoed + text,
                "finish_reason": reason,
                "logprobs": logprobs,
            }
        return {
            **self._base(self.object),
            "choices": [choice],
            "usage": self.usage(job),
            # Ignored by OpenAI clients; useful to a caller that wants to know.
            "tierlm": {
                "job_id": job.id,
                "class": job.meta.class_name,
                "producer": job.producer,
                "time_to_first_token": (
                    None if job.first_token_at is None else job.first_token_at - job.submitted_at
                ),
                **({"schema_errors": errors} if errors else {}),
            },
        }

    # -- streamed (SSEFormat) -----------------------------------------------------

    def _chunk(
        self, delta: dict[str, Any] | str, finish: str | None, logprobs: Any = None
    ) -> dict[str, Any]:
        if self.params.endpoint == "chat":
            choice: dict[str, Any] = {
                "index": self.index,
                "delta": delta,
                "finish_reason": finish,
                "logprobs": logprobs,
            }
            return {**self._base("chat.completion.chunk"), "choices": [choice]}
        choice = {"index": self.index, "text": delta, "finish_reason": finish, "logprobs": logprobs}
        return {**self._base("text_completion"), "choices": [choice]}

    def start(self) -> list[Mapping[str, Any]]:
        if self.params.endpoint == "chat":
            return [self._chunk({"role": "assistant", "content": ""}, None)]
        if self._echoed:
            return [self._chunk(self._echoed, None)]
        return []

    @property
    def _echoed(self) -> str:
        """What ``echo`` puts before the completion: its prompt."""
        return (self.params.request.prompt or "") if self.params.echo else ""

    def piece(self, text: str) -> list[Mapping[str, Any]]:
        if self.parser is not None:
            return [self._event(event) for event in self.parser.feed(text)]
        logprobs = self._logprobs([text]) if self.params.logprobs else None
        self._text += text
        delta = {"content": text} if self.params.endpoint == "chat" else text
        return [self._chunk(delta, None, logprobs)]

    def _event(self, event: Event) -> dict[str, Any]:
        if isinstance(event, Content):
            return self._chunk({"content": event.text}, None)
        if isinstance(event, Call):
            call = event.as_openai()
            call["function"]["arguments"] = ""
            return self._chunk({"tool_calls": [{"index": event.index, **call}]}, None)
        assert isinstance(event, Arguments)
        delta = {"index": event.index, "function": {"arguments": event.fragment}}
        return self._chunk({"tool_calls": [delta]}, None)

    def end(self, job: AnsweredJob) -> list[Mapping[str, Any]]:
        chunks: list[Mapping[str, Any]] = []
        calls: list[Call] = []
        content = self._text
        if self.parser is not None:
            chunks += [self._event(event) for event in self.parser.finish(cut(job.ending))]
            calls, content = self.parser.calls, self.parser.content
        empty: dict[str, Any] | str = {} if self.params.endpoint == "chat" else ""
        last = self._chunk(empty, finish_reason(job.ending, bool(calls)))
        errors = self.schema_errors(job, content, calls)
        if errors:
            last["tierlm"] = {"schema_errors": errors}
        chunks.append(last)
        if self.usage_chunk:
            chunks.append(self.usage_only(self.usage(job)))
        return chunks

    def usage_only(self, usage: Mapping[str, int]) -> dict[str, Any]:
        """The streamed answer's last chunk: its usage, no choices."""
        obj = "chat.completion.chunk" if self.params.endpoint == "chat" else "text_completion"
        return {**self._base(obj), "choices": [], "usage": dict(usage)}

    # -- log-probabilities ----------------------------------------------------------

    def _logprobs(self, pieces: Sequence[str]) -> dict[str, Any] | None:
        scored = [p for p in pieces if isinstance(p, TokenPiece)]
        if self.params.endpoint == "chat":
            return {"content": [_chat_logprob(p.logprob, p.top) for p in scored], "refusal": None}
        offsets = []
        for piece in pieces:
            if isinstance(piece, TokenPiece):
                offsets.append(self._offset)
            self._offset += len(piece)
        return {
            "tokens": [p.logprob.token for p in scored],
            "token_logprobs": [p.logprob.logprob for p in scored],
            "top_logprobs": [{t.token: t.logprob for t in p.top} for p in scored],
            "text_offset": offsets,
        }


def _entry(logprob: TokenLogprob) -> dict[str, Any]:
    return {"token": logprob.token, "logprob": logprob.logprob, "bytes": list(logprob.bytes)}


def _chat_logprob(logprob: TokenLogprob, top: tuple[TokenLogprob, ...]) -> dict[str, Any]:
    return {**_entry(logprob), "top_logprobs": [_entry(t) for t in top]}


def total_usage(answers: Sequence[Answer], jobs: Sequence[AnsweredJob]) -> dict[str, int]:
    """The usage of ``n`` choices of one or more prompts: each prompt once,
    every choice's tokens (as OpenAI)."""
    usages = [a.usage(j) for a, j in zip(answers, jobs, strict=True)]
    # One Params per prompt: its n answers share it.
    prompts = {id(a.params): u["prompt_tokens"] for a, u in zip(answers, usages, strict=True)}
    prompt = sum(prompts.values())
    completion = sum(u["completion_tokens"] for u in usages)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def merged(answers: Sequence[Answer], jobs: Sequence[AnsweredJob]) -> dict[str, Any]:
    """The non-streamed answer of ``n`` choices, one per job."""
    rendered = [a.render(j) for a, j in zip(answers, jobs, strict=True)]
    body = rendered[0]
    body["choices"] = [r["choices"][0] for r in rendered]
    body["usage"] = total_usage(answers, jobs)
    body["tierlm"]["job_ids"] = [j.id for j in jobs]
    return body
