"""One typed description of what a runner can do (``runners.protocol.Abilities``):
what the scheduler and the gateway plan with, read with ``abilities_of``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tierlm import Scheduler
from tierlm.runners import CancelToken, GenerationRequest, SimulatedRunner
from tierlm.runners.llama_cpp import LlamaCppRunner, LlamaModelSpec
from tierlm.runners.llama_cpp.model.capacity import CPU_STEP_COST
from tierlm.runners.openai_compat import OpenAIRunner
from tierlm.runners.protocol import Abilities, abilities_of
from tierlm.shell.dispatch import Dispatcher

pytestmark = pytest.mark.fast  # the inner loop: scripts/test --fast (tests/conftest.py)


class PlainRunner:
    """A runner with only the protocol's members (as one written before abilities)."""

    loaded_model: str | None = None

    async def load(self, model_id: str) -> None:
        self.loaded_model = model_id

    async def generate(self, request: GenerationRequest, cancel: CancelToken) -> AsyncIterator[str]:
        yield "x"


def test_a_runner_that_says_nothing_is_one_slot_and_nothing_more() -> None:
    assert abilities_of(PlainRunner()) == Abilities()


def test_an_upstream_says_its_slots_in_its_abilities() -> None:
    runner = OpenAIRunner("http://127.0.0.1:9")
    runner.slots = 4  # the operator's [backend] slots: the upstream's parallel streams
    assert abilities_of(runner) == Abilities(slots=4)


def test_the_simulated_device_says_its_curve_swap_and_restore() -> None:
    runner = SimulatedRunner(slots=4, batch_cost=0.5, swap_seconds=2.0, resume="restore")
    abilities = abilities_of(runner)
    assert abilities.slots == 4
    assert abilities.step_cost == (1.0, 1.5, 2.0, 2.5)
    assert abilities.swap_estimate == 2.0
    assert abilities.restores_kv
    assert abilities.context("any") is None


def test_the_scheduler_plans_with_the_runner_s_abilities() -> None:
    runner = SimulatedRunner(slots=2, batch_cost=0.25, swap_seconds=4.0)
    scheduler = Scheduler(runner)
    dispatcher = Dispatcher(runner, scheduler.policy, scheduler.config)
    assert (dispatcher.slots, dispatcher.step_cost, dispatcher.swap_estimate) == (
        2,
        (1.0, 1.25),
        4.0,
    )
    assert dispatcher.restores_kv is abilities_of(runner).restores_kv


def test_llama_cpp_says_its_slots_cpu_curve_restore_and_contexts() -> None:
    """Before any load (nothing of llama.cpp runs): each model's context is its
    spec's."""
    runner = LlamaCppRunner(
        {"a": LlamaModelSpec("a.gguf", n_ctx=4096), "b": LlamaModelSpec("b.gguf")},
        slots=4,
        kv_pool_bytes=0,
    )
    abilities = abilities_of(runner)
    assert abilities.slots == 4
    assert abilities.step_cost == CPU_STEP_COST[:4]
    assert not abilities.restores_kv
    assert abilities.swap_estimate is None
    assert abilities.context("a") == 4096
    assert abilities.context("b") == LlamaModelSpec("b.gguf").n_ctx
    assert abilities.context("c") is None
