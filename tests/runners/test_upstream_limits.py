"""What a broken or hostile upstream can do to the gateway: one line without
end must fail that job only, not grow the gateway's memory without bound
(``tierlm.runners.http.MAX_LINE_BYTES``)."""

from __future__ import annotations

import tracemalloc
from typing import TYPE_CHECKING

import pytest

from tests.runners.helpers import run
from tierlm.runners.cancellation import CancelToken
from tierlm.runners.http import MAX_LINE_BYTES, UpstreamError
from tierlm.runners.openai_compat import OpenAIRunner
from tierlm.runners.requests import GenerationRequest

if TYPE_CHECKING:
    from tests.runners.helpers import FakeServer


def chat(model: str) -> GenerationRequest:
    return GenerationRequest(model_id=model, messages=[{"role": "user", "content": "hi"}])


def test_a_line_without_end_fails_its_job_within_the_line_limit(fake: FakeServer) -> None:
    async def main() -> tuple[list[str], int]:
        async with OpenAIRunner(fake.url) as runner:
            pieces: list[str] = []

            async def read() -> None:
                async for piece in runner.generate(chat("flood"), CancelToken()):
                    pieces.append(piece)

            tracemalloc.start()
            try:
                with pytest.raises(UpstreamError, match="longer than"):
                    await read()
                _now, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            # The next request is served as usual.
            after = [p async for p in runner.generate(chat("fine"), CancelToken())]
            assert after
            return pieces, peak

    pieces, peak = run(main())
    assert pieces == ["t0 "]  # what came before the flood reached the client
    # 64 MiB were sent; what was held stays within a few times the limit.
    assert peak < 8 * MAX_LINE_BYTES, peak


def test_an_upstreams_error_text_reaches_the_client_summarized() -> None:
    from tierlm.runners.http import SUMMARY_CHARS, http_error_message

    body = b'{"error": {"message": "failed to open /srv/models/private/q.gguf: no such file"}}'
    assert (
        http_error_message(500, body)
        == "500 Internal Server Error: failed to open <path>: no such file"
    )
    long = http_error_message(400, b'{"error": "' + b"word " * 500 + b'"}')
    assert len(long.split(": ", 1)[1]) == SUMMARY_CHARS
    # What a client needs to act on stays.
    missing = b'{"error": {"message": "The model `x` does not exist"}}'
    assert http_error_message(404, missing) == "404 Not Found: The model `x` does not exist"
