"""The command line: usage, unknown commands, and `tierlm bench` discovery."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tierlm.cli import main


def test_no_command_prints_usage_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    out = capsys.readouterr().out
    for command in ("demo", "simulate", "serve", "bench"):
        assert command in out


def test_help_succeeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "usage: tierlm COMMAND" in capsys.readouterr().out


def test_unknown_command_names_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demoo"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'demoo'" in err
    assert "demo, simulate, serve, bench" in err


def test_bench_lists_and_rejects_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    bench = Path(__file__).resolve().parents[1] / "bench"
    assert main(["bench", "--dir", str(bench)]) == 0
    assert "pick_cost" in capsys.readouterr().out
    assert main(["bench", "--dir", str(bench), "no_such_bench"]) == 2
    assert "available:" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_is_the_installed_distribution_s(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from importlib.metadata import version

    assert main([flag]) == 0
    assert capsys.readouterr().out == f"tierlm {version('tierlm')}\n"


def test_the_console_script_says_its_version() -> None:
    import shutil
    import subprocess

    script = shutil.which("tierlm")
    if script is None:
        pytest.skip("the tierlm console script is not installed")
    done = subprocess.run([script, "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("tierlm ") and done.stdout.split()[1][0].isdigit()


BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_bench_writes_to_the_users_folder_and_the_committed_one_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tierlm bench NAME` must not rewrite the committed bench/results/."""
    bench = tmp_path / "checkout" / "bench"
    bench.mkdir(parents=True)
    (bench / "_lib").mkdir()
    shutil.copy(BENCH / "_lib" / "results.py", bench / "_lib")
    (bench / "tiny.py").write_text(
        "from _lib.results import results_file\nresults_file('tiny').write_text('{}')\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["bench", "--dir", str(bench), "tiny"]) == 0
    assert (work / "bench-results" / "tiny.json").read_text() == "{}"
    assert not (bench / "results").exists()
    assert main(["bench", "--dir", str(bench), "--out", "mine", "tiny"]) == 0
    assert (work / "mine" / "tiny.json").is_file()
    assert main(["bench", "--dir", str(bench), "--update-committed", "tiny"]) == 0
    assert (bench / "results" / "tiny.json").is_file()


def test_every_benchmark_writes_through_results_file() -> None:
    for script in sorted(BENCH.glob("[!_]*.py")):
        text = script.read_text()
        assert "results_file(" in text, script.name
        assert '"results" /' not in text and "bench/results/" not in text, script.name
