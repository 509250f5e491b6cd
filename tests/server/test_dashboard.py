"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by
Playwright without a browser download): a person logs in with the admin key
through the login form (never a key in a URL), and the page shows the running
job and updates live, without a reload, when another job starts.

Saves a screenshot (``dashboard.png`` in the test's tmp dir, and in
``$TIERLM_SCREENSHOT_DIR`` when set) for a person to look at.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from tests.payloads import chat_body
from tests.server.helpers import Gateway, serve, sim_settings, sse

pytestmark = pytest.mark.browser
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (pip)")

CHROMIUM = os.environ.get("TIERLM_CHROMIUM", "/usr/bin/chromium")
# Headless without a sandbox (root in CI), no GPU, and no traffic of its own:
# the only address this browser talks to is the gateway's on 127.0.0.1.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LONG = 4000  # tokens: longer than the test lets any job run
ADMIN = "sk-dashboard-admin"
AUTH = {"Authorization": f"Bearer {ADMIN}"}
TIMEOUT_MS = 15_000


def running_is(job_id: int) -> str:
    return f"document.getElementById('running').dataset.jobId === '{job_id}'"


def warm_up(gw: Gateway) -> None:
    """Some history for the panels: fair-pool producers, extraction, a swap."""
    for producer in ("gana:1", "gana:2", "nataraj"):
        klass = producer.split(":")[0]
        client = gw.openai(X_Tierlm_Class=klass, X_Tierlm_Producer=producer)
        client.completions.create(model="sim-a", prompt="x", max_tokens=20)
    gw.openai(X_Tierlm_Class="extract").completions.create(model="sim-b", prompt="x", max_tokens=30)


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Chromium at {CHROMIUM}")
def test_dashboard_shows_the_running_job_and_updates_live(tmp_path: Path) -> None:
    # A short timeline window: the test's few seconds of history fill it.
    settings = sim_settings(
        {"server": {"dashboard_window": 8}, "keys": [{"key": ADMIN, "admin": True}]}
    )
    with serve(settings, key=ADMIN) as gw, sync_api.sync_playwright() as playwright:
        warm_up(gw)
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),  # --user-data-dir
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
            # The login form: the key goes in a POST body, then lives in a cookie.
            page.fill("input[name=key]", ADMIN)
            page.click("button[type=submit]")
            page.wait_for_url(f"{gw.url}/dashboard")
            assert ADMIN not in page.url
            cookie = next(c for c in context.cookies() if c["name"] == "tierlm_key")
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
            page.wait_for_function("Number(document.body.dataset.updates) >= 1")
            assert page.inner_text("#status-text") == "live"
            assert page.get_attribute("#running", "data-job-id") == ""
            assert "gana:1" in page.inner_text("#vruntime")
            # Marks the document: a reload would lose it.
            page.evaluate("window.sameDocument = true")

            gana_headers = {**AUTH, "X-Tierlm-Class": "gana", "X-Tierlm-Producer": "gana:7"}
            with sse(gw, chat_body(max_tokens=LONG), gana_headers) as gana:
                page.wait_for_function(running_is(gana.job_id))
                assert "gana:7" in page.inner_text("#running")
                assert "running for" in page.inner_text("#running-detail")
                # A person chats: the chat preempts the gana, live on the page.
                with sse(gw, chat_body(max_tokens=LONG), AUTH) as chat:
                    page.wait_for_function(running_is(chat.job_id))
                    page.wait_for_function(
                        "document.getElementById('queue-T4').dataset.count === '1'"
                    )
                    # The producer, under its key's name (unnamed: key0).
                    assert f"#{gana.job_id} key0/gana:7" in page.inner_text("#queue-T4")
                    with sse(gw, chat_body(max_tokens=3), {**AUTH, "X-Tierlm-Class": "extract"}):
                        page.wait_for_function(
                            "document.getElementById('queue-T2').dataset.count === '1'"
                        )
                        # The timeline: runs of the warm-up, the swap, the preemption mark.
                        assert page.locator("#timeline-svg rect").count() >= 6
                        assert (
                            page.locator("#timeline-svg line[stroke='var(--preempt)']").count() >= 1
                        )
                        shot = tmp_path / "dashboard.png"
                        page.screenshot(path=str(shot), full_page=True)
            page.wait_for_function("document.getElementById('running').dataset.jobId === ''")
            assert page.evaluate("window.sameDocument") is True
            # The gana left while preempted or after it had started again: a
            # race between its client leaving and the device freeing.
            recent = page.inner_text("#recent").splitlines()
            gana_row = next(row for row in recent if row.startswith(f"#{gana.job_id}\t"))
            assert re.search(
                r"\tcancelled \(client disconnected while (running|queued)\)\t", gana_row
            )
            assert errors == []
        finally:
            context.close()
    assert shot.stat().st_size > 10_000
    if os.environ.get("TIERLM_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(os.environ["TIERLM_SCREENSHOT_DIR"]) / shot.name)


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Chromium at {CHROMIUM}")
def test_the_panels_show_the_state_before_the_stream_connects(tmp_path: Path) -> None:
    """The page carries the state as of its load: a screenshot taken before its
    event stream connects shows the backend, the models and the counters, not
    empty panels. The stream is blocked here (a route that never answers)."""
    with serve(sim_settings(), key=None) as gw, sync_api.sync_playwright() as playwright:
        warm_up(gw)
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.route("**/dashboard/events", lambda route: None)  # never connects
            page.goto(f"{gw.url}/dashboard")
            page.wait_for_function("document.body.dataset.initial === 'shown'")
            assert page.inner_text("#status-text") == "as loaded; connecting…"
            assert page.inner_text("#backend") == "sim"
            assert "gana:1" in page.inner_text("#vruntime")
        finally:
            browser.close()
