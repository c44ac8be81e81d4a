"""Hopper and FP8: the shipped H100 / H200 calibrations keep FP8 GEMMs within the published
FP8-to-BF16 bounds, and keep their provenance (h200.yaml, measured: tests/test_cost_h200.py;
calibrations/h100-sxm.yaml, its GEMMs the H200's, the same die, and its FP8 share argued)."""

import pytest

from servesim.core.batch import synthetic_batch
from servesim.cost import CostModel
from servesim.cost.calibration import efficiencies_for
from servesim.inputs.specs import GPUS, MODELS

# Published bounds (sources in calibrations/h100-sxm.yaml):
PEAK_RATIO = 989 / 1979  # datasheet BF16 / FP8 dense peaks: no FP8 GEMM can beat it
MAMF_RATIO = 794.5 / 1453.4  # best achievable BF16 (H100/H200) / FP8 (H200) matmul, ml-engineering MAMF
DEEPGEMM_RATIO = 794.5 / 1550  # DeepGEMM FP8 on H800, the best FP8 GEMM claimed

L70 = MODELS["meta-llama/Meta-Llama-3-70B"]


def _gemm_times(gpu, dtype, batch):
    cm = CostModel(L70, GPUS[gpu], tp=1, dtype=dtype, eff=efficiencies_for(GPUS[gpu]))
    ops = cm.breakdown(batch)
    return sum(ops[k].time_s for k in ("qkv_proj", "o_proj", "mlp_up", "mlp_down"))


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200"])
def test_fp8_gemm_speedup_within_published_bounds(gpu):
    # compute-bound: an 8192-token prefill's linear layers; FP8 is at most 2x BF16 (the peaks) and
    # about the best-achievable ratio MAMF measured, not the 2x an FP8 peak at BF16's share gives
    big = synthetic_batch(prefill=[(8192, 0)])
    r = _gemm_times(gpu, "fp8", big) / _gemm_times(gpu, "bf16", big)
    assert PEAK_RATIO < DEEPGEMM_RATIO <= r <= 0.62
    assert r == pytest.approx(MAMF_RATIO, rel=0.05)
    # weight-read bound: one decode token reads half the bytes
    one = synthetic_batch(decode_contexts=[128])
    r1 = _gemm_times(gpu, "fp8", one) / _gemm_times(gpu, "bf16", one)
    assert 0.45 <= r1 <= 0.6


def test_no_fp8_tensor_cores_no_fp8_compute_speedup():
    """A100 has no FP8 tensor cores: FP8 weights halve the bytes, the math runs at the BF16 peak."""
    big = synthetic_batch(prefill=[(8192, 0)])
    assert _gemm_times("a100-80g", "fp8", big) / _gemm_times("a100-80g", "bf16", big) > 0.95


def test_hopper_efficiencies_and_provenance():
    a100, h100, h200 = (efficiencies_for(GPUS[g]) for g in ("a100-80g", "h100-sxm", "h200"))
    # the H100's GEMMs are the H200's, measured on the same GH100 die; its FP8 share stays the one
    # argued from MAMF (the best FP8 matmul at 73.4% of the FP8 peak, BF16's at 80.3% of its own)
    assert h100.gemm == h200.gemm and "measured on the same die" in h100.source
    assert h100.gemm.compute != a100.gemm.compute
    assert h100.gemm_fp8.compute_scale == pytest.approx((1453.4 / 1979) / (794.5 / 989), rel=2e-3)
    # the H200 (same GH100 die) is measured (tests/test_cost_h200.py): its FP8 share over BF16's
    # agrees with MAMF's argued figure for the H100 within 1%
    assert "fitted (GEMMs, FP8 GEMMs, attention) to 4 compute profiles for h200" in h200.source
    assert h200.gemm_fp8.compute_scale == pytest.approx(h100.gemm_fp8.compute_scale, rel=0.01)
    # uncalibrated Hopper-like and newer GPUs take these, with their own datasheet peaks
    b200 = efficiencies_for(GPUS["b200"])
    assert b200.gemm_fp8 == h200.gemm_fp8 and "transferred from h200" in b200.source


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_decode_gemms_grow_with_batch_as_measured_on_hopper(tp):
    """A decode step's linear layers read the same weights at 32 and 128 sequences; the extra
    sequences add compute. On the H200 (tests/data/h200, measured by servesim) they take 6-7%
    longer at 128, and its fit gives the same. The H100 is the same die with slower HBM: the same
    added compute over a longer weight read, so its relative growth can be no larger. The GEMMs
    argued from the A100 fit grew 13-14% there."""
    import csv
    from pathlib import Path

    path = Path(__file__).parent / "data/h200/compute/h200/meta-llama/Llama-2-70b-hf/mlp.csv"
    rows = {(int(r["num_tokens"]), int(r["num_tensor_parallel_workers"])): r for r in csv.DictReader(path.open())}
    linears = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
    t32, t128 = (sum(float(rows[m, tp][f"time_stats.{k}.median"]) for k in linears) for m in (32, 128))
    measured = t128 / t32
    model = MODELS["meta-llama/Llama-2-70b-hf"]
    ops = ("qkv_proj", "o_proj", "mlp_up", "mlp_down")

    def growth(gpu):
        cm = CostModel(model, GPUS[gpu], tp=tp, dtype="fp16", eff=efficiencies_for(GPUS[gpu]))
        t = [sum(cm.breakdown(synthetic_batch(decode_contexts=[128] * n))[k].time_s for k in ops) for n in (32, 128)]
        return t[1] / t[0]

    assert 1.0 < measured < 1.2
    assert growth("h200") == pytest.approx(measured, rel=0.03)
    assert 1.0 < growth("h100-sxm") <= measured + 0.01
