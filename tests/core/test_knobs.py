"""The table of the policy's knobs (``tierlm.core.knobs.KNOBS``, issue 60
item 4): every setting of ``SchedulerConfig`` in it, each named test real,
each rule a section of docs/design.md, and docs/knobs.md written from it."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from tierlm.core import knobs
from tierlm.core.config import SchedulerConfig, scheduler_config
from tierlm.core.knobs import KNOBS, knobs_markdown

ROOT = Path(__file__).resolve().parent.parent.parent


def test_every_setting_is_in_the_table_once() -> None:
    names = [knob.name for knob in KNOBS]
    assert len(names) == len(set(names))
    settings = {f"SchedulerConfig.{f.name}" for f in dataclasses.fields(SchedulerConfig)}
    assert settings <= set(names), settings - set(names)


def test_each_default_is_the_one_in_force() -> None:
    """A constant is read from its module, a setting from SchedulerConfig():
    the table cannot drift from the code."""
    for knob in KNOBS:
        owner, _, name = knob.name.partition(".")
        if owner == "SchedulerConfig":
            assert getattr(SchedulerConfig(), name) == knob.default, knob.name
        else:
            module = getattr(knobs, "relief" if owner == "guard_relief" else owner)
            assert getattr(module, name) == knob.default, knob.name


def test_each_pinning_test_exists() -> None:
    for knob in KNOBS:
        if not knob.test:
            continue
        path, _, name = knob.test.partition("::")
        tree = ast.parse((ROOT / path).read_text())
        defined = {
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        assert name in defined, knob.test


def test_each_rule_is_a_section_of_the_design() -> None:
    sections = set(
        re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", (ROOT / "docs/design.md").read_text(), re.M)
    )
    for knob in KNOBS:
        assert knob.rule.removeprefix("§") in sections, (knob.name, knob.rule)


def test_docs_knobs_md_is_up_to_date() -> None:
    """Regenerate with ``scripts/knobs``."""
    assert (ROOT / "docs" / "knobs.md").read_text() == knobs_markdown()


def test_a_retired_setting_still_loads_and_says_it_does_nothing() -> None:
    """``decay_period`` is no setting of the policy any more (the EEVDF pool
    keeps no history to halve, docs/design.md §4.4); a gateway file naming
    it still loads, with a warning, and the config has no such field."""
    with pytest.warns(DeprecationWarning, match="decay_period has no effect"):
        loaded = scheduler_config({"decay_period": 60.0, "slice": 2.0})
    assert loaded == SchedulerConfig(slice=2.0)
    assert "decay_period" not in {f.name for f in dataclasses.fields(SchedulerConfig)}
