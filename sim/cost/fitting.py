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

from servesim.cost.comm import SIZE_RANGES, collective_time_np
from servesim.cost.efficiency import (LOWBIT_TILE_M, CommEfficiency, Efficiencies, Fp8GemmEfficiency, GemmEfficiency,
                                      MemEfficiency, OpEfficiency, OverheadFit)
from servesim.cost.profiles import GEMM_OPS, MEM_OPS, PROFILE_DTYPE_BYTES, Profiles
from servesim.cost.smoothmax import smooth_max_np
from servesim.errors import InputError
from servesim.outputs.wording import plural
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


# a kernel's measured time against its datasheet roofline ``max(FLOPs / peak, bytes / bandwidth)``:
# measured kernels reach 0.7-0.9 of it at best (A100, A40, H200 GEMMs; collectives 0.04-0.8 of
# their link), so a profile whose typical kernel beats the roofline, or whose best one stays
# under this share of it, was not timed in milliseconds on this GPU (seconds or microseconds,
# or another GPU): a fit to it would be a calibration of nothing, written without complaint
MIN_ROOFLINE_SHARE = 0.005


def _units_error(what: str, share, gpu: GpuSpec, roof: str) -> str | None:
    """Why ``share`` (each measurement's roofline time over its measured time) cannot be this
    GPU's timings in milliseconds, or None."""
    import numpy as np

    med, best = float(np.median(share)), float(np.max(share))
    if med > 1.0:
        return (f"{what}: the measured times are {med:.3g}x faster than the {gpu.name}'s datasheet "
                f"roofline ({roof}) at the median: the time_stats columns must be milliseconds measured "
                f"on the {gpu.name} (seconds here, or a faster GPU's timings?)")
    if best < MIN_ROOFLINE_SHARE:
        return (f"{what}: the fastest measurement reaches only {best:.2g} of the {gpu.name}'s datasheet "
                f"roofline ({roof}; measured kernels reach a few percent of it or more): the time_stats columns "
                f"must be milliseconds measured on the {gpu.name} (microseconds here?)")
    return None


def check_units(profiles: Profiles, gpu: GpuSpec) -> None:
    """An ``InputError`` naming the file when a profile's times cannot be ``gpu``'s kernel times
    in milliseconds (``MIN_ROOFLINE_SHARE``): each ``mlp.csv``'s GEMMs, ``attention.csv``'s
    kernels and ``fp8_gemm.csv``'s GEMMs against the GPU's peak FLOP/s and bandwidth, each
    network file's messages against its fastest link."""
    import numpy as np

    peak, bw = gpu.peak_flops, gpu.mem_bw_bytes_per_s
    roof = f"{peak / 1e12:g} TFLOP/s, {bw / 1e9:g} GB/s"
    for p in profiles.compute:
        M, K, N, y, *_ = gemm_points([p])
        if len(y):
            lb = np.maximum(2 * M * K * N / peak, (PROFILE_DTYPE_BYTES * K * N + ACT * M * (K + N)) / bw)
            err = _units_error(str(p.path), lb / y, gpu, roof)
            if err:
                raise InputError(err)
    for p in profiles.attention:
        a, _ = attention_points([p])
        lb = attention_time_np(a["qd"], a["kv_tok"], a["tok"], a["pairs"], a["ctx"], peak, bw, OpEfficiency(1.0, 1.0))
        err = _units_error(str(p.path), lb / a["y"], gpu, roof)
        if err:
            raise InputError(err)
    if gpu.fp8_flops > 0:  # (else the FP8 timings are not used)
        for p in profiles.fp8:
            M, K, N = (np.asarray(x, float) for x in (p.M, p.K, p.N))
            lb = np.maximum(2 * M * K * N / gpu.fp8_flops, (K * N + ACT * M * (K + N)) / bw)
            err = _units_error(str(p.path), lb / p.y, gpu, f"{gpu.fp8_flops / 1e12:g} FP8 TFLOP/s, {bw / 1e9:g} GB/s")
            if err:
                raise InputError(err.replace("the time_stats columns", "the fp8_ms column"))
    link = max(gpu.link_bw_bytes_per_s, gpu.pcie_bw_bytes_per_s)
    for fam, kind, _, (node, data) in comm_data(profiles):
        n, size, _, y = data
        # the least an all-reduce moves over one GPU's link: 2 (n - 1) / n of the message; a send all of it
        vol = 2 * (n - 1) / n * size if kind == "allreduce" else size
        name = "all_reduce.csv" if kind == "allreduce" else "send_recv.csv"
        err = _units_error(f"{profiles.where}/network/{node}/{name}", vol / link / y, gpu,
                           f"{link / 1e9:g} GB/s per link")
        if err:
            raise InputError(err)


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
def _finite_start(residual, x0) -> None:
    """An ``InputError`` when the model gives no finite time for some measurement at the starting
    point (scipy would stop on a ValueError): a measured shape the model cannot price."""
    import numpy as np

    with np.errstate(all="ignore"):
        r = np.asarray(residual(np.asarray(x0, float)))
    if not np.all(np.isfinite(r)):
        raise InputError(f"the profiles hold {plural(int(np.sum(~np.isfinite(r))), 'measurement')} the cost model "
                         "gives no finite time for (a shape with no work on a GPU, or a time of 0): check the model "
                         "columns (n_head, n_kv_head, n_embd, n_expanded_embd) and the TP sizes of the profiles")


def _lsq(residual, x0, lo, hi, scale):
    from scipy.optimize import least_squares

    _finite_start(residual, x0)
    return least_squares(residual, x0, bounds=(lo, hi), x_scale=scale).x


def _lsq_result(residual, x0, lo, hi):
    """``least_squares`` from ``x0`` (clipped inside the bounds), scaled by its Jacobian."""
    import numpy as np
    from scipy.optimize import least_squares

    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    x0 = np.clip(np.asarray(x0, float), lo + 1e-9 * (hi - lo), hi - 1e-9 * (hi - lo))
    _finite_start(residual, x0)
    return least_squares(residual, x0, bounds=(lo, hi), x_scale="jac", max_nfev=4000)


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
    # smooth no more than GemmEfficiency's limit, 100 (a fit that ran to e^5 wrote a file that
    # would not load; at 100 the smooth max is within 0.7% of the hard max). Clipped after the fit,
    # not bounded in it: the bounds steer scipy's steps, and the shipped fits would move.
    x[3] = min(x[3], math.log(100.0))
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


def fits_fp8(fp8_profiles: list, gpu: GpuSpec) -> bool:
    """Whether FP8 GEMM timings fit (and validate) ``gemm_fp8`` on ``gpu``: there are some, and the
    GPU has FP8 tensor cores."""
    return bool(fp8_profiles) and gpu.fp8_flops > 0


def fp8_gemm_time_np(M, K, N, gpu: GpuSpec, g: GemmEfficiency, f8: Fp8GemmEfficiency):
    """Vectorized FP8 GEMM time as ``CostModel`` prices it: 1-byte weights, the FP8 peak, the 16-bit
    family as ``f8.applied`` makes it."""
    return gemm_time_np(M, K, N, 1.0, gpu.fp8_flops, gpu.mem_bw_bytes_per_s, f8.applied(g))


def fp8_points(profiles: list):
    """Arrays M, K, N and measured seconds of every FP8 GEMM measurement."""
    import numpy as np

    cat = np.concatenate
    return (cat([p.M for p in profiles]).astype(float), cat([p.K for p in profiles]).astype(float),
            cat([p.N for p in profiles]).astype(float), cat([p.y for p in profiles]))


def fit_fp8(profiles: list, gpu: GpuSpec, gemm: GemmEfficiency) -> Fp8GemmEfficiency | None:
    """``gemm_fp8.compute_scale`` from FP8 GEMM timings, with the 16-bit GEMM family's other terms
    (latency, smooth max, tiling) as fitted: the FP8 GEMMs' share of the FP8 peak over the 16-bit
    GEMMs' share of theirs. None without FP8 tensor cores or measurements."""
    import numpy as np

    if not fits_fp8(profiles, gpu):
        return None
    M, K, N, y = fp8_points(profiles)
    ly = np.log(y)

    def res(x):
        return np.log(fp8_gemm_time_np(M, K, N, gpu, gemm, Fp8GemmEfficiency(float(x[0])))) - ly

    x = _lsq(res, [0.9], [0.1], [1.5], [0.1])
    return _rounded(Fp8GemmEfficiency(float(x[0])))


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
            hi = [min(top, 60.0), min(top, 1.0)]  # (and within OverheadFit's limits: 60 s a step, 1 s a sequence)
            x0 = [min(max(icpt, 1e-3 * top), hi[0]), min(max(slope, 0.0), hi[1])]
            x = _lsq(lambda v: np.log(v[0] + v[1] * b) - ly, x0, [1e-9, 0.0], hi,
                     [max(top / 10, 1e-9), max(top / 1000, 1e-12)])
        tps.append(int(t))
        steps.append(float(f"{x[0]:.4g}"))
        pers.append(float(f"{x[1]:.4g}"))
    return OverheadFit(tuple(tps), tuple(steps), tuple(pers))


# NCCL's per-step latency of its Ring/LL protocol (NVIDIA/nccl src/graph/tuning.cc, hwLat: NVLink
# 0.6 us, PCI 1.0 us): the hop latency where one GPU count cannot tell it from the fixed latency
NCCL_HOP_S = {"peer": 0.6e-6, "pcie": 1.0e-6}


def node_nvlink_domain(node: str) -> int:
    """GPUs of a Vidur network node that share the peer link: its ``*_pairwise_nvlink`` nodes
    connect pairs with an NVLink bridge (more GPUs cross PCIe); the ``*_dgx`` nodes all 8."""
    return 2 if "pairwise" in node else 8


def comm_points(data, kind: str, link: str = "peer", node: str = ""):
    """Intra-node measurements (every participant in one node, as TP / PP within a server) of one
    link: ``peer`` (all-reduces inside the node's NVLink domain, sends between two GPUs of a node)
    or ``pcie`` (all-reduces over more GPUs than the domain)."""
    n, size, dpn, y = data
    if kind != "allreduce":
        ok = dpn >= 2
    else:
        dom = node_nvlink_domain(node)
        ok = (dpn == n) & ((n <= dom) if link == "peer" else (n > dom))
    return n[ok], size[ok], y[ok]


def balanced_weights(size, n):
    """Least-squares weights giving every (GPU count, message-size range) cell the same total
    weight: the measured sizes are spaced linearly, so unweighted ~90% of them are above 1 MiB, where
    the latency terms do not show."""
    import numpy as np

    cells = list(zip(np.asarray(n).tolist(), size_range_index(size).tolist()))
    counts: dict = {}
    for c in cells:
        counts[c] = counts.get(c, 0) + 1
    return np.array([1.0 / math.sqrt(counts[c]) for c in cells])


def size_range_index(size):
    """Index into ``SIZE_RANGES`` of each message size."""
    import numpy as np

    return np.searchsorted([hi for _, hi, _ in SIZE_RANGES[:-1]], np.asarray(size, float), side="right")


def fit_comm(data, gpu: GpuSpec, kind: str, link: str = "peer", node: str = "") -> CommEfficiency | None:
    """NCCL's collective parameters on one link from measured all-reduce or send/recv medians:
    the bandwidth protocol's latency and efficiency, the latency protocol's (at most the bandwidth
    protocol's latency, 1-100% of its efficiency, so it can win only at small sizes), the smooth
    max's p, and the hop latency (fitted when the rows have several GPU counts, else NCCL's own
    figure). Least squares on log(predicted / measured), each (GPU count, size range) cell weighted
    equally; the best of a few starts (the minimum over protocols makes the problem piecewise)."""
    import numpy as np

    n, size, y = comm_points(data, kind, link, node)
    if len(y) < 6:
        return None
    op = "allreduce" if kind == "allreduce" else "send"
    bw = gpu.link_bw_bytes_per_s if link == "peer" else gpu.pcie_bw_bytes_per_s
    w = balanced_weights(size, n)
    ly = np.log(y)
    free_hop = op == "allreduce" and len(set(n.tolist())) > 1
    hop0 = NCCL_HOP_S[link] if op == "allreduce" else 0.0
    small = size <= 64 * 1024
    floor = float(np.median(y[small])) if small.any() else float(y.min())
    big = size >= np.percentile(size, 90)
    vol = 2 * (n[big] - 1) / n[big] if op == "allreduce" else 1.0
    eta0 = float(np.clip(np.median(vol * size[big] / y[big]) / bw, 1e-3, 0.9))
    # x = [log latency, eta, LL latency / latency, LL eta / eta, log p, (hop)]
    x0 = [math.log(floor), eta0, 0.5, 0.3, math.log(1.5)] + ([1e-6] if free_hop else [])
    lo = [math.log(1e-7), 1e-4, 0.05, 0.01, math.log(0.5)] + ([0.0] if free_hop else [])
    hi = [math.log(5e-2), 1.0, 1.0, 1.0, math.log(8.0)] + ([2e-5] if free_hop else [])

    def make(x):
        lat, eta = math.exp(x[0]), float(x[1])
        # (the latency protocol's share no lower than a share may be: 1e-4, as a file must hold it)
        return CommEfficiency(eta, lat, float(x[5]) if free_hop else hop0, float(math.exp(x[4])),
                              lat * float(x[2]), max(eta * float(x[3]), 1e-4))

    def res(x):
        return w * (np.log(collective_time_np(op, size, n, bw, 0.0, make(x))) - ly)

    starts = [x0, [x0[0] + math.log(0.5)] + x0[1:], [x0[0] + math.log(2.0)] + x0[1:], x0[:2] + [0.2, 0.15] + x0[4:]]
    best = None
    for x in starts:
        r = _lsq_result(res, x, lo, hi)
        if best is None or r.cost < best.cost:
            best = r
    return _rounded(make(best.x))


COMM_FIT_FAMILIES = ("allreduce", "allreduce_pcie", "send_recv")


def comm_data(profiles: Profiles):
    """(family, kind, link, (node, data)) of each collective family the profiles measure."""
    return [(fam, kind, link, data) for fam, kind, link, data in (
        ("allreduce", "allreduce", "peer", profiles.allreduce),
        ("allreduce_pcie", "allreduce", "pcie", profiles.allreduce_pcie),
        ("send_recv", "send_recv", "peer", profiles.send_recv)) if data]


def _rounded(obj):
    vals = {f.name: (float(f"{v:.4g}") if isinstance(v, float) else v)
            for f in dataclasses.fields(obj) for v in [getattr(obj, f.name)]}
    return type(obj)(**vals)


def fit_profiles(profiles: Profiles, gpu: GpuSpec) -> Efficiencies:
    """Fitted ``Efficiencies``: GEMM and bandwidth-bound families from the compute profiles,
    collectives from the network ones; families without measurements keep the v0 values."""
    kw = {}
    if profiles.compute:
        kw["gemm"] = fit_gemm(profiles.compute, gpu)
    for fam in ("norm", "activation", "rotary", "residual", "embedding"):
        e = fit_mem(profiles.compute, gpu, fam)
        if e is not None:
            kw[fam] = e
    for fam, kind, link, data in comm_data(profiles):
        e = fit_comm(data[1], gpu, kind, link, data[0])
        if e is not None:
            kw[fam] = e
    f8 = fit_fp8(profiles.fp8, gpu, kw.get("gemm") or Efficiencies().gemm)
    if f8 is not None:
        kw["gemm_fp8"] = f8
    att = fit_attention(profiles.attention, gpu) if profiles.attention else None
    if att is not None:
        kw["attention"] = att
    over = fit_overhead(profiles.cpu)
    if over is not None:
        kw["overhead"] = over
    nodes = ", ".join(f"{fam} from network/{data[0]}" for fam, _, _, data in comm_data(profiles) if fam in kw)
    kw["source"] = ((f"fitted to {len(profiles.compute)} compute profiles for {gpu.name}" if profiles.compute
                     else f"fitted to network timings for {gpu.name}")
                    + (f"; {nodes}" if nodes else "")
                    + (f"; attention from {plural(len(profiles.attention), 'attention profile')}" if att is not None
                       else "; attention not measured (v0 values)" if profiles.compute else "")
                    + (f"; per-step CPU overhead from {plural(len(profiles.cpu), 'cpu_overheads profile')}"
                       if over is not None else "")
                    + (f"; FP8 GEMMs from {plural(len(profiles.fp8), 'fp8_gemm profile')}" if f8 is not None else ""))
    return Efficiencies(**kw)
