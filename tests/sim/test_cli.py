"""``tierlm demo`` and ``tierlm simulate`` end to end, on short workloads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tierlm.cli import main
from tierlm.sim.policies import POLICIES

PNG = b"\x89PNG\r\n\x1a\n"


def test_demo_prints_the_table_and_writes_both_pngs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--duration", "240", "--out", str(out)]) == 0
    for name in ("timeline.png", "chat_ttft_cdf.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 20_000, name
    results = json.loads((out / "results.json").read_text())
    assert results["policy_order"] == list(POLICIES)
    assert set(results["metrics"]) == set(POLICIES)
    assert results["workload"]["name"] == "issue118"
    printed = capsys.readouterr().out
    for name in POLICIES:
        assert name in printed
    assert "chat time to first token" in printed


def test_simulate_same_seed_gives_identical_results_json(tmp_path: Path) -> None:
    args = ["simulate", "--workload", "issue118", "--duration", "300", "--seed", "3"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--out", str(tmp_path / "b")]) == 0
    first = (tmp_path / "a" / "results.json").read_bytes()
    assert first == (tmp_path / "b" / "results.json").read_bytes()
    other = ["simulate", "--workload", "issue118", "--duration", "300", "--seed", "4"]
    assert main([*other, "--out", str(tmp_path / "c")]) == 0
    assert first != (tmp_path / "c" / "results.json").read_bytes()


def test_simulate_chosen_policies_and_device(tmp_path: Path) -> None:
    code = main(
        [
            "simulate",
            "--workload",
            "mixed-models",
            "--policies",
            "tierlm,fifo",
            "--duration",
            "200",
            "--swap-seconds",
            "4",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["policy_order"] == ["tierlm", "fifo"]
    assert results["device"]["swap_seconds"] == 4.0
    assert results["workload"]["hints"]["min_swaps"] == 2


def test_simulate_errors_are_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "--out", str(tmp_path)]
    assert main([*base, "--workload", "issue118", "--policies", "lifo"]) == 2
    assert "unknown 'lifo'" in capsys.readouterr().err
    missing = tmp_path / "no-trace.csv"
    assert main([*base, "--workload", "azure-chat", "--trace", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "azure-llm-2023-conv.csv" in err and "not found" in err
    with pytest.raises(SystemExit):
        main([*base, "--workload", "nope"])


@pytest.mark.parametrize("command", ["demo", "simulate"])
def test_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    assert "--duration" in capsys.readouterr().out
