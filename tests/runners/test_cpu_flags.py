"""The AMX check that turns weight repacking off for batched decoding
(``tierlm.runners.llama_cpp.model.cpu_flags``; the crash: llama.cpp #16315, #20824)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tierlm.runners.llama_cpp.model import cpu_flags

pytestmark = pytest.mark.fast  # the inner loop: scripts/test --fast (tests/conftest.py)

if TYPE_CHECKING:
    from pathlib import Path

INTEL = "processor\t: 0\nflags\t\t: fpu sse2 avx512f amx_bf16 amx_tile amx_int8\n"
AMD = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f\n"


def test_amx_is_read_from_the_flags_line(tmp_path: Path) -> None:
    intel, amd = tmp_path / "intel", tmp_path / "amd"
    intel.write_text(INTEL + "model name\t: has amx in its name\n")
    amd.write_text(AMD + "model name\t: amx-like name, no flag\n")
    assert cpu_flags.cpu_has_amx(intel)
    assert not cpu_flags.cpu_has_amx(amd)
    assert not cpu_flags.cpu_has_amx(tmp_path / "missing")


def test_several_slots_on_an_amx_cpu_load_without_repacking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cpu_flags, "cpu_has_amx", lambda: True)
    assert cpu_flags.extra_bufts_for_slots(None, 4) is False
    assert cpu_flags.extra_bufts_for_slots(None, 1) is None  # the start-up probe decides
    assert cpu_flags.extra_bufts_for_slots(True, 4) is True  # the user's choice stands
    monkeypatch.setattr(cpu_flags, "cpu_has_amx", lambda: False)
    assert cpu_flags.extra_bufts_for_slots(None, 4) is None
