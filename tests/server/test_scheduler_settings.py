"""``[scheduler]`` mirrors ``SchedulerConfig``: every knob of the policy can be
set from the TOML file, the environment and a flag (docs/gateway.md)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import get_args

import pytest

from tierlm.core.config import DEADLINE_MODES, SchedulerConfig
from tierlm.server import serve_cli as cli
from tierlm.server.settings.schema import Flag
from tierlm.server.settings.sections import SchedulerSettings
from tierlm.server.settings.sources import ConfigError, load_settings, settings_from_dict

GATEWAY_ONLY = {"default_classes"}  # which classes to start from: not the policy's
TABLES = {"weights", "class_weights"}  # tables: TOML or JSON in the environment
DEPRECATED = {"decay_period"}  # accepted in files, warns, not the policy's: no field, no flag


def _config_fields() -> set[str]:
    return {f.name for f in dataclasses.fields(SchedulerConfig)}


def test_the_settings_have_every_field_of_the_config_and_no_other() -> None:
    assert set(SchedulerSettings.model_fields) - GATEWAY_ONLY - DEPRECATED == _config_fields()


def test_unset_settings_are_the_config_s_defaults() -> None:
    assert SchedulerSettings().config() == SchedulerConfig()


def test_every_scalar_knob_has_a_flag() -> None:
    flagged = {
        name
        for name, field in SchedulerSettings.model_fields.items()
        if any(isinstance(m, Flag) for m in field.metadata)
    }
    assert flagged == _config_fields() - TABLES - DEPRECATED


def _flag_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser


def test_chat_slowdown_from_the_file_the_environment_and_a_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default 8-slot gateway's chat guard (docs/design.md §4.7) was refused
    as an unknown field."""
    base = {"backend": {"kind": "sim"}}
    from_dict = settings_from_dict({**base, "scheduler": {"chat_slowdown": 1.5}})
    assert from_dict.scheduler.chat_slowdown == 1.5

    config = tmp_path / "tierlm.toml"
    config.write_text('[backend]\nkind = "sim"\n\n[scheduler]\nchat_slowdown = 1.75\n')
    assert load_settings(config).scheduler.chat_slowdown == 1.75

    monkeypatch.setenv("TIERLM_SCHEDULER__CHAT_SLOWDOWN", "2.5")
    assert load_settings(config).scheduler.chat_slowdown == 2.5

    args = _flag_parser().parse_args(["--config", str(config), "--chat-slowdown", "3"])
    settings = cli.settings_from_args(args)
    assert settings.scheduler.chat_slowdown == 3.0


def test_every_flag_reaches_the_config() -> None:
    """Each scalar knob's flag sets that knob of the scheduler the gateway runs."""
    values = {
        "max_affinity_wait": "7",
        "chat_grace": "8",
        "chat_idle": "9",
        "grace_factor": "2",
        "lost_bets": "0.05",
        "slice": "4",
        "pool_floor": "0.2",
        "idle_reset": "11",
        "cancel_grace": "6",
        "chat_slowdown": "1.5",
        "journal_bytes_per_job": "1000",
        "journal_bytes_total": "5000",
    }
    modes = {"deadlines": "on-time"}  # the one knob that is a word, not a number
    assert set(values) | set(modes) == _config_fields() - TABLES - DEPRECATED
    argv = ["--backend", "sim"]
    for name, value in {**values, **modes}.items():
        argv += [f"--{name.replace('_', '-')}", value]
    settings = cli.settings_from_args(_flag_parser().parse_args(argv))
    config = settings.scheduler
    for name, value in values.items():
        assert getattr(config, name) == type(getattr(config, name))(float(value)), name
    assert config.deadlines == "on-time"


def test_a_chat_slowdown_below_one_names_the_flag() -> None:
    args = _flag_parser().parse_args(["--backend", "sim", "--chat-slowdown", "0.5"])
    with pytest.raises(ConfigError, match=r"^--chat-slowdown \(scheduler.chat_slowdown\): must be"):
        cli.settings_from_args(args)


def test_deadline_modes_are_the_config_s() -> None:
    """The setting accepts exactly the modes the policy knows."""
    assert get_args(SchedulerSettings.model_fields["deadlines"].annotation) == DEADLINE_MODES


def test_an_unknown_deadline_mode_names_the_flag_and_the_modes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        _flag_parser().parse_args(["--backend", "sim", "--deadlines", "asap"])
    assert "--deadlines: invalid choice: 'asap'" in capsys.readouterr().err
    expected = r"^scheduler.deadlines: must be one of after-people, on-time; got 'asap'"
    with pytest.raises(ConfigError, match=expected):
        settings_from_dict({"backend": {"kind": "sim"}, "scheduler": {"deadlines": "asap"}})


def test_check_says_which_promise_deadlines_keep(capsys: pytest.CaptureFixture[str]) -> None:
    """``tierlm serve --check`` shows the mode the gateway would run."""
    for argv, shown in (
        ([], "deadlines after-people"),
        (["--deadlines", "on-time"], "deadlines on-time"),
    ):
        args = _flag_parser().parse_args(["--backend", "sim", *argv, "--check"])
        assert cli.run(args) == 0
        assert shown in capsys.readouterr().out
