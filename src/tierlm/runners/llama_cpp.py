"""llama.cpp in-process through llama-cpp-python.

The direct analogue of the seed's on-device runner: one ``Llama`` (one GGUF,
one context) at a time. ``load`` closes the old model and opens the new one;
``generate`` evaluates the prompt and samples token by token in a worker thread
and hands each token's text to the event loop, which is never blocked.

Stopping:

- between tokens, the worker reads the cancel token (a plain attribute) before
  every decode, so a generation stops within one token of a cancel;
- during a prompt evaluation (one ``llama_decode`` of up to the whole prompt,
  seconds for a long prompt on a small device), llama.cpp's abort callback
  (``llama_set_abort_callback``) polls the same flag between graph nodes and
  aborts the decode; llama.cpp then removes the aborted batch from the KV cache
  and the context keeps working. The callback is installed only while a prompt
  is evaluated: it costs a Python call per graph node, and a single-token decode
  is short enough to wait for.

Resume: the prompt is re-tokenized with ``resume_text`` appended (for chat, the
chat template rendered with the assistant's generation prompt, then the partial
answer: a continued assistant message). llama-cpp-python reuses the KV cache for
the longest common prefix with the previous generation, so resuming right after
a preemption, with nothing run in between, re-evaluates almost nothing.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tierlm.runners.protocol import (
    CancelToken,
    GenerationRequest,
    Message,
    RunnerError,
    unknown_model,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping, Sequence
    from os import PathLike

__all__ = [
    "DEFAULT_N_BATCH",
    "DEFAULT_N_CTX",
    "GenerationStats",
    "LlamaCppRunner",
    "LlamaModelSpec",
    "default_threads",
]

# llama-cpp-python's server default (its Llama() default, 512, is too short for chat).
DEFAULT_N_CTX = 2048
# llama-cpp-python's Llama() default: tokens per llama_decode call of a prompt.
DEFAULT_N_BATCH = 512
# llama-cpp-python's generate() sampling defaults, used when a request leaves them open.
_SAMPLING_DEFAULTS: dict[str, Any] = {"temp": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
# GenerationRequest.extra keys passed to Llama.generate (OpenAI names -> llama-cpp names).
_SAMPLING_KEYS = {
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "typical_p": "typical_p",
    "repeat_penalty": "repeat_penalty",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "mirostat_mode": "mirostat_mode",
    "mirostat_tau": "mirostat_tau",
    "mirostat_eta": "mirostat_eta",
}
# When a model has no chat template: ChatML, llama.cpp server's fallback too.
_CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


RUN_AHEAD = 8
"""Tokens the decode thread may produce beyond what its reader has taken.

Unbounded, a thread decoding thousands of tokens a second runs far ahead of a
busy event loop, and all of that is decoded after a cancel the reader would
have honoured at once. A few tokens of slack keep the thread from waiting on
the loop for every token."""


def default_threads() -> int:
    """All the cores this process may use.

    llama-cpp-python defaults to half the cores; on a 2-core machine all cores
    doubled decode speed, and the device runs one generation at a time.
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True, slots=True)
class LlamaModelSpec:
    """A model id's GGUF file and load options.

    Two specs of the same file with different options are two models: loading
    one after the other is a swap, as it is for llama.cpp.
    """

    path: str | PathLike[str]
    n_ctx: int = DEFAULT_N_CTX
    n_threads: int | None = None
    """Decode threads; None = ``default_threads()`` (all cores).

    On a machine where other busy processes share the cores, fewer threads can be
    much faster: llama.cpp's threads wait for each other after every operation,
    and one descheduled thread stalls them all (measured here: 2 threads fell
    from ~150 to ~5-90 tokens/s while tests ran alongside; 1 thread held ~80).
    """
    n_threads_batch: int | None = None
    """Prompt-evaluation threads; None = ``n_threads``."""
    n_batch: int = DEFAULT_N_BATCH
    n_gpu_layers: int = 0
    seed: int | None = None
    """Sampling seed; None = llama.cpp's default (a random seed)."""
    chat_template: str | None = None
    """Overrides the model's ``tokenizer.chat_template``."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Other ``llama_cpp.Llama`` keyword arguments (``use_mmap``, ``flash_attn``...)."""


@dataclass(slots=True)
class GenerationStats:
    """What the last ``generate`` did; for tests and benchmarks."""

    prompt_tokens: int = 0
    """Tokens of prompt + resume text."""
    tokens: int = 0
    """Tokens generated (pieces handed to the event loop)."""
    prefill_seconds: float = 0.0
    """From the start of the worker to the first token (or the abort)."""
    decode_seconds: float = 0.0
    """From the first token to the end."""
    ended: Literal[
        "", "max_tokens", "eos", "stop", "cancelled", "prefill_aborted", "context_full", "error"
    ] = ""


_Item = tuple[Literal["piece", "end", "error"], Any]


class LlamaCppRunner:
    """Run GGUF models in-process with llama-cpp-python.

    ``models`` maps model ids to a ``LlamaModelSpec`` or just a path (default
    options)::

        runner = LlamaCppRunner({
            "qwen": LlamaModelSpec("qwen2.5-0.5b.gguf", n_ctx=4096),
            "qwen-8k": LlamaModelSpec("qwen2.5-0.5b.gguf", n_ctx=8192),
        })
        await runner.load("qwen")
    """

    def __init__(self, models: Mapping[str, LlamaModelSpec | str | PathLike[str]]) -> None:
        self.models: dict[str, LlamaModelSpec] = {
            model_id: spec if isinstance(spec, LlamaModelSpec) else LlamaModelSpec(spec)
            for model_id, spec in models.items()
        }
        self.loaded_model: str | None = None
        self.loads = 0
        """How many times ``load`` switched the model."""
        self.last_load_seconds: float | None = None
        self.last_stats: GenerationStats | None = None
        self.last_worker: threading.Thread | None = None
        """The thread of the last generation (tests check that it exits)."""
        # The device: held by a generation's worker for its whole run and by a
        # swap, so a swap never frees a model that a stopping worker still uses.
        self._device = threading.Lock()
        self._llm: Any = None
        self._llm_id: str | None = None
        self._chat_template = _CHATML
        self._bos_text = ""
        self._eos_text = ""
        # The abort callback of the current context reads this; set per prompt.
        self._abort: Callable[[], bool] | None = None
        self._abort_cb: Any = None

    # -- load --------------------------------------------------------------

    def spec(self, model_id: str) -> LlamaModelSpec:
        try:
            return self.models[model_id]
        except KeyError:
            raise unknown_model(model_id, self.models) from None

    async def load(self, model_id: str) -> None:
        if model_id == self.loaded_model:
            return
        spec = self.spec(model_id)
        self.loaded_model = None
        started = time.perf_counter()
        # In a thread: opening a large model takes seconds. Shielded: a swap is
        # not interruptible, so if our caller is cancelled the swap completes.
        await asyncio.shield(asyncio.to_thread(self._swap, model_id, spec))
        self.loaded_model = model_id
        self.loads += 1
        self.last_load_seconds = time.perf_counter() - started

    async def aclose(self) -> None:
        """Free the loaded model (waiting for a stopping generation)."""
        await asyncio.to_thread(self._close)
        self.loaded_model = None

    def _close(self) -> None:
        with self._device:
            self._free()

    def _free(self) -> None:
        llm, self._llm, self._llm_id = self._llm, None, None
        if llm is not None:
            llm.close()
        self._abort_cb = None

    def _swap(self, model_id: str, spec: LlamaModelSpec) -> None:
        with self._device:
            self._free()
            path = Path(spec.path)
            try:
                with path.open("rb") as f:
                    magic = f.read(4)
            except OSError as exc:
                raise RunnerError(
                    f"model {model_id!r}: cannot open {str(path)!r}: {exc.strerror or exc}",
                    model_id=model_id,
                ) from exc
            if magic != b"GGUF":
                raise RunnerError(
                    f"model {model_id!r}: {str(path)!r} is not a GGUF file "
                    f"(starts with {magic!r}, expected b'GGUF')",
                    model_id=model_id,
                )
            try:
                import llama_cpp
            except ImportError as exc:
                raise RunnerError(
                    f"model {model_id!r}: llama-cpp-python is not installed "
                    "(pip install 'tierlm[llama]')",
                    model_id=model_id,
                ) from exc
            threads = spec.n_threads or default_threads()
            kwargs: dict[str, Any] = {
                "n_ctx": spec.n_ctx,
                "n_threads": threads,
                "n_threads_batch": spec.n_threads_batch or threads,
                "n_batch": spec.n_batch,
                "n_gpu_layers": spec.n_gpu_layers,
                "verbose": False,
            }
            if spec.seed is not None:
                kwargs["seed"] = spec.seed
            kwargs.update(spec.options)
            try:
                llm = llama_cpp.Llama(model_path=str(path), **kwargs)
            except Exception as exc:
                raise RunnerError(
                    f"model {model_id!r}: llama.cpp could not load {str(path)!r}: {exc}",
                    model_id=model_id,
                ) from exc
            self._llm, self._llm_id = llm, model_id
            template = spec.chat_template or llm.metadata.get("tokenizer.chat_template")
            self._chat_template = template or _CHATML
            self._bos_text = _token_text(llm, llm.token_bos())
            self._eos_text = _token_text(llm, llm.token_eos())

            def abort(_: Any) -> bool:
                check = self._abort
                return bool(check is not None and check())

            # Kept on self: ctypes frees a callback once nothing references it.
            self._abort_cb = llama_cpp.ggml_abort_callback(abort)

    # -- generate ----------------------------------------------------------

    def render_chat(self, messages: Sequence[Message]) -> str:
        """The loaded model's chat template applied to ``messages``, ready for
        the assistant's answer (as llama-cpp-python's chat completion does)."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        formatter = Jinja2ChatFormatter(
            template=self._chat_template, eos_token=self._eos_text, bos_token=self._bos_text
        )
        rendered: list[Any] = [dict(m) for m in messages]
        prompt: str = formatter(messages=rendered).prompt
        return prompt

    def prompt_text(self, request: GenerationRequest) -> str:
        """The text the model continues: prompt or rendered chat, + resume_text."""
        if request.prompt is not None:
            return request.prompt + request.resume_text
        assert request.messages is not None
        return self.render_chat(request.messages) + request.resume_text

    def generate(self, request: GenerationRequest, cancel: CancelToken) -> AsyncIterator[str]:
        return self._generate(request, cancel)

    async def _generate(
        self, request: GenerationRequest, cancel: CancelToken
    ) -> AsyncIterator[str]:
        # Checked on the first iteration, like every error of a generation.
        if request.model_id != self.loaded_model:
            raise RunnerError(
                f"model {request.model_id!r}: not loaded (loaded: {self.loaded_model!r})",
                model_id=request.model_id,
            )
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[_Item] = asyncio.Queue()
        done: asyncio.Future[None] = loop.create_future()
        left = threading.Event()  # the consumer went away: stop like a cancel

        def stop() -> bool:
            return cancel.cancelled or left.is_set()

        slots = threading.Semaphore(RUN_AHEAD)

        def emit(item: _Item) -> bool:
            if item[0] == "piece":
                # Bounded run-ahead: wait for the reader, but notice a stop.
                while not slots.acquire(timeout=0.05):
                    if stop():
                        return False
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is closed
                left.set()
                return False
            return True

        def finished() -> None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, done)

        stats = GenerationStats()
        self.last_stats = stats
        worker = threading.Thread(
            target=self._work,
            args=(request, stats, stop, emit, finished),
            name=f"tierlm-llama-{request.model_id}",
            daemon=True,
        )
        self.last_worker = worker
        worker.start()
        try:
            while True:
                kind, value = await queue.get()
                if kind == "piece":
                    slots.release()
                    if cancel.cancelled:
                        return
                    yield value
                elif kind == "error":
                    raise value
                else:
                    return
        finally:
            left.set()
            # Return only once the device is free: the worker is at most one
            # token (or one aborted prompt batch) away from exiting. Shielded: if
            # this task is cancelled meanwhile, the worker still exits by itself.
            await asyncio.shield(done)

    def _work(
        self,
        request: GenerationRequest,
        stats: GenerationStats,
        stop: Callable[[], bool],
        emit: Callable[[_Item], bool],
        finished: Callable[[], None],
    ) -> None:
        started = time.perf_counter()
        try:
            with self._device:
                self._run(request, stats, stop, emit, started)
        except RunnerError as exc:
            stats.ended = "error"
            emit(("error", exc))
        except Exception as exc:
            stats.ended = "error"
            emit(
                (
                    "error",
                    RunnerError(
                        f"model {request.model_id!r}: generation failed: {exc}",
                        model_id=request.model_id,
                    ),
                )
            )
        else:
            emit(("end", None))
        finally:
            finished()

    def _run(
        self,
        request: GenerationRequest,
        stats: GenerationStats,
        stop: Callable[[], bool],
        emit: Callable[[_Item], bool],
        started: float,
    ) -> None:
        import llama_cpp

        model_id = request.model_id
        llm = self._llm
        if llm is None or self._llm_id != model_id:
            raise RunnerError(
                f"model {model_id!r}: not loaded (loaded: {self._llm_id!r})", model_id=model_id
            )
        if stop():
            stats.ended = "cancelled"
            return
        text = self.prompt_text(request)
        # Chat: the template writes any BOS itself (llama-cpp-python's chat
        # handler tokenizes the same way). Prompt: the model's add_bos flag.
        add_bos = request.prompt is not None and bool(llm._model.add_bos_token())
        tokens = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)
        n_ctx = llm.n_ctx()
        stats.prompt_tokens = len(tokens)
        if len(tokens) >= n_ctx:
            raise RunnerError(
                f"model {model_id!r}: prompt of {len(tokens)} tokens does not fit "
                f"the context of {n_ctx} tokens",
                model_id=model_id,
            )
        sampling = dict(_SAMPLING_DEFAULTS)
        if request.temperature is not None:
            sampling["temp"] = request.temperature
        for key, value in request.extra.items():
            if key in _SAMPLING_KEYS:
                sampling[_SAMPLING_KEYS[key]] = value
        model_seed = llm._seed
        if "seed" in request.extra:  # for this request only; restored below
            llm.set_seed(int(request.extra["seed"]))
        vocab = llm._model.vocab
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        stops = [s for s in request.stop if s]
        held = ""  # text that may be the start of a stop string, not yet emitted
        ctx = llm._ctx.ctx
        null_cb = llama_cpp.ggml_abort_callback()

        generator = llm.generate(tokens, reset=True, **sampling)
        first_at: float | None = None
        try:
            for i in range(request.max_tokens):
                if stop():
                    stats.ended = "cancelled"
                    break
                if llm.n_tokens >= n_ctx:
                    stats.ended = "context_full"
                    break
                if first_at is None:
                    # The prompt evaluation: abortable between graph nodes.
                    self._abort = stop
                    llama_cpp.llama_set_abort_callback(ctx, self._abort_cb, None)
                    try:
                        token = next(generator)
                    except RuntimeError as exc:
                        if stop() and "returned 2" in str(exc):  # GGML_STATUS_ABORTED
                            stats.ended = "prefill_aborted"
                            stats.prefill_seconds = time.perf_counter() - started
                            # n_tokens counts only the batches that completed; the
                            # next eval drops the rest from the KV cache.
                            return
                        raise
                    finally:
                        llama_cpp.llama_set_abort_callback(ctx, null_cb, None)
                        self._abort = None
                    first_at = time.perf_counter()
                    stats.prefill_seconds = first_at - started
                else:
                    token = next(generator)
                if llama_cpp.llama_vocab_is_eog(vocab, token):
                    stats.ended = "eos"
                    break
                piece = decoder.decode(llm.detokenize([token], special=False))
                if stops:
                    held += piece
                    hit = _find_stop(held, stops)
                    if hit is not None:
                        stats.tokens += 1
                        emit(("piece", held[:hit]))
                        held = ""
                        stats.ended = "stop"
                        break
                    # Hold back what may start a stop string, but still one
                    # piece per token (possibly empty), so pieces count tokens;
                    # the last token releases everything.
                    cut = len(held) if i == request.max_tokens - 1 else _safe_prefix(held, stops)
                    piece, held = held[:cut], held[cut:]
                stats.tokens += 1
                if not emit(("piece", piece)):
                    stats.ended = "cancelled"
                    break
            else:
                stats.ended = "max_tokens"
            if held and stats.ended in ("eos", "context_full"):
                # Text held back for a stop string that never came: the end
                # token's piece. (After a cancel it is dropped, so a resume
                # regenerates it: nothing is duplicated.)
                stats.tokens += 1
                emit(("piece", held))
        finally:
            generator.close()
            llm.set_seed(model_seed)
            if first_at is not None:
                stats.decode_seconds = time.perf_counter() - first_at


def _settle(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _token_text(llm: Any, token: int) -> str:
    if token < 0:
        return ""
    text: str = llm._model.token_get_text(token)
    return text


def _find_stop(text: str, stops: Sequence[str]) -> int | None:
    """Index of the earliest stop string in ``text``, None if there is none."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else None


def _safe_prefix(text: str, stops: Sequence[str]) -> int:
    """Length of the prefix of ``text`` that cannot be part of a stop string."""
    for start in range(len(text)):
        rest = text[start:]
        if any(s.startswith(rest) for s in stops):
            return start
    return len(text)
