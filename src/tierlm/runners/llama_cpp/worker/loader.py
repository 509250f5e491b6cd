"""Opening a GGUF in llama.cpp, with every load option applied and checked.

Runs where the model lives: the worker process (or, with ``isolation="thread"``,
this process). ``open_model`` gives a ``LoadedModel`` (a ``Llama``, its chat
template compiled once, its abort callback); ``open_vocab`` a tokenizer-only
model for counting tokens of a model that is not loaded.
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tierlm.errors import install_hint
from tierlm.runners.errors import InvalidRequest, RunnerError
from tierlm.runners.llama_cpp.prompt.chat_format import chat_for_template
from tierlm.runners.llama_cpp.prompt.literal_text import (
    Literals,
    Piece,
    split_rendered,
    tokenize_pieces,
)
from tierlm.runners.llama_cpp.wire.messages import LoadInfo
from tierlm.runners.requests import (
    FIM_FILES,
    FIM_MIDDLE,
    FIM_SUFFIX,
    GenerationRequest,
    Message,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from tierlm.runners.llama_cpp.model.spec import LlamaModelSpec

__all__ = ["CHATML", "LoadedModel", "Vocab", "open_model", "open_vocab"]

# When a model has no chat template: ChatML, llama.cpp server's fallback too.
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# llama-cpp-python sets a model's layer count to INT32_MAX for n_gpu_layers=-1.
_ALL_LAYERS = 0x7FFFFFFF
# Llama() reads llama_model_default_params() while it runs (see _construct).
_construct_lock = threading.Lock()


@functools.lru_cache(maxsize=32)
def _formatter(template: str, eos: str, bos: str) -> Any:
    """A compiled chat template. llama-cpp-python's chat completion compiles the
    Jinja2 template on every request (~1.5 ms each); here once per model."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    return Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)


def _token_text(model: Any, token: int) -> str:
    if token < 0:
        return ""
    text: str = model.token_get_text(token)
    return text


@dataclass(slots=True)
class _Text:
    """A model's tokenizer and chat template: what counting and generating share."""

    model: Any
    """llama-cpp-python's ``_internals.LlamaModel``."""
    template: str
    bos_text: str
    eos_text: str
    add_bos: bool
    system_prompt: str | None

    @classmethod
    def of(cls, model: Any, spec: LlamaModelSpec) -> _Text:
        template = spec.chat_template or model.metadata().get("tokenizer.chat_template") or CHATML
        return cls(
            model,
            template,
            _token_text(model, model.token_bos()),
            _token_text(model, model.token_eos()),
            bool(model.add_bos_token()),
            spec.system_prompt,
        )

    def chat_pieces(
        self, messages: Sequence[Message], extra: Mapping[str, Any] | None = None
    ) -> list[Piece]:
        """The chat template applied to ``messages``, ready for the assistant's
        answer (as llama-cpp-python's chat completion does), with the tools
        and tool calls of ``extra`` (``chat_format.py``); cut where a message's
        text must be tokenized as text (``literal_text.py``)."""
        formatter = _formatter(self.template, self.eos_text, self.bos_text)
        literals = Literals(self.model)
        rendered = literals.messages(messages)
        if self.system_prompt is not None and not any(
            m.get("role") in ("system", "developer") for m in rendered
        ):
            rendered.insert(0, {"role": "system", "content": self.system_prompt})
        marked = literals.tools(extra or {})
        rendered, variables = chat_for_template(rendered, marked, self.template)
        prompt: str = formatter(messages=rendered, **variables).prompt
        return split_rendered(prompt, literals.texts)

    def prompt_text(self, request: GenerationRequest) -> str:
        """The text before the answer: the prompt, or the rendered chat."""
        if request.prompt is not None:
            return self.infill(request)[0] if FIM_SUFFIX in request.extra else request.prompt
        assert request.messages is not None
        return "".join(text for text, _ in self.chat_pieces(request.messages, request.extra))

    def prompt_tokens(self, request: GenerationRequest, resume: str = "") -> tuple[str, list[int]]:
        """The text before the answer and the tokens of it + ``resume`` (the
        resume text is tokenized with the template's last piece, as before)."""
        if request.prompt is not None:
            if FIM_SUFFIX in request.extra:
                return self.infill(request, resume)
            return request.prompt, self.tokenize(request.prompt + resume, prompt=True)
        assert request.messages is not None
        pieces = self.chat_pieces(request.messages, request.extra)
        text = "".join(piece for piece, _ in pieces)
        if resume and not pieces[-1][1]:
            pieces[-1] = (pieces[-1][0] + resume, False)
        elif resume:
            pieces.append((resume, False))
        return text, tokenize_pieces(self.model, pieces)

    def tokenize(self, text: str, *, prompt: bool) -> list[int]:
        """Chat: the template writes any BOS itself (llama-cpp-python's chat
        handler tokenizes the same way). Prompt: the model's add_bos flag."""
        tokens: list[int] = self.model.tokenize(
            text.encode("utf-8"), add_bos=prompt and self.add_bos, special=True
        )
        return tokens

    def infill(self, request: GenerationRequest, resume: str = "") -> tuple[str, list[int]]:
        """Fill-in-the-middle (``extra["suffix"]``): the prompt is the text
        before the gap, the suffix the text after it, as llama-server's
        ``/infill`` lays them out: ``[input_extra]<FIM_PRE>prompt<FIM_SUF>suffix
        <FIM_MID>[infill_middle + resume]``; the extra files after
        ``<FIM_REP>`` and ``<FIM_SEP>`` when the model has those tokens (the
        repo-level pattern). The parts are tokenized as plain text: a special
        token's text inside code stays text. A model without FIM tokens
        refuses it (``InvalidRequest`` naming ``suffix``)."""
        import llama_cpp

        vocab = self.model.vocab
        pre, suf, mid = (
            llama_cpp.llama_vocab_fim_pre(vocab),
            llama_cpp.llama_vocab_fim_suf(vocab),
            llama_cpp.llama_vocab_fim_mid(vocab),
        )
        if min(pre, suf, mid) < 0:
            raise InvalidRequest(
                f"{FIM_SUFFIX}: model {request.model_id!r} has no fill-in-the-middle tokens "
                "(FIM_PRE, FIM_SUF, FIM_MID in its GGUF): it cannot fill a gap; serve a code "
                "model that has them (Qwen2.5-Coder, CodeLlama, StarCoder2...), or send the text "
                "before the gap alone as the prompt",
                param=FIM_SUFFIX,
                model_id=request.model_id,
            )
        rep, sep = llama_cpp.llama_vocab_fim_rep(vocab), llama_cpp.llama_vocab_fim_sep(vocab)
        assert request.prompt is not None
        parts: list[tuple[int | str, ...]] = []  # a token id, or text
        files = request.extra.get(FIM_FILES) or ()
        if files and rep >= 0 and sep >= 0:
            parts.append((rep, "myproject\n"))
            for file in files:
                parts.append((sep, f"{file.get('filename', '')}\n{file.get('text', '')}"))
            parts.append((sep, "filename\n"))
        else:
            for file in files:
                name = file.get("filename")
                parts.append((f"{name}\n" if name else "", str(file.get("text", ""))))
        middle = str(request.extra.get(FIM_MIDDLE) or "") + resume
        parts += [(pre, request.prompt), (suf, str(request.extra[FIM_SUFFIX])), (mid, middle)]
        bos = self.model.token_bos()
        tokens: list[int] = [bos] if self.add_bos and bos >= 0 else []
        text = self.bos_text if tokens else ""
        for part in parts:
            for item in part:
                if isinstance(item, int):
                    tokens.append(item)
                    text += _token_text(self.model, item)
                elif item:
                    tokens += self.model.tokenize(
                        item.encode("utf-8"), add_bos=False, special=False
                    )
                    text += item
        return text[: len(text) - len(resume)] if resume else text, tokens

    def token_pieces(
        self, text: str, *, add_special: bool, special: bool
    ) -> list[tuple[int, bytes]]:
        """``text`` as tokens (llama-server's ``/tokenize``), each with its piece."""
        tokens: list[int] = self.model.tokenize(
            text.encode("utf-8"), add_bos=add_special, special=special
        )
        return [(token, self.piece(token)) for token in tokens]

    def detokenize(self, tokens: Sequence[int]) -> str:
        """``tokens`` as text (llama-server's ``/detokenize``): their pieces,
        special tokens as their text."""
        n_vocab = self.model.n_vocab()
        for i, token in enumerate(tokens):
            if not 0 <= token < n_vocab:
                raise InvalidRequest(
                    f"tokens[{i}]: token id {token} is not in this model's vocabulary "
                    f"(0 to {n_vocab - 1})",
                    param=f"tokens[{i}]",
                )
        return b"".join(self.piece(token) for token in tokens).decode("utf-8", "replace")

    def piece(self, token: int) -> bytes:
        """One token's bytes (a special token's text)."""
        import ctypes

        import llama_cpp

        size = 32
        while True:
            buffer = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_token_to_piece(self.model.vocab, token, buffer, size, 0, True)
            if n >= 0:
                return buffer.raw[:n]
            size = -n

    def render(self, request: GenerationRequest) -> tuple[str, int]:
        """The text the model continues from (+ resume text) and its tokens."""
        text, tokens = self.prompt_tokens(request, request.resume_text)
        return text + request.resume_text, len(tokens)


@dataclass(slots=True)
class LoadedModel:
    """One ``Llama`` with its options applied, ready to generate."""

    model_id: str
    spec: LlamaModelSpec
    llm: Any
    text: _Text
    info: LoadInfo

    @property
    def key(self) -> str:
        """Whose KV states fit this context: the model id and every load option."""
        return f"{self.model_id}\0{self.spec!r}"

    def close(self) -> None:
        self.llm.close()


@dataclass(slots=True)
class Vocab:
    """A tokenizer-only model (``vocab_only``): counts tokens of a model that
    is not loaded, in milliseconds and without its weights."""

    text: _Text

    def close(self) -> None:
        self.text.model.close()


def _check_file(model_id: str, spec: LlamaModelSpec) -> str:
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
    return str(path)


def _import(model_id: str) -> Any:
    try:
        import llama_cpp
    except ImportError as exc:
        raise RunnerError(
            f"model {model_id!r}: llama-cpp-python is not installed ({install_hint('local')})",
            model_id=model_id,
        ) from exc
    _quiet_native_log(llama_cpp)
    return llama_cpp


# What llama.cpp logs as an error when a decode is aborted: a preemption
# (docs/design.md §4), tierlm's own doing, printed raw to the terminal otherwise.
_EXPECTED = (b"removing memory module entries",)
_log_callback: Any = None


def _quiet_native_log(llama_cpp: Any) -> None:
    """llama.cpp's log, through llama-cpp-python's own callback, less the lines
    above (once per process)."""
    global _log_callback
    if _log_callback is not None:
        return
    import ctypes

    from llama_cpp import _logger

    forward = _logger.llama_log_callback

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def callback(level: int, text: bytes, user_data: Any) -> None:
        if not any(line in text for line in _EXPECTED):
            forward(level, text, user_data)

    _log_callback = callback  # a reference: ctypes must not free it
    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))


def _construct(
    llama_cpp: Any, path: str, kwargs: dict[str, Any], extra_bufts: bool, slots: int = 1
) -> Any:
    """``Llama(path, **kwargs)`` with the model parameter ``use_extra_bufts`` set,
    and, for ``slots`` > 1, a context of that many sequence ids.

    ``Llama()`` has no argument for them (an unknown keyword would be ignored),
    so llama_model_default_params and llama_context_default_params, which
    ``Llama()`` calls to build its parameters, are wrapped for the duration of
    the call, under a lock. The KV cache is split per sequence
    (``kv_unified`` off): each sequence attends over its own cells only, which
    llama.cpp's own header recommends "when the sequences do not share a large
    prefix" (the agents of docs/design.md §1.6).
    """
    module = llama_cpp.llama_cpp
    with _construct_lock:
        default = module.llama_model_default_params
        default_context = module.llama_context_default_params

        def params() -> Any:
            p = default()
            p.use_extra_bufts = extra_bufts
            return p

        def context_params() -> Any:
            p = default_context()
            if slots > 1:
                p.n_seq_max = slots
                p.kv_unified = False
            return p

        module.llama_model_default_params = params
        module.llama_context_default_params = context_params
        try:
            return llama_cpp.Llama(model_path=path, **kwargs)
        finally:
            module.llama_model_default_params = default
            module.llama_context_default_params = default_context


def _verify_applied(
    model_id: str, spec: LlamaModelSpec, llm: Any, extra_bufts: bool, slots: int = 1
) -> None:
    """Read every option back from llama.cpp's context, or from the parameter
    structs llama-cpp-python handed it; raise if one was not applied."""
    import llama_cpp

    ctx = llm._ctx.ctx
    threads = spec.threads
    wanted: dict[str, object] = {
        "n_ctx": spec.n_ctx,  # per sequence; llama.cpp rounds it up: at least this
        "n_threads": threads,
        "n_threads_batch": spec.n_threads_batch or threads,
        # llama-cpp-python caps it at the context's n_ctx (all sequences')
        "n_batch": min(spec.n_batch, spec.n_ctx * slots),
        "n_gpu_layers": _ALL_LAYERS if spec.n_gpu_layers == -1 else spec.n_gpu_layers,
        "use_extra_bufts": extra_bufts,
        "flash_attn": bool(spec.flash_attn),
        "n_seq_max": slots,
    }
    got: dict[str, object] = {
        "n_ctx": llama_cpp.llama_n_ctx_seq(ctx),
        "n_threads": llama_cpp.llama_n_threads(ctx),
        "n_threads_batch": llama_cpp.llama_n_threads_batch(ctx),
        "n_batch": llama_cpp.llama_n_batch(ctx),
        "n_gpu_layers": llm.model_params.n_gpu_layers,
        "use_extra_bufts": bool(llm.model_params.use_extra_bufts),
        "flash_attn": llm.context_params.flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
        "n_seq_max": llama_cpp.llama_n_seq_max(ctx),
    }
    for name, value in wanted.items():
        ok = got[name] >= value if name == "n_ctx" else got[name] == value  # type: ignore[operator]
        if not ok:
            raise RunnerError(
                f"model {model_id!r}: llama.cpp did not apply {name}={value!r} "
                f"(it has {got[name]!r})",
                model_id=model_id,
            )


def default_extra_bufts() -> bool:
    """llama.cpp's own default for ``use_extra_bufts``."""
    import llama_cpp

    return bool(llama_cpp.llama_model_default_params().use_extra_bufts)


def open_model(
    model_id: str, spec: LlamaModelSpec, *, probed: bool = False, slots: int = 1
) -> LoadedModel:
    """Load ``spec`` or raise a ``RunnerError`` that names the model and the cause.

    With ``slots`` > 1 the context holds ``slots`` sequences of ``spec.n_ctx``
    tokens each (as ``llama-server -c`` = per-slot context x ``-np``)."""
    started = time.perf_counter()
    path = _check_file(model_id, spec)
    llama_cpp = _import(model_id)
    try:
        spec.check_options()
    except ValueError as exc:
        raise RunnerError(f"model {model_id!r}: {exc}", model_id=model_id) from None
    extra_bufts = default_extra_bufts() if spec.use_extra_bufts is None else spec.use_extra_bufts
    try:
        kwargs = spec.llama_kwargs()
        kwargs["n_ctx"] = spec.n_ctx * slots
        llm = _construct(llama_cpp, path, kwargs, extra_bufts, slots)
    except Exception as exc:
        raise RunnerError(
            f"model {model_id!r}: llama.cpp could not load {path!r}: {exc}", model_id=model_id
        ) from exc
    try:
        _verify_applied(model_id, spec, llm, extra_bufts, slots)
    except RunnerError:
        llm.close()
        raise
    info = LoadInfo(
        model_id=model_id,
        seconds=time.perf_counter() - started,
        n_ctx=llama_cpp.llama_n_ctx_seq(llm._ctx.ctx),
        n_threads=llama_cpp.llama_n_threads(llm._ctx.ctx),
        use_extra_bufts=extra_bufts,
        probed=probed,
        slots=slots,
    )
    return LoadedModel(model_id, spec, llm, _Text.of(llm._model, spec), info)


def open_vocab(model_id: str, spec: LlamaModelSpec) -> Vocab:
    """The tokenizer and chat template of ``spec``, without its weights."""
    path = _check_file(model_id, spec)
    llama_cpp = _import(model_id)
    from llama_cpp._internals import LlamaModel

    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    try:
        with _construct_lock:
            model = LlamaModel(path_model=path, params=params, verbose=False)
    except Exception as exc:
        raise RunnerError(
            f"model {model_id!r}: llama.cpp could not read the vocabulary of {path!r}: {exc}",
            model_id=model_id,
        ) from exc
    return Vocab(_Text.of(model, spec))
