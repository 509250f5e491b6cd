"""A pytest plugin: ``async def`` tests on the virtual-time loop.

pytest-trio's autojump clock is the model: a test marked ``virtual_time`` is
an ``async def`` that pytest runs with ``run_virtual`` (docs/design.md §7), so
``await asyncio.sleep(300)`` returns at once, 300 virtual seconds later, and a
test whose tasks all wait forever fails with ``VirtualDeadlock`` instead of
hanging. Fixtures are passed as usual (sync fixtures only: each test gets a
fresh loop).

Enable it in a ``conftest.py`` with ``pytest_plugins =
("tierlm.testing.pytest_plugin",)``. It runs only the tests marked
``@pytest.mark.virtual_time`` (or a module's ``pytestmark``): other async
tests stay with whichever async plugin they use. tierlm's own suite marks
every unmarked ``async def`` test (tests/conftest.py).
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from tierlm.testing.virtual import run_virtual

MARK = "virtual_time"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARK}: run this async def test on tierlm's virtual-time loop"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    function = pyfuncitem.obj
    if not inspect.iscoroutinefunction(function) or pyfuncitem.get_closest_marker(MARK) is None:
        return None
    names = pyfuncitem._fixtureinfo.argnames
    arguments: dict[str, Any] = {name: pyfuncitem.funcargs[name] for name in names}
    run_virtual(function(**arguments))
    return True
