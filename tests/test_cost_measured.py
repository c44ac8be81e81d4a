"""The shipped calibrations against the measured Vidur profiles (skipped when ../shared/data is absent).

Targets from issue 4 that the model meets are asserted; the one it misses (worst point of the A40
per-layer linear time, 31% vs 25%) is an ``xfail(strict=True)`` that says so, so a model change that
meets it will be noticed."""

import os
from pathlib import Path

import numpy as np
import pytest

from servesim.core.batch import synthetic_batch
from servesim.cost import CostModel
from servesim.cost.calibration import efficiencies_for, load_calibration, shipped_calibrations
from servesim.cost.fitting import fit_profiles
from servesim.cost.profiles import find_profiles
from servesim.cost.validation import validate, validate_held_out_models, validate_measured
from servesim.inputs.specs import GPUS, MODELS


def _profiling_dir():
    env = os.environ.get("SERVESIM_SHARED_DATA")
    base = Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data"
    return base / "vidur" / "profiling"


PROFILING = _profiling_dir()
pytestmark = pytest.mark.skipif(not (PROFILING / "compute").is_dir(),
                                reason=f"measured profiles not found at {PROFILING} (set SERVESIM_SHARED_DATA)")


_cache = {}


def _validation(gpu, calibration="auto"):
    key = (gpu, calibration)
    if key not in _cache:
        prof = find_profiles(PROFILING, gpu)
        eff = efficiencies_for(GPUS[gpu]) if calibration == "auto" else load_calibration(calibration)
        _cache[key] = validate(prof, GPUS[gpu], eff)["rows"]
    return _cache[key]


def _row(rows, family, model="all"):
    return next(r for r in rows if r["family"] == family and r["model"] == model)


@pytest.mark.parametrize("gpu", ["a100-80g", "a40"])
def test_linear_ops_mape_within_8_percent_for_every_model_and_tp(gpu):
    rows = [r for r in _validation(gpu) if r["family"] == "linear"]
    assert len(rows) > 10
    for r in rows:
        assert r["mape"] <= 0.08, r


def test_linear_ops_worst_point_within_25_percent_on_a100():
    assert _row(_validation("a100-80g"), "linear")["worst"] <= 0.25


@pytest.mark.xfail(strict=True, reason="known miss: A40 per-layer linear worst point is ~31% (cuBLAS kernel "
                                       "switches around 128-640 tokens the smooth model does not follow)")
def test_linear_ops_worst_point_within_25_percent_on_a40():
    assert _row(_validation("a40"), "linear")["worst"] <= 0.25


@pytest.mark.parametrize("gpu", ["a100-80g", "a40"])
def test_pricing_from_measurements_held_out(gpu):
    """``cost.profiles``: each per-layer linear time priced from the other measurements (leave one
    out, so at twice the profile's token spacing) is far closer on average than the fitted model,
    but a held-out point at a kernel switch is still off by a quarter: only measuring it helps."""
    rows = validate_measured(find_profiles(PROFILING, gpu), GPUS[gpu], efficiencies_for(GPUS[gpu]))["rows"]
    held_out, fitted = _row(rows, "linear"), _row(_validation(gpu), "linear")
    assert held_out["points"] == fitted["points"]
    assert held_out["mape"] <= 0.02 and held_out["mape"] < fitted["mape"] / 2
    assert 0.15 < held_out["worst"] <= 0.30


@pytest.mark.parametrize("gpu", ["a100-80g", "a40"])
def test_models_the_fit_never_saw_meet_the_mape_target(gpu):
    """Leave one model out: each model predicted by a fit to the other models' profiles, as a
    model from a config.json without measurements would be, stays within the 8% MAPE target."""
    rows = validate_held_out_models(find_profiles(PROFILING, gpu), GPUS[gpu])["rows"]
    lin = [r for r in rows if r["family"] == "linear" and r["model"] != "all"]
    assert len(lin) >= 20
    for r in lin:
        assert r["mape"] <= 0.08, r
    assert _row(rows, "linear")["mape"] <= _row(_validation(gpu), "linear")["mape"] * 1.25


def test_cross_gpu_transfer_a100_fit_predicts_a40():
    rows = _validation("a40", shipped_calibrations()["a100-80g"])
    assert _row(rows, "linear")["mape"] <= 0.15


def test_allreduce_mape_within_15_percent():
    assert _row(_validation("a100-80g"), "allreduce")["mape"] <= 0.15


def test_llama2_7b_batch1_decode_matches_weight_read_and_measured_layers():
    """Decode at batch 1 on A100: at least the weight-read time, and its non-attention kernels add up to
    what the measured per-layer timings at num_tokens=1 imply."""
    prof = next(p for p in find_profiles(PROFILING, "a100-80g").compute if p.model.endswith("Llama-2-7b-hf"))
    row = (prof.tokens == 1) & (prof.tp == 1)
    per_layer = sum(float(np.nanmean(v[row])) for k, v in prof.ops.items() if k != "emb")
    measured = per_layer * 32  # 32 layers (norms, QKV, rope, O, up, act, down, one add)
    g = GPUS["a100-80g"]
    cm = CostModel(MODELS["meta-llama/Llama-2-7b-hf"], g, eff=efficiencies_for(g))
    ops = cm.breakdown(synthetic_batch(decode_contexts=[128]))
    layers = sum(ops[k].time_s for k in ("qkv_proj", "rotary", "o_proj", "mlp_up", "mlp_act", "mlp_down", "norms",
                                         "residual"))
    assert layers == pytest.approx(measured, rel=0.10)
    step = sum(o.time_s for o in ops.values()) - ops["overhead"].time_s
    assert step >= cm.weight_bytes / g.mem_bw_bytes_per_s
    assert step <= 1.3 * (measured + ops["lm_head"].time_s + ops["attention"].time_s + ops["embedding"].time_s)


@pytest.mark.slow
@pytest.mark.parametrize("gpu", ["a100-80g", "a40"])
def test_refit_reproduces_the_shipped_coefficients(gpu):
    fit = fit_profiles(find_profiles(PROFILING, gpu), GPUS[gpu])
    shipped = load_calibration(shipped_calibrations()[gpu])
    assert fit.gemm.compute == pytest.approx(shipped.gemm.compute, rel=1e-3)
    assert fit.gemm.memory == pytest.approx(shipped.gemm.memory, rel=1e-3)
