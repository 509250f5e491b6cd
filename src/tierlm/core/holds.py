"""How long to hold a model for a person who may type again (docs/design.md §4.8).

Two holds keep the device on the model that served the last chat instead of
swapping away for background work on another model:

- ``chat_grace`` after the last chat (seed scenario 6: "a person likely types
  again");
- while the chat page is open (the foreground is a T0 class), ``chat_idle``
  after the last chat: a person reading the reply may type again, but one who
  has sent nothing for a minute has stopped, and no job waits forever for them.

Both are capped by ski rental: idling costs what it lasts, a swap costs what
it measures, so with work queued for another model the device idles at most
``grace_factor`` swap times (a 0.1 s swap never idles the device for 30 s; a
10 s phone swap keeps the seed's 30 s). The cap counts from when the device
started idling with that work waiting. With the chat page open the cap is
``OPEN_PAGE_SWAPS`` swaps instead: the bet is on a person's wait. A hold that
only delays a swap while same-model work runs costs nothing and is not capped.
"""

from __future__ import annotations

from tierlm.core.bets import ExcursionBets
from tierlm.core.classes import Tier
from tierlm.core.jobs import Foreground, Job
from tierlm.core.presence import Presence

__all__ = [
    "DEFAULT_SWAP_ESTIMATE",
    "EXCURSION_SWAPS",
    "IDLE_STRETCH",
    "OPEN_PAGE_SWAPS",
    "SwapHolds",
]

OPEN_PAGE_SWAPS = 10.0
"""With the chat page open, the most swap times a hold idles the device for
(docs/design.md §4.8). A lost bet there costs a person a swap's wait, which
tierlm promises not to make them pay for background work; an idle second costs
background throughput. Ten swaps keep the whole 60 s ``chat_idle`` on the
seed's 10 s swap, and a 0.1 s swap still frees the device after 1 s."""

EXCURSION_SWAPS = 3.0
"""docs/design.md §4.8 (excursions): the part of a person's chat idle gap an
excursion to another model needs, in swap times: the swap there, its job
(about a swap's length, the unit ski rental bets in), and the swap back."""

IDLE_STRETCH = 2.0
"""docs/design.md §4.8 (holds): a person's own reading gaps stretch ``chat_idle``
to at most this many times it (two minutes on the default, which is
``max_affinity_wait``): one long absence with the page open must not hold the
device's other models for the next four messages."""

GONE_CAP = 10.0
"""docs/design.md §4.8 (bets): with no bet to make, the most ``chat_idle``s a
person's silence at the open page is waited out (ten minutes on the
default): their longest gap may be one long absence. Four minutes took a
reader whose gaps are heavy-tailed (median 80 s) for gone one gap in seven."""

NEGLIGIBLE_SWAP = 1.0
"""docs/design.md §4.8 (bets): seconds of swap a person does not wait for in
any sense that matters (a 0.1 s swap back is a token or two): swapping away
that fast is no bet, and ski rental alone caps the hold."""

NEXT_BET_MARGIN = 0.001
"""Seconds past a gap's length at which the bet is looked at again: past it,
not on it (a gap exactly that long is still running)."""

GAPS_KEPT = 4
"""A person's last reading gaps whose longest stretches ``chat_idle``
(docs/design.md §4.8 (holds)); the bets read more (``bets.GAPS_KEPT``)."""

DEFAULT_SWAP_ESTIMATE = 10.0
"""Seed: "a model swap costs ~10 s". Used until a swap has been measured."""


class SwapHolds:
    """Last chat per model, measured swap times, and the idle hold in progress."""

    __slots__ = (
        "_chat_model",
        "_chat_open",
        "_held_since",
        "_last_chat",
        "_last_swap",
        "_page_opened",
        "_swaps",
        "bets",
        "chat_grace",
        "chat_idle",
        "grace_factor",
        "presence",
        "runner_estimate",
    )

    def __init__(self, chat_grace: float, chat_idle: float, grace_factor: float) -> None:
        self.chat_grace = chat_grace
        self.chat_idle = max(chat_grace, chat_idle)
        self.grace_factor = grace_factor
        self._last_chat: dict[str, float] = {}
        self._chat_model: str | None = None
        self._swaps: dict[str, float] = {}
        self._last_swap: float | None = None
        self._held_since: float | None = None
        # When the chat page last opened, and the model of the last chat then:
        # a person opens the page to type (docs/design.md §4.8 (holds)).
        self._page_opened: tuple[float, str] | None = None
        self.runner_estimate: float | None = None
        """The runner's own swap estimate (``Device.swap_estimate``), used until
        a swap is measured."""
        self.presence = Presence()  # docs/design.md §4.8 (presence)
        self.bets = ExcursionBets()  # docs/design.md §4.8 (bets)
        self._chat_open = False

    def chat_ended(self, model_id: str, now: float) -> None:
        self._last_chat[model_id] = now
        self._chat_model = model_id
        self.bets.answered()

    def surface(
        self, foreground: Foreground | None, now: float, *, chat: bool, opened: bool
    ) -> None:
        """The foreground changed (``chat``: to the chat page; ``opened``: it
        was not open before): the presence it says (docs/design.md §4.8)."""
        self.presence.surface(foreground, now, chat=chat)
        self._chat_open = chat
        if opened:
            self.page_opened(now)

    def submitted(self, job: Job, now: float) -> None:
        """A job was submitted: a person's message is a reading gap's end,
        the open page's own job its person's activity (docs/design.md §4.8)."""
        if job.task_class.tier == Tier.T0:
            self.chat_submitted(now)
        else:
            self.presence.submitted(job, now)

    def page_opened(self, now: float) -> None:
        """The chat page opened: the person came to type, on the model their
        last chat used (docs/design.md §4.8: the open page holds it from now,
        as a chat would; a swap away at this moment made the first message
        wait for it and the swap back)."""
        model = self._chat_model
        self._page_opened = None if model is None else (now, model)

    def swapped(self, model_id: str, seconds: float) -> None:
        """A swap to ``model_id`` took ``seconds`` (told by the shell)."""
        self._swaps[model_id] = seconds
        self._last_swap = seconds
        self.bets.swapped(model_id, self._chat_model, chat_open=self._chat_open)

    def swap_estimate(self, model_id: str) -> float:
        """The last measured swap to ``model_id``; else the last swap measured;
        else the runner's estimate; else the seed's figure."""
        known = self._swaps.get(model_id, self._last_swap)
        if known is not None:
            return known
        return self.runner_estimate if self.runner_estimate is not None else DEFAULT_SWAP_ESTIMATE

    def hold_end(
        self,
        now: float,
        loaded_model: str,
        target_model: str,
        *,
        chat_open: bool,
        idle: bool,
        present_until: float = float("inf"),
    ) -> float | None:
        """Until when to hold ``loaded_model`` rather than swap to
        ``target_model`` (None: no person may use it). ``idle``: nothing else
        on the loaded model can run meanwhile, so the device would idle;
        ``present_until``: the latest a person on another AI surface holds it
        (docs/design.md §4.8 (presence): work past the starvation bound is held
        so for at most one more bound)."""
        last_chat = self._last_chat.get(loaded_model)
        opened = self._page_opened
        if chat_open and opened is not None and opened[1] == loaded_model:
            last_chat = max(last_chat if last_chat is not None else opened[0], opened[0])
        present = None
        if not chat_open:
            present = self.presence.until(now, loaded_model, self._chat_model, self.chat_idle)
            present = None if present is None or present_until <= now else present
        if last_chat is None and present is None:
            return None
        end = -float("inf")
        if last_chat is not None:
            end = last_chat + (self.idle_after(target_model) if chat_open else self.chat_grace)
        if present is not None:
            end = max(end, min(present, present_until))
        if idle:
            # docs/design.md §4.8 (ski rental). With a person at the chat page or
            # another AI surface a lost bet costs them the swap back, so the
            # hold may idle up to OPEN_PAGE_SWAPS swaps: a person typing every
            # 40-50 s under the 3-swap cap waited 10-20 s on most messages.
            swaps = OPEN_PAGE_SWAPS if chat_open or present is not None else self.grace_factor
            since = self._held_since if self._held_since is not None else now
            end = min(end, since + swaps * self.swap_estimate(target_model))
        if chat_open and last_chat is not None and now >= end:
            end = max(end, self._unbet_end(now, last_chat, target_model))
        return end

    def _unbet_end(self, now: float, last_chat: float, target_model: str) -> float:
        """docs/design.md §4.8 (bets): a swap away from the open page now bets
        the person has stopped. Without the odds or the budget for it, the
        hold lasts until they have left the page, whichever hold ran out (ski
        rental's cap included); a swap too short to be waited for
        (``NEGLIGIBLE_SWAP``) is no bet."""
        swap = self.swap_estimate(target_model)
        if swap <= NEGLIGIBLE_SWAP or self.bets.wins(now - last_chat, EXCURSION_SWAPS * swap):
            return now
        return last_chat + self.bets.gone_after(self.chat_idle, GONE_CAP * self.chat_idle)

    def idle_after(self, target_model: str) -> float:
        """How long after their last chat a person at the open page has
        stopped typing: ``chat_idle``, or, when their recent reading gaps ran
        longer, the longest of them and a swap (the swap away would otherwise
        land where they type), never past ``IDLE_STRETCH`` x ``chat_idle``
        (docs/design.md §4.8 (holds)). A person reading each reply for 40-70 s
        was taken for gone at 60 s, and a swap to another model then made a
        fifth of their messages wait for it and the swap back (the Azure
        conversation trace, 8 slots: 29 messages waited, 20 with
        strict-priority)."""
        longest = self.bets.longest(GAPS_KEPT) + self.swap_estimate(target_model)
        return max(self.chat_idle, min(longest, IDLE_STRETCH * self.chat_idle))

    def expecting(self, now: float, *, chat_open: bool) -> str | None:
        """The model a person at the open chat page may type on now: their
        last chat's, within ``idle_after`` of it or of the page opening (None:
        the page is closed, or they have stopped). The excursion rule of
        docs/design.md §4.8 brings the device back to it."""
        model = self._chat_model
        if not chat_open or model is None:
            return None
        return model if now < self.expected_until(now, chat_open=chat_open) else None

    def expected_until(self, now: float, *, chat_open: bool) -> float:
        """Until when a person may type again (``expecting``); ``now`` or
        earlier: not expected."""
        model = self._chat_model
        if model is None:
            return now
        end = self.hold_end(now, model, model, chat_open=chat_open, idle=False)
        return now if end is None else end

    def chat_submitted(self, now: float) -> None:
        """A person sent a message: the time since their last chat ended is
        one of their reading gaps (reading the reply, typing the next),
        unless the chat page opened in it: they were away, and a few minutes
        away are no reading time (docs/design.md §4.8 (excursions))."""
        if self._last_chat:
            last = max(self._last_chat.values())
            opened = self._page_opened
            if opened is None or opened[0] <= last:
                self.bets.gap(now - last)
        self.bets.message()

    def gap_fits(self, now: float, model_id: str, since: float, target_model: str) -> bool:
        """Whether an excursion to ``target_model`` fits in the person's chat
        idle gap (docs/design.md §4.8 (bets); seed scenario 6: work on another
        model "waits for a chat idle gap"): a gap that began at or after
        ``since`` (their last chat on ``model_id`` ended then, and the page
        has not opened again since: a person who just opened it is about to
        type), whose rest, by the person's own gaps, holds ``EXCURSION_SWAPS``
        swaps (there, a job, and back), with the budget of lost bets left
        (``ExcursionBets``). The median bet it replaces lost one excursion in
        four on the Azure conversation trace."""
        last = self._last_chat.get(model_id)
        if last is None or last < since:
            return False
        opened = self._page_opened
        if opened is not None and opened[0] > last:
            return False
        need = EXCURSION_SWAPS * self.swap_estimate(target_model)
        return self.bets.wins(now - last, need)

    def next_bet_at(self, now: float, model_id: str) -> float | None:
        """When a gap bet that does not hold now may next hold: the moment the
        shortest of the person's gaps still running out has passed (a reply
        that quick is then no longer possible: docs/design.md §4.8 (bets))."""
        last = self._last_chat.get(model_id)
        if last is None:
            return None
        silent = self.bets.next_chance(now - last)
        return None if silent is None else last + silent + NEXT_BET_MARGIN

    def idling(self, now: float) -> None:
        """The device went idle holding a model while other work waits."""
        if self._held_since is None:
            self._held_since = now

    def busy(self) -> None:
        """The device is not idling for a hold (it runs, or nothing waits)."""
        self._held_since = None
