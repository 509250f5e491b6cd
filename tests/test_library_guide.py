"""docs/library.md's examples run as written and print what the guide shows.

Each ``python`` block is a whole program; the untagged block right after it is
its output, compared exactly: a guide whose numbers drift from what the
scheduler does is worse than none. ``asyncio.run`` is ``run_virtual`` here, so
the examples' minutes of simulated tokens take milliseconds (their virtual
clock makes the printed times exact).
"""

from __future__ import annotations

import asyncio
import contextlib
import io

import pytest

from tests.test_readme import ROOT, Block, blocks
from tierlm.testing import run_virtual

GUIDE = ROOT / "docs" / "library.md"


def examples() -> list[tuple[Block, Block]]:
    """(program, its output) pairs: every runnable python block and the block after it."""
    found = blocks(GUIDE)
    pairs = []
    for i, block in enumerate(found):
        if block.lang != "python" or block.fragment is not None:
            continue
        output = found[i + 1] if i + 1 < len(found) else None
        assert output is not None and output.lang == "", f"{block.where}: no output block after it"
        pairs.append((block, output))
    return pairs


def test_the_guide_covers_what_a_newcomer_asks() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    for heading in (
        "## A producer submitting work",
        "## A person's chat",
        "## The foreground",
        "## Deadlines",
        "## Budgets",
    ):
        assert heading in text
    assert len(examples()) >= 6


@pytest.mark.parametrize(("program", "output"), examples(), ids=lambda b: b.where)
def test_each_example_prints_what_the_guide_shows(
    program: Block, output: Block, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(asyncio, "run", run_virtual)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(program.code, program.where, "exec"), {"__name__": "__main__"})
    assert printed.getvalue() == output.code, f"{program.where}: prints otherwise"
