"""What keeps web pages from driving the gateway (a keyless loopback gateway
above all: every program on the machine may use it, and so may every page its
browser opens, unless it is told apart).

- **Head size** (431 ``headers_too_large``): h11 bounds a request head only
  while it is incomplete (``limits.max_header_bytes``); one that arrives whole
  in one read is checked here against the same limit.
- **Host** (421 ``host_not_allowed``): a page on ``evil.example`` whose name
  the attacker re-points at 127.0.0.1 (DNS rebinding) reaches the gateway as
  same-origin, but its requests say ``Host: evil.example``. Only the names in
  ``server.accepted_hosts()`` are answered.
- **Origin** (403 ``origin_not_allowed``): a browser names the page's origin on
  every cross-origin request that can change something (and on same-origin
  ones too). A request from a page that is neither the gateway itself (its own
  dashboard) nor allowed on its path (``origins.OriginPolicy``:
  ``server.cors_origins`` everywhere, ``server.ollama_origins`` on Ollama's
  API) is refused, whatever its method or body: a bodiless ``POST
  /v1/scheduler/pause`` from any page is a "simple" request that a browser
  sends without asking. Clients that are not browsers send no Origin and are
  not concerned.
- **Content-Type** (415 ``unsupported_media_type``): a body of a POST, PUT or
  PATCH is JSON and must say so. ``text/plain`` and form posts are what a page
  can send cross-origin without a CORS preflight. A request without a
  Content-Type passes (curl, a bodiless POST): no browser sends one without an
  Origin. The dashboard's login form is the one form post (``form_paths``);
  a file upload (``POST /v1/files``) the one multipart body
  (``multipart_paths``): it passes the Origin check first, as every request.
  Ollama's API takes any Content-Type, as Ollama does (``lenient``): its
  clients send what they like (LiteLLM's ``application/octet-stream``, curl's
  form type with ``-d``), and a page's request is the Origin check's to stop.

CORS itself is Starlette's ``CORSMiddleware``, per path (``cors.PathCors``)
with the same ``OriginPolicy``: on ``/v1`` only when ``server.cors_origins``
lists origins, so a browser chat UI is allowed on purpose.
"""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from tierlm.server.edge.errors import APIError, send_error
from tierlm.server.edge.origins import OriginPolicy, is_ollama_path

__all__ = ["RequestGuard", "host_name"]

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data"


def host_name(host: str) -> str:
    """A Host header's name: lower case, without the port or IPv6 brackets."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host[1:]
    name, colon, port = host.rpartition(":")
    return name if colon and port.isdigit() else host


class RequestGuard:
    """The Host, Origin and Content-Type checks (module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        hosts: Collection[str] | None,
        origins: OriginPolicy | None = None,
        form_paths: Collection[str] = (),
        multipart_paths: Collection[str] = (),
        max_head_bytes: int | None = None,
    ) -> None:
        self.app = app
        self.max_head_bytes = max_head_bytes
        self.hosts = None if hosts is None else frozenset(hosts)
        self.origins = origins or OriginPolicy()
        self.form_paths = frozenset(form_paths)
        self.multipart_paths = frozenset(multipart_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        error = self.check(scope, Headers(scope=scope))
        if error is not None:
            await send_error(error, scope, receive, send)
            return
        await self.app(scope, receive, send)

    def check(self, scope: Scope, headers: Headers) -> APIError | None:
        if self.max_head_bytes is not None:
            size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
            size += sum(len(name) + len(value) + 4 for name, value in scope["headers"])
            if size > self.max_head_bytes:
                return APIError(
                    431,
                    f"request head: {size} bytes, over the limit of {self.max_head_bytes} "
                    "(limits.max_header_bytes)",
                    code="headers_too_large",
                    reason="headers_too_large",
                    headers={"Connection": "close"},
                )
        host = headers.get("host")
        if host is not None and self.hosts is not None and host_name(host) not in self.hosts:
            return APIError(
                421,
                f"Host: {host!r} is not a name of this gateway (server.allowed_hosts: "
                f"{', '.join(sorted(self.hosts))})",
                param="Host",
                code="host_not_allowed",
                reason="host_not_allowed",
            )
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin, host, scope):
            where = "Ollama's API" if is_ollama_path(scope["path"]) else "this path"
            return APIError(
                403,
                f"Origin: pages from {origin!r} may not call {where}; a browser page "
                "needs its origin in server.cors_origins (--cors-origins; wildcards "
                "such as chrome-extension://* are allowed)",
                param="Origin",
                code="origin_not_allowed",
                reason="origin_not_allowed",
            )
        media = headers.get("content-type")
        lenient = is_ollama_path(scope["path"])
        if media is not None and scope["method"] in _BODY_METHODS and not lenient:
            kind = media.partition(";")[0].strip().lower()
            path = scope["path"]
            form = kind == FORM and path in self.form_paths
            upload = kind == MULTIPART and path in self.multipart_paths
            if kind != JSON and not form and not upload:
                return APIError(
                    415,
                    f"Content-Type: must be {JSON}, got {media!r}",
                    param="Content-Type",
                    code="unsupported_media_type",
                    reason="unsupported_media_type",
                )
        return None

    def _origin_allowed(self, origin: str, host: str | None, scope: Scope) -> bool:
        if self.origins.allows(origin, scope["path"]):
            return True
        origin = origin.strip().rstrip("/").lower()
        # The gateway's own pages (the dashboard): same scheme, same host and port.
        parts = urlsplit(origin)
        return (
            host is not None
            and parts.scheme == scope.get("scheme", "http")
            and parts.netloc == host.strip().lower()
        )
