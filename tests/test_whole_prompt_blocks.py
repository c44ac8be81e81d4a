"""Chunked prefill near a full KV cache: vLLM V0's and Sarathi-Serve's block manager allocates the
blocks of a request's whole prompt when it admits it (``BlockSpaceManager.allocate``), its chunks
computed into them; vLLM V1 allocates a chunk's blocks as it schedules the chunk
(``KVCacheManager.allocate_slots``). So V1 may admit a prompt's first chunk that the next chunk
cannot follow (it is then preempted, the newest, and recomputed later), where V0 admits the prompt
only once all of its blocks are free (``ContinuousPolicy.whole_prompt_blocks``, set by the engine
profile)."""

import pytest

from servesim.simulation import simulate
from tests.conftest import SYNC, make_scenario, specs

# A: prompt 200 (13 blocks of 16), 60 out (its sequence 259 tokens: 17 blocks); B: prompt 160 (10
# blocks), 40 out. 20 blocks, no watermark, a 256-token budget: A's prompt and 56 of B's fit step 1
ROWS = [(0.0, 200, 60), (0.0, 160, 40)]


def run(engine, profile, rows=ROWS, **kw):
    sc = make_scenario(**{**SYNC, "cost.engine": profile, "engine": engine, "memory.num_gpu_blocks": 20,
                          "policy.watermark": 0.0, "policy.name": "chunked_prefill",
                          "policy.max_num_batched_tokens": 256, "workload.num_requests": len(rows), **kw})
    return simulate(sc, specs=specs(rows))


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("profile", ["vllm-v0", "sarathi-serve", "vllm-v0.2.3"])
def test_v0_admits_a_chunked_prompt_only_when_its_whole_prompt_fits(engine, profile):
    res = run(engine, profile)
    st, r = res.steps, res.requests
    # step 1: A alone (13 blocks); B's prompt needs 10 of the 7 left: it waits, nothing preempted
    assert (st["num_seqs"][0], st["prefill_tokens"][0], st["kv_blocks_used"][0]) == (1, 200, 13)
    assert res.summary["preemptions"] == 0 and list(r["preemptions"]) == [0, 0]
    assert res.summary["kv"]["recompute_tokens"] == 0
    # A grows to 16 blocks over its 59 decodes, never leaving B's 10 free: B is admitted in the step
    # after A completes (A: a prefill and 59 decodes), its whole prompt at once, and decodes 39 times
    assert (st["prefill_tokens"][60], st["num_seqs"][60]) == (160, 1)
    assert sum(st["prefill_tokens"]) == 360 and len(st["start_s"]) == 100
    assert r["first_token_s"][1] >= r["finish_s"][0]


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_v1_admits_the_first_chunk_and_preempts_it_when_the_next_one_cannot_grow(engine):
    res = run(engine, "vllm-v1")
    st, r = res.steps, res.requests
    # step 1: A's prompt and 56 tokens of B's (4 blocks): 17 blocks; step 2: A decodes in its 13,
    # B's next 104 tokens need 6 more of the 3 free: B, the newest, preempts itself (its 56 dropped)
    assert (st["num_seqs"][0], st["prefill_tokens"][0], st["kv_blocks_used"][0]) == (2, 256, 17)
    assert (st["num_seqs"][1], st["prefill_tokens"][1], st["kv_blocks_used"][1]) == (1, 0, 13)
    assert list(r["preemptions"]) == [0, 1] and res.summary["kv"]["recompute_tokens"] == 56
    assert sum(st["prefill_tokens"]) == 360 + 56


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_prompt_over_the_watermark_is_rejected_at_arrival_under_v0_not_v1(engine):
    # 300 tokens: 19 of the 20 blocks, over the 18 the 10% watermark leaves; its first chunk (256:
    # 16 blocks) is under them
    rows = [(0.0, 300, 5)]
    v0 = run(engine, "vllm-v0", rows, **{"policy.watermark": 0.1})
    assert v0.summary["rejected"] == 1 and len(v0.steps["start_s"]) == 0
    why = v0.requests["reason"][0]
    assert "its prompt = 300 tokens needs 19 free KV blocks" in why and "policy.watermark=0.1" in why
    v1 = run(engine, "vllm-v1", rows, **{"policy.watermark": 0.1})
    assert v1.summary["completed"] == 1
