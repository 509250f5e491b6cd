"""A misbehaving upstream (a FAKE, ``fake_upstream``: no real server stalls on
demand) must not hold the device: a stall fails its job with 504
``upstream_timeout`` and the next job runs; an upstream that ignores
``max_tokens`` is cut at ``max_tokens``; no error shows the upstream's
address; ``/ready`` says whether the upstream answers."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.helpers import wait_until_blocking
from tests.payloads import MESSAGES
from tests.runners.helpers import free_port
from tests.server.fake_upstream import FakeLog, make_fake_upstream
from tests.server.helpers import WAIT, Gateway, read_into, run_app, serve
from tierlm.server.serve_cli import add_arguments, settings_from_args
from tierlm.server.settings.sources import settings_from_dict

STALL = 2.0  # seconds: the tests' stall_timeout; the healthy fake upstream, in this
# process, answers well within it even on a loaded machine (0.5 s was not, once)


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, FakeLog]]:
    log = FakeLog()
    with run_app(make_fake_upstream(log)) as url:
        yield url, log


def gateway_for(url: str, kind: str = "openai") -> Iterator[Gateway]:
    settings = settings_from_dict({"backend": {"kind": kind, "url": url, "stall_timeout": STALL}})
    with serve(settings) as gw:
        yield gw


@pytest.fixture
def gw(upstream: tuple[str, FakeLog]) -> Iterator[Gateway]:
    yield from gateway_for(upstream[0])


def wait_closed(log: FakeLog, model: str) -> None:
    """The fake saw its client leave: the upstream stream was closed (a
    bounded poll of the fake's own record, in another thread)."""
    wait_until_blocking(
        lambda: model in log.closed_early, f"the {model} stream to close", timeout=WAIT
    )


@pytest.mark.parametrize("model", ["stall-mid", "stall-headers"])
def test_a_stalled_upstream_is_a_504_and_the_next_chat_runs(
    gw: Gateway, upstream: tuple[str, FakeLog], model: str
) -> None:
    url, log = upstream
    client = gw.openai()
    # A chat is never preempted: the one behind it waits for the stall to end.
    stalled = gw.background(
        lambda: client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=8)
    )
    gw.wait_running("chat")
    behind = gw.background(
        lambda: client.chat.completions.create(model="ok", messages=MESSAGES, max_tokens=3)
    )
    with pytest.raises(openai.APIStatusError) as info:
        stalled.result(WAIT)
    assert info.value.status_code == 504
    assert info.value.code == "upstream_timeout"
    assert "stalled" in info.value.message
    assert "stall_timeout" in info.value.message
    assert httpx.URL(url).netloc.decode() not in info.value.message
    # The device was freed: the chat queued behind it ran.
    assert behind.result(WAIT).choices[0].message.content == "t0 t1 t2 "
    wait_closed(log, model)
    state = gw.state()
    assert state["stats"]["failed"] == 1
    assert [j["outcome"] for j in state["gateway"]["recent"][:2]] == ["completed", "failed"]


def test_a_stall_mid_stream_ends_the_stream_with_the_error(gw: Gateway) -> None:
    stream = gw.openai().chat.completions.create(
        model="stall-mid", messages=MESSAGES, max_tokens=8, stream=True
    )
    received: list[str] = []
    with pytest.raises(openai.APIError, match=r"stalled: no token for 2 s after 3 tokens"):
        read_into(iter(stream), received)
    assert "".join(received) == "t0 t1 t2 "


@pytest.mark.parametrize("kind", ["openai", "ollama"])
def test_an_upstream_that_ignores_max_tokens_is_cut_at_max_tokens(
    upstream: tuple[str, FakeLog], kind: str
) -> None:
    url, log = upstream
    for gw in gateway_for(url, kind):
        reply = gw.openai().chat.completions.create(
            model="runaway", messages=MESSAGES, max_tokens=10
        )
        assert reply.choices[0].message.content == "".join(f"t{i} " for i in range(10))
        assert reply.choices[0].finish_reason == "length"
        assert reply.usage is not None and reply.usage.completion_tokens == 10
        wait_closed(log, "runaway")
        log.closed_early.remove("runaway")


def test_ready_says_whether_the_upstream_answers(upstream: tuple[str, FakeLog]) -> None:
    for gw in gateway_for(upstream[0]):
        assert gw.http.get("/ready").json()["status"] == "ready"
    down = f"http://127.0.0.1:{free_port()}"
    for gw in gateway_for(down):
        health = gw.http.get("/health")
        assert health.status_code == 200  # alive: restarting would not bring the upstream up
        ready = gw.http.get("/ready")
        assert ready.status_code == 503
        reason = ready.json()["reason"]
        assert reason.startswith("the upstream does not answer: ")
        assert httpx.URL(down).netloc.decode() not in reason
        # A request's error does not show the address either.
        with pytest.raises(openai.APIStatusError) as info:
            gw.openai().chat.completions.create(model="ok", messages=MESSAGES, max_tokens=2)
        assert info.value.status_code == 502
        assert "cannot reach the upstream" in info.value.message
        assert httpx.URL(down).netloc.decode() not in info.value.message


def test_stall_timeout_from_flag_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--backend", "openai", "--url", "http://127.0.0.1:1"])
    assert settings_from_args(args).backend.stall_timeout == 30.0  # type: ignore[union-attr]
    monkeypatch.setenv("TIERLM_BACKEND__STALL_TIMEOUT", "12.5")
    assert settings_from_args(args).backend.stall_timeout == 12.5  # type: ignore[union-attr]
    args = parser.parse_args([*["--backend", "ollama", "--stall-timeout", "7"]])
    assert settings_from_args(args).backend.stall_timeout == 7.0  # type: ignore[union-attr]
    with pytest.raises(Exception, match=r"--stall-timeout \(backend.stall_timeout\)"):
        settings_from_args(parser.parse_args(["--backend", "ollama", "--stall-timeout", "0"]))
