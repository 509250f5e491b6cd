"""Which web origins may call which paths (docs/gateway.md "Browsers, hosts
and CORS"): the one place the Origin check (``guards``) and the CORS answers
(``cors``) read, so the two never disagree.

An origin pattern is an origin (``http://localhost:3000``) or one with ``*``
wildcards, each matching any run of characters (``http://localhost:*``,
``chrome-extension://*``), as Ollama's ``OLLAMA_ORIGINS`` and gin's CORS
take them; ``*`` alone is any origin. Two lists apply:

- ``server.cors_origins``: every path (a browser chat UI on ``/v1``);
- ``server.ollama_origins``: Ollama's API only (``/api/*`` and ``/``), by
  default Ollama's own defaults (``settings.sections.OLLAMA_DEFAULT_ORIGINS``), so an Obsidian
  plugin, a VS Code webview or a Tauri front-end written for Ollama is let in
  as Ollama lets it in, while the scheduler API and the dashboard stay closed
  to every page but the gateway's own (a page on ``localhost:3000`` cannot
  ``POST /v1/scheduler/pause``).

``Origin: null`` (a sandboxed frame, a redirect) matches only ``null`` and
``*``, never a wildcard pattern: any site can make its page send it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["OriginPatterns", "OriginPolicy", "is_ollama_path"]


def is_ollama_path(path: str) -> bool:
    """Ollama's API: ``/api/...``, and ``/`` (which apps probe)."""
    return path == "/" or path == "/api" or path.startswith("/api/")


def _normal(origin: str) -> str:
    """Lower case, without a trailing slash (but ``file://`` keeps its two)."""
    origin = origin.strip().lower()
    return origin if origin.endswith("://") else origin.rstrip("/")


class OriginPatterns:
    """Origins, exact or with ``*`` wildcards (module docstring)."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(_normal(p) for p in patterns if p.strip())
        parts = [
            ".*" if p == "*" else ".*".join(map(re.escape, p.split("*"))) for p in self.patterns
        ]
        self.regex = "(?i)" + "|".join(f"(?:{part})" for part in parts) if parts else None
        """One regular expression for all (Starlette's ``allow_origin_regex``)."""
        self._compiled = None if self.regex is None else re.compile(self.regex)

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def match(self, origin: str) -> bool:
        origin = _normal(origin)
        if self._compiled is None:
            return False
        if origin == "null":
            return "null" in self.patterns or "*" in self.patterns
        return self._compiled.fullmatch(origin) is not None


class OriginPolicy:
    """Which origins each path takes: ``everywhere``, and on Ollama's API also
    ``ollama`` (module docstring)."""

    def __init__(self, everywhere: Iterable[str] = (), ollama: Iterable[str] = ()) -> None:
        self.everywhere = OriginPatterns(everywhere)
        self.ollama = OriginPatterns([*self.everywhere.patterns, *OriginPatterns(ollama).patterns])

    def patterns_for(self, path: str) -> OriginPatterns:
        return self.ollama if is_ollama_path(path) else self.everywhere

    def allows(self, origin: str, path: str) -> bool:
        return self.patterns_for(path).match(origin)
