"""Whether a person is in the app's AI surfaces, and on which models
(docs/design.md §4.8 (presence)).

The chat holds (``core/holds``) watch the chat page. A person on another AI
surface (a T1 page: the deck they swipe, a note they opened) is as present:
their page's next job, or the chat they open next, runs on the model the
device holds, and a swap away for background work makes them wait for it and
the swap back. On ``issue118`` a swap to another model for an overdue cron
job started while the person swiped on the deck page; they opened chat six
seconds later and their first message waited 10 s (seed 25 at 8 slots, seed
136 at 1 slot). So:

- *present*: a non-chat AI surface is open and active: opened, or a job of
  its own submitted, within ``chat_idle``. Its models are its last job's and
  the person's last chat's. A page left open and silent for ``chat_idle`` is
  no longer a person there.
- *away*: a person has been in the app and no AI surface is open now. The
  moment a swap costs no person anything; background excursions are best
  taken then. With no person ever (agents alone) nobody is away, and the
  starvation bound's order between models stands.
"""

from __future__ import annotations

from tierlm.core.jobs import Foreground, Job

__all__ = ["Presence"]


class Presence:
    """The open non-chat AI surface: since when, its last job, its model."""

    __slots__ = ("_active", "_model", "_open", "_page", "_seen")

    def __init__(self) -> None:
        self._open = False
        """Any AI surface (the chat page too) is open."""
        self._seen = False
        """One has been open: a person uses the app."""
        self._page: Foreground | None = None
        """The open surface when it is not the chat page."""
        self._active = 0.0
        self._model: str | None = None

    def surface(self, foreground: Foreground | None, now: float, *, chat: bool) -> None:
        """The foreground changed to ``foreground`` (``chat``: the chat page)."""
        self._open = foreground is not None
        self._seen = self._seen or self._open
        page = None if chat else foreground
        if page != self._page:
            self._page, self._active, self._model = page, now, None

    def submitted(self, job: Job, now: float) -> None:
        """A job was submitted: the open page's own is its person's activity."""
        page = self._page
        if page is not None and page.matches(job):
            self._active, self._model = now, job.model_id

    @property
    def away(self) -> bool:
        """A person uses the app and no AI surface is open: no person is there
        to pay for a swap."""
        return self._seen and not self._open

    def until(self, now: float, model_id: str, chat_model: str | None, idle: float) -> float | None:
        """Until when a person on a non-chat AI surface keeps ``model_id``
        (their page's model, or their last chat's, which they may open next):
        ``idle`` after the page's last activity; None: no such person."""
        if self._page is None or model_id not in (self._model, chat_model):
            return None
        end = self._active + idle
        return end if now < end else None
