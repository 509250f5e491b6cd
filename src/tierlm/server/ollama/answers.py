"""One request's answer in Ollama's shapes (docs/api.md), streamed and not.

A chat answer is ``{"model", "created_at", "message": {"role": "assistant",
"content"}, "done"}``, a generate answer ``{..., "response", "done"}``; the
last object has ``"done": true``, the ``done_reason`` (``stop``, ``length``,
``content_filter``: how the generation ended, ``gateway/endings``)
and the counts and durations in nanoseconds:

- ``total_duration``: from the request's submission to its end, its wait in
  the queue included (what the person waited);
- ``load_duration``: 0 (a swap is the scheduler's, shared by the jobs it serves);
- ``prompt_eval_count``: the prompt's tokens (exact when the runner counted
  them, as ``usage`` on ``/v1``); ``prompt_eval_duration``: from the first
  dispatch to the first token;
- ``eval_count``: the tokens generated; ``eval_duration``: their decode, over
  every run (a preempted job resumes: docs/design.md §4.9).

A ``tierlm`` object beside says which job, class and producer it was and how
long it waited (Ollama's clients ignore fields they do not know). Tool calls
(``tools.py``'s parser over the generated text) are Ollama's: whole, with
their ``arguments`` as an object, each sent once complete.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Literal

from tierlm.server.gateway.endings import cut, done_reason
from tierlm.server.gateway.jobs import GatewayJob
from tierlm.server.openai.answers import Params
from tierlm.server.openai.tools import Call, Content, ToolCallParser

__all__ = ["Kind", "OllamaAnswer", "created_at"]

Kind = Literal["chat", "generate"]
NS = 1_000_000_000


def created_at(when: dt.datetime | None = None) -> str:
    """RFC 3339 in UTC, as Ollama writes it."""
    when = when or dt.datetime.now(dt.UTC)
    return when.isoformat().replace("+00:00", "Z")


def _ns(seconds: float) -> int:
    return max(0, round(seconds * NS))


def _call(call: Call) -> dict[str, Any] | None:
    """An Ollama tool call; None when its arguments are not a whole JSON object."""
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        return None
    if not isinstance(arguments, dict):
        return None
    return {"function": {"index": call.index, "name": call.name, "arguments": arguments}}


class OllamaAnswer:
    """Renders one job's answer: ``piece`` and ``end`` the streamed lines,
    ``render`` the whole object."""

    def __init__(self, params: Params, kind: Kind) -> None:
        self.params = params
        self.kind = kind
        self.parser = ToolCallParser() if params.tool_calls else None
        self._calls_sent = 0

    def _object(self, text: str, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        base: dict[str, Any] = {"model": self.params.model, "created_at": created_at()}
        if self.kind == "generate":
            base["response"] = text
        else:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                message["tool_calls"] = calls
            base["message"] = message
        base["done"] = False
        return base

    # -- streamed -------------------------------------------------------------------

    def piece(self, text: str) -> list[dict[str, Any]]:
        if self.parser is None:
            return [self._object(text)]
        events = self.parser.feed(text)
        content = "".join(e.text for e in events if isinstance(e, Content))
        calls = self._complete_calls()
        return [self._object(content, calls)] if content or calls else []

    def _complete_calls(self) -> list[dict[str, Any]]:
        assert self.parser is not None
        out = []
        while self._calls_sent < len(self.parser.calls):
            call = self.parser.calls[self._calls_sent]
            if not call.complete:
                break
            self._calls_sent += 1
            rendered = _call(call)
            if rendered is not None:
                out.append(rendered)
        return out

    def end(self, job: GatewayJob) -> list[dict[str, Any]]:
        lines: list[dict[str, Any]] = []
        if self.parser is not None:
            events = self.parser.finish(cut=cut(job.ending))
            content = "".join(e.text for e in events if isinstance(e, Content))
            calls = self._complete_calls()
            if content or calls:
                lines.append(self._object(content, calls))
        lines.append(self._final(job, ""))
        return lines

    # -- not streamed ---------------------------------------------------------------

    def render(self, job: GatewayJob) -> dict[str, Any]:
        text = "".join(job.produced)
        calls: list[dict[str, Any]] = []
        if self.parser is not None:
            parser = ToolCallParser()
            parser.feed(text)
            parser.finish(cut=cut(job.ending))
            text = parser.content
            calls = [c for c in map(_call, parser.calls) if c is not None]
        return self._final(job, text, calls)

    # -- the last object ------------------------------------------------------------

    def _final(
        self, job: GatewayJob, text: str, calls: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        final = self._object(text, calls)
        final["done"] = True
        final["done_reason"] = done_reason(job.ending)
        final.update(durations(job, self.params))
        return final


def durations(job: GatewayJob, params: Params) -> dict[str, Any]:
    """Ollama's counts and durations of an ended job (module docstring)."""
    snap = job.handle.job
    now = job.gateway.scheduler.now()
    started = [run.started_at for run in job.runs if run.started_at is not None]
    first_start = min(started) if started else None
    first = job.first_token_at
    prompt_eval = first - first_start if first is not None and first_start is not None else 0.0
    return {
        "total_duration": _ns(now - snap.submitted_at),
        "load_duration": 0,
        "prompt_eval_count": params.request.approx_prompt_tokens(),
        "prompt_eval_duration": _ns(prompt_eval),
        "eval_count": len(job.produced),
        "eval_duration": _ns(sum(run.decode_seconds for run in job.runs)),
        "tierlm": {
            "job_id": job.id,
            "class": job.meta.class_name,
            "producer": snap.producer,
            "wait": None if first_start is None else first_start - snap.submitted_at,
        },
    }
