"""The dashboard of a batched device, in a real headless Chromium (as
test_dashboard.py): with 8 background streams on 8 slots and then a person's
chat, the timeline holds every job of the batch, each on a lane of its own,
and the batch size over time (cut around the chat by the latency guard);
the finished jobs show their wait, first token, duration and tokens/s;
per-class percentiles, the device's resources, one colour per producer in
the fairness bars, and a favicon (no 404).

Saves a screenshot (``dashboard-batch.png``, and in ``$TIERLM_SCREENSHOT_DIR``
when set) for a person to look at.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.payloads import chat_body
from tests.server.helpers import Gateway, serve, sim_settings, sse
from tests.server.test_dashboard import ARGS, CHROMIUM, LONG, TIMEOUT_MS

pytestmark = pytest.mark.browser
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (pip)")

STREAMS = 8

JOBS_DRAWN = """() => [...new Set([...document.querySelectorAll('#timeline-svg rect.run')]
    .map(r => r.dataset.job))].map(Number)"""
OPEN_LANES = """() => [...document.querySelectorAll("#timeline-svg rect.run[data-open='1']")]
    .map(r => Number(r.dataset.lane)).sort((a, b) => a - b)"""


def running_ids_of(state: dict[str, Any]) -> set[int]:
    return {job["id"] for job in state["running_jobs"]}


def finish_some(gw: Gateway) -> None:
    """A little history: finished jobs of two classes (percentiles, the recent table)."""
    for producer in ("notes:1", "notes:2"):
        client = gw.openai(X_Tierlm_Class="gana", X_Tierlm_Producer=producer)
        client.completions.create(model="sim-a", prompt="x", max_tokens=20)
    gw.openai().completions.create(model="sim-a", prompt="x", max_tokens=5)


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Chromium at {CHROMIUM}")
def test_the_timeline_holds_every_job_of_a_batch(tmp_path: Path) -> None:
    settings = sim_settings({"backend": {"slots": STREAMS}, "server": {"dashboard_window": 20}})
    with (
        serve(settings) as gw,
        sync_api.sync_playwright() as playwright,
        contextlib.ExitStack() as streams,
    ):
        finish_some(gw)
        assert httpx.get(f"{gw.url}/favicon.ico").status_code == 200
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1200})
            page.set_default_timeout(TIMEOUT_MS)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            failed: list[str] = []
            page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
            page.goto(f"{gw.url}/dashboard")
            page.wait_for_function("Number(document.body.dataset.updates) >= 1")

            # Finished jobs: their wait, first token, duration and rate.
            row = page.inner_text("#recent tr[data-job]").split("\t")
            assert len(row) == 11 and row[4] == "completed" and row[9] != "–"
            assert page.locator("#percentiles-body tr[data-class='gana']").count() == 1
            bars = page.eval_on_selector_all(
                "#vruntime .fill", "els => els.map(e => e.style.background)"
            )
            assert len(bars) >= 2 and len(set(bars)) == len(bars)  # a colour per producer

            ids = []
            for i in range(STREAMS):
                headers = {"X-Tierlm-Class": "gana", "X-Tierlm-Producer": f"gana:{i}"}
                ids.append(
                    streams.enter_context(sse(gw, chat_body(max_tokens=LONG), headers)).job_id
                )
            gw.wait(lambda s: len(s["running_jobs"]) == STREAMS, "a full batch")
            # Every job of the batch is drawn, each on its own lane: not an idle device.
            page.wait_for_function(f"({OPEN_LANES})().length === {STREAMS}")
            assert page.evaluate(OPEN_LANES) == list(range(STREAMS))
            assert set(ids) <= set(page.evaluate(JOBS_DRAWN))
            page.wait_for_function(
                f"document.getElementById('batch-size').dataset.now === '{STREAMS}'"
            )
            resources = page.inner_text("#resources-body")
            assert "KV in use" in resources and "tokens/s" in resources

            # A person chats: it takes a slot at once, and the latency guard cuts
            # the batch around it (docs/design.md §4.7): the cut runs stay drawn,
            # ended ("preempted"), and the batch size falls.
            chat = streams.enter_context(sse(gw, chat_body(max_tokens=LONG)))
            # The cut sequences leave at the step boundary where the chat joins;
            # a state read in between can still list them, so wait for both
            # (a guard that never cut times out here).
            gw.wait(
                lambda s: chat.job_id in running_ids_of(s) and len(s["running_jobs"]) < STREAMS,
                "the chat running in a batch the guard cut",
            )
            page.wait_for_function(
                f"({JOBS_DRAWN})().includes({chat.job_id})"
                # The guard's cut: fewer than a full batch (the count moves as
                # cut sequences leave and the chat's guard relaxes).
                f" && Number(document.getElementById('batch-size').dataset.now) < {STREAMS}"
            )
            assert {*ids, chat.job_id} <= set(page.evaluate(JOBS_DRAWN))
            drawn = page.get_attribute("#batch-size", "data-now")
            assert drawn is not None and 1 <= len(page.evaluate(OPEN_LANES)) < STREAMS
            assert page.get_attribute("#batch-size", "data-max") == str(STREAMS)
            rate = page.inner_text("#resources-body tr[data-key='tokens/s']").split("\t")[1]
            assert float(rate) > 0
            shot = tmp_path / "dashboard-batch.png"
            page.screenshot(path=str(shot), full_page=True)
            assert errors == [] and failed == []
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
    if os.environ.get("TIERLM_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(os.environ["TIERLM_SCREENSHOT_DIR"]) / shot.name)
