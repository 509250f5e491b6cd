"""Scheduler settings, with where each default comes from, and every knob of
the policy in one table (``KNOBS``, written to docs/knobs.md)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from tierlm.core import (
    anticipation,
    classes,
    fairness,
    floor,
    holds,
    people,
    persons_in_turn,
    slices,
    slots,
)
from tierlm.core import guard_relief as relief
from tierlm.core.fairness import DEFAULT_IDLE_RESET

__all__ = [
    "DEADLINE_MODES",
    "KNOBS",
    "MAX_WEIGHT",
    "MIN_WEIGHT",
    "RETIRED",
    "Knob",
    "SchedulerConfig",
    "knobs_markdown",
    "scheduler_config",
]

MIN_WEIGHT = 0.001
MAX_WEIGHT = 1000.0
"""Fair-pool weights span six orders of magnitude: enough for any share, and
precise as integer loads (docs/design.md §4.4)."""


DEADLINE_MODES = ("after-people", "on-time")
"""docs/design.md §4.8 (deadlines on time): the accepted ``SchedulerConfig.deadlines``."""


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Tunables of the tiered policy and its shell (docs/design.md §4)."""

    max_affinity_wait: float = 120.0
    """docs/design.md §4.8: the longest the best job waits behind same-model work
    before its swap is forced (the starvation bound). 120 s = 12 swaps' worth of
    the seed's ~10 s swap, so affinity saves most swaps yet nothing waits long."""

    chat_grace: float = 30.0
    """docs/design.md §4.8: no swap away from a model within this many seconds
    of its last chat, "a person likely types again" (seed scenario 6)."""

    chat_idle: float = 60.0
    """docs/design.md §4.8: while the chat page is open, the no-swap hold
    lasts until the last chat is this old: one minute without a message means
    the person has stopped typing, not that they are about to. A person whose
    own recent gaps ran longer holds it up to twice this (§4.8 (holds),
    ``holds.IDLE_STRETCH``)."""

    grace_factor: float = 3.0
    """docs/design.md §4.8 (ski rental): with work queued for another
    model, the device idles at most this many measured swap times for a
    person who may type again. Renting (idling) until rent paid equals a few
    purchases (swaps) bounds the waste; 3 keeps the seed's 30 s hold for its
    ~10 s phone swap and shrinks it to 0.3 s for a 0.1 s swap."""

    slice: float = 3.0
    """docs/design.md §4.6: a pool job that has run this
    long yields to an eligible producer with an earlier virtual deadline.
    Two backlogged producers stay within about two slices of each other over
    any minute (EEVDF's lag of about a slice each way), so 3 s keeps their
    service within 10 % of any 60 s window (VTC's measure): the seed's 4 s
    allowed 13.3 %, and on the `azure-pool` trace case 13.6 % over 116 h
    against 9.5 % at 3 s. 3 s is 60 tokens at the seed's 20 tokens/s, and a
    preemption (a re-prefill at worst, nothing with a KV snapshot; §4.6 (a slice worth its resume))
    costs little against it."""

    pool_floor: float = 0.1
    """docs/design.md §4.5: overdue work never pushes a
    backlogged fair pool below this share of busy device time in a 300 s window
    (the seed's budget window): cron that falls behind cannot starve the pool."""

    idle_reset: float = DEFAULT_IDLE_RESET
    """Seed: a producer that "returns after being absent for > 5 min" starts
    afresh; here its fair-pool state is forgotten, which also bounds memory."""

    weights: Mapping[str, float] = field(default_factory=dict)
    """Fair-pool weight per producer path, e.g. ``{"swarm": 2, "swarm/1": 0.5}``:
    a weight applies to that path's node at its own level, whatever the class
    (docs/design.md §4.4). Default 1."""

    class_weights: Mapping[str, float] = field(default_factory=dict)
    """Fair-pool weight per fair task class, at the pool's top level. Default 1."""

    chat_slowdown: float = 1.25
    """docs/design.md §4.7 (chat latency guard): while a person's sequence (T0, T1)
    runs on a batched device, the batch around it is cut so that its time per
    output token stays within this factor of running alone, by the step-time
    curve the runner reports. 1.25: a chat at 80 % of its solo speed reads as
    unchanged (a reader of 5-8 words/s is far slower than either), and on the
    measured llama.cpp CPU curve it still admits a few background sequences."""

    deadlines: str = "after-people"
    """docs/design.md §4.8 (deadlines on time): ``"after-people"`` (the seed's
    order: overdue work on another model waits for a person's idle gap, so a
    message waits for background swaps only when a bet on that gap is lost);
    ``"on-time"``: work presses ``grace_factor`` swaps before it is due (so
    it is done by its deadline, not started at it); pressing work on another
    model gets its swap as soon as no person's job is queued (their running
    sequences end first), a person who then writes waits for it to finish,
    up to ``grace_factor`` swaps, before the swap back, and on the person's
    own model the chat latency guard does not cut it. An operator's choice of
    which promise bends: measured on both Azure traces in docs/design.md §8."""

    cancel_grace: float = 5.0
    """Seconds a cancelled job may take to stop before the shell reports it as
    stuck and stops waiting for it. Runners stop within a token, so
    5 s is many tokens even on a phone."""

    journal_bytes_per_job: int = 1 << 20
    """docs/design.md §4.9: memory one closure job's journal of
    its ``ctx.generate`` output may hold (1 MiB). A recorded token costs ~60 B
    (a small str and its list slot), so this is ~17 000 tokens: every call of an
    agent round of several 4 000-token calls, 14 minutes of decoding at the
    seed's 20 tokens/s. A job past it still runs correctly; it regenerates."""

    journal_bytes_total: int = 32 << 20
    """The same for all journals together (32 MiB): 32 jobs at their bound,
    thousands of typical rounds (a few hundred tokens each); small next to the
    model the device holds. Only preempted and running jobs hold a journal."""

    def __post_init__(self) -> None:
        for name in (
            "max_affinity_wait",
            "chat_grace",
            "chat_idle",
            "grace_factor",
            "idle_reset",
            "cancel_grace",
        ):
            _check_number(name, getattr(self, name))
        _check_number("chat_slowdown", self.chat_slowdown)
        if self.chat_slowdown < 1:
            raise ValueError(
                f"SchedulerConfig.chat_slowdown: must be a factor >= 1, got {self.chat_slowdown!r}"
            )
        _check_number("slice", self.slice)
        if self.slice == 0 or math.isinf(self.slice):
            raise ValueError(f"SchedulerConfig.slice: must be seconds > 0, got {self.slice!r}")
        _check_number("pool_floor", self.pool_floor)
        if self.pool_floor >= 1:
            raise ValueError(
                f"SchedulerConfig.pool_floor: must be a fraction in [0, 1), got {self.pool_floor!r}"
            )
        for name in ("journal_bytes_per_job", "journal_bytes_total"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"SchedulerConfig.{name}: must be an int >= 0, got {value!r}")
        if self.deadlines not in DEADLINE_MODES:
            accepted = ", ".join(repr(mode) for mode in DEADLINE_MODES)
            raise ValueError(
                f"SchedulerConfig.deadlines: must be one of {accepted}, got {self.deadlines!r}"
            )
        _check_weights("weights", self.weights, "producer")
        _check_weights("class_weights", self.class_weights, "class")


RETIRED = {
    "decay_period": "the EEVDF fair pool keeps no history to halve "
    "(lag is clamped and forgotten after idle_reset)",
}
"""Settings the policy no longer has, and why: a gateway file naming one still
loads (``scheduler_config``), with a warning."""


def scheduler_config(values: Mapping[str, Any]) -> SchedulerConfig:
    """``SchedulerConfig(**values)``; a retired setting (``RETIRED``) is
    dropped with a ``DeprecationWarning`` that says why."""
    for name in RETIRED.keys() & values.keys():
        why = f"scheduler.{name} has no effect: {RETIRED[name]}"
        warnings.warn(why, DeprecationWarning, stacklevel=3)
    return SchedulerConfig(**{k: v for k, v in values.items() if k not in RETIRED})


def _check_number(name: str, value: object) -> None:
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or math.isnan(value)
        or value < 0
    ):
        raise ValueError(f"SchedulerConfig.{name}: must be a number >= 0, got {value!r}")


def _check_weights(name: str, weights: object, what: str) -> None:
    if not isinstance(weights, Mapping):
        raise TypeError(
            f"SchedulerConfig.{name}: must be a mapping of {what} name -> weight, "
            f"got {type(weights).__name__}"
        )
    for key, weight in weights.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"SchedulerConfig.{name}: keys must be non-empty strings, got {key!r}")
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not MIN_WEIGHT <= weight <= MAX_WEIGHT
        ):
            raise ValueError(
                f"SchedulerConfig.{name}: weight of {what} {key!r} must be a number "
                f"from {MIN_WEIGHT:g} to {MAX_WEIGHT:g}, got {weight!r}"
            )


@dataclass(frozen=True, slots=True)
class Knob:
    """One setting of the policy: its name, its default, where the default
    comes from, the rule it tunes and the test that pins it."""

    name: str
    """``SchedulerConfig.<field>`` (an operator's setting) or
    ``<module>.<CONSTANT>`` (a tuning constant in ``tierlm.core``)."""
    default: object
    source: str
    """Where the default comes from, in a phrase."""
    rule: str
    """The rule it tunes: a section of docs/design.md."""
    test: str
    """``path::test`` of the test that pins it; empty: none does yet."""


_DEFAULTS = {f.name: getattr(SchedulerConfig(), f.name) for f in fields(SchedulerConfig)}
_RULES = "tests/shell/test_rules.py::"
_FAIR = "tests/shell/test_fair_pool.py::"
_AFFINITY = "tests/core/test_affinity_across_models.py::"


def _setting(name: str, source: str, rule: str, test: str) -> Knob:
    return Knob(f"SchedulerConfig.{name}", _DEFAULTS[name], source, rule, test)


KNOBS: tuple[Knob, ...] = (
    # The operator's settings (``SchedulerConfig``; the gateway's [scheduler]).
    _setting(
        "max_affinity_wait",
        "12 swaps of the seed's ~10 s swap",
        "§4.8",
        _RULES + "test_max_affinity_wait_bounds_starvation",
    ),
    _setting(
        "chat_grace",
        "seed scenario 6: a person likely types again",
        "§4.8",
        "tests/shell/test_scenarios.py::test_scenario_6_affinity_then_swap_after_chat_grace",
    ),
    _setting(
        "chat_idle",
        "a minute without a message: the person stopped typing",
        "§4.8",
        _RULES + "test_chat_page_open_holds_the_model_until_chat_idle_then_swaps",
    ),
    _setting(
        "grace_factor",
        "ski rental: idle at most a few purchases (swaps)",
        "§4.8",
        _RULES + "test_ski_rental_a_fast_swap_never_idles_the_device_for_a_chat_hold",
    ),
    _setting(
        "slice",
        "two producers within 10 % of any 60 s window (VTC)",
        "§4.4",
        _FAIR + "test_two_backlogged_producers_stay_within_12_s_over_any_minute",
    ),
    _setting(
        "pool_floor",
        "cron that falls behind cannot starve the pool",
        "§4.5",
        _FAIR + "test_overdue_cron_at_125_percent_leaves_the_pool_its_floor",
    ),
    _setting(
        "idle_reset",
        "seed: a producer back after > 5 min starts afresh",
        "§4.4",
        _RULES + "test_new_producer_starts_level_and_a_forgotten_one_starts_afresh",
    ),
    _setting("weights", "1 per path", "§4.4", _FAIR + "test_weights_apply_at_every_level"),
    _setting("class_weights", "1 per class", "§4.4", _FAIR + "test_weights_apply_at_every_level"),
    _setting(
        "chat_slowdown",
        "a chat at 80 % of its solo speed reads as unchanged",
        "§4.7",
        "tests/core/test_slots.py::test_the_chat_latency_guard_cuts_the_batch_around_a_person",
    ),
    _setting(
        "deadlines",
        "the seed's order: a person's gaps before cron",
        "§4.8",
        "tests/core/test_deadlines_on_time.py::"
        "test_by_default_a_cron_job_waits_for_the_persons_gap_bet",
    ),
    _setting(
        "cancel_grace",
        "runners stop within a token: 5 s is many",
        "§2.9",
        _RULES + "test_stuck_job_is_reported_and_not_waited_on_forever",
    ),
    _setting(
        "journal_bytes_per_job",
        "~17 000 tokens: an agent round of 4 000-token calls",
        "§4.9",
        "tests/shell/test_journal.py::test_journal_bounds_per_job_and_in_total",
    ),
    _setting(
        "journal_bytes_total",
        "32 jobs at their bound, small beside the model",
        "§4.9",
        "tests/shell/test_journal.py::test_many_preempted_jobs_stay_within_the_total_bound",
    ),
    # Tuning constants of the rules (module-level, not settings).
    Knob(
        "holds.OPEN_PAGE_SWAPS",
        holds.OPEN_PAGE_SWAPS,
        "keeps the 60 s chat_idle on a 10 s swap",
        "§4.8",
        _RULES + "test_ski_rental_a_fast_swap_never_idles_the_device_for_a_chat_hold",
    ),
    Knob(
        "holds.EXCURSION_SWAPS",
        holds.EXCURSION_SWAPS,
        "the swap there, its job, the swap back",
        "§4.8",
        _AFFINITY + "test_work_on_another_model_gets_its_swap_in_a_persons_idle_gap",
    ),
    Knob(
        "holds.IDLE_STRETCH",
        holds.IDLE_STRETCH,
        "two minutes on the default: max_affinity_wait",
        "§4.8",
        _AFFINITY + "test_a_person_who_reads_past_a_minute_is_not_taken_for_gone",
    ),
    Knob(
        "holds.GAPS_KEPT",
        holds.GAPS_KEPT,
        "a median over a person's last gaps",
        "§4.8",
        _AFFINITY + "test_one_quick_reply_among_long_reads_does_not_hold_the_excursions",
    ),
    Knob(
        "holds.DEFAULT_SWAP_ESTIMATE",
        holds.DEFAULT_SWAP_ESTIMATE,
        "seed: a model swap costs ~10 s",
        "§4.8",
        "tests/core/test_swap_estimate.py::"
        "test_a_fast_swapping_device_holds_a_chats_model_only_a_few_of_its_swaps",
    ),
    Knob(
        "anticipation.MIN_HOLD",
        anticipation.MIN_HOLD,
        "a local client's round trip, with room",
        "§4.8",
        _AFFINITY + "test_two_agents_on_two_models_do_not_swap_after_every_job",
    ),
    Knob(
        "anticipation.SWAP_SHARE",
        anticipation.SWAP_SHARE,
        "a lost bet costs half a swap, a won one saves one",
        "§4.8",
        _AFFINITY + "test_a_client_that_thinks_long_gets_no_hold",
    ),
    Knob(
        "anticipation.MAX_PRODUCERS",
        anticipation.MAX_PRODUCERS,
        "memory bounded whoever invents producer ids",
        "§1.8",
        "",
    ),
    Knob(
        "slices.RESUME_SHARE",
        slices.RESUME_SHARE,
        "a resume redoes at most a quarter of a turn",
        "§4.6",
        "tests/core/test_slice_worth_resume.py::"
        "test_a_long_prompt_is_not_cut_at_every_slice_when_its_resume_re_evaluates",
    ),
    Knob(
        "slots.PROMPT_SLOWDOWN",
        slots.PROMPT_SLOWDOWN,
        "a first token within 5 % of an idle device's",
        "§4.7",
        "tests/shell/test_batched_device.py::"
        "test_a_persons_long_prompt_is_evaluated_alone_from_the_step_it_starts",
    ),
    Knob(
        "floor.MARGIN",
        floor.MARGIN,
        "ten tokens of the seed's device",
        "§4.5",
        _FAIR + "test_pool_floor_holds_in_every_window_against_a_t3_class_flood",
    ),
    Knob(
        "classes.DEFAULT_BUDGET_WINDOW",
        classes.DEFAULT_BUDGET_WINDOW,
        "seed: a rolling 5-minute window",
        "§4.3",
        _RULES + "test_budget_holds_when_contended_and_counts_the_running_job",
    ),
    Knob(
        "classes.DEFAULT_EXTRACT_SHARE",
        classes.DEFAULT_EXTRACT_SHARE,
        "seed: extraction capped at ~60 %",
        "§3",
        _RULES + "test_budget_holds_when_contended_and_counts_the_running_job",
    ),
    Knob(
        "fairness.MAX_PATH_PARTS",
        fairness.MAX_PATH_PARTS,
        "bounds a decision's depth whatever the path",
        "§4.4",
        "",
    ),
    Knob(
        "persons_in_turn.REMEMBERED",
        persons_in_turn.REMEMBERED,
        "far more people than a device serves in a minute",
        "§4.2",
        "",
    ),
    Knob(
        "guard_relief.GUARD_SPAN",
        relief.GUARD_SPAN,
        "chat_grace: the longest one person types",
        "§4.7",
        "tests/shell/test_guard_relief.py::"
        "test_people_busy_without_a_pause_leave_background_one_slot_after_the_span",
    ),
    Knob(
        "guard_relief.PAUSE",
        relief.PAUSE,
        "a person who reads a short answer",
        "§4.7",
        "tests/shell/test_guard_relief.py::"
        "test_a_person_who_reads_meets_no_background_beside_their_chat",
    ),
    Knob(
        "people.READING_GAP",
        people.READING_GAP,
        'keystroke-level model: 1.95 s for "ok"',
        "§4.11",
        "tests/core/test_people.py::test_no_request_sent_within_the_reading_gap_is_a_person_s",
    ),
    Knob("people.WINDOW", people.WINDOW, "gaps remembered per identity", "§4.11", ""),
    Knob(
        "people.PROGRAM_AT",
        people.PROGRAM_AT,
        "one automatic follow-up per answer stays a person",
        "§4.11",
        "tests/core/test_people.py::test_a_program_that_starts_reading_again_is_a_person_again",
    ),
    Knob(
        "people.FORGET_AFTER",
        people.FORGET_AFTER,
        "the fair pool's idle_reset",
        "§4.11",
        "tests/core/test_people.py::test_an_identity_away_for_five_minutes_is_a_newcomer",
    ),
    Knob(
        "people.REMEMBERED",
        people.REMEMBERED,
        "as persons_in_turn.REMEMBERED",
        "§4.11",
        "tests/core/test_people.py::test_the_table_of_identities_is_bounded",
    ),
)
"""Every knob of the policy (docs/knobs.md): the operator's settings, then
the rules' tuning constants. ``scripts/knobs`` writes it to docs/knobs.md."""


def knobs_markdown() -> str:
    """``KNOBS`` as the markdown of docs/knobs.md."""
    lines = [
        "# The policy's knobs",
        "",
        "Generated from `tierlm.core.config.KNOBS` by `scripts/knobs`; do not edit",
        "(`tests/core/test_knobs.py` checks it is up to date). The operator's",
        "settings (`SchedulerConfig`, the gateway's `[scheduler]`) first, then the",
        "rules' tuning constants in `tierlm.core`. Rules are sections of",
        "[design.md](design.md).",
        "",
        "| knob | default | where the default comes from | rule | pinned by |",
        "|---|---|---|---|---|",
    ]
    for knob in KNOBS:
        default = dict(knob.default) if isinstance(knob.default, Mapping) else knob.default
        test = f"`{knob.test}`" if knob.test else "none yet"
        lines.append(f"| `{knob.name}` | `{default!r}` | {knob.source} | {knob.rule} | {test} |")
    return "\n".join(lines) + "\n"
