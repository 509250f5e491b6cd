"""Text no model can read is the client's mistake: 400 naming the field.

JSON may carry a lone UTF-16 surrogate (``"\\ud800"``), which is no character:
it cannot be encoded as UTF-8, so a tokenizer (llama.cpp's) or an upstream's
JSON encoder fails on it, and the job would end as a server error. The gateway
refuses it before the job is queued, naming the field, as it does any invalid
value.
"""

from __future__ import annotations

from collections.abc import Iterator

from tierlm.runners.protocol import GenerationRequest
from tierlm.server.errors import APIError

__all__ = ["check_text"]


def check_text(request: GenerationRequest) -> None:
    """400 if any text of ``request`` is not valid Unicode (a lone surrogate)."""
    for param, text in _texts(request):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise APIError(
                400,
                f"{param}: not valid Unicode: a lone surrogate "
                f"({text[exc.start]!r}) at character {exc.start}",
                param=param,
                code="invalid_text",
            ) from None


def _texts(request: GenerationRequest) -> Iterator[tuple[str, str]]:
    if request.prompt is not None:
        yield "prompt", request.prompt
    for i, message in enumerate(request.messages or ()):
        for key, value in message.items():
            if isinstance(value, str):
                yield f"messages[{i}].{key}", value
    for i, stop in enumerate(request.stop):
        yield f"stop[{i}]", stop
