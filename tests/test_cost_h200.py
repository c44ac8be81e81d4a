"""The H200 calibration against servesim's own H200 measurements (``tests/data/h200``, made by
``tools/h200_measure.py`` on one H200; how, in ``sim/cost/calibrations/h200.yaml``'s header).

The measurements ship with the tests (they are ours), so these run everywhere: the shipped file is
what ``servesim calibrate`` fits to them, it predicts them, and the operators it prices add up to
whole Llama-2-7B steps as the operators measured one by one do."""

import csv
import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from servesim.core.batch import synthetic_batch
from servesim.cost import CostModel
from servesim.cost.calibration import efficiencies_for, load_calibration, shipped_calibrations
from servesim.cost.fitting import fit_profiles
from servesim.cost.profiles import find_profiles
from servesim.cost.validation import validate
from servesim.inputs.specs import GPUS, MODELS
from tools.fit_h200 import check_steps, per_op_sum, steady_s, sustained_share

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "h200"
H200 = GPUS["h200"]


@pytest.fixture(scope="module")
def profiles():
    return find_profiles(DATA, "h200", "h200")


def _rows(v):
    return {r["family"]: r for r in v["rows"] if r["model"] == "all"}


def test_the_shipped_file_is_the_fit_of_the_measurements(profiles):
    assert len(profiles.compute) == 4 and len(profiles.attention) == 2 and len(profiles.fp8) == 1
    fit = fit_profiles(profiles, H200)
    shipped = load_calibration(shipped_calibrations()["h200"])
    for fam in ("gemm", "gemm_fp8", "attention"):
        a, b = dataclasses.asdict(getattr(fit, fam)), dataclasses.asdict(getattr(shipped, fam))
        for k in set(a) - {"sustained"}:
            assert a[k] == pytest.approx(b[k], rel=2e-3, abs=1e-9), (fam, k)
    # PyTorch's norm, add and embedding kernels were measured too but are not shipped (the header
    # says why): the bandwidth-bound families stay the A100 fit's, for the H200 and the H100 alike
    a100, h200 = efficiencies_for(GPUS["a100-80g"]), efficiencies_for(H200)
    for fam in ("norm", "residual", "embedding", "activation", "rotary"):
        assert getattr(h200, fam) == getattr(a100, fam) and f"{fam} from a100-80g" in h200.source
        assert getattr(efficiencies_for(GPUS["h100-sxm"]), fam) == getattr(a100, fam)
    assert fit.norm != a100.norm  # measured, fitted, left out


def test_sustained_share_is_the_measured_power_cap_slowdown():
    """10 s of back-to-back compute-bound GEMMs ran at the 700 W cap and lower clocks: the shipped
    ``gemm.sustained`` is the fitted burst time over that steady time, and it slows compute-bound
    GEMMs in runs (by that share) but not weight-read bound ones."""
    shipped = load_calibration(shipped_calibrations()["h200"])
    assert shipped.gemm.sustained == pytest.approx(sustained_share(shipped.gemm), abs=1e-3)
    assert 0.8 < shipped.gemm.sustained < 0.95
    # FP8 GEMMs slow by the same share as bf16 ones of the same shape (so the share applies to them)
    def steady_over_burst(rows):
        return float(rows[0]["s_per_call"]) / steady_s(rows, after_s=4)

    first = ("8192", "4096", "22016")
    bf16 = [r for r in csv.DictReader(open(DATA / "sustain.csv")) if (r["M"], r["K"], r["N"]) == first]
    fp8 = [r for r in csv.DictReader(open(DATA / "sustain_more.csv")) if r["op"] == "fp8_gemm"]
    assert steady_over_burst(fp8) == pytest.approx(steady_over_burst(bf16), abs=0.03)
    clocks = [int(r["sm_mhz"]) for r in csv.DictReader(open(DATA / "clocks.csv"))]
    assert max(clocks) == 1980 and 1300 < np.median([c for c in clocks if c < 1900]) < 1500
    m = MODELS["meta-llama/Llama-2-7b-hf"]
    burst = dataclasses.replace(efficiencies_for(H200), gemm=dataclasses.replace(shipped.gemm, sustained=1.0))
    run, short = (CostModel(m, H200, eff=e, step_overhead_s=0.0, per_seq_overhead_s=0.0)
                  for e in (efficiencies_for(H200), burst))
    big = synthetic_batch(prefill=[(8192, 0)])
    r = run.breakdown(big)["mlp_up"].time_s / short.breakdown(big)["mlp_up"].time_s
    assert r == pytest.approx(1 / shipped.gemm.sustained, rel=0.03)
    one = synthetic_batch(decode_contexts=[128])
    assert run.breakdown(one)["mlp_up"].time_s == pytest.approx(short.breakdown(one)["mlp_up"].time_s, rel=1e-3)


def test_measured_gemm_timings_slow_under_the_power_cap_as_the_model_does():
    """``cost.profiles`` prices a layer's kernels from their measured times, timed in short bursts
    like the fits: under ``gemm.sustained`` a measured GEMM slows by the model's own sustained over
    burst time at that shape (compute-bound: about 1 / sustained; weight-read bound: not at all),
    so a run priced from the measurements and one priced from the fit stay consistent."""
    from servesim.cost.measured import load_measured

    m = MODELS["meta-llama/Llama-2-7b-hf"]
    shipped = load_calibration(shipped_calibrations()["h200"])
    burst = dataclasses.replace(efficiencies_for(H200), gemm=dataclasses.replace(shipped.gemm, sustained=1.0))
    ms = load_measured(DATA, m, 1, H200, device="h200")
    run, short = (CostModel(m, H200, eff=e, measured=ms, step_overhead_s=0.0, per_seq_overhead_s=0.0)
                  for e in (efficiencies_for(H200), burst))
    big = synthetic_batch(prefill=[(8192, 0)])
    # (the burst-priced run takes the measured time as it is)
    measured_up = ms.time_s("mlp_up", 8192.0, -1.0, lambda y: 1.0) * m.num_layers
    assert short.breakdown(big)["mlp_up"].time_s == pytest.approx(measured_up, rel=1e-9)
    r = run.breakdown(big)["mlp_up"].time_s / short.breakdown(big)["mlp_up"].time_s
    assert r == pytest.approx(1 / shipped.gemm.sustained, rel=0.03)
    one = synthetic_batch(decode_contexts=[128])
    assert run.breakdown(one)["mlp_up"].time_s == pytest.approx(short.breakdown(one)["mlp_up"].time_s, rel=1e-3)
    # an operator that is no GEMM keeps its measured time
    assert run.breakdown(big)["mlp_act"].time_s == short.breakdown(big)["mlp_act"].time_s


def test_the_fit_predicts_the_measurements_and_beats_the_argued_figures(profiles):
    rows = _rows(validate(profiles, H200, efficiencies_for(H200), max_tokens=8192))
    assert rows["linear"]["mape"] < 0.05 and rows["linear"]["worst"] < 0.25
    assert rows["attention"]["mape"] < 0.15
    assert rows["gemm_fp8"]["mape"] < 0.06
    # what the file argued before the measurement: the A100 fit with its compute share scaled by
    # MAMF (H100/H200 80.3% of peak, A100 85.9%), memory at the A100 fit's 1.0
    a100 = efficiencies_for(GPUS["a100-80g"])
    argued = dataclasses.replace(efficiencies_for(H200),
                                 gemm=dataclasses.replace(a100.gemm, compute=a100.gemm.compute * 0.803 / 0.859))
    old = _rows(validate(profiles, H200, argued, max_tokens=8192))
    assert old["linear"]["mape"] > 3 * rows["linear"]["mape"]


def test_measured_shares_agree_with_published_best_matmuls(profiles):
    """The best bf16 and FP8 GEMMs measured reach MAMF's published best rates on the GH100 die
    (794.5 and 1,453.4 TFLOPS, within 5%), and the fitted FP8 share over BF16's is MAMF's ratio."""
    p = profiles.fp8[0]
    rows = list(csv.DictReader(open(p.path)))
    flops = np.array([2.0 * int(r["M"]) * int(r["K"]) * int(r["N"]) for r in rows])
    bf16 = flops / (np.array([float(r["bf16_ms"]) for r in rows]) * 1e-3)
    fp8 = flops / (np.array([float(r["fp8_ms"]) for r in rows]) * 1e-3)
    assert bf16.max() == pytest.approx(794.5e12, rel=0.05)
    assert fp8.max() == pytest.approx(1453.4e12, rel=0.05)
    eff = efficiencies_for(H200)
    assert eff.gemm_fp8.compute_scale == pytest.approx((1453.4 / 1979) / (794.5 / 989), rel=0.02)


def _per_op_step_s(B, L):
    """A Llama-2-7B decode step (TP 1) as the sum of its operators measured one by one (32 layers of
    the four GEMMs, two norms, two adds and attention; rotary and the activation were not timed)."""
    return per_op_sum(B, L, "decode")


@pytest.mark.parametrize("B,L", [(1, 128), (8, 1024), (32, 4096), (128, 1024)])
def test_decode_steps_add_up_as_the_measured_operators_do(B, L):
    cm = CostModel(MODELS["meta-llama/Llama-2-7b-hf"], H200, eff=efficiencies_for(H200), step_overhead_s=0.0,
                   per_seq_overhead_s=0.0)
    ops = cm.breakdown(synthetic_batch(decode_contexts=[L] * B))
    priced = sum(ops[k].time_s for k in ("qkv_proj", "o_proj", "mlp_up", "mlp_down", "norms", "residual",
                                         "attention"))
    assert priced == pytest.approx(_per_op_step_s(B, L), rel=0.10)
    # the whole step replayed from a CUDA graph on the H200 took longer than both: the test model's
    # unfused element-wise kernels (tests/data/h200/steps.csv)
    graph = next(float(r["graph_s"]) for r in csv.DictReader(open(DATA / "steps.csv"))
                 if r["kind"] == "decode" and int(r["batch"]) == B and int(r["context"]) == L)
    assert _per_op_step_s(B, L) < graph < 1.5 * _per_op_step_s(B, L)


def test_whole_steps_compiled_as_vllm_v1_runs_them():
    """Whole Llama-2-7B steps on the H200 with the pieces around attention compiled (as vLLM V1),
    replayed back to back: all 32 shapes MAPE under 6%; decode up to batch 32 within 8%; prefill
    and the many-short-decodes gap the docs name price fast by at most 12% and 17%."""
    rows = check_steps()
    err = {(kind, B): [] for kind, B, *_ in rows}
    for kind, B, L, _, f, _, p in rows:
        err[kind, B].append(p / f - 1)
    every = [e for v in err.values() for e in v]
    assert len(every) == 32 and np.mean(np.abs(every)) < 0.06
    assert all(abs(e) < 0.08 for (kind, B), v in err.items() if kind == "decode" and B <= 32 for e in v)
    assert all(-0.12 < e < 0.0 for (kind, B), v in err.items() if kind == "prefill" for e in v)
    assert all(-0.17 < e < 0.03 for (kind, B), v in err.items() if kind == "decode" and B > 32 for e in v)


def test_calibrate_fits_fp8_instead_of_carrying_it(tmp_path):
    out = tmp_path / "h200.yaml"
    r = subprocess.run([sys.executable, "-m", "servesim", "calibrate", "--profiles", str(DATA), "--gpu", "h200",
                        "--device", "h200", "--out", str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "FP8 GEMMs: 1 fp8_gemm.csv file" in text and "gemm_fp8, " not in text
    assert "| gemm_fp8 | all | all |" in r.stdout
    fit = load_calibration(out)
    assert math.isclose(fit.gemm_fp8.compute_scale, efficiencies_for(H200).gemm_fp8.compute_scale, rel_tol=2e-3)


def test_calibrate_says_when_fp8_timings_cannot_be_used(tmp_path):
    import shutil

    prof = tmp_path / "prof"
    shutil.copytree(DATA / "compute" / "h200", prof / "compute" / "nofp8")
    # the H200's own timings on a GPU like it without FP8 tensor cores (another GPU's, e.g. the
    # A100's, would be refused: the H200's GEMMs beat the A100's datasheet roofline)
    (tmp_path / "nofp8.yaml").write_text("name: nofp8\nbase: h200\nfp8_flops: 0\n")
    r = subprocess.run([sys.executable, "-m", "servesim", "calibrate", "--profiles", str(prof), "--gpu", "nofp8.yaml",
                        "--out", str(tmp_path / "nofp8-cal.yaml")], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "1 fp8_gemm.csv file not used: nofp8 has no FP8 tensor cores" in r.stdout
    import yaml

    assert "gemm_fp8" not in yaml.safe_load((tmp_path / "nofp8-cal.yaml").read_text())



def _scale_columns(path, factor, which):
    """Rewrite a CSV with the non-empty cells of the columns ``which(name)`` picks times ``factor``."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    cols = [i for i, h in enumerate(rows[0]) if which(h)]
    for r in rows[1:]:
        for i in cols:
            r[i] = repr(float(r[i]) * factor) if r[i] else r[i]
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)


@pytest.mark.parametrize("name, column", [("meta-llama/Llama-2-7b-hf/attention.csv", "time_stats."),
                                          ("fp8_gemm.csv", "fp8_")])
def test_attention_and_fp8_timings_in_seconds_are_refused(tmp_path, capsys, name, column):
    """attention.csv and fp8_gemm.csv timings in seconds (1000x faster than the H200 can run them)
    were fitted and written like any (attention's shares pinned at 1): refused by name, as mlp.csv's."""
    import shutil

    from servesim.cli.main import main

    prof = tmp_path / "prof"
    shutil.copytree(DATA / "compute", prof / "compute")
    bad = prof / "compute" / "h200" / name
    _scale_columns(bad, 1e-3, lambda h: h.startswith(column))
    out = tmp_path / "h200.yaml"
    assert main(["calibrate", "--profiles", str(prof), "--gpu", "h200", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "faster than the h200's datasheet roofline" in err and not out.exists()
