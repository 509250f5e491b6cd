"""docs/gateway.md documents every setting: its reference is generated from the
settings' models, and this checks the file against them, so the documentation
and the schema cannot drift apart."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from tierlm.server import serve_cli as cli
from tierlm.server.settings.flags import setting_flags
from tierlm.server.settings.reference import BEGIN, END, reference
from tierlm.server.settings.schema import every_field
from tierlm.server.settings.sections import ServerSettings

DOCS = Path(__file__).parents[2] / "docs" / "gateway.md"


def documented_reference() -> str:
    text = DOCS.read_text(encoding="utf-8")
    found = re.search(re.escape(BEGIN) + ".*?" + re.escape(END), text, re.S)
    assert found, f"docs/gateway.md has no reference between {BEGIN!r} and {END!r}"
    return found.group(0)


def test_the_reference_in_the_docs_is_the_schemas() -> None:
    # On failure: python -m tierlm.server.settings.reference --write docs/gateway.md
    assert documented_reference() == reference()


def test_every_field_is_documented() -> None:
    text = documented_reference()
    keys = set(re.findall(r"^\| `([^`]+)`", text, re.M))
    for entry in every_field(ServerSettings):
        path = entry.site.path
        if len(path) < 2:  # a section: its fields are the rows
            continue
        key = ".".join(str(p) for p in path).replace(".[]", "[]")
        assert key in keys, f"{key} is not in docs/gateway.md's reference"
        if entry.when and path[-1] != entry.when[-1][0]:
            assert entry.field.description, f"{key}: no docstring to document it"


def test_every_flag_is_a_field_and_documented() -> None:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    options = {option for action in parser._actions for option in action.option_strings}
    text = DOCS.read_text(encoding="utf-8")
    for spec in setting_flags():
        assert spec.flag.name in options
        assert f"`{spec.flag.name}`" in text, f"{spec.flag.name} is not in docs/gateway.md"
    assert "--port" in options and "--embed-max-batch" in options
