"""Fitting: the operator-family efficiencies fitted to measured kernel timings.

Each family is fitted with ``scipy.optimize.least_squares`` on log(predicted) - log(measured), so
every point weighs by its relative error. The model equations are those of
``sim/cost/efficiency.py``; the vectorized twins below are kept equal to the scalar ones in
``sim/cost/roofline.py`` and ``sim/cost/comm.py`` by a test. The measurements come from
``sim/cost/profiles.py``; ``sim/cost/calibration.py`` writes and loads the fits.

Nothing here runs in the simulation's hot path; numpy and scipy are imported lazily.
"""

from __future__ import annotations

import dataclasses
import math

from servesim.cost.efficiency import (LOWBIT_TILE_M, CommEfficiency, Efficiencies, GemmEfficiency, MemEfficiency,
                                      OpEfficiency, OverheadFit)
from servesim.cost.profiles import GEMM_OPS, MEM_OPS, PROFILE_DTYPE_BYTES, Profiles
from servesim.cost.smoothmax import smooth_max_np
from servesim.inputs.specs import GpuSpec

ACT = 2.0  # bytes per activation element: the profiles ran in fp16


# ---------------------------------------------------------------- vectorized time models
def gemm_time_np(M, K, N, w, peak, bw, g: GemmEfficiency):
    import numpy as np

    M, K, N = (np.asarray(x, float) for x in (M, K, N))
    f = 2.0 * M * N * K
    b = w * K * N + ACT * M * (K + N)
    tm = g.tile_m if w >= 2 else min(g.tile_m, LOWBIT_TILE_M)  # as roofline.gemm_cost
    fe = f + g.tile_quant * (2.0 * np.ceil(M / tm) * tm * N * K - f) if g.tile_quant else f
    ec = g.compute * K / (K + g.k_half) if g.k_half else g.compute
    c = fe / (peak * ec)
    m = b / (bw * g.memory)
    return g.latency_s + smooth_max_np(c, m, g.smooth)


def mem_time_np(b, bw, e: MemEfficiency):
    return e.latency_s + b / (bw * e.memory)


def collective_time_np(n, size, gpu: GpuSpec, e: CommEfficiency, kind: str):
    """Vectorized ``sim.cost.comm.allreduce_time_s`` / ``send_time_s``."""
    import numpy as np

    n = np.asarray(n, float)
    link_bw = gpu.link_bw_bytes_per_s
    if e.hop_latency_s is not None:
        hop = e.hop_latency_s
    else:
        hop = (2 if kind == "allreduce" else 1) * gpu.link_latency_s
    if kind == "allreduce":
        lat = e.base_latency_s + hop * (n - 1)
        tr = 2 * (n - 1) / n * size / (link_bw * e.link)
    else:
        lat = e.base_latency_s + hop + 0 * n
        tr = size / (link_bw * e.link)
    return lat + tr if e.smooth == 1.0 else smooth_max_np(lat, tr, e.smooth)


def attention_time_np(qd, kv_tok, tok, pairs, ctx, peak16, bw, e: OpEfficiency):
    """Vectorized ``CostModel._attention`` for steps that are all prefill or all decode (one part):
    ``tok`` query tokens doing ``pairs`` query-key products over ``ctx`` KV tokens, ``qd`` the
    per-GPU query width, ``kv_tok`` KV bytes per token per layer; time of one layer."""
    import numpy as np

    f = 4.0 * qd * pairs
    b = kv_tok * ctx + ACT * tok * 2.0 * qd
    return e.latency_s + np.maximum(f / (peak16 * e.compute), b / (bw * e.memory))


# ---------------------------------------------------------------- per-operator shapes of the profiles
def attention_points(profiles: list):
    """Per attention measurement: (qd, kv_tok, tok, pairs, ctx) as ``attention_time_np`` takes them
    (fp16 KV), measured seconds, labels (model, tp) and the KV tokens touched."""
    import numpy as np

    out = {k: [] for k in ("qd", "kv_tok", "tok", "pairs", "ctx", "y", "tp", "model")}
    for p in profiles:
        hd = p.hidden // p.n_q_head
        t = p.tp
        qd = p.n_q_head // t * hd
        kvd = np.maximum(p.n_kv_head // t, 1) * hd
        c, k, B = p.chunk.astype(float), p.kv.astype(float), p.batch.astype(float)
        pre = p.is_prefill
        # prefill: one sequence, c new tokens after k cached; decode: B sequences, k cached each
        out["tok"].append(np.where(pre, c, B))
        out["pairs"].append(np.where(pre, c * k + c * (c + 1) / 2, B * (k + 1)))
        out["ctx"].append(np.where(pre, k + c, B * (k + 1)))
        out["qd"].append(qd.astype(float))
        out["kv_tok"].append(2.0 * kvd * PROFILE_DTYPE_BYTES)
        out["y"].append(p.y)
        out["tp"].append(t)
        out["model"] += [p.model] * len(p.y)
    if not out["y"]:
        return None
    cat = np.concatenate
    return ({k: cat(v) for k, v in out.items() if k != "model"}, np.array(out["model"]))
def gemm_dims(p, t) -> dict:
    """(K, N) per GEMM kernel of profile ``p`` at TP ``t`` (an int, or an array of one per row)."""
    import numpy as np

    hd = p.hidden // p.n_head
    qd = p.n_head // t * hd
    kvd = np.maximum(p.n_kv_head // t, 1) * hd
    n_up = 2 if p.gated else 1
    return {"attn_pre_proj": (p.hidden + 0 * t, qd + 2 * kvd), "attn_post_proj": (qd, p.hidden + 0 * t),
            "mlp_up_proj": (p.hidden + 0 * t, n_up * p.inter // t), "mlp_down_proj": (p.inter // t, p.hidden + 0 * t)}


def gemm_points(profiles: list):
    """Arrays M, K, N, measured seconds, and labels (model, tp, op) of every GEMM measurement."""
    import numpy as np

    M, K, N, y, model, tp, op = [], [], [], [], [], [], []
    for p in profiles:
        t = p.tp
        for name, (k, n) in gemm_dims(p, t).items():
            ok = ~np.isnan(p.ops[name])
            M.append(p.tokens[ok])
            K.append(k[ok])
            N.append(n[ok])
            y.append(p.ops[name][ok])
            model += [p.model] * int(ok.sum())
            tp.append(t[ok])
            op += [GEMM_OPS[name]] * int(ok.sum())
    cat = np.concatenate
    return (cat(M).astype(float), cat(K).astype(float), cat(N).astype(float), cat(y), np.array(model), cat(tp),
            np.array(op))


def mem_points(profiles: list, family: str):
    """Bytes moved per kernel, measured seconds, labels (model, tp, op) and token counts of one
    bandwidth-bound family."""
    import numpy as np

    b, y, model, tp, op, tok = [], [], [], [], [], []
    for p in profiles:
        t, T = p.tp, p.tokens.astype(float)
        hd = p.hidden // p.n_head
        qd = p.n_head // t * hd
        kvd = np.maximum(p.n_kv_head // t, 1) * hd
        n_up = 2 if p.gated else 1
        by = {"input_layernorm": 2 * ACT * T * p.hidden + ACT * p.hidden,
              "post_attention_layernorm": 2 * ACT * T * p.hidden + ACT * p.hidden,
              "attn_rope": 2 * ACT * T * (qd + kvd),
              "mlp_act": ACT * T * (n_up + 1) * (p.inter // t),
              "add": 3 * ACT * T * p.hidden,
              "emb": (PROFILE_DTYPE_BYTES + ACT) * T * p.hidden}
        for name, fam in MEM_OPS.items():
            if fam != family or name not in p.ops:
                continue
            ok = ~np.isnan(p.ops[name])
            b.append((by[name] + 0 * T)[ok])
            y.append(p.ops[name][ok])
            model += [p.model] * int(ok.sum())
            tp.append(t[ok])
            op += [name] * int(ok.sum())
            tok.append(T[ok])
    if not b:
        return None
    cat = np.concatenate
    return cat(b), cat(y), np.array(model), cat(tp), np.array(op), cat(tok)


# ---------------------------------------------------------------- fitting
def _lsq(residual, x0, lo, hi, scale):
    from scipy.optimize import least_squares

    return least_squares(residual, x0, bounds=(lo, hi), x_scale=scale).x


def fit_gemm(profiles: list, gpu: GpuSpec, tile_m: int = 128) -> GemmEfficiency:
    import numpy as np

    M, K, N, y, *_ = gemm_points(profiles)
    ly = np.log(y)

    def make(x):
        return GemmEfficiency(float(x[0]), float(x[1]), float(x[2]), float(math.exp(x[3])), float(x[4]),
                              tile_m, float(x[5]))

    def res(x):
        return np.log(gemm_time_np(M, K, N, PROFILE_DTYPE_BYTES, gpu.peak_flops, gpu.mem_bw_bytes_per_s, make(x))) - ly

    x = _lsq(res, [0.7, 0.8, 2e-6, math.log(4.0), 0.5, 100.0], [0.05, 0.05, 0, 0, 0, 0],
             [1, 1, 1e-4, 5, 1, 1e4], [0.1, 0.1, 1e-6, 1, 0.1, 100])
    return _rounded(make(x))


def fit_mem(profiles: list, gpu: GpuSpec, family: str) -> MemEfficiency | None:
    import numpy as np

    pts = mem_points(profiles, family)
    if pts is None:
        return None
    b, y, *_ = pts
    ly = np.log(y)

    def res(x):
        return np.log(mem_time_np(b, gpu.mem_bw_bytes_per_s, MemEfficiency(x[0], x[1]))) - ly

    x = _lsq(res, [0.7, 3e-6], [0.01, 0], [1, 1e-4], [0.1, 1e-6])
    return _rounded(MemEfficiency(float(x[0]), float(x[1])))


def fit_attention(profiles: list, gpu: GpuSpec) -> OpEfficiency | None:
    """Attention's roofline efficiencies (compute, memory, per-kernel latency) from attention.csv
    measurements: prefill rows pin the compute side, decode rows the memory side."""
    import numpy as np

    pts = attention_points(profiles)
    if pts is None or len(pts[0]["y"]) < 3:
        return None
    a = pts[0]
    ly = np.log(a["y"])

    def res(x):
        e = OpEfficiency(x[0], x[1], x[2])
        return np.log(attention_time_np(a["qd"], a["kv_tok"], a["tok"], a["pairs"], a["ctx"], gpu.peak_flops,
                                        gpu.mem_bw_bytes_per_s, e)) - ly

    x = _lsq(res, [0.5, 0.7, 5e-6], [0.01, 0.01, 0], [1, 1, 1e-3], [0.1, 0.1, 1e-6])
    return _rounded(OpEfficiency(float(x[0]), float(x[1]), float(x[2])))


def cpu_points(profiles: list):
    """(batch, tp, measured seconds, model) over every CPU overhead profile."""
    import numpy as np

    cat = np.concatenate
    return (cat([p.batch for p in profiles]).astype(float), cat([p.tp for p in profiles]),
            cat([p.y for p in profiles]), cat([p.model for p in profiles]))


def overhead_time_np(batch, tp, fit: OverheadFit):
    """Vectorized ``OverheadFit``: each row's ``step_s + per_seq_s x batch`` at its TP size."""
    import numpy as np

    pairs = {int(t): fit.at(int(t)) for t in set(np.asarray(tp).tolist())}
    step = np.array([pairs[int(t)][0] for t in tp])
    per = np.array([pairs[int(t)][1] for t in tp])
    return step + per * np.asarray(batch, float)


def fit_overhead(profiles: list) -> OverheadFit | None:
    """``step_s`` and ``per_seq_s`` per measured TP size (over every model measured at it), least
    squares in log space; a TP size measured at one batch size gets ``per_seq_s = 0``."""
    import numpy as np

    if not profiles:
        return None
    B, T, y, _ = cpu_points(profiles)
    tps, steps, pers = [], [], []
    for t in sorted(set(T.tolist())):
        s = T == t
        b, ly = B[s], np.log(y[s])
        if len(set(b.tolist())) < 2:
            x = [float(np.exp(ly.mean())), 0.0]
        else:
            slope, icpt = np.polyfit(b, y[s], 1)
            top = float(y[s].max())  # neither the fixed part nor one sequence costs more than a whole step
            x0 = [min(max(icpt, 1e-3 * top), top), min(max(slope, 0.0), top)]
            x = _lsq(lambda v: np.log(v[0] + v[1] * b) - ly, x0, [1e-9, 0.0], [top, top],
                     [max(top / 10, 1e-9), max(top / 1000, 1e-12)])
        tps.append(int(t))
        steps.append(float(f"{x[0]:.4g}"))
        pers.append(float(f"{x[1]:.4g}"))
    return OverheadFit(tuple(tps), tuple(steps), tuple(pers))


def comm_points(data, kind: str):
    """Intra-node measurements only (every participant in one node, as TP / PP within a server)."""
    n, size, dpn, y = data
    ok = (dpn == n) if kind == "allreduce" else (dpn >= 2)
    return n[ok], size[ok], y[ok]


def fit_comm(data, gpu: GpuSpec, kind: str) -> CommEfficiency | None:
    import numpy as np

    n, size, y = comm_points(data, kind)
    if len(y) < 4:
        return None
    ly = np.log(y)

    def make(x):
        return CommEfficiency(float(x[0]), float(x[1]), float(x[2]) if kind == "allreduce" else 0.0,
                              float(math.exp(x[3])))

    def res(x):
        return np.log(collective_time_np(n, size, gpu, make(x), kind)) - ly

    x = _lsq(res, [0.5, 10e-6, 2e-6, math.log(2.0)], [0.01, 0, 0, 0], [1, 1e-3, 1e-3, 5],
             [0.1, 1e-5, 1e-6, 1])
    return _rounded(make(x))


def _rounded(obj):
    vals = {f.name: (float(f"{v:.4g}") if isinstance(v, float) else v)
            for f in dataclasses.fields(obj) for v in [getattr(obj, f.name)]}
    return type(obj)(**vals)


def fit_profiles(profiles: Profiles, gpu: GpuSpec) -> Efficiencies:
    """Fitted ``Efficiencies``: GEMM and bandwidth-bound families from the compute profiles,
    collectives from the network ones; families without measurements keep the v0 values."""
    kw = {"gemm": fit_gemm(profiles.compute, gpu)}
    for fam in ("norm", "activation", "rotary", "residual", "embedding"):
        e = fit_mem(profiles.compute, gpu, fam)
        if e is not None:
            kw[fam] = e
    if profiles.allreduce:
        e = fit_comm(profiles.allreduce[1], gpu, "allreduce")
        if e is not None:
            kw["allreduce"] = e
    if profiles.send_recv:
        e = fit_comm(profiles.send_recv[1], gpu, "send_recv")
        if e is not None:
            kw["send_recv"] = e
    att = fit_attention(profiles.attention, gpu) if profiles.attention else None
    if att is not None:
        kw["attention"] = att
    over = fit_overhead(profiles.cpu)
    if over is not None:
        kw["overhead"] = over
    nodes = ", ".join(f"{k} from network/{v[0]}" for k, v in (("all-reduce", profiles.allreduce),
                                                              ("send/recv", profiles.send_recv)) if v)
    kw["source"] = (f"fitted to {len(profiles.compute)} compute profiles for {gpu.name}"
                    + (f"; {nodes}" if nodes else "")
                    + (f"; attention from {len(profiles.attention)} attention profiles" if att is not None
                       else "; attention not measured (v0 values)")
                    + (f"; per-step CPU overhead from {len(profiles.cpu)} cpu_overheads profile(s)"
                       if over is not None else ""))
    return Efficiencies(**kw)
