"""``kind = "openai"`` and ``kind = "ollama"``: the models run on a server
elsewhere (``tierlm.runners.openai_compat``, ``tierlm.runners.ollama``)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, model_validator

from tierlm.runners.errors import RunnerError
from tierlm.runners.http import DEFAULT_STALL_TIMEOUT
from tierlm.runners.ollama import DEFAULT_OLLAMA_URL
from tierlm.runners.openai_compat import ResumeMode
from tierlm.runners.protocol import ModelLister, Runner
from tierlm.server.settings.backends.base import (
    MODELS,
    BackendSettings,
    Capabilities,
    HttpURL,
    ModelTable,
)
from tierlm.server.settings.schema import Expect, FieldError, Flag, Required, Schema

__all__ = ["OllamaBackend", "OpenAIBackend", "UpstreamModel"]


class UpstreamModel(Schema):
    """A model id clients use and the upstream server's name for it: a table,
    or just the name."""

    upstream: str | None = None
    """The upstream's name for the model (unset: the id)."""

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        if value is None:  # `--model NAME`, or a name in a list
            return {}
        return {"upstream": value} if isinstance(value, str) else value


class UpstreamBackend(BackendSettings):
    """What both upstream backends have."""

    models: Annotated[
        Mapping[str, Annotated[UpstreamModel, Expect("the upstream's name, or a table")]],
        ModelTable,
        MODELS,
    ] = Field(default_factory=dict)
    """Model id = the upstream's name for it, or a list of names (the ids are
    the names). Empty: any name a client sends is passed upstream."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        upstream=True, passes_model_names=True, lists_models=True
    )

    url: str
    stall_timeout: Annotated[float, Flag("--stall-timeout", "S"), Field(gt=0)] = (
        DEFAULT_STALL_TIMEOUT
    )
    """Seconds the upstream may send no token (before the first, or between two)
    before its job fails with 504 ``upstream_timeout`` and the device is freed:
    far beyond a token's time on a working device."""
    first_byte_timeout: Annotated[float | None, Field(gt=0)] = None
    """Seconds to the first token instead (unset: ``stall_timeout``), for an
    upstream that evaluates long prompts before it answers."""

    def summary(self) -> str:
        return f"{self.kind} ({self.url})"

    def public(self, text: str) -> str:
        """Without the upstream's address: an error a client reads says "the
        upstream"; the operator's log has the address."""
        netloc = urlsplit(self.url).netloc
        if not netloc:
            return text
        # The URL with its path ("http://host:port/v1/chat/completions"), then
        # the address alone.
        text = re.sub(rf"\w+://{re.escape(netloc)}[^\s:,;'\")]*", "the upstream", text)
        return text.replace(netloc, "the upstream")

    async def readiness(self, runner: Runner) -> str | None:
        """Ready while the upstream answers (it lists its models)."""
        if not isinstance(runner, ModelLister):
            return None
        try:
            await runner.list_models()
        except RunnerError as exc:
            return self.public(f"the upstream does not answer: {exc}")
        return None

    def upstream_names(self) -> dict[str, str] | None:
        """Model id -> upstream name; None when any name passes through."""
        return {m_id: m.upstream or m_id for m_id, m in self.models.items()} or None


class OpenAIBackend(UpstreamBackend):
    """An upstream OpenAI-compatible server (llama.cpp's server, llama-swap,
    vLLM, LM Studio, another tierlm...)."""

    kind: Literal["openai"] = "openai"
    url: Annotated[
        HttpURL,
        Required("the openai backend needs the upstream server's URL (url in [backend], or --url)"),
    ]
    """The upstream server's URL, with or without ``/v1``."""
    api_key: str | None = None
    """The upstream server's key."""
    api_key_env: str | None = None
    """The environment variable holding the upstream server's key (instead of ``api_key``)."""
    resume: ResumeMode = "prefill"
    """How a preempted chat continues upstream: ``prefill`` (a final assistant
    message), ``continue_final_message`` (vLLM's), ``completions`` (the chat
    rendered here with ``chat_template``, continued as a raw prompt)."""
    chat_template: str | None = None
    """A Jinja chat template, for ``resume = "completions"``."""
    warmup: bool = False
    """A 1-token request at each swap, so a model-swapping upstream swaps inside the swap."""

    @model_validator(mode="after")
    def _check(self) -> OpenAIBackend:
        if self.api_key is not None and self.api_key_env is not None:
            raise FieldError("give one of api_key or api_key_env", "api_key_env")
        if self.api_key_env is not None and not os.environ.get(self.api_key_env):
            raise FieldError(f"environment variable {self.api_key_env} is not set", "api_key_env")
        if self.resume == "completions" and self.chat_template is None:
            raise FieldError(
                "resume = 'completions' renders chats here: it needs chat_template", "resume"
            )
        return self

    def upstream_key(self) -> str | None:
        """``api_key``, or the value of ``api_key_env``."""
        if self.api_key_env is not None:
            return os.environ.get(self.api_key_env)
        return self.api_key

    def make_runner(self) -> Runner:
        from tierlm.runners.openai_compat import OpenAIRunner

        runner = OpenAIRunner(
            self.url,
            api_key=self.upstream_key(),
            models=self.upstream_names(),
            warmup=self.warmup,
            resume=self.resume,
            chat_template=self.chat_template,
            stall_timeout=self.stall_timeout,
            first_byte_timeout=self.first_byte_timeout,
        )
        runner.slots = self.device_slots()  # the upstream's parallel streams
        return runner


def _seconds_or_duration(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(
            "must be seconds (an integer) or a duration string such as '5m', "
            f"got {type(value).__name__} {value!r}"
        )
    return value


class OllamaBackend(UpstreamBackend):
    """An Ollama server, through its native API."""

    kind: Literal["ollama"] = "ollama"
    url: HttpURL = DEFAULT_OLLAMA_URL
    """The Ollama server's URL (default: Ollama's own address)."""
    keep_alive: Annotated[int | str | None, BeforeValidator(_seconds_or_duration)] = None
    """How long Ollama keeps a model loaded (unset: -1, until tierlm swaps it)."""

    def make_runner(self) -> Runner:
        from tierlm.runners.ollama import OllamaRunner

        runner = OllamaRunner(
            self.url,
            models=self.upstream_names(),
            stall_timeout=self.stall_timeout,
            first_byte_timeout=self.first_byte_timeout,
        )
        if self.keep_alive is not None:
            runner.keep_alive = self.keep_alive
        runner.slots = self.device_slots()  # OLLAMA_NUM_PARALLEL on the server
        return runner
