"""Every code block of README.md and docs/*.md, extracted and tried.

- ``python``: run as written, the blocks of one file in order in one namespace
  (a later block may use an earlier one's names), unless marked as a fragment
  with a reason: ``<!-- fragment: why -->`` on the line before the fence. The
  README's example runs in virtual time (``asyncio.run`` is ``run_virtual``
  here); docs/gateway.md's client code talks to a real sim gateway, started
  for them, at its address instead of 127.0.0.1:8000; docs/library.md's are
  run, each against the output shown under it, by tests/test_library_guide.py.
- ``toml`` and ``json``: parse.
- ``sh``: every ``tierlm`` command parses with that command's own arguments
  (a renamed or misspelt flag fails here), and every ``pip install`` of
  ``.[extras]`` names extras pyproject.toml has.
- Anything else (``ini``, layouts, outputs) is not code to run: listed, so a
  new language is a decision.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import re
import shlex
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tierlm.cli import COMMANDS
from tierlm.testing import run_virtual

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_TEXT = (ROOT / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w*)\s*$")
FRAGMENT = re.compile(r"<!-- fragment: (.+?) -->")
NOT_RUN = {"", "ini"}  # layouts and outputs; docs/deploy.md's systemd unit (tested there)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    code: str
    fragment: str | None
    """Why it does not run as written, when it is marked so."""

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    found = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        start = i
        i += 1
        while not lines[i].startswith("```"):
            i += 1
        before = " ".join(lines[max(0, start - 2) : start])
        marker = FRAGMENT.search(before)
        code = "\n".join(lines[start + 1 : i]) + "\n"
        found.append(
            Block(path, start + 1, match.group(1), code, marker.group(1) if marker else None)
        )
        i += 1
    return found


ALL = [block for path in DOCS for block in blocks(path)]


def of(lang: str) -> list[Block]:
    return [block for block in ALL if block.lang == lang]


def test_every_block_is_of_a_known_kind() -> None:
    known = {"python", "toml", "json", "sh", "yaml"} | NOT_RUN
    assert {block.where: block.lang for block in ALL if block.lang not in known} == {}
    for block in ALL:
        if block.fragment is not None:
            assert block.lang == "python" and len(block.fragment) > 10, block.where


# -- python ------------------------------------------------------------------------


def runnable(path: Path) -> list[Block]:
    return [b for b in blocks(path) if b.lang == "python" and b.fragment is None]


def test_the_readme_library_example_runs_as_written(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (block,) = runnable(ROOT / "README.md")
    monkeypatch.setattr(asyncio, "run", run_virtual)  # its 1 s of tokens, in virtual time
    exec(compile(block.code, block.where, "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    assert out.startswith("w0 w1 w2")  # the chat's stream, then the card
    assert "SchedulerSnapshot(" in out


@pytest.fixture(scope="module")
def docs_gateway() -> Iterator[str]:
    """The gateway docs/gateway.md's client code talks to: its model names."""
    from tests.server.helpers import serve, sim_settings

    settings = sim_settings(
        {
            "backend": {"models": {"qwen": {}}},
            "embeddings": {"backend": "sim", "model": "all-MiniLM-L6-v2"},
        }
    )
    with serve(settings) as gw:
        yield gw.url


def test_the_gateway_docs_client_code_runs_against_a_gateway(docs_gateway: str) -> None:
    pytest.importorskip("openai", reason="needs the openai client (the dev extra)")
    namespace: dict[str, object] = {"__name__": "__main__"}
    code = runnable(ROOT / "docs" / "gateway.md")
    assert len(code) >= 2
    for block in code:
        source = block.code.replace("http://127.0.0.1:8000", docs_gateway)
        exec(compile(source, block.where, "exec"), namespace)


def test_every_other_python_block_is_a_marked_fragment() -> None:
    # docs/library.md's: tests/test_library_guide.py runs each and compares its output.
    tried = {ROOT / "README.md", ROOT / "docs" / "gateway.md", ROOT / "docs" / "library.md"}
    assert [b.where for b in of("python") if b.fragment is None and b.path not in tried] == []


@pytest.mark.parametrize("block", of("python"), ids=lambda b: b.where)
def test_every_python_block_compiles_or_says_why_not(block: Block) -> None:
    if block.fragment is None:
        compile(block.code, block.where, "exec")


# -- toml, json ------------------------------------------------------------------


@pytest.mark.parametrize("block", of("toml"), ids=lambda b: b.where)
def test_toml_blocks_parse(block: Block) -> None:
    tomllib.loads(block.code)


def test_yaml_blocks_parse() -> None:
    yaml = pytest.importorskip("yaml")
    for block in of("yaml"):
        assert list(yaml.safe_load_all(block.code)), block.where


@pytest.mark.parametrize("block", of("json"), ids=lambda b: b.where)
def test_json_blocks_parse(block: Block) -> None:
    json.loads(block.code)


# -- sh ----------------------------------------------------------------------------


def commands(block: Block) -> list[list[str]]:
    """The commands of a shell block: continuations joined, comments dropped,
    split at && and ;."""
    found = []
    for line in block.code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        command: list[str] = []
        for word in [*words, "&&"]:
            if word in ("&&", ";", "||"):
                if command:
                    found.append(command)
                command = []
            else:
                command.append(word)
    return found


SHELL = [(block, command) for block in of("sh") for command in commands(block)]


def test_the_shell_blocks_hold_tierlm_commands() -> None:
    assert sum(1 for _, command in SHELL if command[0] == "tierlm") >= 5


@pytest.mark.parametrize(
    ("block", "command"),
    [(b, c) for b, c in SHELL if c[0] == "tierlm"],
    ids=lambda x: x.where if isinstance(x, Block) else " ".join(x)[:60],
)
def test_tierlm_commands_in_shell_blocks_parse(block: Block, command: list[str]) -> None:
    name, *args = command[1:]
    assert name in COMMANDS, f"{block.where}: no command {name!r}"
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(prog=f"tierlm {name}", exit_on_error=False)
    module.add_arguments(parser)
    try:
        parser.parse_args(args)
    except (argparse.ArgumentError, SystemExit) as exc:
        pytest.fail(f"{block.where}: {' '.join(command)}: {exc}")


def test_pip_installs_in_shell_blocks_name_extras_that_exist() -> None:
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    named = [
        (block.where, word)
        for block, command in SHELL
        if "pip" in " ".join(command[:3]) and "install" in command
        for word in command
        if word.startswith(".[")
    ]
    assert named  # the quick start's
    for where, word in named:
        wanted = set(word.removeprefix(".[").removesuffix("]").split(","))
        assert wanted <= extras, (where, word)


# -- claims about the checkout -------------------------------------------------------


def test_the_fast_tier_is_as_big_as_the_readme_says() -> None:
    """The README said ~250 when `scripts/test --fast` ran 290 (issue 59): its
    count is checked against what the fast tier collects, within 20 %."""
    import os
    import subprocess

    (claimed,) = re.findall(r"~(\d+) tests in \d+ s", README_TEXT)
    done = subprocess.run(
        ["sh", str(ROOT / "scripts" / "test"), "--fast", "--collect-only", "-q"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={**os.environ, "TIERLM_SKIP_INSTALL": "1"},
    )
    collected = int(re.findall(r"(\d+)(?:/\d+)? tests? collected", done.stdout)[-1])
    assert abs(collected - int(claimed)) <= 0.2 * collected, (claimed, collected)
