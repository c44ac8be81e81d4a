"""Calibration: synthetic profiles in Vidur's column format, generated from known efficiencies,
are fitted back; the scalar (engine) and vectorized (fitting) time models agree; bad profiles and
calibration files are input errors naming the file and field."""

import csv
import dataclasses
import math

import numpy as np
import pytest

from servesim.core.batch import synthetic_batch
from servesim.cli.main import main
from servesim.cost import CostModel
from servesim.cost.calibration import efficiencies_for, load_calibration, shipped_calibrations
from servesim.cost.comm import collective_time_np
from servesim.cost.fitting import fit_profiles, gemm_time_np, mem_time_np
from servesim.cost.profiles import find_profiles
from servesim.cost.validation import validate
from servesim.cost.comm import allgather_time_s, allreduce_time_s, send_time_s
from servesim.cost.efficiency import (CommEfficiency, CustomAllReduce, Efficiencies, GemmEfficiency, MemEfficiency,
                                      OpEfficiency)
from servesim.cost.roofline import gemm_cost
from servesim.errors import InputError
from servesim.inputs.specs import GPUS, MODELS

A100 = GPUS["a100-80g"]
TRUE = Efficiencies(
    gemm=GemmEfficiency(0.72, 0.88, 4e-6, 3.0, 0.6, 128, 40.0),
    norm=MemEfficiency(0.5, 3e-6), activation=MemEfficiency(0.7, 2e-6), rotary=MemEfficiency(0.6, 2.5e-6),
    residual=MemEfficiency(0.85, 1.5e-6), embedding=MemEfficiency(0.3, 3e-6),
    allreduce=CommEfficiency(0.6, 20e-6, 1.5e-6, 2.0, 8e-6, 0.05), send_recv=CommEfficiency(0.7, 10e-6, 0.0, 1.0),
)
OPS = ["emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
       "mlp_up_proj", "mlp_act", "mlp_down_proj", "add"]
TOKENS = [1, 2, 4] + list(range(8, 1025, 40)) + list(range(1024, 4097, 256))


def op_times(shape, T, tp, gpu, eff):
    """Per-layer operator times (s) of ``shape`` at ``T`` tokens and TP ``tp``: the model under test."""
    nh, nkv, h, inter, gated = shape
    hd = h // nh
    qd, kvd, n_up = nh // tp * hd, max(nkv // tp, 1) * hd, 2 if gated else 1
    bw, peak = gpu.mem_bw_bytes_per_s, gpu.peak_flops
    g = lambda K, N: float(gemm_time_np(T, K, N, 2.0, peak, bw, eff.gemm))  # noqa: E731
    m = lambda b, e: float(mem_time_np(b, bw, e))  # noqa: E731
    return {"emb": m(4 * T * h, eff.embedding), "input_layernorm": m(4 * T * h + 2 * h, eff.norm),
            "attn_pre_proj": g(h, qd + 2 * kvd), "attn_rope": m(4 * T * (qd + kvd), eff.rotary),
            "attn_post_proj": g(qd, h), "post_attention_layernorm": m(4 * T * h + 2 * h, eff.norm),
            "mlp_up_proj": g(h, n_up * inter // tp), "mlp_act": m(2 * T * (n_up + 1) * (inter // tp), eff.activation),
            "mlp_down_proj": g(inter // tp, h), "add": m(6 * T * h, eff.residual)}


def write_mlp_csv(path, shape, tps, gpu=A100, eff=TRUE, noise=None):
    nh, nkv, h, inter, gated = shape
    header = [f"time_stats.{op}.{s}" for op in OPS for s in ("min", "max", "mean", "median", "std")]
    header += ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp", "num_tokens",
               "num_tensor_parallel_workers"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for tp in tps:
            for T in TOKENS:
                t = op_times(shape, T, tp, gpu, eff)
                row = []
                for op in OPS:
                    ms = t[op] * 1e3 * (1 + (noise.normal(0, 0.02) if noise is not None else 0))
                    row += [ms, ms, ms, ms, 0.0]
                w.writerow(row + [nh, nkv, h, inter, 32000, gated, T, tp])


def ar_np(n, size, gpu, e, custom=None):
    """NCCL all-reduce times on ``gpu``'s peer link (numpy)."""
    return collective_time_np("allreduce", size, n, gpu.link_bw_bytes_per_s, gpu.link_latency_s, e, custom)


def write_allreduce_csv(path, gpu=A100, eff=TRUE):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["", "time_stats.all_reduce.min", "time_stats.all_reduce.max", "time_stats.all_reduce.mean",
                    "time_stats.all_reduce.median", "time_stats.all_reduce.std", "rank", "num_workers", "size",
                    "collective", "devices_per_node", "max_devices_per_node"])
        i = 0
        for n in (2, 4, 8):
            for size in np.geomspace(2048, 64 * 2**20, 40):
                ms = float(ar_np(n, size, gpu, eff.allreduce)) * 1e3
                w.writerow([i, ms, ms, ms, ms, 0.0, 0, n, int(size), "all_reduce", n, 8])
                i += 1


def set_cell(path, line: int, col: int, value: str) -> None:
    """Overwrite one cell of a CSV file: ``line`` counts from 1 (the header), ``col`` from 0 (or
    from the end when negative)."""
    lines = path.read_text().splitlines()
    cells = lines[line - 1].split(",")
    cells[col] = value
    lines[line - 1] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")


ATT_TRUE = OpEfficiency(0.55, 0.75, 8e-6)
ATT_HEADER = ["n_embd", "n_q_head", "n_kv_head", "block_size", "num_tensor_parallel_workers", "max_model_len",
              "batch_size", "prefill_chunk_size", "kv_cache_size", "is_prefill", "attention_backend",
              "time_stats.attn_prefill.median", "time_stats.attn_decode.median",
              "time_stats.attn_kv_cache_save.median"]


def write_attention_csv(path, model, tps, gpu=A100, att=ATT_TRUE, save_ms=0.003):
    """Vidur's attention.csv for ``model``, generated by the engine's own cost model (the attention
    operator of one layer with efficiencies ``att``), split as Vidur measures it: the kernel in
    its phase's column, ``save_ms`` in the KV-cache write column."""
    cms = {tp: CostModel(model, gpu, tp=tp, eff=dataclasses.replace(TRUE, attention=att)) for tp in tps}
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(ATT_HEADER)
        for tp, cm in cms.items():
            head = [model.hidden_size, model.num_heads, model.num_kv_heads, 16, tp, 8192]
            per_layer = lambda b: cm.breakdown(b)["attention"].time_s / model.num_layers * 1e3  # noqa: E731
            for chunk in (16, 128, 512, 2048):
                for kv in (0, 1024, 4096):
                    t = per_layer(synthetic_batch(prefill=[(chunk, kv)]))
                    w.writerow(head + [1, chunk, kv, True, "FLASHINFER", t - save_ms, "", save_ms])
            for batch in (1, 8, 64, 256):
                for kv in (128, 1024, 4096):
                    t = per_layer(synthetic_batch(decode_contexts=[kv] * batch))
                    w.writerow(head + [batch, 0, kv, False, "FLASHINFER", "", t - save_ms, save_ms])


@pytest.fixture
def synthetic_profiles(tmp_path):
    root = tmp_path / "profiling"
    write_mlp_csv(root / "compute/a100/org/big/mlp.csv", (32, 8, 4096, 14336, True), (1, 2, 4))
    write_mlp_csv(root / "compute/a100/org/small/mlp.csv", (32, 32, 2560, 10240, False), (1,))
    write_allreduce_csv(root / "network/a100_dgx/all_reduce.csv")
    return root


def test_fit_recovers_known_efficiencies(synthetic_profiles):
    prof = find_profiles(synthetic_profiles, "a100-80g")
    assert len(prof.compute) == 2 and prof.allreduce[0] == "a100_dgx"
    fit = fit_profiles(prof, A100)
    # the fitted model reproduces the generating one within a fraction of a percent everywhere ...
    for p in prof.compute:
        for T in (1, 64, 136, 1000, 4096):
            shape = (p.n_head, p.n_kv_head, p.hidden, p.inter, p.gated)
            a, b = op_times(shape, T, 1, A100, TRUE), op_times(shape, T, 1, A100, fit)
            for op in OPS:
                assert b[op] == pytest.approx(a[op], rel=0.01), (op, T)
    # ... and the physically meaningful parameters come back
    assert fit.gemm.compute == pytest.approx(0.72, rel=0.03)
    assert fit.gemm.memory == pytest.approx(0.88, rel=0.03)
    assert fit.norm.memory == pytest.approx(0.5, rel=0.02) and fit.norm.latency_s == pytest.approx(3e-6, rel=0.05)
    assert fit.allreduce.link == pytest.approx(0.6, rel=0.03)
    assert fit.allreduce.small_latency_s < fit.allreduce.base_latency_s  # both NCCL protocols come back
    for n in (2, 8):
        for size in (4096, 2**20, 32 * 2**20):
            assert float(ar_np(n, size, A100, fit.allreduce)) == pytest.approx(
                float(ar_np(n, size, A100, TRUE.allreduce)), rel=0.01)


def test_fit_tolerates_noise(synthetic_profiles, tmp_path):
    root = tmp_path / "noisy"
    write_mlp_csv(root / "compute/a100/org/big/mlp.csv", (32, 8, 4096, 14336, True), (1, 2, 4, 8),
                  noise=np.random.default_rng(0))
    fit = fit_profiles(find_profiles(root, "a100-80g"), A100)
    assert fit.gemm.compute == pytest.approx(0.72, rel=0.05)
    assert fit.gemm.memory == pytest.approx(0.88, rel=0.05)


def test_calibrate_cli_writes_a_loadable_file_and_validate_cost_reports(synthetic_profiles, tmp_path, capsys):
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--profiles", str(synthetic_profiles), "--gpu", "a100-80g", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# servesim") and "gemm:" in text and "allreduce:" in text
    eff = load_calibration(out)
    assert eff.gemm.compute == pytest.approx(0.72, rel=0.03)
    capsys.readouterr()
    vdir = tmp_path / "v"
    assert main(["validate-cost", "--profiles", str(synthetic_profiles), "--gpu", "a100-80g",
                 "--calibration", str(out), "--out", str(vdir)]) == 0
    printed = capsys.readouterr().out
    assert "| linear | all | all |" in printed and "MAPE" in printed
    assert (vdir / "validate-cost-a100-80g.png").stat().st_size > 1000
    import json

    rows = json.loads((vdir / "validate-cost-a100-80g.json").read_text())["rows"]
    linear = next(r for r in rows if r["family"] == "linear" and r["model"] == "all")
    assert linear["mape"] < 0.01  # the synthetic data came from the same model family


def test_a_gpu_name_with_a_path_separator_writes_into_out(synthetic_profiles, tmp_path, capsys):
    """validate-cost named its files after the GPU: a GPU YAML's name with a '/' (nvidia/a100) made
    a path into a folder that is not there, and the command failed at its end, after the work."""
    gpu = tmp_path / "g.yaml"
    gpu.write_text('name: "nvidia/../a100"\nbase: a100-80g\n')
    vdir = tmp_path / "v"
    assert main(["validate-cost", "--profiles", str(synthetic_profiles), "--gpu", str(gpu), "--device", "a100",
                 "--out", str(vdir), "--quiet"]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in vdir.iterdir()) == ["validate-cost-nvidia_.._a100.json",
                                                      "validate-cost-nvidia_.._a100.png"]


def test_attention_is_calibrated_from_attention_profiles(synthetic_profiles, tmp_path, capsys):
    llama3 = MODELS["meta-llama/Meta-Llama-3-8B"]  # the "big" profile's shape
    write_attention_csv(synthetic_profiles / "compute/a100/org/big/attention.csv", llama3, (1, 2, 4))
    prof = find_profiles(synthetic_profiles, "a100-80g")
    assert len(prof.attention) == 1 and len(prof.attention[0].y) == 3 * 24
    # the vectorized twin the fit uses is the engine's attention operator: exact with the truth
    rows = validate(prof, A100, dataclasses.replace(TRUE, attention=ATT_TRUE))["rows"]
    att = next(r for r in rows if r["family"] == "attention" and r["model"] == "all")
    assert att["points"] == 72 and att["worst"] < 1e-9
    fit = fit_profiles(prof, A100)
    assert fit.attention.compute == pytest.approx(0.55, rel=0.02)
    assert fit.attention.memory == pytest.approx(0.75, rel=0.02)
    assert fit.attention.latency_s == pytest.approx(8e-6, rel=0.1)
    assert "attention from 1 attention profile" in fit.source
    # with the v0 figures the same points are off: the fit is what brings them in
    rows = validate(prof, A100, TRUE)["rows"]
    assert next(r for r in rows if r["family"] == "attention" and r["model"] == "all")["mape"] > 0.05
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--profiles", str(synthetic_profiles), "--gpu", "a100-80g", "--out", str(out)]) == 0
    assert "attention: 1 attention.csv file" in out.read_text()
    assert load_calibration(out).attention.compute == pytest.approx(0.55, rel=0.02)
    assert main(["validate-cost", "--profiles", str(synthetic_profiles), "--gpu", "a100-80g", "--calibration",
                 str(out), "--out", str(tmp_path / "v")]) == 0
    assert "| attention | all | all | 72 |" in capsys.readouterr().out


def test_held_out_models_are_predicted_by_a_fit_to_the_others(synthetic_profiles, tmp_path, capsys):
    from servesim.cost.validation import validate_held_out_models

    prof = find_profiles(synthetic_profiles, "a100-80g")
    v = validate_held_out_models(prof, A100)
    lin = [r for r in v["rows"] if r["family"] == "linear"]
    assert sorted((r["model"], r["tp"]) for r in lin if r["model"] != "all") == [
        ("org/big", 1), ("org/big", 2), ("org/big", 4), ("org/small", 1)]
    every = lin[-1]
    assert every["model"] == "all" and every["points"] == sum(r["points"] for r in lin[:-1])
    # both profiles come from one set of efficiencies: a fit to either predicts the other
    assert every["mape"] < 0.01
    assert not any(r["family"] == "allreduce" for r in v["rows"])
    # a profile from other efficiencies is predicted worse when held out than when fitted with the rest
    other = dataclasses.replace(TRUE, gemm=GemmEfficiency(0.45, 0.6, 9e-6, 3.0, 0.6, 128, 40.0))
    write_mlp_csv(synthetic_profiles / "compute/a100/org/odd/mlp.csv", (40, 8, 5120, 13824, True), (1,), eff=other)
    prof = find_profiles(synthetic_profiles, "a100-80g")
    held = next(r for r in validate_held_out_models(prof, A100)["rows"]
                if r["family"] == "linear" and r["model"] == "org/odd")
    seen = next(r for r in validate(prof, A100, fit_profiles(prof, A100))["rows"]
                if r["family"] == "linear" and r["model"] == "org/odd")
    assert held["mape"] > seen["mape"] > 0.01
    assert main(["validate-cost", "--profiles", str(synthetic_profiles), "--gpu", "a100-80g", "--held-out-models",
                 "--out", str(tmp_path / "v")]) == 0
    assert "leave one model out" in capsys.readouterr().out
    assert (tmp_path / "v/validate-cost-a100-80g-held-out-models.json").exists()
    assert main(["validate-cost", "--profiles", str(synthetic_profiles), "--gpu", "a100-80g", "--held-out-models",
                 "--measured"]) == 2
    one = tmp_path / "one"
    write_mlp_csv(one / "compute/a100/org/big/mlp.csv", (32, 8, 4096, 14336, True), (1,))
    with pytest.raises(InputError, match="needs profiles of at least two models; found org/big"):
        validate_held_out_models(find_profiles(one, "a100-80g"), A100)


def test_bad_attention_profiles_are_input_errors(synthetic_profiles):
    path = synthetic_profiles / "compute/a100/org/big/attention.csv"
    write_attention_csv(path, MODELS["meta-llama/Meta-Llama-3-8B"], (1,))
    lines = path.read_text().splitlines()
    set_cell(path, 2, 7, "0")  # a prefill row with no chunk
    with pytest.raises(InputError, match=r"attention\.csv: a prefill row \(is_prefill True\) needs prefill_chunk_size"):
        find_profiles(synthetic_profiles, "a100-80g")
    path.write_text(",".join(h for h in ATT_HEADER if h != "kv_cache_size") + "\n" + "\n".join(lines[1:]) + "\n")
    with pytest.raises(InputError, match=r"attention\.csv: missing column 'kv_cache_size'"):
        find_profiles(synthetic_profiles, "a100-80g")
    cells = lines[1].split(",")
    cells[9] = "maybe"
    path.write_text("\n".join([lines[0], ",".join(cells)]) + "\n")
    with pytest.raises(InputError, match=r"attention\.csv: line 2: column 'is_prefill': cannot read 'maybe'"):
        find_profiles(synthetic_profiles, "a100-80g")


def test_scalar_and_vectorized_models_agree():
    rng = np.random.default_rng(1)
    for _ in range(200):
        g = GemmEfficiency(rng.uniform(0.3, 1), rng.uniform(0.3, 1), rng.uniform(0, 1e-5),
                           float(rng.choice([0.0, 1.0, 2.5, 8.0])), rng.uniform(0, 1), int(rng.choice([64, 128])),
                           rng.uniform(0, 200))
        M, K, N = int(rng.integers(1, 5000)), int(rng.integers(64, 30000)), int(rng.integers(64, 60000))
        w = float(rng.choice([0.5, 1.0, 2.0]))
        t = gemm_cost(M, K, N, w, 312e12, 2e12, g)[0]
        assert t == pytest.approx(float(gemm_time_np(M, K, N, w, 312e12, 2e12, g)), rel=1e-12)
        small = rng.uniform() < 0.5
        e = CommEfficiency(rng.uniform(0.1, 1), rng.uniform(0, 5e-5), float(rng.choice([rng.uniform(0, 5e-6), 0.0])),
                           float(rng.choice([0.8, 1.0, 1.7, 4.0])), rng.uniform(0, 2e-5) if small else None,
                           rng.uniform(0.01, 0.3) if small else None)
        custom = CustomAllReduce(rng.uniform(3e-6, 1e-5), rng.uniform(0.3, 0.9), rng.uniform(5e-6, 2e-5),
                                 rng.uniform(0.3, 0.9), int(rng.choice([2**20, 8 * 2**20])))
        n, size = int(rng.choice([2, 4, 8])), float(rng.uniform(1e3, 1e8))
        bw, lat = A100.link_bw_bytes_per_s, A100.link_latency_s
        for c in (None, custom):
            assert allreduce_time_s(size, n, bw, lat, e, c) == pytest.approx(
                float(collective_time_np("allreduce", size, n, bw, lat, e, c)), rel=1e-12)
        assert allgather_time_s(size, n, bw, lat, e) == pytest.approx(
            float(collective_time_np("allgather", size, n, bw, lat, e)), rel=1e-12)
        assert send_time_s(size, bw, lat, e) == pytest.approx(float(collective_time_np("send", size, 2, bw, lat, e)),
                                                             rel=1e-12)
    # v0 efficiencies (hop latency from the GPU) agree too
    v0 = CommEfficiency()
    assert allreduce_time_s(1e6, 4, 300e9, 5e-6, v0) == pytest.approx(
        float(collective_time_np("allreduce", 1e6, 4, 300e9, 5e-6, v0)), rel=1e-12)


def test_collective_algorithms():
    """The fastest algorithm wins: a collective is never slower than NCCL's bandwidth protocol alone,
    the custom all-reduce only helps below its size limit, an all-gather costs less than an
    all-reduce of the same output, one GPU costs nothing, and the bandwidth enters only the
    transfer term."""
    e = CommEfficiency(0.6, 36e-6, 0.0, 0.8, 30e-6, 0.16)
    bulk = dataclasses.replace(e, small_latency_s=None, small_link=None)
    custom = CustomAllReduce()
    for n in (2, 4, 8):
        for size in np.geomspace(2048, 2**30, 30):
            t = allreduce_time_s(size, n, 300e9, 5e-6, e)
            assert t <= allreduce_time_s(size, n, 300e9, 5e-6, bulk) * (1 + 1e-12)
            tc = allreduce_time_s(size, n, 300e9, 5e-6, e, custom)
            assert tc <= t * (1 + 1e-12)
            if size > custom.max_bytes:
                assert tc == t
            assert allgather_time_s(size, n, 300e9, 5e-6, e) < t
    assert allreduce_time_s(16 * 1024, 8, 300e9, 5e-6, e, custom) < 0.5 * allreduce_time_s(16 * 1024, 8, 300e9, 5e-6, e)
    assert allreduce_time_s(1e6, 1, 300e9, 5e-6, e, custom) == 0.0 == allgather_time_s(1e6, 1, 300e9, 5e-6, e)
    alpha = CommEfficiency(0.5, 10e-6, 1e-6, 1.0)
    t1, t2 = (allreduce_time_s(1e8, 4, bw, 5e-6, alpha) for bw in (100e9, 200e9))
    lat = 10e-6 + 6 * 1e-6
    assert t2 - lat == pytest.approx((t1 - lat) / 2, rel=1e-12)


def test_gemm_never_beats_plain_roofline():
    g = efficiencies_for(A100).gemm
    for M in (1, 7, 128, 129, 4096):
        t, f, b, _, _ = gemm_cost(M, 4096, 11008, 2.0, A100.peak_flops, A100.mem_bw_bytes_per_s, g)
        assert t >= max(f / A100.peak_flops, b / A100.mem_bw_bytes_per_s)


# ---------------------------------------------------------------- choosing a calibration
def test_shipped_fits_and_transfer_to_uncalibrated_gpus():
    shipped = shipped_calibrations()
    assert {"a100-80g", "a40", "h100-sxm", "h200"} <= set(shipped)
    a100 = efficiencies_for(GPUS["a100-80g"])
    assert a100.source.startswith("fitted") and a100 != Efficiencies()
    assert "transferred from a100-80g" in efficiencies_for(GPUS["a100-40g"]).source
    assert "transferred from h100-sxm" in efficiencies_for(GPUS["h100-pcie"]).source
    assert "transferred from h200" in efficiencies_for(GPUS["b200"]).source  # the nearest HBM GPU
    assert "transferred from a40" in efficiencies_for(GPUS["l40s"]).source  # GDDR like the A40
    a40 = efficiencies_for(GPUS["a40"])
    assert a40.allreduce == a100.allreduce and "allreduce from a100-80g" in a40.source  # A40: no all-reduce data
    assert efficiencies_for(GPUS["a100-80g"], "none") == Efficiencies()
    # collectives transfer only between links of one kind: the A40's (NVLink-bridge) send/recv
    # efficiency of 0.07 would put the L40S's PCIe sends at 2.3 GB/s, below what the A40 measured
    l40s = efficiencies_for(GPUS["l40s"])
    assert l40s.gemm == a40.gemm  # compute families still come from the A40
    assert l40s.send_recv == Efficiencies().send_recv and l40s.allreduce == Efficiencies().allreduce
    assert "send_recv: v0 (no calibrated GPU with a pcie link)" in l40s.source
    assert l40s.allreduce_pcie == a100.allreduce_pcie  # PCIe is PCIe: its fit transfers to any GPU
    # Hopper: its own collectives; the families it lacks from the nearest GPU that has them
    h100, h200 = efficiencies_for(GPUS["h100-sxm"]), efficiencies_for(GPUS["h200"])
    assert h100.allreduce != a100.allreduce and h100.allreduce_custom != a100.allreduce_custom
    assert h200.allreduce == h100.allreduce and h200.allreduce_custom == h100.allreduce_custom
    assert h100.norm == a100.norm and "norm from a100-80g" in h100.source
    # the H100's GEMMs are the H200's measured fit: the same die (calibrations/h100-sxm.yaml)
    assert h100.gemm == h200.gemm and h100.gemm != a100.gemm


def test_bad_profiles_and_calibration_files_are_input_errors(tmp_path, synthetic_profiles):
    with pytest.raises(InputError, match="not a folder"):
        find_profiles(tmp_path / "nope", "a100-80g")
    with pytest.raises(InputError, match="no measurements for GPU 'a40'.*a100"):
        find_profiles(synthetic_profiles, "a40")
    bad = tmp_path / "bad/compute/a100/org/m/mlp.csv"
    write_mlp_csv(bad, (32, 8, 4096, 14336, True), (1,))
    set_cell(bad, 4, -2, "many")  # num_tokens
    with pytest.raises(InputError, match=r"mlp\.csv: line 4: column 'num_tokens'"):
        find_profiles(tmp_path / "bad", "a100-80g")
    bad.write_text("num_tokens,n_head\n1,32\n")
    with pytest.raises(InputError, match=r"mlp\.csv: missing column"):
        find_profiles(tmp_path / "bad", "a100-80g")
    # found by fuzzing: inf, a TP size that does not divide the heads, a missing collective time
    for col, v, msg in ((-10, "inf", "is not a finite number"),  # time_stats.add.median
                        (-1, "7", "num_tensor_parallel_workers 7 does not divide the 32 heads")):
        write_mlp_csv(bad, (32, 8, 4096, 14336, True), (1,))
        set_cell(bad, 4, col, v)
        with pytest.raises(InputError, match=msg):
            find_profiles(tmp_path / "bad", "a100-80g")
    # an MLP narrower than the TP size: no MLP column on a shard, 0 / 0 in the fit (a traceback)
    write_mlp_csv(bad, (32, 8, 4096, 14336, True), (8,))
    bad.write_text(bad.read_text().replace(",14336,", ",4,"))
    with pytest.raises(InputError, match="num_tensor_parallel_workers 8 is more than the MLP width n_expanded_embd 4"):
        find_profiles(tmp_path / "bad", "a100-80g")
    write_mlp_csv(bad, (32, 8, 4096, 14336, True), (1,))
    ar = tmp_path / "bad/network/a100_dgx/all_reduce.csv"
    write_allreduce_csv(ar)
    set_cell(ar, 3, 4, "")  # time_stats.all_reduce.median
    with pytest.raises(InputError, match=r"all_reduce\.csv: line 3: time_stats\.all_reduce\.median must be a positive"):
        find_profiles(tmp_path / "bad", "a100-80g")
    with pytest.raises(InputError, match="does not exist"):
        load_calibration(tmp_path / "missing.yaml")
    for body, msg in (
        ("gemm: {compute: 1.5, memory: 0.8}\n", r"gemm\.compute must be in \[1e-4, 1\]"),
        ("allreduce: {link: 0.5, smooth: 0}\n", r"allreduce\.smooth must be >= 0\.5"),
        ("allreduce: {link: 0.5, small_latency_s: 1.0e-5}\n",
         r"allreduce\.small_latency_s and \.small_link go together"),
        ("allreduce_custom: {oneshot_link: 1.5}\n", r"allreduce_custom\.oneshot_link must be in \[1e-4, 1\]"),
        ("gemm: {compute: 0.5, memory: 0.8, speed: 3}\n", "gemm.speed: unknown field"),  # the scenario's wording
        ("gemm: {compute: 0.5, memory: 0.8, tile_q: 0.5}\n",
         r"c\.yaml: gemm\.tile_q: unknown field; \(did you mean 'tile_quant'\?\)"),
        ("gem: {compute: 0.5, memory: 0.8}\n", r"gem: unknown field; \(did you mean 'gemm'"),  # was silently ignored
        ("gemm: {compute: 0.5, memory: 0.8, tile_m: 64.5}\n", r"gemm\.tile_m must be an integer, got 64\.5"),
        ("source: [fitted]\n", r"c\.yaml: source must be a string, got \['fitted'\]"),
        # no family at all priced silently with the v0 figures, as `none` does
        ("{}\n", r"c\.yaml: holds no operator family; give at least one of gemm, "),
        ("gpu: a100-80g\nsource: fitted\n", "holds no operator family"),
    ):
        (tmp_path / "c.yaml").write_text(body)
        with pytest.raises(InputError, match=msg):
            load_calibration(tmp_path / "c.yaml")
    for body in ("gemm: {compute: 0.5, memory: 0.5, tile_m: .inf}\n", "gemm: {compute: .nan, memory: 0.5}\n"):
        (tmp_path / "c.yaml").write_text(body)  # found by fuzzing: inf / nan were taken as numbers
        with pytest.raises(InputError, match="must be a finite number >= 0"):
            load_calibration(tmp_path / "c.yaml")
    # through the CLI: exit 2 and one message
    assert main(["calibrate", "--profiles", str(tmp_path / "nope"), "--gpu", "a100-80g", "--out", "x.yaml"]) == 2
    assert main(["validate-cost", "--profiles", str(synthetic_profiles), "--gpu", "b300"]) == 2
    assert main(["cost", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "a100-80g", "--prefill", "8",
                 "--calibration", str(tmp_path / "missing.yaml")]) == 2


@pytest.mark.parametrize("smooth", [1e-4, 1e-300, 0.3])
def test_a_gemm_smooth_below_one_half_is_refused_not_an_overflow(tmp_path, smooth, capsys):
    """gemm.smooth p in (0, 0.5) blends compute and memory time into up to 2^(1/p) times their
    larger: 1e-4 overflowed the first step's time (an OverflowError traceback in servesim run)."""
    f = tmp_path / "c.yaml"
    f.write_text(f"gemm: {{compute: 0.7, memory: 0.9, smooth: {smooth}}}\n")
    with pytest.raises(InputError, match=r"c\.yaml: gemm\.smooth must be 0 \(a hard max\) or from 0\.5 to 100, got "):
        load_calibration(f)
    sc = tmp_path / "s.yaml"
    sc.write_text("model: meta-llama/Meta-Llama-3-8B\nhardware: {gpu: h100-sxm}\nworkload: {num_requests: 2, "
                  "arrival: {process: poisson, rate_rps: 1}, prompt_tokens: {dist: fixed, value: 64}, "
                  f"output_tokens: {{dist: fixed, value: 4}}}}\ncost: {{calibration: {f}}}\n")
    assert main(["run", str(sc), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "gemm.smooth must be 0" in capsys.readouterr().err
    for ok in (0, 0.5, 100):  # the hard max and the range's ends still load
        f.write_text(f"gemm: {{compute: 0.7, memory: 0.9, smooth: {ok}}}\n")
        assert load_calibration(f).gemm.smooth == ok


@pytest.mark.parametrize("body, match", [
    # (each loaded: sustained 1e-300 ran 5 requests for 2.7e302 simulated seconds, a compute_scale of
    # 1e-300 would run FP8 GEMMs as slowly)
    ("gemm: {compute: 0.7, memory: 0.9, sustained: 1.0e-300}", r"gemm\.sustained must be in \[1e-4, 1\]"),
    ("gemm_fp8: {compute_scale: 1.0e-300}", r"gemm_fp8\.compute_scale must be >= 0\.0001"),
])
def test_a_rate_share_of_a_calibration_file_is_at_least_1e_4_as_every_other(tmp_path, body, match):
    f = tmp_path / "c.yaml"
    f.write_text(body + "\n")
    with pytest.raises(InputError, match=rf"c\.yaml: {match}"):
        load_calibration(f)
    f.write_text(body.replace("1.0e-300", "1.0e-4") + "\n")  # the bound itself loads
    load_calibration(f)


def test_scenario_chooses_calibration(tmp_path, scenario_factory):
    from servesim.simulation import prepare

    make_scenario = scenario_factory

    auto = prepare(make_scenario(**{"hardware.gpu": "a100-80g"})).cost_model
    none = prepare(make_scenario(**{"hardware.gpu": "a100-80g", "cost.calibration": "none"})).cost_model
    assert auto.eff.source.startswith("fitted") and none.eff == Efficiencies()
    (tmp_path / "c.yaml").write_text("gemm: {compute: 0.5, memory: 0.5}\n")
    own = prepare(make_scenario(**{"hardware.gpu": "a100-80g", "cost.calibration": str(tmp_path / "c.yaml")}))
    assert own.cost_model.eff.gemm == GemmEfficiency(0.5, 0.5)
    with pytest.raises(InputError, match="cost.calibration"):
        prepare(make_scenario(**{"hardware.gpu": "a100-80g", "cost.calibration": str(tmp_path / "x.yaml")}))


# ---------------------------------------------------------------- physics holds with the fitted efficiencies
@pytest.mark.parametrize("gpu", ["a100-80g", "a40", "h100-sxm", "l40s"])
def test_calibrated_physics(gpu):
    from servesim.inputs.specs import MODELS

    g = GPUS[gpu]
    for tp in (1, 2, 4):
        cm = CostModel(MODELS["meta-llama/Llama-2-7b-hf"], g, tp=tp, eff=efficiencies_for(g))
        dec = cm.step_time(synthetic_batch(decode_contexts=[128]))
        if tp == 1:
            weight_read_s = cm.weight_bytes / g.mem_bw_bytes_per_s
            assert weight_read_s <= dec.time_s <= 2 * weight_read_s and dec.bound == "memory"
        for b in (synthetic_batch(prefill=[(3000, 500)], decode_contexts=[100, 2000]),
                  synthetic_batch(decode_contexts=[1000] * 32), synthetic_batch(prefill=[(4096, 0)])):
            c = cm.step_time(b)
            assert c.time_s >= max(c.flops / (g.peak_flops * tp), c.bytes / (g.mem_bw_bytes_per_s * tp))
            ops = cm.breakdown(b)
            assert sum(o.time_s for o in ops.values()) == pytest.approx(c.time_s, rel=1e-12)
            assert ("allreduce" in ops) == (tp > 1)
        pre = cm.step_time(synthetic_batch(prefill=[(4096, 0)]))
        assert pre.bound == "compute"


def test_v0_attention_family_is_used_for_mixed_steps_from_parts():
    from servesim.inputs.specs import MODELS

    cm = CostModel(MODELS["meta-llama/Meta-Llama-3-8B"], GPUS["h100-sxm"], eff=efficiencies_for(GPUS["h100-sxm"]))
    pre = cm.breakdown(synthetic_batch(prefill=[(512, 1024)]))["attention"]
    dec = cm.breakdown(synthetic_batch(decode_contexts=[2000] * 16))["attention"]
    mixed = cm.breakdown(synthetic_batch(prefill=[(512, 1024)], decode_contexts=[2000] * 16))["attention"]
    assert mixed.time_s == pytest.approx(pre.time_s + dec.time_s, rel=1e-12)
    assert mixed.flops == pytest.approx(pre.flops + dec.flops, rel=1e-12)
    assert pre.bound == "compute" and dec.bound == "memory"
    assert math.isclose(mixed.bytes, pre.bytes + dec.bytes, rel_tol=1e-12)


def test_packaged_calibrations_read_the_same_through_the_fast_loader():
    """Packaged calibration files are parsed with libyaml (``load_packaged_yaml``) for speed: it
    must read each exactly as the checked loader does (numbers like 1e15 included)."""
    from servesim.cost.calibration import shipped_calibrations
    from servesim.inputs.schema import load_packaged_yaml, load_yaml

    files = shipped_calibrations()
    assert len(files) >= 4
    for name, path in files.items():
        text = path.read_text(encoding="utf-8")
        assert load_packaged_yaml(text) == load_yaml(text), name
    assert load_packaged_yaml("a: 1e15\nb: [2, x]\n") == load_yaml("a: 1e15\nb: [2, x]\n") == {"a": 1e15, "b": [2, "x"]}


def test_smooth_max_np_is_the_scalar_one_elementwise_zeros_included():
    from servesim.cost.smoothmax import smooth_max, smooth_max_np

    x, y = np.array([0.0, 1e-9, 2.0, 3.0, 0.0]), np.array([0.0, 0.0, 2.0, 1.0, 5e-7])
    got = smooth_max_np(x, y, 4.8)
    assert np.all(np.isfinite(got))  # (0 / 0 made nan: the GEMM fit stopped on it)
    assert got.tolist() == [smooth_max(a, b, 4.8) for a, b in zip(x.tolist(), y.tolist())]


def test_a_fit_that_cannot_start_is_an_input_error():
    """A measurement the model prices at no finite time stops the fit with the columns to check,
    not scipy's 'Residuals are not finite in the initial point' traceback."""
    from servesim.cost.fitting import _lsq, _lsq_result

    for fit in (lambda r: _lsq(r, [0.5], [0.0], [1.0], [0.1]), lambda r: _lsq_result(r, [0.5], [0.0], [1.0])):
        with pytest.raises(InputError, match=r"the profiles hold 1 measurement the cost model gives no finite time"):
            fit(lambda x: np.array([np.log(0.0), 1.0]))
        with pytest.raises(InputError, match=r"hold 2 measurements the cost model gives no finite time"):
            fit(lambda x: np.array([np.log(0.0), np.nan, 1.0]))


def test_calibrate_writes_only_a_file_that_loads(synthetic_profiles, tmp_path, monkeypatch, capsys):
    """Fuzzing found fits that wrote a file its own loader refused (gemm.smooth e^5 = 148.4 past
    the limit of 100): the run naming it failed later. The fit's smooth is clipped to the limit,
    and a file that would not load is not written: the error names the field."""
    import servesim.cost.fitting as fitting

    real_lsq = fitting._lsq

    def runaway(res, x0, lo, hi, scale):  # the GEMM fit ending at its bound for smooth
        x = real_lsq(res, x0, lo, hi, scale)
        if len(x) == 6:
            x[3] = hi[3]
        return x

    monkeypatch.setattr(fitting, "_lsq", runaway)
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--profiles", str(synthetic_profiles), "--gpu", "a100-80g", "--out", str(out)]) == 0
    assert load_calibration(out).gemm.smooth == 100.0
    # and were a fitted figure out of range all the same: an InputError, nothing written
    monkeypatch.setattr(fitting, "_rounded", lambda e: dataclasses.replace(e, smooth=148.4)
                        if isinstance(e, GemmEfficiency) else e)
    out2 = tmp_path / "cal2.yaml"
    assert main(["calibrate", "--profiles", str(synthetic_profiles), "--gpu", "a100-80g", "--out", str(out2)]) == 2
    err = capsys.readouterr().err
    assert "cal2.yaml: not written: the fit gave a calibration that does not load" in err
    assert "gemm.smooth must be >= 0 and <= 100, got 148.4" in err and not out2.exists()
    assert list(tmp_path.glob("cal2.yaml*")) == []  # (nor the file it was loaded from)


def _rescale_times(path, factor):
    """Rewrite a profile CSV with every time_stats column multiplied by ``factor``."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    cols = [i for i, h in enumerate(rows[0]) if h.startswith("time_stats.")]
    for r in rows[1:]:
        for i in cols:
            r[i] = repr(float(r[i]) * factor)
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)


@pytest.mark.parametrize("factor, says", [(1e-3, "seconds here"), (1e3, "microseconds here")])
def test_profiles_in_the_wrong_time_unit_are_refused(synthetic_profiles, tmp_path, capsys, factor, says):
    """Vidur's time_stats are milliseconds. Timings in seconds (1000x faster than the GPU can
    run) or microseconds were fitted all the same: calibrate wrote a file pinned at its bounds
    (gemm compute 1.0, smooth 100, or every share at its floor) with 64,000% / 94% MAPE, exit 0.
    Now both commands, and pricing from measurements, refuse the file by name; nothing is written."""
    mlp = synthetic_profiles / "compute/a100/org/big/mlp.csv"
    _rescale_times(mlp, factor)
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--profiles", str(synthetic_profiles), "--gpu", "a100-80g", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(mlp) in err and "must be milliseconds" in err and says in err and not out.exists()
    assert main(["validate-cost", "--profiles", str(synthetic_profiles), "--gpu", "a100-80g", "--quiet",
                 "--out", str(tmp_path / "v")]) == 2
    assert str(mlp) in capsys.readouterr().err
    # nor are a step's kernels priced from them (cost.profiles; the profile has Llama-3-8B's shape)
    assert main(["cost", "--model", "meta-llama/Meta-Llama-3-8B", "--gpu", "a100-80g", "--decode-batch", "1",
                 "--profiles", str(synthetic_profiles)]) == 2
    assert str(mlp) in capsys.readouterr().err
    # the network timings alike (the collectives-only path of a GPU without compute profiles)
    _rescale_times(mlp, 1 / factor)
    ar = synthetic_profiles / "network/a100_dgx/all_reduce.csv"
    _rescale_times(ar, factor)
    assert main(["calibrate", "--profiles", str(synthetic_profiles), "--gpu", "a100-80g", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "network/a100_dgx/all_reduce.csv" in err and says in err and not out.exists()


def test_profiles_of_another_gpu_are_refused(synthetic_profiles, tmp_path, capsys):
    """A100 timings validated as an A40's (--device a100 --gpu a40) beat the A40's datasheet
    roofline: refused, not reported as a fit."""
    assert main(["validate-cost", "--profiles", str(synthetic_profiles), "--gpu", "a40", "--device", "a100",
                 "--quiet", "--out", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err
    assert "faster than the a40's datasheet roofline" in err and "a faster GPU's timings" in err


def test_calibrate_says_which_families_a_file_leaves_at_the_v0_figures(tmp_path, capsys):
    """`calibrate --gpu h100-sxm` on network timings alone (the docs' "collectives only" example)
    wrote a file whose source said only "fitted to network timings": a run naming it priced the
    H100's GEMMs, attention and bandwidth-bound kernels with the v0 figures, not the H200-measured
    ones `auto` gives it, without a word. The source and a note now name those families."""
    h100 = GPUS["h100-sxm"]
    root = tmp_path / "prof"
    write_allreduce_csv(root / "network/h100_dgx/all_reduce.csv", h100)
    out = tmp_path / "h100-comm.yaml"
    assert main(["calibrate", "--profiles", str(root), "--gpu", "h100-sxm", "--out", str(out)]) == 0
    note = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("note:"))
    unfitted = "gemm, attention, norm, activation, rotary, residual, embedding, allreduce_pcie, send_recv"
    assert f"not measured by these profiles: {unfitted}." in note and "v0 figures" in note
    assert "with cost.calibration: auto the h100-sxm takes other figures for all of them" in note
    own, auto = efficiencies_for(h100, str(out)), efficiencies_for(h100)
    assert f"not measured, v0 figures: {unfitted}" in " ".join(own.source.split())
    # what the source says is what a run gets: those families at v0, the fitted and carried ones not
    for fam in unfitted.split(", "):
        assert getattr(own, fam) == getattr(Efficiencies(), fam) != getattr(auto, fam), fam
    assert own.allreduce != Efficiencies().allreduce and own.allreduce_custom == auto.allreduce_custom


def test_network_timings_alone_are_a_profiles_folder(tmp_path, capsys):
    """A profiles folder holding only network/<node>/ (no compute/ folder) was taken for a folder
    of <org>/<model>/mlp.csv files: "no mlp.csv files under it", exit 2. It now fits the
    collectives, as it does when compute/ holds other GPUs' timings."""
    root = tmp_path / "prof"
    write_allreduce_csv(root / "network/a100_dgx/all_reduce.csv")
    prof = find_profiles(root, "a100-80g")
    assert prof.compute == [] and prof.allreduce[0] == "a100_dgx"
    out = tmp_path / "comm.yaml"
    assert main(["calibrate", "--profiles", str(root), "--gpu", "a100-80g", "--out", str(out)]) == 0
    assert load_calibration(out).allreduce.link == pytest.approx(TRUE.allreduce.link, rel=0.03)
    # a GPU it has no timings of is still refused by name
    capsys.readouterr()
    assert main(["calibrate", "--profiles", str(root), "--gpu", "a40", "--out", str(out)]) == 2
    assert "no mlp.csv files under" in capsys.readouterr().err


def _keep_rows(path, keep):
    """Rewrite a profile CSV keeping the rows whose num_tokens ``keep`` accepts."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    i = rows[0].index("num_tokens")
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([rows[0]] + [r for r in rows[1:] if keep(int(r[i]))])


def test_validate_cost_with_nothing_to_validate_says_so(synthetic_profiles, tmp_path, capsys):
    """Three ways validate-cost had no point to plot ended in a matplotlib traceback (exit 1):
    --max-tokens below every measured token count, --measured or --held-out-models on network
    timings alone, --measured with two token counts per operator. Each is now an error saying why."""
    base = ["validate-cost", "--profiles", str(synthetic_profiles), "--gpu", "a100-80g", "--quiet",
            "--out", str(tmp_path / "v")]
    for mlp in synthetic_profiles.glob("compute/a100/*/*/mlp.csv"):
        _keep_rows(mlp, lambda t: t >= 8)
    assert main(base + ["--max-tokens", "4"]) == 2
    err = capsys.readouterr().err
    assert "--max-tokens 4 is below every measured token count: the smallest is 8, in" in err
    # calibrate fits every row but reports over --max-tokens: an empty report was written silently
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--profiles", str(synthetic_profiles), "--gpu", "a100-80g", "--max-tokens", "4",
                 "--out", str(out)]) == 2 and not out.exists()
    assert "below every measured token count" in capsys.readouterr().err
    for mlp in synthetic_profiles.glob("compute/a100/*/*/mlp.csv"):
        _keep_rows(mlp, lambda t: t in (8, 48))
    assert main(base + ["--measured"]) == 2
    assert "--measured needs at least 3 token counts" in capsys.readouterr().err
    net = tmp_path / "net"
    write_allreduce_csv(net / "network/a100_dgx/all_reduce.csv")
    for flag in ("--measured", "--held-out-models"):
        assert main(["validate-cost", "--profiles", str(net), "--gpu", "a100-80g", flag, "--quiet",
                     "--out", str(tmp_path / "v")]) == 2
        assert f"{flag} checks the per-layer kernels of compute profiles (mlp.csv)" in capsys.readouterr().err


def test_validate_cost_on_network_timings_alone_names_no_token_limit(tmp_path, capsys):
    """validate-cost on a network-only folder said 'num_tokens <= 4096' in its header and figure
    title: collectives go by message size, so no token count was bounded."""
    root = tmp_path / "prof"
    write_allreduce_csv(root / "network/a100_dgx/all_reduce.csv")
    assert main(["validate-cost", "--profiles", str(root), "--gpu", "a100-80g", "--quiet",
                 "--out", str(tmp_path / "v")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("a100-80g: predicted vs measured; efficiencies") and "num_tokens" not in out


def test_a_shipped_file_named_by_path_says_which_families_it_prices_at_v0():
    """A calibration file given by path keeps the v0 figures for the families it lacks, where ``auto``
    fills them from a calibrated GPU: the shipped H100 file by path priced its norms, rotary, ...
    at v0 (no kernel latency) while its source read as the H100 fit. Its source names them now."""
    h100 = GPUS["h100-sxm"]
    path = shipped_calibrations()["h100-sxm"]
    by_path, auto = efficiencies_for(h100, str(path)), efficiencies_for(h100, "auto")
    assert by_path.norm != auto.norm and by_path.norm == Efficiencies().norm
    assert by_path.gemm == auto.gemm
    note = by_path.source.split(" [v0 figures: ")[1]
    assert note.startswith("norm, activation, rotary, residual, embedding (not in h100-sxm.yaml")
    # a family the file's own source already calls v0 (calibrate's note) is not named twice; one
    # the GPU cannot use (FP8 GEMMs on an A100) not at all
    a100 = efficiencies_for(GPUS["a100-80g"], str(shipped_calibrations()["a100-80g"]))
    assert "[v0 figures" not in a100.source and "attention not measured (v0 values)" in a100.source
