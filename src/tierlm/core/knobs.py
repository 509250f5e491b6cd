"""Every knob of the policy in one table (``KNOBS``): the operator's settings
(``SchedulerConfig``) and the rules' tuning constants, each with its default,
where the default comes from, the rule it tunes and the test that pins it;
``scripts/knobs`` writes it to docs/knobs.md (h11's "Rule 1" table is the
model: one place to read them all)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from tierlm.core import (
    anticipation,
    bets,
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
from tierlm.core.config import SchedulerConfig

__all__ = ["KNOBS", "Knob", "knobs_markdown"]


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
_BETS = "tests/core/test_bets.py::"


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
        "lost_bets",
        "one message in fifty may wait a background swap",
        "§4.8",
        _BETS + "test_a_person_chatting_for_hours_meets_background_swaps_within_the_budget",
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
        "the longest of a person's last gaps stretches chat_idle",
        "§4.8",
        _AFFINITY + "test_a_person_who_reads_past_a_minute_is_not_taken_for_gone",
    ),
    Knob(
        "holds.GONE_CAP",
        holds.GONE_CAP,
        "ten minutes: a heavy-tailed reader's gaps run past four",
        "§4.8",
        _BETS + "test_a_person_chatting_for_hours_meets_background_swaps_within_the_budget",
    ),
    Knob(
        "holds.NEGLIGIBLE_SWAP",
        holds.NEGLIGIBLE_SWAP,
        "a swap back of a token or two is no wait",
        "§4.8",
        _RULES + "test_ski_rental_a_fast_swap_never_idles_the_device_for_a_chat_hold",
    ),
    Knob(
        "bets.GAPS_KEPT",
        bets.GAPS_KEPT,
        "enough for a conditional share, few enough to follow a pace",
        "§4.8",
        _BETS + "test_a_bet_reads_the_gaps_the_person_may_still_be_in",
    ),
    Knob(
        "bets.MIN_GAPS",
        bets.MIN_GAPS,
        "two gaps: a person's pace seen twice",
        "§4.8",
        "tests/sim/test_bounds_new_cases.py::"
        "test_four_other_models_at_the_bound_beside_a_person_are_served_one_per_reading_gap",
    ),
    Knob(
        "bets.WIN_AT",
        bets.WIN_AT,
        "three in four of the gaps still possible hold it",
        "§4.8",
        _BETS + "test_a_risky_bet_waits_for_the_budget_a_sure_one_for_no_debt",
    ),
    Knob(
        "bets.GONE_FACTOR",
        bets.GONE_FACTOR,
        "twice their longest gap: they have left the page",
        "§4.8",
        _AFFINITY + "test_gaps_that_do_not_hold_an_excursion_get_none",
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
        "people.CLIENT_WINDOW",
        people.CLIENT_WINDOW,
        "a client's requests remembered as new names' or not",
        "§4.11",
        "",
    ),
    Knob(
        "people.NEW_NAMES_AT",
        people.NEW_NAMES_AT,
        "a front-end's newcomers 3 s apart: 1.9 % judged programs",
        "§4.11",
        "tests/core/test_people.py::"
        "test_a_client_that_invents_a_name_for_each_request_is_a_program",
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
        "Generated from `tierlm.core.knobs.KNOBS` by `scripts/knobs`; do not edit",
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
