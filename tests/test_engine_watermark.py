"""The admission watermark each engine profile keeps where ``policy.watermark`` is null
(``EngineProfile.watermark``): vLLM V0's block manager keeps 0.01 of the KV blocks free when it
admits a prompt (``BlockSpaceManager``'s ``watermark=0.01``); vLLM V1 at v0.15.1, which ``vllm-v1``
is fitted to, keeps none (``KVCacheManager.allocate_slots`` admits a request whose blocks are free),
nor do TensorRT-LLM, SGLang and HF generate().
A watermark the scenario gives is kept under every profile."""

import pytest

from servesim.simulation import prepare, simulate
from tests.conftest import make_scenario, specs

# 100 blocks of 16 (0.01 of them: 1 block). A and B: prompt 790 (50 blocks), 3 out (792 tokens of KV:
# still 50 blocks): both fit together only with no block kept free
ROWS = [(0.0, 790, 3), (0.0, 790, 3)]


def run(engine, profile, **kw):
    sc = make_scenario(**{"cost.engine": profile, "cost.api_server": False, "engine": engine,
                          "memory.num_gpu_blocks": 100, "workload.num_requests": len(ROWS), **kw})
    return simulate(sc, specs=specs(ROWS))


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_vllm_v1_keeps_no_watermark_unless_the_scenario_sets_one(engine):
    v1 = run(engine, "vllm-v1")
    st, r = v1.steps, v1.requests
    # both prompts in the first step, all 100 blocks taken; nobody preempted (no token opens a block)
    assert (st["num_seqs"][0], st["prefill_tokens"][0], st["kv_blocks_used"][0]) == (2, 1580, 100)
    assert v1.summary["preemptions"] == 0 and v1.summary["completed"] == 2
    # policy.watermark 0.01 given: B would leave 0 of the 1 block kept: it waits for A to complete
    held = run(engine, "vllm-v1", **{"policy.watermark": 0.01})
    st, r = held.steps, held.requests
    assert (st["num_seqs"][0], st["prefill_tokens"][0], st["kv_blocks_used"][0]) == (1, 790, 50)
    assert r["first_token_s"][1] >= r["finish_s"][0] and held.summary["completed"] == 2


@pytest.mark.parametrize("profile", ["trt-llm", "sglang", "hf-eager"])
def test_engines_without_a_watermark_in_their_source_keep_none(profile):
    """TensorRT-LLM's capacity scheduler (GUARANTEED_NO_EVICT), SGLang's PrefillAdder and HF
    generate() keep no share of the KV blocks back (they kept servesim's 0.01, with no source): both
    prompts are admitted in the first step, filling the 100 blocks."""
    r = run("reference", profile)
    st = r.steps
    assert (st["num_seqs"][0], st["prefill_tokens"][0], st["kv_blocks_used"][0]) == (2, 1580, 100)
    assert r.summary["completed"] == 2


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_vllm_v0_keeps_its_block_managers_watermark(engine):
    v0 = run(engine, "vllm-v0", **{"policy.prefill_first": True})
    st, r = v0.steps, v0.requests
    assert (st["num_seqs"][0], st["prefill_tokens"][0], st["kv_blocks_used"][0]) == (1, 790, 50)
    assert r["first_token_s"][1] >= r["finish_s"][0]
    # a watermark of 0 given is kept: both prompts in the first step
    none = run(engine, "vllm-v0", **{"policy.prefill_first": True, "policy.watermark": 0.0})
    assert (none.steps["num_seqs"][0], none.steps["prefill_tokens"][0]) == (2, 1580)


def test_each_pool_takes_its_engines_watermark():
    """The policy a pool makes carries the resolved watermark: the profile's where the scenario's is
    null (vllm-v1, trt-llm, sglang, hf-eager: 0; the vLLM V0 profiles and sarathi-serve 0.01), the
    scenario's where given."""
    from servesim.cost.engines import PROFILES

    for name, prof in PROFILES.items():
        pol = prepare(make_scenario(**{"cost.engine": name})).pools[0].make_policy()
        none = name in ("vllm-v1", "trt-llm", "sglang", "hf-eager")
        assert pol.watermark == prof.watermark == (0.0 if none else 0.01), name
        pol = prepare(make_scenario(**{"cost.engine": name, "policy.watermark": 0.05})).pools[0].make_policy()
        assert pol.watermark == 0.05, name
