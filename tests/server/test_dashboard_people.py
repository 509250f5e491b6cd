"""The dashboard under mixed load in a real headless Chromium (issue 56,
item 8): who is judged a person and who a program, and why (docs/design.md
§4.11); why slots sit idle (a person's chat runs and the latency guard cut
the background beside it, §4.7; then no work); lanes coloured by producer;
tokens a second over time; percentiles over the window.

A keyless gateway on 4 simulated slots, as plain clients call it: an agent
loop sending its chats back to back (a program), a person at a chat UI who
reads between answers, and background producers naming their class. Saves
``dashboard-mixed.png`` (in ``$TIERLM_SCREENSHOT_DIR`` too when set).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

import httpx
import pytest

from tests.payloads import chat_body
from tests.server.helpers import WAIT, Gateway, serve, sim_settings, sse
from tests.server.test_dashboard import ARGS, CHROMIUM, TIMEOUT_MS

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Chromium at {CHROMIUM}"),
]
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (pip)")

LONG = 4000  # tokens: longer than the test lets any job run (20 s on the sim)
READING_GAP = 0.3
AGENT = {"User-Agent": "agent-loop/1.0"}
PERSON = {"User-Agent": "Open WebUI/0.6"}


def chats(gw: Gateway, headers: dict[str, str], n: int, pause: float = 0.0) -> None:
    for _ in range(n):
        answer = httpx.post(
            f"{gw.url}/v1/chat/completions",
            json=chat_body(max_tokens=3),
            headers=headers,
            timeout=WAIT,
        )
        assert answer.status_code == 200, answer.text
        time.sleep(pause)


def test_the_dashboard_says_who_is_a_person_and_why_slots_sit_idle(tmp_path: Path) -> None:
    settings = sim_settings(
        {
            "server": {"dashboard_window": 20},
            "backend": {"slots": 4},
            "people": {"keyless": "auto", "reading_gap": READING_GAP},
        }
    )
    with serve(settings) as gw, sync_api.sync_playwright() as playwright:
        chats(gw, AGENT, 4)  # back to back: a program from its second on
        chats(gw, PERSON, 2, pause=2 * READING_GAP)  # reads between answers: a person
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
            page.wait_for_function("Number(document.body.dataset.updates) >= 1")
            people = page.inner_text("#people")
            assert "agent-loop" in people and "Open WebUI" in people
            assert page.locator(
                "#people tr[data-client='agent-loop'][data-served='program']"
            ).count()
            assert page.locator(
                "#people tr[data-client='Open WebUI'][data-served='person']"
            ).count()
            assert "sends the next request as the last ends" in people
            assert "reads between answers" in people
            assert "program" in page.inner_text("#people-rule")
            with contextlib.ExitStack() as streams:
                # The device full: three background producers and the agent,
                # whose long chat is served as the program it is.
                for producer in ("indexer", "summarizer", "tagger"):
                    headers = {"X-Tierlm-Class": "gana", "X-Tierlm-Producer": producer}
                    streams.enter_context(sse(gw, chat_body(max_tokens=LONG), headers))
                agent = streams.enter_context(sse(gw, chat_body(max_tokens=LONG), AGENT))
                assert agent.response.headers["x-tierlm-class"] == "gana"
                gw.wait(lambda s: len(s["running_jobs"]) == 4, "four slots busy")
                time.sleep(2 * READING_GAP)  # the person reads, then writes
                person = streams.enter_context(sse(gw, chat_body(max_tokens=LONG), PERSON))
                assert person.response.headers["x-tierlm-served-as"].startswith("person")
                # A person's chat runs: the guard cuts the background beside it.
                page.wait_for_function("document.getElementById('idle').dataset.why === 'guard'")
                # While its prompt is evaluated it runs alone; from its first
                # token two background sequences rejoin it (1 + 0.12 (n - 1) <= 1.25).
                page.wait_for_function(
                    "document.getElementById('idle-head').textContent.startsWith('1 of 4')"
                )
                idle = page.inner_text("#idle")
                assert "1 of 4 slots idle · chat latency guard:" in idle
                assert "chat_slowdown" in idle
                # Lanes by producer; the legend names them; tokens a second drawn.
                drawn = page.eval_on_selector_all(
                    "#timeline-svg rect.run", "els => els.map(e => e.dataset.producer)"
                )
                assert {"indexer", "summarizer", "tagger"} <= set(drawn)
                assert "indexer" in page.inner_text("#legend")
                page.wait_for_function(
                    "Number(document.getElementById('throughput').dataset.points) >= 2"
                )
                assert "last 20.0 s" in page.text_content("#percentiles-title")
                page.wait_for_function(
                    "document.querySelector('#percentiles-body tr[data-class=\"chat\"]') !== null"
                )
                shot = tmp_path / "dashboard-mixed.png"
                page.screenshot(path=str(shot), full_page=True)
            # Every client gone: every slot idle, for want of work.
            page.wait_for_function(
                "document.getElementById('idle-head').textContent === "
                "'4 of 4 slots idle · no work:'"
            )
            assert page.get_attribute("#idle", "data-why") == "no_work"
            assert errors == []
        finally:
            context.close()
    assert shot.stat().st_size > 10_000
    if os.environ.get("TIERLM_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(os.environ["TIERLM_SCREENSHOT_DIR"]) / shot.name)
