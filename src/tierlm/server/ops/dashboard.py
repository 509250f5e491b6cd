"""The live dashboard: a static page (``dashboard.html``) fed by server-sent events.

``/dashboard`` serves the page (``dashboard.html``, its script ``app.js`` and
the timeline's ``timeline.js``); ``/dashboard/events`` streams its state, pushed
on every scheduler event (at most ``MIN_INTERVAL`` apart) and at least every
``MAX_INTERVAL`` (so running times advance); ``/dashboard/state`` is the same
state once, as JSON. Timeline items are sent once each (by sequence number):
the page accumulates them.

With keys configured the dashboard needs an admin key. A browser cannot put one
in an EventSource's headers, so ``/dashboard`` shows a login form that POSTs
the key to ``/dashboard/login``, which checks it, stores it in an HttpOnly,
SameSite=Strict cookie scoped to /dashboard and redirects to ``/dashboard``.
A key never travels in a URL: a URL is written to access logs, to the
browser's history and to proxies' logs (``/dashboard?key=`` is not accepted).
"""

from __future__ import annotations

import asyncio
import html
import json
from collections.abc import AsyncGenerator, Iterable
from dataclasses import asdict
from importlib import resources as resources_module
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from tierlm.server.edge.errors import APIError
from tierlm.server.edge.rejections import rejections_of
from tierlm.server.gateway.auth import DASHBOARD_COOKIE
from tierlm.server.gateway.gateway import Gateway
from tierlm.server.gateway.keep_alive import KeepAlive
from tierlm.server.gateway.resources import resources
from tierlm.server.openai.streaming import EventStream
from tierlm.server.ops.idle import idle_slots
from tierlm.shell.snapshot import JobInfo

__all__ = ["LOGIN_PATH", "dashboard_state", "routes"]

# Pushes at most 5 times a second (a burst of events is one update) and at least
# once a second (the running time and the timeline's "now" advance).
MIN_INTERVAL = 0.2
MAX_INTERVAL = 1.0
# Jobs listed per tier; the count is always exact. A 100 000-job backfill must
# not make every push megabytes.
JOBS_PER_TIER = 25
# Producers shown as vruntime bars (the ones with the least vruntime run next).
PRODUCERS = 30
RECENT = 12

_TIER_NAMES = {
    0: "T0 · a person is waiting",
    1: "T1 · foreground",
    2: "T2 · extraction",  # the README's word for the tier (docs/design.md §4)
    3: "T3 · overdue",
    4: "T4 · fair pool",
}


def _job(info: JobInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "class": info.class_name,
        "producer": info.producer,
        "model": info.model_id,
        "subject": info.subject,
        "tier": info.tier,
        "waited": info.waited,
        "preemptions": info.preemptions,
        "deadline": info.deadline,
    }


def dashboard_state(
    gateway: Gateway,
    since: int = 0,
    rejected: Iterable[dict[str, Any]] = (),
    keep_alive: KeepAlive | None = None,
) -> dict[str, Any]:
    """What the page shows; timeline items newer than ``since`` only."""
    snap = gateway.scheduler.snapshot()
    running = None
    if snap.running is not None:
        running = {**_job(snap.running), "since": snap.running_since}
    # Every slot's job, best-ranked first (the first is ``running``).
    batch = [_job(info) for info in snap.running_jobs]
    vruntime = sorted(snap.vruntime.items(), key=lambda kv: kv[1])[:PRODUCERS]
    timeline = gateway.timeline
    fg = snap.foreground
    return {
        "now": snap.now,
        "wall_offset": gateway.wall_offset(),
        "backend": gateway.settings.backend.kind,
        "models": gateway.model_ids,
        "loaded_model": snap.loaded_model,
        "swapping_to": snap.swapping_to,
        "slots": snap.slots,
        "batch": batch,
        "paused": snap.paused,
        "policy": snap.policy,
        "foreground": None if fg is None else {"class": fg.class_name, "subject": fg.subject},
        "running": running,
        "tiers": [
            {
                "tier": tier,
                "name": _TIER_NAMES.get(tier, f"T{tier}"),
                "count": len(jobs),
                "jobs": [_job(j) for j in jobs[:JOBS_PER_TIER]],
            }
            for tier, jobs in sorted(snap.queued.items())
        ],
        "vruntime": [{"producer": p, "vruntime": v} for p, v in vruntime],
        "budget": [
            {"class": name, "share": snap.budget_share.get(name, 0.0), "cap": cap}
            for name, cap in sorted(snap.budget_cap.items())
        ],
        "stats": asdict(snap.stats),
        "classes": {
            name: {"tier": c.tier, "fair": c.fair}
            for name, c in sorted(gateway.settings.classes.items())
        },
        "timeline": {
            "window": timeline.window,
            "items": timeline.since(since),
            "last_seq": timeline.last_seq,
            "open_run": timeline.open_run,
            # Every job on the device now, each on its lane (a batch: several).
            "open_runs": list(timeline.open_runs.values()),
            "lanes": max(timeline.lanes, snap.slots),
            "open_swap": timeline.open_swap,
        },
        "resources": resources(gateway, keep_alive),
        # Why slots sit idle (docs/design.md §4.7), from this snapshot.
        "idle": idle_slots(snap, gateway.settings.scheduler.chat_slowdown),
        # Who is a person (docs/design.md §4.11): each identity and its verdict.
        "people": gateway.people.state(snap.now),
        # Tokens a second, second by second over the window (throughput over time).
        "throughput": gateway.throughput.history(snap.now, timeline.window),
        # Over the window, not since the start: an incident an hour ago is gone
        # (/metrics keeps the all-time histograms: latency_window).
        "percentiles": gateway.metrics.requests.window.percentiles(timeline.window),
        "recent": list(gateway.recent)[:RECENT],
        "rejected": list(rejected)[:RECENT],
        "extensions": {name: dict(fn()) for name, fn in gateway.extensions.items()},
    }


def _gateway(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


LOGIN_PATH = "/dashboard/login"


def _login_page(message: str) -> Response:
    page = (
        "<!doctype html><meta charset=utf-8><title>tierlm dashboard</title>"
        "<body style='font:16px system-ui;margin:3em'><h1>tierlm dashboard</h1>"
        f"<p id=message>{html.escape(message)}</p>"
        f"<form method=post action='{LOGIN_PATH}'><label>Admin key "
        "<input type=password name=key autocomplete=current-password required autofocus>"
        "</label> <button type=submit>Open</button></form>"
        "<p>The key is then kept in a cookie for this site's dashboard.</p>"
    )
    return HTMLResponse(page, status_code=401, headers={"Cache-Control": "no-store"})


async def page(request: Request) -> Response:
    gateway = _gateway(request)
    try:
        gateway.keys.authenticate(request, admin=True)
    except APIError as exc:
        message = exc.message
        if "key" in request.query_params:
            message = "A key in the URL is not accepted (URLs are logged); enter it below."
        return _login_page(message)
    text = resources_files().joinpath("dashboard.html").read_text("utf-8")
    # The state as of this page, in the page: its panels are filled before its
    # event stream connects (a screenshot taken then showed empty panels).
    now = dashboard_state(gateway, 0, rejections_of(request.app.state), _keep_alive(request))
    initial = json.dumps(now, separators=(",", ":")).replace("</", "<\\/")
    script = f'<script id="initial-state" type="application/json">{initial}</script>'
    text = text.replace("</main>", f"</main>\n{script}", 1)  # before app.js reads it
    return HTMLResponse(text, headers={"Cache-Control": "no-cache"})


async def login(request: Request) -> Response:
    """The login form's POST: an admin key -> the cookie, and back to the page."""
    gateway = _gateway(request)
    if not gateway.keys.configured:
        return RedirectResponse("/dashboard", status_code=303)
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    key = (form.get("key") or [""])[0]
    entry = gateway.keys.lookup(key) if key else None
    if entry is None or not entry.admin:
        return _login_page("That key is not an admin key of this gateway.")
    response = RedirectResponse("/dashboard", status_code=303)
    response.set_cookie(DASHBOARD_COOKIE, key, httponly=True, samesite="strict", path="/dashboard")
    return response


async def state(request: Request) -> Response:
    gateway = _gateway(request)
    gateway.keys.authenticate(request, admin=True)
    return JSONResponse(
        dashboard_state(gateway, 0, rejections_of(request.app.state), _keep_alive(request))
    )


async def events(request: Request) -> Response:
    gateway = _gateway(request)
    gateway.keys.authenticate(request, admin=True)

    async def stream() -> AsyncGenerator[bytes, None]:
        loop = asyncio.get_running_loop()
        sent_seq = 0
        version = -1
        while not gateway.closing:
            pushed_at = loop.time()
            version = gateway.version
            data = dashboard_state(
                gateway, sent_seq, rejections_of(request.app.state), _keep_alive(request)
            )
            sent_seq = data["timeline"]["last_seq"]
            yield f"event: state\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
            await gateway.changed(version, MAX_INTERVAL)
            # A burst of events becomes one push.
            await asyncio.sleep(max(0.0, pushed_at + MIN_INTERVAL - loop.time()))

    return EventStream(stream)


def _keep_alive(request: Request) -> KeepAlive | None:
    keep_alive: KeepAlive | None = getattr(request.app.state, "keep_alive", None)
    return keep_alive


_SCRIPTS = ("app.js", "timeline.js")

# The icon browsers ask for on every page: a slot lane with a chat preempting it.
FAVICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
    '<rect width="16" height="16" rx="3" fill="#1d2125"/>'
    '<rect x="2" y="3" width="12" height="4" fill="#7048e8"/>'
    '<rect x="2" y="9" width="7" height="4" fill="#d9480f"/></svg>'
)


async def script_js(request: Request) -> Response:
    """The page's scripts: static code, no state (the state comes by /events)."""
    name = request.url.path.rsplit("/", 1)[-1]
    text = resources_files().joinpath(name).read_text("utf-8")
    return Response(text, media_type="text/javascript", headers={"Cache-Control": "no-cache"})


def resources_files() -> Any:
    return resources_module.files("tierlm.server.ops")


async def favicon(request: Request) -> Response:
    """Not a 404 in every browser's console and in the recently rejected."""
    return Response(FAVICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


def routes() -> list[BaseRoute]:
    return [
        Route("/favicon.ico", favicon, methods=["GET"]),
        *(Route(f"/dashboard/{name}", script_js, methods=["GET"]) for name in _SCRIPTS),
        Route("/dashboard", page, methods=["GET"]),
        Route(LOGIN_PATH, login, methods=["POST"]),
        Route("/dashboard/state", state, methods=["GET"]),
        Route("/dashboard/events", events, methods=["GET"]),
    ]
