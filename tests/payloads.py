"""The request bodies the tests send, in one place: the messages of a chat,
an OpenAI chat body, a story numbered ``i`` (a stream of its own on a real
model), an Ollama chat body. Plain data: nothing here imports the app, so
every tier (the fast one, the real-backend and the Ray tests) can use it.

A body's content is part of what some tests assert (a prompt's token count,
a template's rendering): a test that needs other words passes its own
``messages``, it does not change these."""

from __future__ import annotations

from typing import Any

MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
"""The chat of the simulated-device tests."""

HI: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
"""The shortest chat: a request that only has to be served."""

STORY: list[dict[str, Any]] = [{"role": "user", "content": "Tell me a story."}]
"""The chat of the runner tests: a real model answers it at length."""


def story(i: int = 0) -> list[dict[str, Any]]:
    """The ``i``-th of several different chats (a stream each on a real model)."""
    return [{"role": "user", "content": f"Tell me story number {i}."}]


def chat_body(
    model: str = "sim-a",
    max_tokens: int | None = 5,
    *,
    messages: list[dict[str, Any]] = MESSAGES,
    **extra: Any,
) -> dict[str, Any]:
    """An OpenAI chat-completions body; ``max_tokens=None`` leaves the field
    out (the gateway's default applies)."""
    body: dict[str, Any] = {"model": model, "messages": messages}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return {**body, **extra}


def ollama_chat_body(
    model: str = "sim-a", *, messages: list[dict[str, Any]] = MESSAGES, **extra: Any
) -> dict[str, Any]:
    """An Ollama ``/api/chat`` body (its length is ``options.num_predict``)."""
    return {"model": model, "messages": messages, **extra}
