"""``POST /v1/responses``: OpenAI's Responses API on the chat path.

The request becomes the chat completion it means (``responses_request``), is
parsed, counted, classed, keyed and queued exactly as ``/v1/chat/completions``
is (same scheduler, classes, keys and limits), and its answer (``Answer``) is
re-shaped: a ``response`` object whose ``output`` holds a ``message`` item
(``output_text``) and/or ``function_call`` items; streamed, OpenAI's typed
events (``response.created`` ... ``response.output_text.delta`` ...
``response.completed``), each with its ``sequence_number``.

``previous_response_id`` continues a stored conversation. The store
(``response_store.ResponseStore``) keeps each response's whole conversation,
owned by the key that made it (another key finds nothing), up to
``limits.responses_store_bytes`` of JSON over all of them, shared fairly
between keys; past it the largest holder's oldest are forgotten (a 400
naming ``previous_response_id`` then), and a gateway restart forgets them
all. ``store: false`` keeps nothing.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tierlm.server.edge.body import read_json
from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.gateway import GatewayJob
from tierlm.server.gateway.intake import admit
from tierlm.server.gateway.model_names import resolve
from tierlm.server.openai.answers import Answer
from tierlm.server.openai.job_errors import job_error
from tierlm.server.openai.pipeline import ask_of, gateway_of, parse_chat
from tierlm.server.openai.requests import parse
from tierlm.server.openai.response_store import ResponseStore
from tierlm.server.openai.responses_request import NamedTool, ResponsesRequest, chat_messages
from tierlm.server.openai.streaming import JobResult, JobStream
from tierlm.server.settings.schema import FieldError

__all__ = ["routes"]

# A cut answer's status: a Response is "incomplete" for these reasons only.
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def store_of(request: Request) -> ResponseStore:
    """The app's store (made at its first use)."""
    state = request.app.state
    store: ResponseStore | None = getattr(state, "responses_store", None)
    if store is None:
        store = ResponseStore(gateway_of(request).settings.limits.responses_store_bytes)
        state.responses_store = store
    return store


class ResponseAnswer:
    """A chat ``Answer`` re-shaped as a Responses API ``response`` (``render``)
    and its event stream (``JobStream``'s ``SSEFormat``)."""

    def __init__(self, answer: Answer, request: ResponsesRequest, echo: dict[str, Any]) -> None:
        self.answer = answer
        self.request = request
        self.echo = echo
        self.id = f"resp_{secrets.token_hex(12)}"
        self.created = answer.created
        self.on_done: Any = None
        self._seq = 0
        self._items: list[dict[str, Any]] = []  # streamed output items so far
        self._open: dict[str, Any] | None = None  # the item being streamed

    def shell(self, status: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "model": self.answer.params.model,
            "output": [],
            "usage": None,
            **self.echo,
        }

    def render(self, job: GatewayJob) -> dict[str, Any]:
        chat = self.answer.render(job)
        choice = chat["choices"][0]
        message = choice["message"]
        output: list[dict[str, Any]] = []
        if message.get("content"):
            output.append(_message_item(f"msg_{secrets.token_hex(12)}", message["content"]))
        for call in message.get("tool_calls") or ():
            function = call["function"]
            item = _call_item(call["id"], function["name"])
            item.update(arguments=function["arguments"], status="completed")
            output.append(item)
        body = self.shell("completed")
        reason = _INCOMPLETE.get(choice["finish_reason"])
        if reason is not None:
            body["status"] = "incomplete"
            body["incomplete_details"] = {"reason": reason}
        usage = chat["usage"]
        body["output"] = output
        body["usage"] = {
            "input_tokens": usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage["total_tokens"],
        }
        body["tierlm"] = chat["tierlm"]
        if self.on_done is not None:
            self.on_done(body, message)
        return body

    # -- streamed --------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        self._seq += 1
        return {"type": kind, "sequence_number": self._seq - 1, **fields}

    def start(self) -> list[Mapping[str, Any]]:
        self.answer.start()
        shell = self.shell("in_progress")
        return [
            self._event("response.created", response=shell),
            self._event("response.in_progress", response=shell),
        ]

    def piece(self, text: str) -> list[Mapping[str, Any]]:
        return self._from_chunks(self.answer.piece(text))

    def end(self, job: GatewayJob) -> list[Mapping[str, Any]]:
        events = self._from_chunks(self.answer.end(job))
        events += self._close()
        body = self.render(job)
        kind = "response.completed" if body["status"] == "completed" else "response.incomplete"
        return [*events, self._event(kind, response=body)]

    def _from_chunks(self, chunks: Any) -> list[Mapping[str, Any]]:
        events: list[Mapping[str, Any]] = []
        for chunk in chunks:
            for choice in chunk.get("choices", ()):
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    events += self._text(delta["content"])
                for call in delta.get("tool_calls") or ():
                    events += self._call(call)
        return events

    def _text(self, text: str) -> list[dict[str, Any]]:
        events = []
        if self._open is None or self._open["type"] != "message":
            events += self._close()
            item = _message_item(f"msg_{secrets.token_hex(12)}", "")
            item.update(status="in_progress", content=[])
            events += self._added(item)
            part = {"type": "output_text", "text": "", "annotations": []}
            events.append(self._event("response.content_part.added", **self._at(), part=part))
            item["content"].append(part)
        assert self._open is not None
        self._open["content"][0]["text"] += text
        events.append(self._event("response.output_text.delta", **self._at(), delta=text))
        return events

    def _call(self, call: Mapping[str, Any]) -> list[dict[str, Any]]:
        events = []
        if call.get("id"):  # a new call
            events += self._close()
            events += self._added(_call_item(call["id"], call["function"]["name"]))
        fragment = (call.get("function") or {}).get("arguments") or ""
        if fragment and self._open is not None:
            self._open["arguments"] += fragment
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=self._open["id"],
                    output_index=len(self._items) - 1,
                    delta=fragment,
                )
            )
        return events

    def _added(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        self._items.append(item)
        self._open = item
        index = len(self._items) - 1
        return [self._event("response.output_item.added", output_index=index, item=dict(item))]

    def _at(self) -> dict[str, Any]:
        assert self._open is not None
        return {
            "item_id": self._open["id"],
            "output_index": len(self._items) - 1,
            "content_index": 0,
        }

    def _close(self) -> list[dict[str, Any]]:
        item, self._open = self._open, None
        if item is None:
            return []
        index = len(self._items) - 1
        item["status"] = "completed"
        if item["type"] == "message":
            part = item["content"][0]
            events = [
                self._event("response.output_text.done", **_at(item, index), text=part["text"]),
                self._event("response.content_part.done", **_at(item, index), part=part),
            ]
        else:
            events = [
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            ]
        return [*events, self._event("response.output_item.done", output_index=index, item=item)]


def _at(item: Mapping[str, Any], index: int) -> dict[str, Any]:
    return {"item_id": item["id"], "output_index": index, "content_index": 0}


def _message_item(item_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _call_item(call_id: str, name: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id.removeprefix('call_')}",
        "call_id": call_id,
        "name": name,
        "arguments": "",
        "status": "in_progress",
    }


def _echo(request: ResponsesRequest) -> dict[str, Any]:
    """The request's fields a ``response`` repeats."""
    text = request.text.model_dump(by_alias=True, exclude_none=True) if request.text else None
    return {
        "instructions": request.instructions,
        "previous_response_id": request.previous_response_id,
        "tools": [t.model_dump(exclude_none=True) for t in request.tools or ()],
        "tool_choice": (
            request.tool_choice.model_dump()
            if isinstance(request.tool_choice, NamedTool)
            else request.tool_choice or "auto"
        ),
        "parallel_tool_calls": bool(request.parallel_tool_calls),
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_output_tokens": request.max_output_tokens,
        "text": text or {"format": {"type": "text"}},
        "metadata": request.metadata or {},
        "store": request.store is not False,
        "truncation": request.truncation or "disabled",
        "reasoning": {"effort": None, "summary": None},
        "user": request.user,
    }


def _field_error(exc: FieldError) -> APIError:
    where = ""
    for part in exc.path:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else part)
    return APIError(400, f"{where}: {exc.message}", param=where, code=exc.code)


async def create_response(request: Request) -> Response:
    gateway = gateway_of(request)
    principal = gateway.keys.authenticate(request)
    owner = principal.name or ""
    settings = gateway.settings
    body = await read_json(request, settings.limits.max_body_bytes)
    asked = parse(ResponsesRequest, body)
    history, chat_body = _conversation(store_of(request), owner, asked)
    # "model@gana": the class an app can name without headers (model_names).
    model, headers = resolve(gateway, principal, request.headers, chat_body["model"])
    params = parse_chat({**chat_body, "model": model}, settings.limits, settings.backend.kind)
    [job] = await admit(gateway, principal, headers, ask_of(params))
    params = replace(params, request=job.request, include_usage=False)
    answer = ResponseAnswer(Answer(params), asked, _echo(asked))
    if asked.store is not False:
        conversation = [*history, *chat_messages(asked.input)]
        answer.on_done = _keeper(store_of(request), owner, conversation)
    if params.stream:
        return JobStream(job, answer, job_error, settings.server.sse_heartbeat)
    return JobResult(job, answer.render, job_error)


def _conversation(
    store: ResponseStore, owner: str, asked: ResponsesRequest
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The stored conversation of ``owner`` that ``asked`` continues, and the
    chat request it makes. Another key's id is as unknown as one never stored."""
    history: list[dict[str, Any]] = []
    if asked.previous_response_id is not None:
        found = store.get(owner, asked.previous_response_id)
        if found is None:
            raise APIError(
                400,
                f"previous_response_id: no stored response {asked.previous_response_id!r} "
                "(never stored, stored with store: false, or forgotten past "
                "limits.responses_store_bytes)",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        history = found[1]
    try:
        return history, asked.chat_body(history)
    except FieldError as exc:
        raise _field_error(exc) from None


def _keeper(store: ResponseStore, owner: str, conversation: list[dict[str, Any]]) -> Any:
    def keep(response: dict[str, Any], message: dict[str, Any]) -> None:
        said: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            said["tool_calls"] = message["tool_calls"]
        store.put(owner, response, [*conversation, said])

    return keep


async def get_response(request: Request) -> Response:
    gateway = gateway_of(request)
    principal = gateway.keys.authenticate(request)
    found = store_of(request).get(principal.name or "", request.path_params["response_id"])
    if found is None:
        raise APIError(404, "no stored response with this id", code="not_found")
    return JSONResponse(found[0])


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/responses", create_response, methods=["POST"]),
        Route("/v1/responses/{response_id:str}", get_response, methods=["GET"]),
    ]
