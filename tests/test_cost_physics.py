"""The roofline cost model is right in direction and magnitude."""

import pytest

from servesim.core.batch import synthetic_batch
from servesim.cost import CostModel
from servesim.inputs.specs import GPUS, MODELS

L3_8B = MODELS["meta-llama/Meta-Llama-3-8B"]
H100 = GPUS["h100-sxm"]


@pytest.mark.parametrize("model", ["meta-llama/Meta-Llama-3-8B", "meta-llama/Llama-2-7b-hf",
                                   "mistralai/Mistral-7B-v0.1"])
@pytest.mark.parametrize("gpu", ["h100-sxm", "a100-80g", "h200"])
def test_batch1_decode_within_2x_of_weight_read_time(model, gpu):
    cm = CostModel(MODELS[model], GPUS[gpu])
    c = cm.step_time(synthetic_batch(decode_contexts=[128]))
    weight_read_s = cm.weight_bytes / GPUS[gpu].mem_bw_bytes_per_s
    assert weight_read_s <= c.time_s <= 2 * weight_read_s
    assert c.bound == "memory"


def test_doubling_prompt_at_least_doubles_prefill_flops():
    cm = CostModel(L3_8B, H100)
    for p in (128, 1024, 4096):
        a = cm.step_time(synthetic_batch(prefill=[(p, 0)]))
        b = cm.step_time(synthetic_batch(prefill=[(2 * p, 0)]))
        assert b.flops >= 2 * a.flops
        assert b.time_s > a.time_s


def test_prefill_4096_compute_bound_decode_memory_bound():
    cm = CostModel(L3_8B, H100)
    pre = cm.step_time(synthetic_batch(prefill=[(4096, 0)]))
    dec = cm.step_time(synthetic_batch(decode_contexts=[4096]))
    assert pre.bound == "compute" and pre.arithmetic_intensity > H100.ridge_flops_per_byte
    assert dec.bound == "memory" and dec.arithmetic_intensity < H100.ridge_flops_per_byte / 50


def test_large_decode_batch_turns_compute_bound_and_raises_intensity():
    cm = CostModel(L3_8B, H100)
    ai = [cm.step_time(synthetic_batch(decode_contexts=[16] * b)).arithmetic_intensity for b in (1, 8, 64)]
    assert ai[1] > 6 * ai[0] and ai[2] > 6 * ai[1]  # ~B-fold while weights dominate the bytes
    big = cm.step_time(synthetic_batch(decode_contexts=[16] * 2048))
    assert big.bound == "compute"


def test_step_never_beats_roofline_and_breakdown_sums_to_step():
    for tp in (1, 2, 4):
        cm = CostModel(MODELS["meta-llama/Meta-Llama-3-70B"], H100, tp=tp)
        for b in (synthetic_batch(prefill=[(3000, 500)], decode_contexts=[100, 2000]),
                  synthetic_batch(decode_contexts=[1000] * 32)):
            c = cm.step_time(b)
            assert c.time_s >= max(c.flops / (H100.peak_flops * tp), c.bytes / (H100.mem_bw_bytes_per_s * tp))
            ops = cm.breakdown(b)
            assert sum(o.time_s for o in ops.values()) == pytest.approx(c.time_s, rel=1e-12)
            assert sum(o.flops for o in ops.values()) == pytest.approx(c.flops, rel=1e-12)
            assert ("allreduce" in ops) == (tp > 1)


def test_tp_divides_work_and_adds_allreduce():
    b = synthetic_batch(prefill=[(2048, 0)])
    t1 = CostModel(L3_8B, H100, tp=1).step_time(b)
    t2 = CostModel(L3_8B, H100, tp=2).step_time(b)
    assert t2.time_s < t1.time_s  # faster ...
    assert t2.time_s > t1.time_s / 2  # ... but not perfectly (all-reduce, overhead)
    assert t2.flops == pytest.approx(t1.flops, rel=1e-3)  # same work (norms are replicated per rank)
    assert t2.comm_s > 0 and t1.comm_s == 0


def test_chunked_attention_rereads_earlier_kv():
    cm = CostModel(L3_8B, H100)
    first = cm.breakdown(synthetic_batch(prefill=[(512, 0)]))["attention"]
    later = cm.breakdown(synthetic_batch(prefill=[(512, 3584)]))["attention"]
    # the later chunk re-reads the 3584 earlier tokens' KV in every layer ...
    assert later.bytes - first.bytes == pytest.approx(3584 * L3_8B.kv_bytes_per_token("bf16"), rel=1e-12)
    # ... and each of its 512 queries attends to them: 512 * 3584 more query-key pairs, 4 FLOPs per pair per dim
    extra = 4 * L3_8B.q_dim * 512 * 3584 * L3_8B.num_layers
    assert later.flops - first.flops == pytest.approx(extra, rel=1e-12)
