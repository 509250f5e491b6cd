"""The README's library example runs as written (in virtual time)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from tierlm.testing import run_virtual

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_library_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    section = README.read_text().split("## The library", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    source = "async def main():\n" + textwrap.indent(code.group(1), "    ")
    namespace: dict[str, object] = {}
    exec(compile(source, str(README), "exec"), namespace)
    run_virtual(namespace["main"]())  # type: ignore[operator]
    out = capsys.readouterr().out
    assert out.startswith("w0 w1 w2")  # the chat's stream, then the card
    assert "SchedulerSnapshot(" in out
