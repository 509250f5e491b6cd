"""tierlm's one error tree: every error tierlm raises on purpose derives from
``TierlmError`` and carries the HTTP status a gateway answers it with.

h11's ``ProtocolError.error_status_hint`` is the model: the place that raises
knows what kind of failure it is (the request's fault, the backend's, a
shutdown), so the gateway maps an error to a response by reading the hint, not
by an ``isinstance`` chain that must learn every new error. A leaf module:
it imports nothing of tierlm, so every layer (runners included) may import it
(docs/design.md §1).
"""

from __future__ import annotations

__all__ = ["TierlmError", "install_hint"]


class TierlmError(Exception):
    """The root of tierlm's errors.

    ``status_hint`` is the HTTP status for a client whose request hit it (500:
    tierlm's or the device's fault; a subclass says otherwise); ``code`` is
    OpenAI's ``error.code`` for it; ``param`` the request field at fault, if
    one is; ``retry_after`` seconds after which a retry may succeed (a full
    queue), which a gateway sends as ``Retry-After``; ``reason`` the label a
    gateway counts the refusal under (None: ``code``). A subclass sets them as
    class attributes; an instance may set its own.
    """

    status_hint: int = 500
    code: str | None = "internal_error"
    param: str | None = None
    retry_after: int | None = None
    reason: str | None = None


def install_hint(extra: str) -> str:
    """The command that installs ``extra``, in both forms: tierlm is installed
    from a checkout today (``-e '.[extra]'``), and the PyPI form alone
    (``'tierlm[extra]'``) failed for every newcomer who followed it. Every
    "missing extra" message says it through here, so none drifts."""
    return f"pip install -e '.[{extra}]' in a checkout (pip install 'tierlm[{extra}]' from PyPI)"
