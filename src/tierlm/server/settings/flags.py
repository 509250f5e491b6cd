"""``tierlm serve``'s setting flags, derived from the settings' fields: a field
with a ``Flag`` marker has one, with its docstring as the help, its type and
choices from its annotation and its default from its default. There is no
second table of flags to keep in step with the schema."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tierlm.server.settings.schema import (
    Entry,
    Flag,
    Loc,
    Site,
    every_field,
    literal_values,
    locate,
    members,
)
from tierlm.server.settings.sections import ServerSettings
from tierlm.server.settings.validation import dotted

__all__ = ["SettingFlag", "add_setting_flags", "setting_flags", "setting_overrides"]


@dataclass(frozen=True, slots=True)
class SettingFlag:
    """A flag that sets the field at ``path``."""

    flag: Flag
    path: Loc
    type: Callable[[str], Any]
    choices: tuple[str, ...] | None
    help: str

    @property
    def dest(self) -> str:
        return self.flag.name.lstrip("-").replace("-", "_")


def _boolean(text: str) -> bool:
    """A true/false flag's value (``--flash-attn true``)."""
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"must be true or false, got {text!r}")
    return lowered == "true"


def _sentence(entry: Entry | Site) -> str:
    """A field's docstring up to its first full stop, on one line, as plain text."""
    field = entry.field
    text = " ".join((field.description or "").split()).replace("``", "") if field else ""
    return text.partition(". ")[0].rstrip(".")


def _flag_of(entries: Sequence[Entry]) -> SettingFlag:
    """The flag of one field, or of the same field of several union members."""
    site = entries[0].site
    flag: Flag = site.marker(Flag)
    if site.discriminator is not None:  # a union's flag chooses its member
        tags = tuple(str(tag) for tag, _ in members(site))
        return SettingFlag(flag, (*site.path, site.discriminator), str, tags, _sentence(site))
    values = tuple(str(v) for v in literal_values(site.type)) or None
    kind: Callable[[str], Any] = site.type if site.type in (int, float) else str
    if site.type is bool:
        kind = _boolean  # argparse checks choices after the conversion: none here
    union = locate(ServerSettings, site.path[:-1]) if entries[0].when else None
    if union is None or len(entries) == len(members(union)):  # every member has it
        text = _sentence(entries[0])
        default = entries[0].field.get_default(call_default_factory=False)
        if isinstance(default, int | float | str) and not values:
            text += f" (default {default})"
    else:  # each member says what it is for it, members that say the same once
        said: dict[str, list[str]] = {}
        for e in entries:
            said.setdefault(_sentence(e), []).append(str(e.when[-1][1]))
        text = "; ".join(f"{', '.join(kinds)}: {sentence}" for sentence, kinds in said.items())
    return SettingFlag(flag, site.path, kind, values, text)


def setting_flags() -> list[SettingFlag]:
    """Every setting flag, once (``--url`` sets the url of whichever upstream
    backend is chosen), in the order of the fields."""
    by_name: dict[str, list[Entry]] = {}
    for entry in every_field(ServerSettings):
        flag = entry.site.marker(Flag)
        if flag is not None:
            by_name.setdefault(flag.name, []).append(entry)
    return [_flag_of(entries) for entries in by_name.values()]


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    for spec in setting_flags():
        parser.add_argument(
            spec.flag.name,
            dest=spec.dest,
            type=spec.type,
            choices=spec.choices,
            metavar=None if spec.choices else spec.flag.metavar,
            help=spec.help,
        )


def setting_overrides(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """The values the flags set (dotted path -> value), and which flag set each."""
    overrides: dict[str, Any] = {}
    flags: dict[str, str] = {}
    for spec in setting_flags():
        value = getattr(args, spec.dest, None)
        if value is not None:
            overrides[dotted(spec.path)] = value
            flags[dotted(spec.path)] = spec.flag.name
    return overrides, flags
