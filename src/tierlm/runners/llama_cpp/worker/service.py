"""The worker's side of the runner: one persistent decode thread, in order.

Loads, generations and unloads run one after the other on ONE thread that
lives as long as the worker: llama.cpp's OpenMP runtime keeps a team of
threads per calling thread, and a fresh thread per generation grows a fresh
team (measured: +37 ms to the first token). Token counts (and tokenizing,
detokenizing) are served at once beside the decode thread (the command
thread hands them to a few render threads), also while a generation runs,
from a tokenizer-only copy of the model (``loader.open_vocab``), so a swap on
the decode thread never frees what a count is reading.

Generations run in a ``BatchEngine`` (``batch.py``), for any ``slots``
(``Configure``; one slot is a batch of one, docs/design.md §1.6): the
decode thread admits each ``Generate`` into it and steps it, taking new
commands between steps; a load or an unload waits until the generations
running have ended.

The same class runs inside the worker process (``main.py``) and, with
``isolation="thread"``, inside the runner's own process.
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from tierlm.runners.errors import InvalidRequest, RunnerError
from tierlm.runners.llama_cpp.prompt.grammars import is_made, request_grammar
from tierlm.runners.llama_cpp.wire.faults import from_environment
from tierlm.runners.llama_cpp.wire.messages import (
    Configure,
    Detokenize,
    Failed,
    Generate,
    InjectFault,
    Load,
    Progress,
    RenderPrompt,
    Reply,
    Shutdown,
    Tokenize,
    Unload,
)
from tierlm.runners.llama_cpp.worker.engine.batch import BatchEngine
from tierlm.runners.llama_cpp.worker.kv_pool import KvPool
from tierlm.runners.llama_cpp.worker.loader import LoadedModel, Vocab, open_model, open_vocab
from tierlm.runners.llama_cpp.worker.sampling import check_options

if TYPE_CHECKING:
    from collections.abc import Callable

    from tierlm.runners.llama_cpp.wire.control import ControlBlock
    from tierlm.runners.llama_cpp.wire.faults import FaultInjection, FaultPoint
    from tierlm.runners.llama_cpp.wire.messages import Command, Event

__all__ = ["PROBE_PROMPT", "DecodeService"]

logger = logging.getLogger("tierlm.runners.llama_cpp")

# The start-up probe: a prompt of several tokens (the AMX crash is in batched
# decodes) and two sampled tokens.
PROBE_PROMPT = "The quick brown fox jumps over the lazy dog."
RENDER_THREADS = 4
PROBE_TOKENS = 2


class DecodeService:
    """Runs commands for one runner; ``send`` carries the events back."""

    def __init__(self, control: ControlBlock, send: Callable[[Event], None]) -> None:
        self.control = control
        self._send = send
        self._queue: queue.SimpleQueue[Command | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="tierlm-llama-decode", daemon=True)
        self._model: LoadedModel | None = None
        self._vocabs: dict[tuple[str, str, str | None, str | None], Vocab] = {}
        self._vocabs_lock = threading.Lock()
        # docs/design.md §1.8: counts run side by side, so a
        # long one (a huge chat, a big schema's grammar) holds one thread, not
        # every request's count behind it. Four: a person's count finds a free
        # thread unless four slow ones arrived together, and each of those is
        # bounded by the gateway's limits.
        self._renders = ThreadPoolExecutor(RENDER_THREADS, thread_name_prefix="tierlm-render")
        self._faults: list[FaultInjection] = from_environment()
        self._pool = KvPool()
        self._slots = 1
        self._engine: BatchEngine | None = None
        """The running generations of the loaded model."""

    def start(self) -> None:
        self._thread.start()

    def handle(self, command: Command) -> None:
        """Take one command from the runner (on the command thread)."""
        if isinstance(command, RenderPrompt | Tokenize | Detokenize):
            self._renders.submit(self._render, command)
        elif isinstance(command, InjectFault):
            self._faults.append(command.fault)
            self._send(Reply(command.call_id))
        else:
            self._queue.put(command)

    def stop(self) -> None:
        """Finish what is queued, free the model, and end the decode thread."""
        self._renders.shutdown(wait=False, cancel_futures=True)
        self._queue.put(None)
        self._thread.join()

    # -- the decode thread --------------------------------------------------------

    def _run(self) -> None:
        while True:
            command = self._next()
            if command is None:
                self._unload()
                return
            self._attempt(command)

    def _next(self) -> Command | None:
        """The next command to run; while generations run in the batch, new
        ones join it between steps and anything else waits for it to empty."""
        engine = self._engine
        while engine is not None and engine.busy:
            try:
                command = self._queue.get_nowait()
            except queue.Empty:
                engine.step()
                continue
            if not isinstance(command, Generate):
                engine.drain()
                return command
            self._attempt(command)
        return self._queue.get()

    def _attempt(self, command: Command) -> None:
        """Run one command; a failure is its reply."""
        if isinstance(command, Generate) and not is_made(
            command.request.extra, command.request.model_id
        ):
            # docs/design.md §1.8: a grammar is never built on
            # this thread, where it would stall every running stream; one not
            # made yet (no count made it, or it left the cache) is made on a
            # render thread, and the command comes back here.
            self._renders.submit(self._make_grammar, command)
            return
        try:
            if isinstance(command, Generate):
                self._check_loaded(command)
                assert self._engine is not None  # made with the model (``_load``)
                self._engine.admit(command)  # replies when it ends
                return
            self._send(Reply(command.call_id, self._execute(command)))
        except InvalidRequest as exc:
            model_id = getattr(command, "model_id", None) or getattr(
                getattr(command, "request", None), "model_id", None
            )
            self._send(_invalid(command.call_id, exc, model_id))
        except RunnerError as exc:
            self._send(Failed(command.call_id, str(exc), exc.model_id))
        except Exception as exc:
            logger.exception("the llama.cpp worker failed on %s", type(command).__name__)
            self._send(Failed(command.call_id, f"llama.cpp worker error: {exc!r}"))

    def _execute(self, command: Command) -> object:
        if isinstance(command, Configure):
            self._pool = KvPool(command.kv_pool_bytes)
            self._slots = command.slots
            return None
        if isinstance(command, Load):
            return self._load(command)
        if isinstance(command, Unload | Shutdown):
            self._unload()
            return None
        raise TypeError(f"unexpected command {command!r}")

    def _fault(self, point: FaultPoint) -> FaultInjection | None:
        for fault in self._faults:
            if fault.at == point:
                return fault
        return None

    def _unload(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()
        model, self._model = self._model, None
        if model is not None:
            model.close()

    def _load(self, command: Load) -> object:
        self._unload()
        model = open_model(command.model_id, command.spec, probed=command.probe, slots=self._slots)
        self._model = model
        if command.probe:
            self._send(Progress(command.call_id, "probing"))
            self._probe(model)
        self._engine = BatchEngine(
            model, self._slots, self.control, self._send, self._pool, self._fault
        )
        return model.info

    def _probe(self, model: LoadedModel) -> None:
        """A tiny batched generation: if this model crashes llama.cpp on this
        machine, it crashes here, where the runner expects it."""
        fault = self._fault("probe")
        if fault is not None and (not fault.only_with_extra_bufts or model.info.use_extra_bufts):
            fault.fire()
        llm = model.llm
        tokens = model.text.tokenize(PROBE_PROMPT, prompt=True)
        for n, _ in enumerate(llm.generate(tokens, temp=0.0, reset=True), start=1):
            if n == PROBE_TOKENS:
                break

    def _check_loaded(self, command: Generate) -> LoadedModel:
        request = command.request
        model = self._model
        if model is None or model.model_id != request.model_id:
            loaded = model.model_id if model is not None else None
            raise RunnerError(
                f"model {request.model_id!r}: not loaded (loaded: {loaded!r})",
                model_id=request.model_id,
            )
        return model

    # -- the command thread -------------------------------------------------------

    def _make_grammar(self, command: Generate) -> None:
        request = command.request
        try:
            request_grammar(request.extra, request.model_id)
        except InvalidRequest as exc:
            self._send(_invalid(command.call_id, exc, request.model_id))
            return
        except Exception as exc:  # the converter failed: the generation would
            self._send(Failed(command.call_id, f"llama.cpp worker error: {exc!r}"))
            return
        self._queue.put(command)

    def _vocab(self, command: RenderPrompt | Tokenize | Detokenize) -> Vocab:
        # A vocabulary depends on the file and the template, not the load options.
        spec = command.spec
        key = (command.model_id, str(spec.path), spec.chat_template, spec.system_prompt)
        with self._vocabs_lock:  # one copy per model, whichever thread asks first
            vocab = self._vocabs.get(key)
            if vocab is None:
                vocab = self._vocabs[key] = open_vocab(command.model_id, command.spec)
        return vocab

    def _render(self, command: RenderPrompt | Tokenize | Detokenize) -> None:
        try:
            text = self._vocab(command).text
            answer: object
            if isinstance(command, Tokenize):
                answer = text.token_pieces(
                    command.text, add_special=command.add_special, special=command.parse_special
                )
            elif isinstance(command, Detokenize):
                answer = text.detokenize(command.tokens)
            else:
                answer = text.render(command.request)
                # What the generation would refuse, refused now: before the request waits.
                check_options(text.model, command.request)
            self._send(Reply(command.call_id, answer))
        except InvalidRequest as exc:
            self._send(_invalid(command.call_id, exc, command.model_id))
        except RunnerError as exc:
            self._send(Failed(command.call_id, str(exc), exc.model_id))
        except Exception as exc:
            if not isinstance(command, RenderPrompt):
                logger.exception("the llama.cpp worker failed on %s", type(command).__name__)
                self._send(Failed(command.call_id, f"llama.cpp worker error: {exc!r}"))
                return
            # The chat template raised: it refuses these messages.
            message = f"the chat template of model {command.model_id!r} cannot render them: {exc}"
            self._send(_invalid(command.call_id, InvalidRequest(message, param="messages")))


def _invalid(call_id: int, exc: InvalidRequest, model_id: str | None = None) -> Failed:
    return Failed(call_id, str(exc), exc.model_id or model_id, invalid=True, param=exc.param)
