"""The layering of docs/design.md §1, checked over the import graph of src/tierlm.

The graph is read from the source with ``ast``, not by importing it: every
``import`` counts, at module level, inside functions (lazy imports) and under
``TYPE_CHECKING``, because each is a dependency of the design even when it is
not one at import time.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # the inner loop: scripts/test --fast (tests/conftest.py)

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "tierlm"
MAX_LINES = 500  # a module past this is doing two jobs (the bound; ~400 is the aim)

# The asyncio shell: docs/design.md §1.1: "the shell imports core and the runner protocol".
SHELL = "tierlm.shell"

# The gateway's floors, lowest first (docs/design.md §1.1): a floor imports
# only the floors below it (and everything outside tierlm.server).
SERVER_FLOORS = (
    "tierlm.server.settings",
    "tierlm.server.edge",
    "tierlm.server.gateway",
    "tierlm.server.openai",
    "tierlm.server.ollama",
    "tierlm.server.ops",
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def source_files() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported(module: str, path: Path, modules: set[str]) -> Iterator[str]:
    """The tierlm modules that ``module`` imports."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _within(alias.name, modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                # `from tierlm import arguments` imports the module tierlm.shell.arguments.
                submodule = f"{base}.{alias.name}"
                yield from _within(submodule if submodule in modules else base, modules)


def _within(name: str, modules: set[str]) -> Iterator[str]:
    # The longest prefix that is a module of ours (`import tierlm.x.y` imports tierlm.x.y).
    while name:
        if name in modules:
            yield name
            return
        name = name.rpartition(".")[0]


@functools.cache
def import_graph() -> dict[str, set[str]]:
    files = source_files()
    modules = set(files)
    return {
        module: {target for target in imported(module, path, modules) if target != module}
        for module, path in files.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_the_imports() -> None:
    """A check of the checker: known edges, relative and lazy imports alike."""
    graph = import_graph()
    assert "tierlm.core.jobs" in graph["tierlm.core.policy"]
    assert "tierlm.shell.dispatch" in graph["tierlm.shell.scheduler"]
    assert (
        "tierlm.shell.arguments" in graph["tierlm.shell.scheduler"]
    )  # `from tierlm import arguments`
    assert "tierlm.runners.llama_cpp" in graph["tierlm.runners"]  # under TYPE_CHECKING
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle() -> None:
    assert cycles(import_graph()) == []


def imports_outside(layer: Iterable[str], allowed: tuple[str, ...]) -> dict[str, list[str]]:
    """{module of ``layer``: the modules it imports that are not ``allowed``}."""
    graph = import_graph()
    bad = {m: sorted(t for t in graph[m] if not t.startswith(allowed)) for m in layer}
    return {module: targets for module, targets in bad.items() if targets}


def layer(prefix: str) -> list[str]:
    return [m for m in source_files() if m == prefix or m.startswith(prefix + ".")]


def test_core_imports_nothing_of_tierlm_outside_core() -> None:
    """docs/design.md §1: the policy is sans-I/O and stands alone."""
    assert imports_outside(layer("tierlm.core"), ("tierlm.core",)) == {}


def test_the_error_root_imports_nothing_of_tierlm() -> None:
    """tierlm.errors is a leaf: every layer may import it (docs/design.md §1)."""
    assert import_graph()["tierlm.errors"] == set()


def test_the_cluster_rule_is_pure() -> None:
    """docs/distributed.md: the placement rule is a pure function of routing
    stats; it imports nothing of tierlm (the error root aside)."""
    assert layer("tierlm.cluster"), "tierlm.cluster is a package"
    assert imports_outside(layer("tierlm.cluster"), ("tierlm.cluster", "tierlm.errors")) == {}


def test_nothing_imports_the_ray_layer() -> None:
    """tierlm.ray sits on top, behind the [ray] extra: no other layer needs Ray."""
    graph = import_graph()
    users = {
        m: sorted(t for t in targets if t.startswith("tierlm.ray"))
        for m, targets in graph.items()
        if not m.startswith("tierlm.ray")
    }
    assert {m: ts for m, ts in users.items() if ts} == {}


# The one word the policy core and the runners share: why a job is told to stop.
STOP_REASONS = "tierlm.core.stop_reasons"


def test_runners_import_only_runners() -> None:
    """docs/design.md §1: runners know no policy; they import their own protocol
    (and the error root, and the core's pure stop reasons)."""
    allowed = ("tierlm.runners", "tierlm.errors", STOP_REASONS)
    assert imports_outside(layer("tierlm.runners"), allowed) == {}
    # The stop reasons stay a leaf: through them runners reach no policy.
    assert import_graph()[STOP_REASONS] == set()


LLAMA = "tierlm.runners.llama_cpp"
# The llama.cpp runner's rooms follow the process boundary (its package
# docstring): the runner's process, the worker's, and what both share.
LLAMA_PROCESSES = (f"{LLAMA}.host", f"{LLAMA}.worker")
LLAMA_SHARED = (f"{LLAMA}.wire", f"{LLAMA}.model", f"{LLAMA}.prompt")
# The one door across: with isolation="thread" the runner runs the worker's
# service in threads of its own process (docs/design.md §1.2).
LLAMA_DOORS = {(f"{LLAMA}.host.transport", f"{LLAMA}.worker.service")}


def test_every_llama_cpp_module_is_in_a_room() -> None:
    rooms = (*LLAMA_PROCESSES, *LLAMA_SHARED)
    loose = [m for m in layer(LLAMA) if m != LLAMA and not m.startswith(rooms)]
    assert loose == []


def test_the_llama_cpp_processes_meet_only_through_the_shared_rooms() -> None:
    """host/ (the runner's process) and worker/ (the worker's) import each other
    only through wire/, model/ and prompt/; those import neither."""
    graph = import_graph()
    crossing = {}
    for room in (*LLAMA_PROCESSES, *LLAMA_SHARED):
        forbidden = tuple(r for r in LLAMA_PROCESSES if r != room)
        for module in layer(room):
            bad = sorted(
                t
                for t in graph[module]
                if t.startswith(forbidden) and (module, t) not in LLAMA_DOORS
            )
            if bad:
                crossing[module] = bad
    assert crossing == {}
    # A door nobody uses any more is closed: take it out of LLAMA_DOORS.
    assert all(target in graph[module] for module, target in LLAMA_DOORS)


def test_nothing_outside_imports_the_llama_cpp_worker() -> None:
    """The gateway and the rest of tierlm use llama.cpp through the runner's
    face, host/ and the shared rooms: no code of the worker's process runs there."""
    graph = import_graph()
    users = {
        m: sorted(t for t in targets if t.startswith(f"{LLAMA}.worker"))
        for m, targets in graph.items()
        if not m.startswith(f"{LLAMA}.")
    }
    assert {m: ts for m, ts in users.items() if ts and m != LLAMA} == {}


def test_the_shell_imports_only_core_runners_and_itself() -> None:
    assert layer(SHELL), "the shell is a package"
    allowed = ("tierlm.core", "tierlm.runners", "tierlm.errors", SHELL)
    assert imports_outside(layer(SHELL), allowed) == {}


def test_each_gateway_floor_imports_only_the_floors_below() -> None:
    graph = import_graph()
    for height, floor in enumerate(SERVER_FLOORS):
        allowed = SERVER_FLOORS[: height + 1]
        assert layer(floor), f"{floor} is a package"
        reaching_up = {
            module: sorted(
                t
                for t in graph[module]
                if t.startswith("tierlm.server.") and not t.startswith(allowed)
            )
            for module in layer(floor)
        }
        assert {m: ts for m, ts in reaching_up.items() if ts} == {}, f"{floor} reaches up"


def oversized() -> dict[str, int]:
    sizes = {
        str(path.relative_to(SRC)): len(path.read_text().splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    return {name: lines for name, lines in sorted(sizes.items()) if lines > MAX_LINES}


def test_no_file_over_500_lines() -> None:
    assert oversized() == {}
