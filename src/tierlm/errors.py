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

from typing import ClassVar

__all__ = ["TierlmError"]


class TierlmError(Exception):
    """The root of tierlm's errors.

    ``status_hint`` is the HTTP status for a client whose request hit it (500:
    tierlm's or the device's fault; a subclass says otherwise); ``code`` is
    OpenAI's ``error.code`` for it.
    """

    status_hint: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
