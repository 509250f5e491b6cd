"""``/metrics`` says what the dashboard says (issue 56, item 7): the KV cache
in use (vLLM's ``kv_cache_usage_perc`` too), the prompts' tokens, end-to-end
and inter-token latency histograms, and tokens a second over the same 10 s
window as the dashboard; under vLLM's names with ``vllm_compat``.
"""

from __future__ import annotations

from tests.payloads import MESSAGES, chat_body
from tests.server.helpers import TOKEN, serve, sim_settings, sse
from tierlm.runners.simulated import SimulatedRunner

CONTEXT = 512


class WithContext(SimulatedRunner):
    """The sim device with a context, as llama-cpp reports one."""

    def describe(self, model_id: str) -> dict[str, object]:
        return {"n_ctx": CONTEXT}


def test_request_latency_prompt_tokens_kv_and_throughput() -> None:
    runner = WithContext(token_interval=TOKEN, swap_seconds=0.0, models=["sim-a", "sim-b"])
    settings = sim_settings({"metrics": {"vllm_compat": True}})
    with serve(settings, runner=runner) as gw:
        gw.openai().chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=5)
        assert gw.metric("tierlm_e2e_request_latency_seconds_count", class_="chat") == 1
        assert gw.metric("tierlm_e2e_request_latency_seconds_sum", class_="chat") > 4 * TOKEN
        # Five tokens: four gaps between them.
        assert gw.metric("tierlm_inter_token_latency_seconds_count", class_="chat") == 4
        prompt = gw.metric("tierlm_prompt_tokens_total", class_="chat", model="sim-a")
        assert prompt > 0
        assert gw.metric("vllm:prompt_tokens_total", model_name="sim-a") == prompt
        assert gw.metric("vllm:generation_tokens_total", model_name="sim-a") == 5
        assert gw.metric("vllm:e2e_request_latency_seconds_count", model_name="sim-a") == 1
        assert gw.metric("vllm:inter_token_latency_seconds_count", model_name="sim-a") == 4
        assert gw.metric("vllm:time_to_first_token_seconds_count", model_name="sim-a") == 1
        # While a job runs: its tokens in the KV cache, and the 10 s rate.
        with sse(gw, chat_body(max_tokens=2000)) as stream:
            for _ in range(40):
                stream.next_data()
            scraped = gw.metrics()  # one scrape: the job goes on meanwhile
            usage = scraped[("tierlm_kv_cache_usage_ratio", ())]
            assert 40 / CONTEXT < usage < 1
            assert scraped[("vllm:kv_cache_usage_perc", ())] == usage
            assert scraped[("tierlm_kv_cache_used_bytes", ())] > 0
            rate = gw.metric("tierlm_tokens_per_second", model="sim-a")
            shown = gw.http.get("/dashboard/state").json()["resources"]["tokens_per_s"]
            assert rate > 0 and abs(rate - shown) <= max(2.0, 0.2 * shown)
        # Idle again: nothing in the cache.
        gw.wait(lambda s: s["running"] is None, "the stream's job ended")
        assert gw.metric("tierlm_kv_cache_usage_ratio") == 0
