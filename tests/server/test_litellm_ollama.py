"""LiteLLM as its users run it in front of Ollama, pointed at the gateway
instead (issue 56): its SDK through both Ollama providers, ``ollama/``
(``/api/generate``) and ``ollama_chat/`` (``/api/chat``), sync, async and
streamed, and the LiteLLM proxy (``litellm --config``) in front of tierlm.
Its async calls and its proxy send ``Content-Type: application/octet-stream``
(a 415 before), and the class is named in the model (``@background``), the
one thing a LiteLLM config can say without headers.

On the sim backend: the text is the simulated device's ``w0 w1 ...``. The
proxy needs ``litellm[proxy]``, whose pins conflict with constraints.txt
(``websockets<16``; litellm 1.97's proxy also fails on the pinned FastAPI), so
``scripts/install`` (the dev extra) makes it a virtualenv of its own,
``.venv-litellm-proxy/`` in the checkout, pinned by
constraints-litellm-proxy.txt. The test runs the proxy with
``$TIERLM_LITELLM_PROXY_PYTHON`` if set, else with that venv's python, else
with this interpreter if it can import the proxy; with none of them it skips,
and fails under ``CI=true`` (CI installs it: a skip there would hide a missing
install step).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.helpers import wait_until_blocking
from tests.payloads import MESSAGES
from tests.runners.helpers import free_port
from tests.server.helpers import WAIT, Gateway, serve, sim_settings
from tests.server.loopback import loopback_only

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # no fetch of the price map
with loopback_only():
    litellm = pytest.importorskip("litellm", reason="needs litellm (the dev extra)")

# LiteLLM's own logging worker, when asyncio.run closes the loop under it.
pytestmark = pytest.mark.filterwarnings(
    "ignore:coroutine 'Logging.async_success_handler' was never awaited:RuntimeWarning"
)
PROVIDERS = ["ollama", "ollama_chat"]
MODES = ["sync", "stream", "async", "async-stream"]


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with serve(sim_settings()) as g:
        yield g


@pytest.fixture(autouse=True)
def no_internet() -> Iterator[None]:
    with loopback_only() as attempts:
        yield
    assert not attempts, f"litellm reached beyond 127.0.0.1: {attempts}"


def complete(mode: str, **args: Any) -> str:
    """The text of one LiteLLM call made the ``mode`` way."""
    if mode == "sync":
        return str(litellm.completion(**args).choices[0].message.content)
    if mode == "stream":
        chunks = litellm.completion(stream=True, **args)
        return "".join(c.choices[0].delta.content or "" for c in chunks)

    async def call() -> str:
        if mode == "async":
            response = await litellm.acompletion(**args)
            return str(response.choices[0].message.content)
        chunks = await litellm.acompletion(stream=True, **args)
        return "".join([c.choices[0].delta.content or "" async for c in chunks])

    return asyncio.run(call())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_litellm_s_ollama_providers(gw: Gateway, provider: str, mode: str) -> None:
    text = complete(
        mode,
        model=f"{provider}/sim-a",
        api_base=gw.url,
        messages=MESSAGES,
        max_tokens=3,
        timeout=WAIT,
    )
    assert text == "w0 w1 w2 "
    job = gw.state()["gateway"]["recent"][0]
    assert (job["model"], job["tokens"], job["class"]) == ("sim-a", 3, "chat")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_litellm_names_the_class_in_the_model(gw: Gateway, provider: str) -> None:
    model = f"{provider}/sim-a@background"
    text = complete("async", model=model, api_base=gw.url, messages=MESSAGES, max_tokens=2)
    assert text == "w0 w1 "
    assert gw.state()["gateway"]["recent"][0]["class"] == "gana"


# -- the LiteLLM proxy ------------------------------------------------------------


PROXY_VENV = Path(__file__).resolve().parents[2] / ".venv-litellm-proxy"


def _imports_the_proxy(python: str) -> tuple[bool, str]:
    """Whether ``python`` can import LiteLLM's proxy, and what it said if not."""
    try:
        probe = subprocess.run(
            [python, "-c", "import litellm.proxy.proxy_server"],
            capture_output=True,
            text=True,
            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
            timeout=WAIT,
        )
    except OSError as error:
        return False, str(error)
    return probe.returncode == 0, probe.stderr.strip()[-1500:]


def _proxy_python() -> str:
    """The interpreter that runs LiteLLM's proxy: $TIERLM_LITELLM_PROXY_PYTHON,
    else scripts/install's venv, else this one if it has the proxy. A given or
    installed one that cannot import the proxy fails the test; none at all
    skips it, except in CI, where scripts/install must have made the venv."""
    given = os.environ.get("TIERLM_LITELLM_PROXY_PYTHON")
    installed = PROXY_VENV / "bin" / "python"
    if given or installed.exists():
        python = given or str(installed)
        works, said = _imports_the_proxy(python)
        if not works:
            where = "$TIERLM_LITELLM_PROXY_PYTHON" if given else "scripts/install's venv"
            pytest.fail(f"{python} ({where}) cannot import litellm's proxy:\n{said}")
        return python
    if _imports_the_proxy(sys.executable)[0]:
        return sys.executable
    missing = (
        f"needs litellm[proxy] in {PROXY_VENV}/, which scripts/install makes (the dev "
        "extra; its pins conflict with constraints.txt), or $TIERLM_LITELLM_PROXY_PYTHON "
        "naming a python that has it"
    )
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"CI=true and the LiteLLM proxy is not installed: {missing}")
    pytest.skip(missing)


CONFIG = """model_list:
  - model_name: chat
    litellm_params: {{model: ollama_chat/sim-a, api_base: "{url}"}}
  - model_name: generate
    litellm_params: {{model: ollama/sim-a, api_base: "{url}"}}
  - model_name: summaries
    litellm_params: {{model: ollama_chat/sim-a@background, api_base: "{url}"}}
  - model_name: extraction
    litellm_params:
      model: ollama_chat/sim-a
      api_base: "{url}"
      extra_headers: {{X-Tierlm-Class: extract}}
"""


@pytest.fixture(scope="module")
def proxy(gw: Gateway, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    python = _proxy_python()
    home = tmp_path_factory.mktemp("litellm-proxy")
    config = Path(home, "config.yaml")
    config.write_text(CONFIG.format(url=gw.url))
    port = free_port()
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY": "False",
        "NO_PROXY": "127.0.0.1",
    }
    command = [python, "-m", "litellm.proxy.proxy_cli", "--config", str(config)]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    with Path(home, "proxy.log").open("w") as log:
        process = subprocess.Popen(command, cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT)

        def up() -> bool:
            assert process.poll() is None, Path(home, "proxy.log").read_text()[-2000:]
            with contextlib.suppress(httpx.TransportError):
                return httpx.get(f"{url}/health/liveliness", timeout=2).status_code == 200
            return False

        try:
            wait_until_blocking(up, "the LiteLLM proxy to start", timeout=WAIT, every=0.2)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_the_litellm_proxy_in_front_of_the_gateway(gw: Gateway, proxy: str) -> None:
    client = openai.OpenAI(base_url=f"{proxy}/v1", api_key="unused", max_retries=0, timeout=WAIT)
    for name, klass in (("chat", "chat"), ("summaries", "gana"), ("extraction", "extract")):
        answer = client.chat.completions.create(model=name, messages=MESSAGES, max_tokens=3)
        assert answer.choices[0].message.content == "w0 w1 w2 "
        assert gw.state()["gateway"]["recent"][0]["class"] == klass, name
    stream = client.chat.completions.create(
        model="generate", messages=MESSAGES, max_tokens=3, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "w0 w1 w2 "
    assert gw.state()["gateway"]["recent"][0]["class"] == "chat"


def test_the_litellm_proxy_async_and_streamed(gw: Gateway, proxy: str) -> None:
    """The OpenAI client's async calls through the proxy, whole and streamed, to
    both of the gateway's Ollama endpoints (``ollama_chat/`` and ``ollama/``)."""

    async def calls() -> list[tuple[str, str]]:
        client = openai.AsyncOpenAI(
            base_url=f"{proxy}/v1", api_key="unused", max_retries=0, timeout=WAIT
        )
        texts = []
        async with client:
            for name in ("chat", "generate", "summaries"):
                answer = await client.chat.completions.create(
                    model=name, messages=MESSAGES, max_tokens=3
                )
                texts.append((name, str(answer.choices[0].message.content)))
                stream = await client.chat.completions.create(
                    model=name, messages=MESSAGES, max_tokens=3, stream=True
                )
                parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
                texts.append((f"{name} streamed", "".join(parts)))
        return texts

    texts = asyncio.run(calls())
    assert texts == [(name, "w0 w1 w2 ") for name, _ in texts]
    assert len(texts) == 6
    recent = gw.state()["gateway"]["recent"]
    assert [job["class"] for job in recent[:2]] == ["gana", "gana"]
