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


def three_of_one_prefix(engine, policy, budget):
    # three requests arriving at once: a 64-token shared prefix (4 blocks of 16) and 20 tokens of their own
    sc = make_scenario(**{**SYNC, "engine": engine, "policy.name": policy, "policy.max_num_batched_tokens": budget,
                          "policy.prefix_caching": True, "workload.num_requests": 3})
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
