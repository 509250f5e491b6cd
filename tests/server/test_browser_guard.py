"""A web page in a real headless Chromium cannot drive a keyless loopback
gateway: not from another origin (a "simple" cross-origin POST, text/plain or
bodiless, that the browser sends without asking), and not through DNS
rebinding (the attacker's name re-pointed at 127.0.0.1: Chromium's
``--host-resolver-rules`` maps it, as a rebound DNS answer would). A chat UI
whose origin is listed in ``server.cors_origins`` can, and a page of an
origin Ollama lets in by default (``localhost`` on any port,
``server.ollama_origins``) may use Ollama's API, and only that.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from tests.server.helpers import run_app, serve, sim_settings
from tests.server.test_dashboard import ARGS, CHROMIUM, TIMEOUT_MS

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Chromium at {CHROMIUM}"),
]
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (pip)")

# What an attacker's page does: every request a page may send cross-origin
# without a CORS preflight, each aimed at the gateway's pause.
ATTACK = """async (gateway) => {
  const pause = gateway + "/v1/scheduler/pause";
  const tries = [
    {method: "POST", mode: "no-cors", body: "x", headers: {"Content-Type": "text/plain"}},
    {method: "POST", mode: "no-cors", body: new Blob(['{}'])},
    {method: "POST", mode: "no-cors"},
  ];
  for (const init of tries) { try { await fetch(pause, init); } catch (e) {} }
  const form = document.createElement("form");
  form.method = "POST"; form.action = pause; form.target = "sink";
  const sink = document.createElement("iframe"); sink.name = "sink";
  document.body.append(sink, form);
  const loaded = new Promise((ok) => sink.addEventListener("load", ok));
  form.submit();
  await loaded;
  return "sent";
}"""

# A chat UI's call, which needs CORS: JSON with the Authorization header.
CHAT = """async (gateway) => {
  const r = await fetch(gateway + "/v1/chat/completions", {
    method: "POST",
    headers: {"Content-Type": "application/json", "Authorization": "Bearer unused"},
    body: JSON.stringify({model: "sim-a", messages: [{role: "user", content: "hi"}],
                          max_tokens: 2}),
  });
  return [r.status, (await r.json()).choices?.[0]?.message?.content ?? null];
}"""


# An Ollama web app's call: JSON (so a preflight first), streamed NDJSON back.
OLLAMA_CHAT = """async (gateway) => {
  const r = await fetch(gateway + "/api/chat", {
    method: "POST",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({model: "sim-a", messages: [{role: "user", content: "hi"}],
                          options: {num_predict: 2}}),
  });
  const lines = (await r.text()).trim().split("\\n").map(JSON.parse);
  return [r.status, lines.map(l => l.message.content).join("")];
}"""


async def _page(request: Request) -> Response:
    return HTMLResponse("<!doctype html><title>another site</title><body>hello</body>")


@pytest.fixture
def other_site() -> Iterator[str]:
    """A page of another origin (another port on 127.0.0.1)."""
    with run_app(Starlette(routes=[Route("/", _page)])) as url:
        yield url


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=CHROMIUM,
            headless=True,
            # rebind.test resolves to 127.0.0.1, as DNS rebinding makes it.
            args=[*ARGS, "--host-resolver-rules=MAP rebind.test 127.0.0.1"],
        )
        context.set_default_timeout(TIMEOUT_MS)
        try:
            yield context
        finally:
            context.close()


def test_a_page_of_another_origin_cannot_pause_the_scheduler(browser: Any, other_site: str) -> None:
    with serve() as gw:
        page = browser.new_page()
        page.goto(other_site)
        assert page.evaluate(ATTACK, gw.url) == "sent"
        state = gw.state()
        assert state["paused"] is False
        rejected = gw.metric("tierlm_rejected_requests_total", reason="origin_not_allowed")
        assert rejected >= 4  # each try reached the gateway, and was refused


def test_dns_rebinding_gets_421(browser: Any) -> None:
    with serve() as gw:
        port = gw.url.rsplit(":", 1)[1]
        page = browser.new_page()
        # The attacker's page, now served from the gateway's address under its name.
        response = page.goto(f"http://rebind.test:{port}/health")
        assert response.status == 421
        status = page.evaluate(
            "async () => (await fetch('/v1/scheduler/pause', {method: 'POST'})).status"
        )
        assert status == 421
        assert gw.state()["paused"] is False


def test_a_listed_chat_ui_origin_may_call_the_gateway(browser: Any, other_site: str) -> None:
    settings = sim_settings({"server": {"cors_origins": [other_site]}})
    with serve(settings) as listed:
        page = browser.new_page()
        page.goto(other_site)
        assert page.evaluate(CHAT, listed.url) == [200, "w0 w1 "]
    with serve() as unlisted:
        page.goto(other_site)
        with pytest.raises(sync_api.Error, match="Failed to fetch"):
            page.evaluate(CHAT, unlisted.url)


def test_an_ollama_web_app_on_localhost_may_chat_but_not_steer(
    browser: Any, other_site: str
) -> None:
    with serve() as gw:
        page = browser.new_page()
        page.goto(other_site)  # http://127.0.0.1:<another port>: Ollama lets it in
        assert page.evaluate(OLLAMA_CHAT, gw.url) == [200, "w0 w1 "]
        assert page.evaluate(ATTACK, gw.url) == "sent"
        assert gw.state()["paused"] is False
