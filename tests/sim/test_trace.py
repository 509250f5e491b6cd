"""The Azure trace: shipped as package data, replayed whole at a stated offered load."""

from __future__ import annotations

import gzip
import itertools
from importlib import resources
from pathlib import Path

import pytest

from tierlm.sim import compute_metrics, simulate
from tierlm.sim.compare import compare
from tierlm.sim.device import DeviceModel
from tierlm.sim.report import offered_line
from tierlm.sim.trace import ENV_VAR, TraceMissingError, TraceRequest, load_trace, replay_plan
from tierlm.sim.workloads import get_workload
from tierlm.sim.workloads.azure_chat import AzureChat

CSV = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def test_the_trace_ships_compressed_with_its_attribution() -> None:
    data = resources.files("tierlm.sim").joinpath("data")
    packed = data.joinpath("azure-llm-2023-conv.csv.gz").read_bytes()
    assert packed[:2] == b"\x1f\x8b"  # gzip
    assert len(packed) < 0.3 * len(gzip.decompress(packed))
    attribution = data.joinpath("ATTRIBUTION.md").read_text()
    assert "CC-BY 4.0" in attribution and "Splitwise" in attribution


def test_the_packaged_trace_loads_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    requests = load_trace()
    assert len(requests) == 19_366
    assert requests[0].at == 0.0
    assert all(a.at <= b.at for a, b in itertools.pairwise(requests))
    assert requests[-1].at == pytest.approx(3501.7, abs=1.0)  # about an hour
    assert requests[0] == TraceRequest(0.0, 374, 44)


@pytest.mark.parametrize("gz", [False, True])
def test_another_trace_by_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gz: bool
) -> None:
    text = CSV + "2023-11-16 18:00:01.5000000,100,10\n2023-11-16 18:00:00.0000000,200,20\n"
    path = tmp_path / ("t.csv.gz" if gz else "t.csv")
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    monkeypatch.setenv(ENV_VAR, str(path))
    assert load_trace() == (TraceRequest(0.0, 200, 20), TraceRequest(1.5, 100, 10))
    workload = AzureChat()
    assert len(workload.requests) == 2


def test_trace_errors_name_the_file_and_the_columns(tmp_path: Path) -> None:
    with pytest.raises(TraceMissingError, match=r"nowhere\.csv not found.*--trace"):
        get_workload("azure-chat", trace=tmp_path / "nowhere.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("when,tokens\n1,2\n")
    with pytest.raises(ValueError, match=r"missing column.*ContextTokens"):
        load_trace(bad)


@pytest.mark.parametrize(
    ("load", "duration"), [(0.3, 3600.0), (0.1, 3600.0), (0.6, 1800.0), (0.3, 86_400.0)]
)
def test_replay_offers_the_stated_load_within_5_percent(load: float, duration: float) -> None:
    device = DeviceModel()
    requests = load_trace()
    for phase in (0.0, 0.37, 0.81):
        plan = replay_plan(
            requests,
            lambda r: device.job_seconds(min(r.context_tokens, 4096), max(1, r.generated_tokens)),
            load=load,
            duration=duration,
            phase=phase,
        )
        assert plan.offered_load == pytest.approx(load, rel=0.05)
        assert all(0 <= at < duration for at, _ in plan.arrivals)


def test_replay_spans_the_whole_trace_at_its_own_rate() -> None:
    """The trace's hour maps onto the run: arrivals per tenth of the run follow
    the trace's arrivals per tenth of its hour."""
    requests = load_trace()
    duration = 7200.0
    plan = replay_plan(requests, lambda r: 20.0, load=2.0, duration=duration, phase=0.5)
    span = requests[-1].at
    assert plan.time_scale == pytest.approx(duration / span, rel=1e-3)
    assert plan.arrivals[0][0] < duration / 100 and plan.arrivals[-1][0] > 0.99 * duration
    trace_tenths = [0] * 10
    for r in requests:
        trace_tenths[min(9, int(10 * r.at / span))] += 1
    run_tenths = [0] * 10
    for at, _ in plan.arrivals:
        run_tenths[min(9, int(10 * at / duration))] += 1
    for trace_count, run_count in zip(trace_tenths, run_tenths, strict=True):
        expected = trace_count * plan.kept / len(requests)
        assert abs(run_count - expected) <= max(2.0, 0.05 * expected)


def test_a_run_generates_the_stated_load_and_says_so() -> None:
    workload = get_workload("azure-chat")
    comparison = compare(workload, ["tierlm"], duration=3600.0)
    offered = comparison.metrics["tierlm"]["offered_load"]
    assert offered["stated"] == {"chat": 0.3}
    assert offered["by_class"]["chat"] == pytest.approx(0.3, rel=0.05)
    line = offered_line(comparison)
    assert line is not None and "chat 3" in line and "(stated 30.0 %)" in line
    # The chats are the trace's: open loop, the same whatever the policy.
    fifo = compute_metrics(simulate(workload, "fifo", duration=3600.0))
    assert fifo["offered_load"]["by_class"]["chat"] == offered["by_class"]["chat"]
