"""Orca's KV reservation (``policy.reserve``) and sliding-window attention: exact tokens and
blocks for hand-worked states (policies and allocator without SimPy), then tiny simulations."""

from collections import deque

import pytest

from servesim.core.batch import attention_span, make_batch, synthetic_batch, windowed
from servesim.core.kv import BlockAllocator, window_blocks
from servesim.core.request import Request
from servesim.cost import CostModel
from servesim.errors import InputError
from servesim.inputs.specs import GPUS, MODELS
from servesim.policies.base import ReplicaState
from servesim.policies.continuous import ContinuousPolicy
from servesim.simulation import simulate
from tests.conftest import make_scenario, specs


def orca(reserve, **kw):
    return ContinuousPolicy(max_num_seqs=64, max_num_batched_tokens=8192, reserve=reserve, max_context_tokens=2048,
                            **kw)


# ---------------------------------------------------------------- reservation
@pytest.mark.parametrize("reserve, prompt, output, tokens", [
    ("max", 100, 25, 2048),  # Orca(Max): up to the context length
    ("pow2", 100, 25, 132),  # Orca(Pow2): 25 -> 32 output slots
    ("pow2", 100, 32, 132),  # a power of two already
    ("pow2", 100, 1, 101),
    ("pow2", 2000, 40, 2048),  # capped by the context
    ("oracle", 100, 25, 124),  # the true length; the last token is never stored
    ("none", 100, 25, 0),
])
def test_reserved_tokens(reserve, prompt, output, tokens):
    assert orca(reserve).reserved_tokens(prompt, output) == tokens


def test_buddy_allocator_rounds_reservations_to_powers_of_two():
    assert orca("oracle", buddy=True).reserved_tokens(100, 25) == 128
    assert orca("pow2", buddy=True).reserved_tokens(100, 40) == 256  # 100 + 64 -> 256
    assert orca("max", buddy=True).reserved_tokens(100, 40) == 2048
    with pytest.raises(InputError, match="reserve_allocator"):
        make_scenario(**{"policy.reserve_allocator": "buddy"})
    assert make_scenario(**{"policy.reserve_allocator": "buddy", "policy.reserve": "oracle"}).policy.reserve == "oracle"


def test_reserve_max_with_max_output_tokens():
    pol = orca("max", max_output_tokens=300)
    assert pol.reserved_tokens(100, 25) == 400
    assert pol.admission_error(100, 301) is not None and "max_output_tokens=300" in pol.admission_error(100, 301)
    assert pol.admission_error(100, 300) is None


def test_admission_takes_the_whole_reservation_at_once():
    kv = BlockAllocator(num_blocks=300, block_size=16)
    waiting = deque([Request(0, 0.0, 100, 25), Request(1, 0.0, 50, 10), Request(2, 0.0, 30, 5)])
    b = orca("max").next_batch(ReplicaState([], waiting, kv))
    # each reserves 2048 tokens = 128 blocks: two fit in 300, the third waits
    assert {r.request_id: q for r, q in b.items} == {0: 100, 1: 50}
    assert [(r.request_id, t) for r, t in b.reserve] == [(0, 2048), (1, 2048)]
    b = orca("oracle").next_batch(ReplicaState([], waiting, kv))
    assert [(r.request_id, t) for r, t in b.reserve] == [(0, 124), (1, 59), (2, 34)]


def test_priority_order_keeps_the_reservations_when_nobody_can_be_preempted():
    """Priority order: admission stops at a request the KV cannot hold, and nobody running has a
    lower priority to preempt for it: the requests admitted before it keep their reservations (the
    running-list decision dropped them: they then grew block by block like unreserved ones)."""
    kv = BlockAllocator(num_blocks=40, block_size=16)
    pol = orca("oracle", queue_order="priority")
    run = Request(0, 0.0, 100, 60)
    assert kv.grow(run, 159) and run.kv_blocks == 10
    run.num_computed_tokens, run.num_output_done = 100, 1
    waiting = deque([Request(1, 0.0, 200, 40), Request(2, 0.0, 300, 100)])  # 15 blocks; then 25, of 15 left
    b = pol.next_batch(ReplicaState([run], waiting, kv))
    assert not b.preempted
    assert {r.request_id: q for r, q in b.items} == {0: 1, 1: 200}
    assert [(r.request_id, t) for r, t in b.reserve] == [(1, 239)]


def test_reserved_requests_never_grow_nor_get_preempted():
    kv = BlockAllocator(num_blocks=16, block_size=16)
    pol = orca("oracle")
    r = Request(0, 0.0, 100, 60)
    b = pol.next_batch(ReplicaState([], deque([r]), kv))
    assert b.reserve == ((r, 159),)
    assert kv.grow(r, 159) and r.kv_blocks == 10  # what the replica applies
    r.num_computed_tokens, r.num_output_done = 100, 1
    kv.take(kv.num_free)  # nothing left free: a growing request would be preempted now
    for step in range(58):
        b = pol.next_batch(ReplicaState([r], deque(), kv))
        assert not b.preempted and b.items == ((r, 1),)
        assert kv.grow(r, r.num_computed_tokens + 1) and r.kv_blocks == 10
        r.num_computed_tokens += 1
        r.num_output_done += 1


def test_reserved_requests_join_the_decode_set_holding_their_reservation():
    """A reserving policy aggregates decodes too: its requests join the decode set holding their
    whole reservation (they grow no KV), and the fast engine still equals the reference."""
    assert ContinuousPolicy().aggregates_decodes and orca("max").aggregates_decodes
    from tests.test_engine_equivalence import SMALL, run_both

    fast, _ = run_both(make_scenario(**{**SMALL, "policy.reserve": "max", "policy.max_output_tokens": 600}))
    assert fast.engine_stats["colocated"]["run_steps"] > 0


def test_reserve_field_is_checked():
    with pytest.raises(InputError, match="policy.reserve"):
        make_scenario(**{"policy.reserve": "max", "policy.name": "static"})
    with pytest.raises(InputError, match="policy.reserve"):
        make_scenario(**{"policy.reserve": "maximum"})


def test_mean_batch_follows_the_reservation():
    """The vLLM paper's Fig. 13 ordering: Orca(Max) < Orca(Pow2) < Orca(Oracle) < paged KV, on one
    KV budget, and Orca(Max)'s batch is exactly the KV over the context length."""
    rows = [(0.01 * i, 200 + 37 * (i % 9), 150 + 53 * (i % 7)) for i in range(120)]
    batch = {}
    for reserve in ("max", "pow2", "oracle", "none"):
        sc = make_scenario(**{"model": "facebook/opt-13b", "hardware.gpu": "a100-40g", "policy.reserve": reserve,
                              "memory.num_gpu_blocks": 1000})  # 16,000 tokens: 7 x 2048
        res = simulate(sc, specs=specs(rows))
        assert res.summary["completed"] == 120 and res.summary["preemptions"] == 0 or reserve == "none"
        batch[reserve] = res.steps["num_seqs"].max()
    assert batch["max"] == 7
    assert batch["max"] < batch["pow2"] < batch["oracle"] <= batch["none"]


# ---------------------------------------------------------------- sliding window
@pytest.mark.parametrize("c, q, w", [(0, 10, 4), (3, 1, 4), (4, 1, 4), (10, 1, 4), (2, 7, 4), (0, 100, 16),
                                     (50, 30, 16), (5, 3, 100)])
def test_attention_span_counts_pairs_and_keys(c, q, w):
    pairs = sum(min(p + 1, w) for p in range(c, c + q))  # query at position p sees min(p + 1, w) keys
    keys = {k for p in range(c, c + q) for k in range(max(0, p - w + 1), p + 1)}
    assert attention_span(c, q, w) == (pairs, len(keys))
    assert attention_span(c, q) == (q * c + q * (q + 1) // 2, c + q)


def test_window_caps_blocks():
    kv = BlockAllocator(num_blocks=100, block_size=16, window_tokens=64)
    assert window_blocks(64, 16) == 5 and kv.window_blocks == 5
    r = Request(0, 0.0, 1000, 10)
    assert kv.blocks_for(48) == 3 and kv.blocks_for(1000) == 5
    assert kv.grow(r, 1000) and r.kv_blocks == 5 and kv.num_used == 5
    assert kv.grow(r, 1001) and kv.num_used == 5  # out-of-window blocks are reused: no growth
    kv.free(r)
    assert kv.num_free == 100


def test_windowed_batch_limits_attention_and_prices_it():
    kv = BlockAllocator(num_blocks=1000, block_size=16)
    long_dec = Request(0, 0.0, 5000, 100)
    long_dec.num_output_done, long_dec.num_computed_tokens = 3, 5002
    short_dec = Request(1, 0.0, 100, 100)
    short_dec.num_output_done, short_dec.num_computed_tokens = 2, 101
    chunk = Request(2, 0.0, 5512, 10)  # its last chunk: sampled, as a synthetic prefill is
    chunk.num_computed_tokens = 5000
    b = windowed(make_batch([(long_dec, 1), (short_dec, 1), (chunk, 512)]), 4096)
    assert b.decode_attn_pairs == 4096 + 102 and b.decode_context_tokens == 4096 + 102
    cp, ck = attention_span(5000, 512, 4096)
    assert b.attn_pairs == 4096 + 102 + cp and b.context_tokens == 4096 + 102 + ck
    assert ck == 4096 + 511  # keys from position 5000 - 4095 on
    # the cost model prices what the window leaves: the same as a synthetic batch of those contexts
    m = MODELS["mistralai/Mistral-7B-v0.1"]
    cm = CostModel(m, GPUS["a100-80g"])
    syn = synthetic_batch(prefill=[(512, 5000)], decode_contexts=[5002, 101], window=4096)
    assert cm.step_time(b) == cm.step_time(syn)
    full = cm.step_time(make_batch([(long_dec, 1), (short_dec, 1), (chunk, 512)]))
    assert cm.step_time(b).time_s < full.time_s
    assert kv.num_free == 1000  # (no KV touched)


def test_window_decode_twins_agree_within_the_window():
    """The engine's vectorized decode prices (used only for requests inside the window) stay bit for
    bit ``step_time``'s, and a decode step past the window costs what one at the window does."""
    cm = CostModel(MODELS["mistralai/Mistral-7B-v0.1"], GPUS["h100-sxm"])
    n = 8
    ctxs = [100 + 7 * i for i in range(40)]
    twins = cm.decode_step_times(n, [n * (c + 1) for c in ctxs])
    assert twins == [cm.step_time(synthetic_batch(decode_contexts=[c] * n, window=4096)).time_s for c in ctxs]
    at = cm.step_time(synthetic_batch(decode_contexts=[4095] * n, window=4096))
    past = cm.step_time(synthetic_batch(decode_contexts=[20000] * n, window=4096))
    assert at == past


def test_window_in_a_simulation():
    """Mistral-7B-v0.1 (window 4096): a request longer than the window holds at most 257 blocks,
    its decode steps stop getting slower past the window, and prefix caching is refused."""
    sc = make_scenario(**{"model": "mistralai/Mistral-7B-v0.1", "policy.name": "chunked_prefill",
                          "policy.max_num_batched_tokens": 2048})
    res = simulate(sc, specs=specs([(0.0, 8000, 400)]))
    st = res.steps
    assert st["kv_blocks_used"].max() == window_blocks(4096, 16) == 257
    dec = st["decode_tokens"] == 1
    assert (st["context_tokens"][dec] == 4096).all()  # every decode step attends to the window
    assert len(set(st["duration_s"][dec].round(12).tolist())) == 1
    full = make_scenario(**{"model": "mistralai/Mistral-7B-Instruct-v0.2", "policy.name": "chunked_prefill",
                            "policy.max_num_batched_tokens": 2048})
    ref = simulate(full, specs=specs([(0.0, 8000, 400)]))
    assert ref.steps["kv_blocks_used"].max() == 525  # 8,399 tokens, no window
    assert res.summary["e2e_s"]["mean"] < ref.summary["e2e_s"]["mean"]
    with pytest.raises(InputError, match="prefix_caching") as e:
        simulate(make_scenario(**{"model": "mistralai/Mistral-7B-v0.1", "policy.prefix_caching": True}),
                 specs=specs([(0.0, 10, 10)]))
    assert "preset" not in str(e.value)
    # the packaged default turns it on by its preset, never naming prefix_caching: the error says so
    from servesim import load_scenario

    with pytest.raises(InputError, match=r"set it to false \(policy.preset=vllm_v1_serve turns it on where the "
                                         r"policy does not give it\)"):
        simulate(load_scenario(None, ["model=mistralai/Mistral-7B-v0.1"]), specs=specs([(0.0, 10, 10)]))


def test_a_request_crossing_the_window_in_the_decode_set_step_by_step(monkeypatch):
    """The decode set's counts for one request crossing Mistral-7B-v0.1's 4,096-token window while
    decoding, at every step (each decided on its own): its context counts min(c, 4095) (its
    computed tokens, c); it attends the whole window (``past_window``) from c = 4095 on, and is
    ``crossing_window`` before; it needs a new block only at c = 4096 (blocks of 16: the window's
    most blocks are ceil(4096 / 16) + 1 = 257, reached when it holds 4,097 tokens). Then the same
    request in a run of decode steps: the same step rows as the reference loop's."""
    from servesim.policies.continuous import ContinuousPolicy as Policy

    seen = []
    decide = Policy.next_batch

    def every_step(self, state):
        batch = decide(self, state)
        if state.decoding.num_seqs:
            seen.append(tuple(state.decoding))
        return batch._replace(steady=False)  # (no runs: every step's counts are seen)

    sc = make_scenario(model="mistralai/Mistral-7B-v0.1", **{"workload.num_requests": 1})
    sp = specs([(0.0, 4090, 12)])
    monkeypatch.setattr(Policy, "next_batch", every_step)
    res = simulate(sc, specs=sp, engine="fast")
    # the decode steps after the prefill step: c = 4090 .. 4100 computed tokens (tokens 2 .. 12)
    want = [(1, min(c, 4095), int(c == 4096), 4090, int(c >= 4095), int(c < 4095), c) for c in range(4090, 4101)]
    assert seen == want
    assert res.engine_stats["colocated"]["set_steps"] == len(want)
    monkeypatch.setattr(Policy, "next_batch", decide)
    fast, ref = simulate(sc, specs=sp, engine="fast"), simulate(sc, specs=sp, engine="reference")
    assert fast.engine_stats["colocated"]["run_steps"] >= 9
    for k in ref.steps:
        assert (fast.steps[k] == ref.steps[k]).all(), k
    assert fast.steps["context_tokens"][1:].tolist() == [min(c, 4095) + 1 for c in range(4090, 4101)]


def test_prefix_caching_under_a_sliding_window_is_refused_saying_what_vllm_does():
    """The refusal said "vLLM V0 disables it too": V0 refused the pair (CacheConfig's "Prefix caching
    is not supported with sliding window"), and V1 caches prefixes under a sliding window
    (SlidingWindowManager.find_longest_cache_hit), so the pair is a servesim limit, said as one."""
    from servesim.inputs.scenario import scenario_from_dict
    from servesim.simulation import prepare

    sc = scenario_from_dict({"model": "mistralai/Mistral-7B-v0.1", "hardware": {"gpu": "h100-sxm"},
                             "policy": {"name": "continuous", "prefix_caching": True},
                             "workload": {"num_requests": 10, "arrival": {"process": "poisson", "rate_rps": 1.0},
                                          "prompt_tokens": {"dist": "fixed", "value": 100},
                                          "output_tokens": {"dist": "fixed", "value": 10}}})
    with pytest.raises(InputError) as e:
        prepare(sc)
    text = str(e.value)
    assert text.startswith("policy.prefix_caching: not modelled with sliding-window attention")
    assert "within 4096 tokens" in text and "vLLM V1 caches prefixes under a sliding window" in text
    assert "V0 refused" in text and "disables" not in text and text.endswith("set it to false")
