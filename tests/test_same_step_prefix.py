"""Prefix-cache hits within one step: vLLM V1 caches a block when it allocates it for the tokens
a step computes (``KVCacheManager.allocate_slots`` caches up to the computed + scheduled tokens,
full blocks only), so a request admitted after another of the same prefix in the same step finds
the blocks that one fills then, and computes only what follows them. servesim looked prefixes up
in the cache as it was before the step, so both computed the prefix."""

import dataclasses

import numpy as np
import pytest

from servesim.simulation import simulate
from tests.conftest import SYNC, make_scenario, specs

# vLLM V1's block allocation (a chunk takes its blocks as it is scheduled); the V0 profiles take a
# whole prompt's blocks at admission (EngineProfile.whole_prompt_blocks)
V1 = {"cost.engine": "vllm-v1"}


def three_of_one_prefix(engine, policy, budget):
    # three requests arriving at once: a 64-token shared prefix (4 blocks of 16) and 20 tokens of their own
    sc = make_scenario(**{**SYNC, **V1, "engine": engine, "policy.name": policy,
                          "policy.max_num_batched_tokens": budget, "policy.prefix_caching": True,
                          "workload.num_requests": 3})
    sp = specs([(0.0, 84, 5)] * 3)
    sp = dataclasses.replace(sp, prefix_group=np.zeros(3, np.int64), prefix_tokens=np.full(3, 64, np.int64))
    return simulate(sc, specs=sp)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_requests_admitted_in_one_step_hit_the_prefix_the_first_fills(engine):
    res = three_of_one_prefix(engine, "continuous", 8192)
    st, r = res.steps, res.requests
    # the first computes 84 tokens, the two behind it their own 20 each (before: 3 x 84 = 252)
    assert st["prefill_tokens"][0] == 84 + 20 + 20 and st["num_seqs"][0] == 3
    assert list(r["prefix_hit_tokens"]) == [0, 64, 64] and res.summary["kv"]["prefix_cache_hit_tokens"] == 128
    # the prefix's 4 blocks are held once: 4 + 2 of the first, 2 each of the others
    assert st["kv_blocks_used"][0] == 10
    assert res.summary["completed"] == 3


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_chunk_shares_the_full_blocks_it_fills(engine):
    # a 100-token budget: the first takes 84, the second hits the 4 prefix blocks and takes 16 of
    # its 20 (before: 16 of its 84, then 68 more next step); the third waits for the next step,
    # where the cache holds the prefix
    res = three_of_one_prefix(engine, "chunked_prefill", 100)
    st, r = res.steps, res.requests
    assert list(st["prefill_tokens"][:3]) == [84 + 16, 4 + 20, 0]
    assert list(r["prefix_hit_tokens"]) == [0, 64, 64]
    assert st["kv_blocks_used"][0] == 6 + 1  # the second's fifth block is its own


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_shared_block_a_chunk_ended_in_is_not_cached_when_its_request_is_preempted(engine):
    """vLLM V1 caches a block only once it is full (``SingleTypeKVCacheManager.cache_blocks``:
    num_full_blocks = num_tokens // block_size). servesim keyed a shared prefix block when it
    mapped it, so a request preempted after a chunk that ended inside its prefix left the partly
    computed block cached, and its return (or anyone of the prefix) hit up to 15 tokens nobody had
    computed. The exact trace: C (16-token prompt, 10 output tokens) and A (44 tokens, a 32-token
    shared prefix: 2 blocks) arrive at once under a 40-token budget with 4 KV blocks."""
    sc = make_scenario(**{**SYNC, **V1, "engine": engine, "policy.name": "chunked_prefill",
                          "policy.max_num_batched_tokens": 40, "policy.prefix_caching": True,
                          "memory.num_gpu_blocks": 4, "policy.watermark": 0.0, "workload.num_requests": 3})
    sp = specs([(0.0, 16, 10), (0.0, 44, 3), (1.0, 44, 3)])  # (B, the third, comes once A is done)
    sp = dataclasses.replace(sp, prefix_group=np.array([-1, 0, 0]), prefix_tokens=np.array([0, 32, 32]))
    res = simulate(sc, specs=sp)
    st, r = res.steps, res.requests
    # step 0: C's prompt and A's first chunk, 24 tokens: block 0 of the prefix full, block 1 holds 8
    assert (st["prefill_tokens"][0], st["kv_blocks_used"][0]) == (16 + 24, 3)
    # step 1: C's first decode needs its second block, A's next chunk a third: A, the newest, is
    # preempted; its full block 0 stays cached, its block 1 (8 of 16 tokens computed) does not
    assert list(r["preemptions"]) == [0, 1, 0]
    # once C is done A comes back: it hits block 0 only and computes 44 - 16 = 28 tokens (before:
    # a hit on both blocks, 12 tokens, 8 of the 32 it skipped never computed by anyone)
    back = np.flatnonzero(st["prefill_tokens"][1:] > 0)[0] + 1
    assert st["prefill_tokens"][back] == 28
    assert res.summary["kv"]["recompute_tokens"] == 24 - 16  # of its 24 dropped tokens, 16 were cached
    # B, after A completed its prompt (both blocks full and cached), hits the whole prefix
    assert list(r["prefix_hit_tokens"]) == [0, 0, 32] and res.summary["completed"] == 3


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_the_decision_trace_counts_the_same_step_hits_admission_counts(engine):
    """X (84 tokens, a 64-token shared prefix), H (100 tokens, no prefix) and R (X's prefix)
    arrive at once on 9 KV blocks, whole prompts: X takes 6, H needs 7 of the 3 left and stops
    admission. R, behind it, would have fit: X fills the 4 prefix blocks in this step, so R needs
    6 - 4 = 2 (admission counts those hits). The trace said R lacked KV ('kv') at that first
    decision, counting only what the cache held before the step; it is 'head_of_line' behind H."""
    sc = make_scenario(**{**SYNC, "engine": engine, "policy.prefix_caching": True, "memory.num_gpu_blocks": 9,
                          "policy.watermark": 0.0, "workload.num_requests": 3})
    sp = specs([(0.0, 84, 3), (0.0, 100, 3), (0.0, 84, 3)])
    sp = dataclasses.replace(sp, prefix_group=np.array([0, -1, 0]), prefix_tokens=np.array([64, 0, 64]))
    res = simulate(sc, specs=sp, decision_trace=True)
    d, r = res.decisions, res.requests
    first = np.flatnonzero(d["request_id"] == 2)[0]
    assert (d["start_s"][first], d["reason"][first], d["blocker"][first]) == (0.0, "head_of_line", 1)
    # it waits behind H until H is admitted (X done), then for KV of its own
    assert d["end_s"][first] == r["scheduled_s"][1] and res.summary["completed"] == 3


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_priority_preemption_counts_the_same_step_hits_admission_counts(engine):
    """L (priority 1, 16 + 100 tokens) runs on 9 KV blocks when X and H (priority 0, 84 tokens, a
    64-token shared prefix) arrive: X takes 6 blocks, leaving one; H, with X's 4 prefix blocks
    hit in this step, needs 2, which preempting L (2 blocks) gives. Priority preemption counted
    H's need without those hits (6 blocks), found that preempting L would not do, and preempted
    nobody: H waited a step, and L was preempted for it then. (The block left free lets X's and
    H's decodes pass vllm-v0's can_append_slot, a free block each at its turn: on 8 blocks they
    found none and preempted each other and L again.)"""
    cls = {"workload.prompt_tokens": None, "workload.output_tokens": None, "workload.classes": [
        {"name": "hi", "share": 0.5, "priority": 0, "prompt_tokens": {"dist": "fixed", "value": 84},
         "output_tokens": {"dist": "fixed", "value": 3}},
        {"name": "lo", "share": 0.5, "priority": 1, "prompt_tokens": {"dist": "fixed", "value": 16},
         "output_tokens": {"dist": "fixed", "value": 100}}]}
    sc = make_scenario(**{**SYNC, **cls, "engine": engine, "policy.prefix_caching": True,
                          "memory.num_gpu_blocks": 9, "policy.watermark": 0.0, "workload.num_requests": 3,
                          "policy.queue": {"order": "priority"}})
    sp = specs([(0.0, 16, 100), (0.1, 84, 3), (0.1, 84, 3)])
    sp = dataclasses.replace(sp, prefix_group=np.array([-1, 0, 0]), prefix_tokens=np.array([0, 64, 64]),
                             class_index=np.array([1, 0, 0]), class_names=("hi", "lo"))
    res = simulate(sc, specs=sp)
    r = res.requests
    assert r["scheduled_s"][2] == r["scheduled_s"][1] > 0.1  # admitted in X's step, on X's prefix blocks
    assert list(r["preemptions"]) == [1, 0, 0] and list(r["prefix_hit_tokens"]) == [0, 0, 64]
    assert res.summary["completed"] == 3
