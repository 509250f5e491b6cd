"""Excursions a person does not pay for (docs/design.md §4.8 (bets)).

With the chat page open, every swap away from the person's model for
background work is a bet that they will not write before the device is back.
A lost bet makes their message wait for background's swaps, which tierlm
promises not to do. Two things keep the bets honest:

- **Their own gaps, not a median.** Of the person's last ``GAPS_KEPT``
  reading gaps, those longer than their silence so far are the gaps they may
  be in now; the bet is made when at least ``WIN_AT`` of those would also
  hold the excursion. A median bet lost one excursion in four on the Azure
  conversation trace, where gaps run 37-63 s (quartiles) against a 37 s
  excursion.
- **A stated budget of lost bets.** Each message of the person earns
  ``loss_share`` of a lost message; a bet is made only when one more lost
  message stays within what was earned. So over any run, the messages that
  met background's swaps are at most ``loss_share`` of the person's messages
  (one lost bet can catch two messages typed back to back: then one over).

With no budget left, the device stays on the person's model while the page is
open until they have been silent ``GONE_FACTOR`` times their longest gap
(they have left): no job waits forever for a page nobody reads.
"""

from __future__ import annotations

from collections import deque

__all__ = ["GAPS_KEPT", "GONE_FACTOR", "LOSS_SHARE", "MIN_GAPS", "WIN_AT", "ExcursionBets"]

LOSS_SHARE = 0.02
"""Of a person's messages, the most that may wait for a swap background
caused (docs/design.md §4.8 (bets)): one message in fifty."""

GAPS_KEPT = 16
"""A person's last reading gaps the bet reads: enough for a conditional share
(their gaps longer than the silence so far), few enough to follow a person
whose pace changes within minutes."""

MIN_GAPS = 2
"""Fewer of those gaps than this say too little to bet on."""

WIN_AT = 0.75
"""The share of the person's gaps (those longer than their silence so far)
that must hold the excursion for the bet to be made: three in four."""

SURE = 1.0 / GAPS_KEPT
"""A bet's risk when every one of the person's gaps that could still be
running holds it: the rule of succession's one unseen gap in ``GAPS_KEPT``."""

GONE_FACTOR = 2.0
"""Silent this many times their longest remembered gap, a person at the open
page has left: background may swap away without a bet's budget."""


class ExcursionBets:
    """A person's reading gaps, the bets' budget, and whether the device is
    away from their model on one."""

    __slots__ = ("_away", "_gaps", "_pending", "lost", "messages", "share")

    def __init__(self, share: float = LOSS_SHARE) -> None:
        self.share = share
        self.lost = 0
        """Messages that met a swap made for background with the page open."""
        self.messages = 0
        self._gaps: deque[float] = deque(maxlen=GAPS_KEPT)
        self._pending = 0  # messages sent and not yet answered
        self._away = False  # the device swapped away with the page open

    def gap(self, seconds: float) -> None:
        """One of the person's reading gaps ended (a message after a reply)."""
        self._gaps.append(seconds)

    def message(self) -> None:
        """The person sent a message; it met the swap back if the device is away."""
        self.messages += 1
        self._pending += 1
        if self._away:
            self.lost += 1

    def answered(self) -> None:
        """One of the person's messages was answered (its job ended)."""
        self._pending = max(0, self._pending - 1)

    def swapped(self, model_id: str, person_model: str | None, *, chat_open: bool) -> None:
        """A swap to ``model_id`` ended. Away from the person's model with the
        page open it was a bet; messages already waiting met it."""
        if person_model is None or model_id == person_model:
            self._away = False
            return
        if chat_open and not self._away:
            self._away = True
            self.lost += self._pending

    @property
    def earned(self) -> float:
        """Lost messages the person's messages have paid for so far."""
        return self.share * self.messages

    def affordable(self, risk: float = 1.0) -> bool:
        """A bet that loses with probability ``risk`` stays within the budget
        earned should it lose; one every remembered gap says holds (``risk``
        at most ``SURE``) only while nothing is owed."""
        if self.share <= 0:
            return False  # a budget of none: no bet at all
        return self.lost + (0.0 if risk <= SURE else 1.0) <= self.earned

    def risk(self, silent: float, need: float) -> float | None:
        """The chance the person writes within ``need`` seconds, having been
        silent ``silent``, read from their own gaps (None: too few to say, or
        under ``WIN_AT`` of those longer than the silence hold it). Their
        gaps longer than the silence are the ones they may be in; with fewer
        than ``MIN_GAPS`` of those, they have outlasted nearly every gap seen,
        and the chance is the rule of succession's."""
        count = len(self._gaps)
        if count < MIN_GAPS:
            return None
        longer = [gap for gap in self._gaps if gap > silent]
        if len(longer) < MIN_GAPS:
            return (len(longer) + 1) / (count + 1)
        held = sum(1 for gap in longer if gap >= silent + need) / len(longer)
        return None if held < WIN_AT else 1.0 - held + 1.0 / GAPS_KEPT

    def wins(self, silent: float, need: float) -> bool:
        """Whether a bet now is made: the person's gaps say it holds
        (``risk``), and its risk fits the budget."""
        risk = self.risk(silent, need)
        return risk is not None and self.affordable(risk)

    def longest(self, last: int) -> float:
        """The longest of the person's ``last`` gaps (0 with none)."""
        return max(list(self._gaps)[-last:], default=0.0)

    def next_chance(self, silent: float) -> float | None:
        """The silence, past ``silent``, at which the odds next change: the
        shortest of the person's gaps still longer than it has run out."""
        return min((gap for gap in self._gaps if gap > silent), default=None)

    def gone_after(self, floor: float, cap: float) -> float:
        """Seconds of silence after which the person has left the open page:
        ``GONE_FACTOR`` times their longest gap, from ``floor`` to ``cap``."""
        return min(cap, max(floor, GONE_FACTOR * max(self._gaps, default=0.0)))
