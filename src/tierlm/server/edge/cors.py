"""CORS answers, path by path (``origins.OriginPolicy``): Starlette's
``CORSMiddleware`` with the origins a path takes, so a preflight from a page
is answered yes exactly where the Origin check (``guards``) lets the request
itself through. No CORS at all where a path takes no origin (the default for
everything but Ollama's API: docs/gateway.md "Browsers, hosts and CORS")."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from tierlm.server.edge.origins import OriginPatterns, OriginPolicy, is_ollama_path

__all__ = ["PathCors"]


class PathCors:
    def __init__(self, app: ASGIApp, *, policy: OriginPolicy, expose: Sequence[str]) -> None:
        self.app = app

        def cors(patterns: OriginPatterns) -> ASGIApp:
            if not patterns:
                return app
            return CORSMiddleware(
                app,
                allow_origin_regex=patterns.regex,
                allow_methods=["GET", "POST", "PUT", "DELETE", "HEAD"],
                allow_headers=["*"],
                expose_headers=list(expose),
            )

        self._everywhere = cors(policy.everywhere)
        self._ollama = cors(policy.ollama)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        app = self._ollama if is_ollama_path(scope["path"]) else self._everywhere
        await app(scope, receive, send)
