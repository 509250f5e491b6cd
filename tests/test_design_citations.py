"""Every ``docs/design.md §N`` the code and the docs cite names a section that
exists (``## N.`` or ``### N.M``, or item M of a section's numbered list of
departures, ``M. **Title**``, as in §6): a citation that resolves to nothing
is a rule nobody can look up.

Citations are by number only: the number, then at most a word in
parentheses, ``§4.8 (excursions)``. A chapter's number followed by a
section's name (the old form, a chapter number then the name of one of its
rules) cannot be checked, so it fails here. The measurement log,
docs/measurements.md, is organised by the same numbers: each of its sections
is the log of the rule section with that number and title, and every
``docs/measurements.md §N.M`` names one of its sections (the opening of
docs/design.md says so)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # the inner loop: scripts/test --fast (tests/conftest.py)

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
MEASUREMENTS = ROOT / "docs" / "measurements.md"
CITATION = re.compile(r"(measurements\.md\s+)?§(\d+(?:\.\d+)?)")
HEADING = re.compile(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", re.MULTILINE)
TITLED = re.compile(r"^#{2,3} (\d+(?:\.\d+)?)\.? (.+)$", re.MULTILINE)
ITEM = re.compile(r"^(\d+)\. \*\*", re.MULTILINE)
# A number followed, on its line, by a word: the name form, unless the word
# is prose that goes on the sentence ("§6 lists every place ...").
NAMED = re.compile(r"§(\d+(?:\.\d+)?)[ \t]+([\"'A-Za-z][\w'-]*)")
PROSE = {
    "allows",
    "and",
    "asks",
    "brings",
    "charges",
    "departs",
    "has",
    "hoists",
    "keeps",
    "lists",
    "on",
    "or",
    "runs",
    "says",
    "shares",
    "to",
}


def sections() -> set[str]:
    text = DESIGN.read_text()
    known = set(HEADING.findall(text))
    # Numbered departures inside a section: "## 6. ..." then "1. **...**".
    for chapter in re.split(r"^(?=## \d+\.)", text, flags=re.MULTILINE):
        head = HEADING.match(chapter)
        if head is not None:
            known.update(f"{head[1]}.{item}" for item in ITEM.findall(chapter))
    return known


def cited_files() -> list[Path]:
    return [
        *ROOT.joinpath("src").rglob("*.py"),
        *ROOT.joinpath("tests").rglob("*.py"),
        *ROOT.joinpath("bench").rglob("*.py"),
        *ROOT.joinpath("scripts").rglob("*"),
        *ROOT.joinpath("docs").glob("*.md"),
        ROOT / "README.md",
    ]


def texts() -> dict[Path, str]:
    """What counts as citing the design in each file: every § of the code and of
    the two design files; in the other docs, the lines that name design.md."""
    found: dict[Path, str] = {}
    for path in cited_files():
        if not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        if path.suffix == ".md" and path not in (DESIGN, MEASUREMENTS):
            text = "\n".join(line for line in text.splitlines() if "design.md" in line)
        found[path] = text
    return found


def citations() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(design citations, measurement-log citations): number -> files."""
    design: dict[str, set[str]] = {}
    log: dict[str, set[str]] = {}
    for path, text in texts().items():
        for to_log, number in CITATION.findall(text):
            into = log if to_log else design
            into.setdefault(number, set()).add(str(path.relative_to(ROOT)))
    return design, log


def test_the_design_has_numbered_sections() -> None:
    assert {"0", "1", "1.1", "2", "2.8", "4", "4.1", "4.7", "4.11", "8.5"} <= sections()


def test_every_citation_resolves_to_a_section() -> None:
    known = sections()
    design, _ = citations()
    missing = {number: sorted(paths) for number, paths in design.items() if number not in known}
    assert missing == {}


def test_citations_are_by_number_not_by_name() -> None:
    named = sorted(
        f"{path.relative_to(ROOT)}: §{number} {word}"
        for path, text in texts().items()
        for number, word in NAMED.findall(text)
        if word not in PROSE
    )
    assert named == []


def test_each_measurement_section_is_the_log_of_a_rule_section() -> None:
    rules = dict(TITLED.findall(DESIGN.read_text()))
    logged = TITLED.findall(MEASUREMENTS.read_text())
    assert logged, "docs/measurements.md has no numbered sections"
    unmatched = [(number, title) for number, title in logged if rules.get(number) != title]
    assert unmatched == []


def test_every_link_to_the_log_resolves() -> None:
    logged = set(HEADING.findall(MEASUREMENTS.read_text()))
    _, log = citations()
    missing = {number: sorted(paths) for number, paths in log.items() if number not in logged}
    assert missing == {}
