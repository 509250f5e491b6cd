"""``tierlm demo | simulate | serve | bench`` (docs/design.md §1.1).

Each subcommand lives with the layer it drives, in a module named after it
(``tierlm.sim.demo_cli``, ``tierlm.sim.simulate_cli``,
``tierlm.server.serve_cli``, ``tierlm.bench_cli``); this module only parses and
dispatches, importing a layer when its command runs, so ``tierlm demo`` never
imports the gateway.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Protocol, cast

from tierlm.errors import install_hint

__all__ = ["main"]


class _Command(Protocol):
    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


# name -> (module with add_arguments/run, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "tierlm.sim.demo_cli",
        "run the seed's issue-118 workload under every scheduler, side by side",
    ),
    "simulate": ("tierlm.sim.simulate_cli", "simulate a workload under chosen policies"),
    "serve": ("tierlm.server.serve_cli", "run the OpenAI-compatible gateway"),
    "bench": ("tierlm.bench_cli", "run the benchmarks under bench/"),
}


# Commands that need an extra beyond the base install (README "Extras").
EXTRAS = {"serve": "server"}


def _usage() -> str:
    lines = ["usage: tierlm COMMAND [options]", "       tierlm --version", "", "commands:"]
    lines += [f"  {name:<10} {help_text}" for name, (_, help_text) in COMMANDS.items()]
    lines += ["", "tierlm COMMAND --help shows a command's options."]
    return "\n".join(lines)


def version() -> str:
    """The installed distribution's version (its metadata: pyproject.toml's)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("tierlm")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    name = args[0]
    if name in ("-V", "--version"):
        print(f"tierlm {version()}")
        return 0
    if name not in COMMANDS:
        print(f"tierlm: unknown command {name!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module_name, help_text = COMMANDS[name]
    try:
        command = cast(_Command, importlib.import_module(module_name))
    except ImportError as exc:
        extra = EXTRAS.get(name)
        if extra is not None and any(a in ("-h", "--help") for a in args[1:]):
            # The options are built from the extra's schemas: say so, and where
            # they are listed, rather than fail on a question.
            print(
                f"usage: tierlm {name} [options]\n\n{help_text}.\n\nIts options need the "
                f"{extra!r} extra installed to be listed here:\n  {install_hint(extra)}\n"
                "(or the 'serve' extra: the same and the embedded model). "
                "docs/gateway.md lists them all."
            )
            return 0
        if extra is None:
            print(f"tierlm {name}: needs an optional dependency: {exc}", file=sys.stderr)
        else:
            print(
                f"tierlm {name}: needs the {extra!r} extra ({exc.name or exc} is not "
                f"installed): {install_hint(extra)}",
                file=sys.stderr,
            )
        return 2
    parser = argparse.ArgumentParser(prog=f"tierlm {name}", description=help_text)
    command.add_arguments(parser)
    return command.run(parser.parse_args(args[1:]))


if __name__ == "__main__":
    raise SystemExit(main())
