"""docs/distributed.md "llm-d": the manifests of N ``tierlm serve`` endpoints.

Every YAML block of the section is parsed; the objects must agree with each
other (the pool selects the pods, on the port they serve; the picker's
engine config is the one the pods' label names; the container reads the
ConfigMap's file and gets the key's variable; the probes hit /health and
/ready). Then a real ``tierlm serve`` runs with the ConfigMap's settings (the
``sim`` backend in place of llama-cpp, the same model ids; 127.0.0.1) and
its ``/metrics``, scraped without a key as the picker scrapes, holds the
series each engine config names, selected as the picker selects them
(tests/server/test_llm_d_metrics.py). No Kubernetes here: the YAML is
checked, not applied.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import wait_until_blocking
from tests.payloads import HI, chat_body
from tests.server.test_llm_d_metrics import families, select

yaml = pytest.importorskip("yaml")

DOC = Path(__file__).resolve().parents[2] / "docs" / "distributed.md"
WAIT = 120.0
SPECS = ("queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec", "loraSpec")


def section() -> str:
    text = DOC.read_text()
    start = text.index("\n## llm-d\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def objects() -> dict[str, dict[str, Any]]:
    """The section's objects by kind (one of each)."""
    found: dict[str, dict[str, Any]] = {}
    for block in re.findall(r"```yaml\n(.*?)```", section(), re.S):
        for item in yaml.safe_load_all(block):
            if item:
                assert item["kind"] not in found, item["kind"]
                found[item["kind"]] = item
    return found


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    [only] = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def engines(picker: dict[str, Any]) -> dict[str, dict[str, str]]:
    [extractor] = [p for p in picker["plugins"] if p["type"] == "core-metrics-extractor"]
    return {e["name"]: e for e in extractor["parameters"]["engineConfigs"]}


def test_the_manifests_agree_with_each_other() -> None:
    found = objects()
    assert set(found) == {"ConfigMap", "Deployment", "InferencePool", "EndpointPickerConfig"}
    deployment, pool = found["Deployment"], found["InferencePool"]
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pool["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert labels["llm-d.ai/engine-type"] in engines(found["EndpointPickerConfig"])
    main = container(deployment)
    args = [str(a) for a in main["args"]]
    assert main["command"] == ["tierlm"] and args[0] == "serve"
    port = int(flag(args, "--port"))
    assert [p["number"] for p in pool["spec"]["targetPorts"]] == [port]
    assert [p["containerPort"] for p in main["ports"]] == [port]
    assert flag(args, "--host") == "0.0.0.0"
    # The config file is the ConfigMap's, where the container mounts it.
    config = Path(flag(args, "--config"))
    [mount] = [m for m in main["volumeMounts"] if Path(m["mountPath"]) == config.parent]
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == found["ConfigMap"]["metadata"]["name"]
    settings = tomllib.loads(found["ConfigMap"]["data"][config.name])
    assert settings["metrics"]["public"] is True  # the picker scrapes without a key
    # 0.0.0.0 needs keys; each key's variable is set from a Secret.
    env = {e["name"] for e in main["env"] if "secretKeyRef" in e.get("valueFrom", {})}
    assert settings["keys"] and {k["key_env"] for k in settings["keys"]} <= env
    assert main["readinessProbe"]["httpGet"] == {"path": "/ready", "port": port}
    assert main["livenessProbe"]["httpGet"] == {"path": "/health", "port": port}
    assert main["resources"]["limits"] == {"nvidia.com/gpu": 1}  # one device per endpoint
    for engine in engines(found["EndpointPickerConfig"]).values():
        assert all(name in engine for name in SPECS), engine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sim_toml(text: str, models: list[str]) -> str:
    """The ConfigMap's TOML with its backend tables replaced by the sim backend."""
    out = [f'[backend]\nkind = "sim"\nmodels = {models!r}\n'.replace("'", '"')]
    skipping = False
    for line in text.splitlines():
        header = re.match(r"\s*\[+\s*([^\]\s]+)", line)
        if header is not None:
            skipping = header.group(1).split(".")[0] == "backend"
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """One ``tierlm serve`` as the Deployment runs it, on 127.0.0.1."""
    found = objects()
    main = container(found["Deployment"])
    args = [str(a) for a in main["args"]]
    config = Path(flag(args, "--config"))
    text = found["ConfigMap"]["data"][config.name]
    models = list(tomllib.loads(text)["backend"]["models"])
    path = tmp_path / config.name
    path.write_text(sim_toml(text, models))
    port = free_port()
    args[args.index("--config") + 1] = str(path)
    args[args.index("--host") + 1] = "127.0.0.1"
    args[args.index("--port") + 1] = str(port)
    key = "sk-test-" + os.urandom(8).hex()
    env = {**os.environ, **{e["name"]: key for e in main["env"]}}
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "tierlm.cli", *args], env=env, stdout=log, stderr=log, cwd=tmp_path
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert process.poll() is None, (tmp_path / "serve.log").read_text()[-2000:]
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{url}/ready", timeout=5).status_code == 200
        return False

    try:
        wait_until_blocking(ready, "tierlm serve to get ready", timeout=WAIT, every=0.2)
        yield url, key
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
        log.close()


def test_a_real_tierlm_serve_answers_the_pickers_scrape(endpoint: tuple[str, str]) -> None:
    url, key = endpoint
    models = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}).json()
    model = models["data"][0]["id"]
    chat = httpx.post(
        f"{url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json=chat_body(model, 2, messages=HI),
        timeout=WAIT,
    )
    assert chat.status_code == 200, chat.text
    assert httpx.get(f"{url}/health", timeout=WAIT).status_code == 200  # the probes: no key
    scrape = httpx.get(f"{url}/metrics", timeout=WAIT)  # the picker: no key
    assert scrape.status_code == 200, scrape.text
    found = families(scrape.text)
    for engine in engines(objects()["EndpointPickerConfig"]).values():
        for spec in SPECS:
            if engine[spec]:
                select(found, engine[spec], lora=spec == "loraSpec")
        labels, _ = select(found, engine["loraSpec"], lora=True)
        assert labels["running_lora_adapters"] == model  # the model it holds
    # vllm_compat: the picker's built-in vLLM engine config reads it as well.
    for name in ("vllm:num_requests_waiting", "vllm:num_requests_running"):
        select(found, name)
