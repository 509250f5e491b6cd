"""Every ``docs/design.md §N`` the code and the docs cite names a section that
exists (``## N.`` or ``### N.M``, or item M of a section's numbered list of
departures, ``M. **Title**``, as in §6): a citation that resolves to nothing
is a rule nobody can look up."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # the inner loop: scripts/test --fast (tests/conftest.py)

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
CITATION = re.compile(r"§(\d+(?:\.\d+)?)")
HEADING = re.compile(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", re.MULTILINE)


ITEM = re.compile(r"^(\d+)\. \*\*", re.MULTILINE)


def sections() -> set[str]:
    text = DESIGN.read_text()
    known = set(HEADING.findall(text))
    # Numbered departures inside a section: "## 6. ..." then "1. **...**".
    for chapter in re.split(r"^(?=## \d+\.)", text, flags=re.MULTILINE):
        head = HEADING.match(chapter)
        if head is not None:
            known.update(f"{head[1]}.{item}" for item in ITEM.findall(chapter))
    return known


def citations() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    files = [
        *ROOT.joinpath("src").rglob("*.py"),
        *ROOT.joinpath("docs").glob("*.md"),
        ROOT / "README.md",
    ]
    for path in files:
        text = path.read_text()
        if path.suffix == ".py" or path == DESIGN:
            cited = CITATION.findall(text)
        else:  # other docs cite the design by name
            cited = [
                m
                for line in text.splitlines()
                if "design.md" in line
                for m in CITATION.findall(line)
            ]
        for number in cited:
            found.setdefault(number, set()).add(str(path.relative_to(ROOT)))
    return found


def test_the_design_has_numbered_sections() -> None:
    assert {"0", "1", "2", "4", "4.1", "4.7"} <= sections()


def test_every_citation_resolves_to_a_section() -> None:
    known = sections()
    missing = {
        number: sorted(paths) for number, paths in citations().items() if number not in known
    }
    assert missing == {}
