"""Giving up a decode in flight (docs/design.md §1.6; ``worker/engine/step_abort.py``).

A real llama.cpp context (the generated ``medium`` model, one thread) decodes
one batch of 2 048 prompt tokens, seconds of work. Asserted on llama.cpp's
own status, never on time: a step every one of whose generations is stopped
is aborted (status 2), whatever it holds; a yield, which stops after a token,
aborts nothing; a step that is still wanted runs to the end.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import pytest

from tierlm.runners.cancellation import CancelReason
from tierlm.testing.gguf_model import write_tiny_llama

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.llama
pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")

from tierlm.runners.llama_cpp import LlamaModelSpec  # noqa: E402
from tierlm.runners.llama_cpp.worker.engine.step_abort import StepAbort  # noqa: E402
from tierlm.runners.llama_cpp.worker.loader import open_model  # noqa: E402

TOKENS = 2048
ABORTED = 2  # llama_decode's GGML_STATUS_ABORTED


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path: Path = write_tiny_llama(tmp_path_factory.mktemp("medium") / "m.gguf", preset="medium")
    spec = LlamaModelSpec(path, n_ctx=4096, n_batch=TOKENS, n_threads=1, use_extra_bufts=False)
    loaded = open_model("m", spec)
    yield loaded
    loaded.close()


def decode_prompt(
    model: Any, reasons: dict[str, CancelReason | None], asked: threading.Event | None = None
) -> tuple[int, int]:
    """Decode one step of ``TOKENS`` prompt tokens whose two "generations"
    are stopped for ``reasons`` (None: wanted); llama.cpp's status and how
    many decodes the watcher gave up. ``asked`` is set once the watcher has
    looked at them."""

    def stops(gen: str) -> CancelReason | None:
        if asked is not None:
            asked.set()
        return reasons[gen]

    import llama_cpp

    ctx = model.llm._ctx.ctx
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
    batch = llama_cpp.llama_batch_init(TOKENS, 0, 1)
    abort = StepAbort(ctx, stops)
    try:
        batch.n_tokens = TOKENS
        for i in range(TOKENS):
            batch.token[i] = 10 + i % 50
            batch.pos[i] = i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i == TOKENS - 1
        return abort.decode(batch, ["a", "b"]), abort.aborted
    finally:
        abort.close()
        llama_cpp.llama_batch_free(batch)


def test_a_step_nobody_wants_is_given_up(model: Any) -> None:
    both = {"a": CancelReason.PREEMPTED, "b": CancelReason.CALLER}
    assert decode_prompt(model, both) == (ABORTED, 1)


def test_a_step_one_generation_still_wants_runs_to_its_end(model: Any) -> None:
    assert decode_prompt(model, {"a": CancelReason.PREEMPTED, "b": None}) == (0, 0)


def test_a_yield_aborts_nothing(model: Any) -> None:
    # A yield stops a generation after its next token: the step makes it.
    both = {"a": CancelReason.PREEMPTED, "b": CancelReason.YIELD}
    assert decode_prompt(model, both) == (0, 0)


def test_a_stop_during_the_step_gives_it_up(model: Any) -> None:
    reasons: dict[str, CancelReason | None] = {"a": None, "b": None}
    asked = threading.Event()

    def stop_once_watched() -> None:
        asked.wait()  # the decode runs, and both are still wanted
        reasons["a"] = reasons["b"] = CancelReason.PREEMPTED

    stopper = threading.Thread(target=stop_once_watched)
    stopper.start()
    try:
        assert decode_prompt(model, reasons, asked) == (ABORTED, 1)
    finally:
        stopper.join()
