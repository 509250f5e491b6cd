"""The lane's default concurrency and the machine measurements behind it."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest

from tierlm.embedding import EmbeddingLane, SimulatedEmbedder, default_concurrency, machine
from tierlm.embedding.machine import total_memory_bytes

if TYPE_CHECKING:
    from pathlib import Path

GIB = 1024**3


@pytest.mark.parametrize(
    ("cores", "memory", "expected"),
    [
        (2, 24 * GIB, 2),  # this project's machines
        (8, 16 * GIB, 3),
        (16, 64 * GIB, 3),
        (8, 16 * GIB - 1, 2),
        (7, 64 * GIB, 2),
    ],
)
def test_default_concurrency_follows_the_seed(cores: int, memory: int, expected: int) -> None:
    assert default_concurrency(cores, memory) == expected


def test_an_unmeasurable_machine_counts_as_small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine.os, "cpu_count", lambda: None)
    assert default_concurrency(memory_bytes=64 * GIB) == 2
    monkeypatch.setattr(machine, "total_memory_bytes", lambda: None)
    assert default_concurrency(cpu_count=32) == 2


def test_the_lane_uses_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "default_concurrency", lambda: 3)
    assert EmbeddingLane(SimulatedEmbedder()).concurrency == 3
    assert EmbeddingLane(SimulatedEmbedder(), concurrency=1).concurrency == 1


def test_memory_is_measured() -> None:
    memory = total_memory_bytes()
    assert memory is not None
    assert memory > 256 * 1024**2


def test_memory_without_psutil_reads_proc_meminfo(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil -> ImportError
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24570556 kB\nMemFree:        1 kB\n")
    assert total_memory_bytes(meminfo) == 24570556 * 1024


def test_memory_without_psutil_or_proc_uses_sysconf(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "psutil", None)
    values = {"SC_PHYS_PAGES": 1000, "SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(machine.os, "sysconf", values.__getitem__)
    assert total_memory_bytes(tmp_path / "absent") == 4096 * 1000


def test_memory_unknown_when_nothing_answers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "psutil", None)

    def refuse(name: str) -> int:
        raise ValueError(name)

    monkeypatch.setattr(machine.os, "sysconf", refuse)
    assert total_memory_bytes(tmp_path / "absent") is None
