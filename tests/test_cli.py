"""The command line: usage, unknown commands, and `tierlm bench` discovery."""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import shutil
from collections.abc import Iterator
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
        # write_results writes through results_file (bench/_lib/results.py).
        assert "results_file(" in text or "write_results(" in text, script.name
        assert '"results" /' not in text and "bench/results/" not in text, script.name


# -- what a newcomer trips over (issue 59) -------------------------------------------

SRC = Path(__file__).resolve().parents[1] / "src" / "tierlm"


def _messages(path: Path) -> Iterator[str]:
    """The string constants of a module that are not docstrings: what it says."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            yield node.value


def test_every_missing_extra_message_says_what_works_in_a_checkout() -> None:
    """tierlm is not on PyPI: `pip install 'tierlm[x]'` alone failed for every
    newcomer who followed it. Messages say it through ``install_hint``."""
    from tierlm.errors import install_hint

    alone = {
        f"{path.relative_to(SRC)}: {text!r}"
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "errors.py"
        for text in _messages(path)
        if "pip install 'tierlm" in text or 'pip install "tierlm' in text
    }
    assert alone == set()
    assert install_hint("server") == (
        "pip install -e '.[server]' in a checkout (pip install 'tierlm[server]' from PyPI)"
    )


def _serve_check(*argv: str) -> tuple[int, str]:
    from tierlm.server import serve_cli

    parser = argparse.ArgumentParser()
    serve_cli.add_arguments(parser)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = serve_cli.run(parser.parse_args([*argv, "--check"]))
    return code, err.getvalue()


@pytest.mark.parametrize("model", ["/nope/model.gguf", "qwen=/nope/model.gguf", "./m.gguf"])
def test_serve_a_model_file_that_does_not_exist_is_an_error_naming_it(model: str) -> None:
    """A bare path used to start the simulated device, which took it for a
    model's name and answered "w0 w1 w2"; --check said 0."""
    pytest.importorskip("uvicorn", reason="tierlm serve needs the server extra")
    code, err = _serve_check("--model", model)
    assert code == 2
    path = model.partition("=")[2] or model
    assert "no such file" in err or "llama-cpp-python is not installed" in err
    assert path.removeprefix("./") in err, err


def test_serve_a_model_file_without_llama_cpp_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("uvicorn", reason="tierlm serve needs the server extra")
    from tierlm.errors import install_hint
    from tierlm.server import serve_cli
    from tierlm.server.settings.backends import SimBackend

    monkeypatch.setattr(serve_cli, "serve_candidates", lambda: [SimBackend])
    code, err = _serve_check("--model", "/nope/model.gguf")
    assert code == 2
    assert "/nope/model.gguf" in err and install_hint("llama") in err
    # A name, not a file, still goes to the simulated device.
    assert _serve_check("--model", "qwen")[0] == 0


def test_which_model_values_are_files() -> None:
    pytest.importorskip("uvicorn", reason="tierlm serve needs the server extra")
    from tierlm.server.serve_cli import model_files

    values = ["a=/m/x.gguf", "/m/y.bin", "z.GGUF", "~/w", "../v", "qwen", "org/name", "q=qwen2"]
    assert model_files(values) == ["/m/x.gguf", "/m/y.bin", "z.GGUF", "~/w", "../v"]
