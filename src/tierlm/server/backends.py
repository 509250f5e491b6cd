"""The runner behind the gateway, built from ``[backend]`` (sim, llama-cpp, openai, ollama)."""

from __future__ import annotations

import logging
from typing import Any

from tierlm.runners.protocol import Runner
from tierlm.runners.simulated import SimulatedRunner
from tierlm.server.config import BackendSettings

__all__ = ["close_runner", "list_upstream_models", "make_runner"]

logger = logging.getLogger("tierlm.server")


def make_runner(backend: BackendSettings) -> Runner:
    """A runner for ``backend``; optional packages are imported only when needed."""
    if backend.kind == "sim":
        models = [m.id for m in backend.models]
        return SimulatedRunner(
            token_interval=backend.token_interval,
            prefill_per_token=backend.prefill_per_token,
            swap_seconds=backend.swap_seconds,
            # The simulated device starts holding the first model (a preload for free).
            initial_model=models[0] if backend.preload else None,
            models=models,
        )
    if backend.kind == "llama-cpp":
        from tierlm.runners.llama_cpp import LlamaCppRunner, LlamaModelSpec

        specs = {}
        for m in backend.models:
            assert m.path is not None
            specs[m.id] = LlamaModelSpec(m.path, **dict(m.options))
        return LlamaCppRunner(specs)
    upstream = {m.id: m.upstream or m.id for m in backend.models} or None
    assert backend.url is not None
    if backend.kind == "openai":
        from tierlm.runners.openai_compat import OpenAIRunner

        options: dict[str, Any] = dict(backend.options)
        return OpenAIRunner(backend.url, api_key=backend.api_key, models=upstream, **options)
    from tierlm.runners.ollama import OllamaRunner

    return OllamaRunner(backend.url, models=upstream, **dict(backend.options))


async def close_runner(runner: Runner) -> None:
    """Free the model / close HTTP connections, for runners that hold any."""
    aclose = getattr(runner, "aclose", None)
    if aclose is not None:
        try:
            await aclose()
        except Exception:
            logger.exception("closing the %s runner failed", type(runner).__name__)


async def list_upstream_models(backend: BackendSettings) -> list[str]:
    """The upstream server's models, for /v1/models when none are configured.

    Best effort: an unreachable upstream lists nothing (requests still pass through).
    """
    import httpx

    assert backend.url is not None
    base = backend.url.rstrip("/")
    headers = {"Authorization": f"Bearer {backend.api_key}"} if backend.api_key else {}
    try:
        async with httpx.AsyncClient(timeout=5.0, headers=headers) as client:
            if backend.kind == "ollama":
                response = await client.get(f"{base}/api/tags")
                response.raise_for_status()
                return [str(m["name"]) for m in response.json().get("models", [])]
            if not base.endswith("/v1"):
                base += "/v1"
            response = await client.get(f"{base}/models")
            response.raise_for_status()
            return [str(m["id"]) for m in response.json().get("data", [])]
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
        logger.warning("listing the upstream models at %s failed: %s", backend.url, exc)
        return []
