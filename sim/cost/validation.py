"""Predicted vs measured operator times: MAPE and worst case per family, model and TP size.

``validate(profiles, gpu, eff)`` predicts every measurement of the profiles with the cost model's
time models (the vectorized twins in ``sim/cost/fitting.py``) and returns plain rows; the CLI
prints them and ``plot_predicted_vs_measured`` draws them (matplotlib, Agg).

Families: ``linear`` is the per-layer sum QKV + O + MLP up + MLP down at one token count (the
quantity a step's time is built from); ``qkv_proj``, ``o_proj``, ``mlp_up``, ``mlp_down`` each
GEMM alone; ``norm``, ``activation``, ``rotary``, ``residual``, ``embedding`` the bandwidth-bound
kernels; ``attention`` the attention kernel (+ KV-cache write) per layer, from ``attention.csv``
when the profiles have it (worst at: KV tokens touched); ``allreduce`` (peer link),
``allreduce_pcie`` and ``send_recv`` the intra-node NCCL collectives by number of GPUs and by
message-size range; ``overhead`` the per-step CPU time, from
``cpu_overheads.csv`` when the profiles have it (per model and TP; worst at: batch size).
"""

from __future__ import annotations

from servesim.cost.efficiency import Efficiencies, OverheadFit
from servesim.cost.comm import SIZE_RANGES, collective_time_np
from servesim.cost.fitting import (COMM_FIT_FAMILIES, attention_points, attention_time_np, comm_data, comm_points,
                                   cpu_points, fits_fp8, fp8_gemm_time_np, fp8_points, gemm_dims, gemm_points,
                                   gemm_time_np, mem_points, mem_time_np, overhead_time_np, size_range_index)
from servesim.cost.profiles import GEMM_OPS, PROFILE_DTYPE_BYTES, Profiles
from servesim.inputs.specs import GpuSpec

MEM_FAMILIES = ("norm", "activation", "rotary", "residual", "embedding")


def _err_rows(family, pred, meas, groups, xs):
    """One row per group (and one ``all`` row) of |pred/meas - 1| statistics."""
    import numpy as np

    e = np.abs(pred / meas - 1.0)
    if not len(e):  # (nothing measured in this family: no row rather than an argmax of nothing)
        return []
    rows = []
    ids: dict = {}
    gid = np.array([ids.setdefault(g, len(ids)) for g in groups])
    for k in sorted(ids):
        s = gid == ids[k]
        i = int(np.argmax(e[s]))
        rows.append({"family": family, "model": k[0], "tp": k[1], "points": int(s.sum()),
                     "mape": float(e[s].mean()), "worst": float(e[s].max()), "worst_at": float(xs[s][i])})
    i = int(np.argmax(e))
    rows.append({"family": family, "model": "all", "tp": "all", "points": int(len(e)), "mape": float(e.mean()),
                 "worst": float(e.max()), "worst_at": float(xs[i])})
    return rows


def comm_predicted(gpu: GpuSpec, eff: Efficiencies, family: str, n, size):
    """Predicted times of measured NCCL collectives (``family``: ``allreduce``, ``allreduce_pcie``
    or ``send_recv``) on the link the family prices: the measurements are NCCL's alone, so the
    engine's custom all-reduce takes no part."""
    if family == "send_recv":
        return collective_time_np("send", size, n, gpu.link_bw_bytes_per_s, gpu.link_latency_s, eff.send_recv)
    bw = gpu.link_bw_bytes_per_s if family == "allreduce" else gpu.pcie_bw_bytes_per_s
    return collective_time_np("allreduce", size, n, bw, gpu.link_latency_s, getattr(eff, family))


def comm_rows(family, pred, meas, node, n, size):
    """``_err_rows`` of a collective: one row per GPU count, one per message-size range
    (``SIZE_RANGES``; model ``<node> <range>``, GPUs ``all``), then the ``all`` row."""
    rows = _err_rows(family, pred, meas, [(node, int(k)) for k in n], size)
    idx = size_range_index(size)
    for i, (_, _, label) in enumerate(SIZE_RANGES):
        s = idx == i
        if s.any():
            rows.insert(len(rows) - 1, _err_rows(family, pred[s], meas[s], [(f"{node} {label}", "all")] * int(s.sum()),
                                                 size[s])[0])
    return rows


def _validate_compute(profiles: Profiles, gpu: GpuSpec, eff: Efficiencies, max_tokens: int, rows: list,
                      points: dict) -> None:
    """``validate``'s rows and points of the compute families (the GEMMs, their per-layer sum and the
    bandwidth-bound kernels), added to ``rows`` and ``points``."""
    import numpy as np

    peak, bw = gpu.peak_flops, gpu.mem_bw_bytes_per_s
    M, K, N, y, model, tp, op = gemm_points(profiles.compute)
    keep = M <= max_tokens
    M, K, N, y, model, tp, op = M[keep], K[keep], N[keep], y[keep], model[keep], tp[keep], op[keep]
    pred = gemm_time_np(M, K, N, PROFILE_DTYPE_BYTES, peak, bw, eff.gemm)
    # linear: sum of the four GEMMs per (model, tp, num_tokens) row, measured twice -> each row
    key = list(zip(model.tolist(), tp.tolist(), M.tolist()))
    sums: dict = {}
    for i, k in enumerate(key):
        s = sums.setdefault(k, [0.0, 0.0, 0])
        s[0] += y[i]
        s[1] += pred[i]
        s[2] += 1
    # repeated token counts hold two measurements of each op: average them (counts are multiples of 4)
    lk = [k for k, v in sums.items() if v[2] % 4 == 0]
    lm = np.array([sums[k][0] / (sums[k][2] // 4) for k in lk])
    lp = np.array([sums[k][1] / (sums[k][2] // 4) for k in lk])
    rows += _err_rows("linear", lp, lm, [(k[0], int(k[1])) for k in lk], np.array([k[2] for k in lk]))
    points["linear"] = (lm, lp)
    for name in ("qkv_proj", "o_proj", "mlp_up", "mlp_down"):
        s = op == name
        rows += _err_rows(name, pred[s], y[s], [(a, int(b)) for a, b in zip(model[s], tp[s])], M[s])
        points[name] = (y[s], pred[s])
    for fam in MEM_FAMILIES:
        pts = mem_points(profiles.compute, fam)
        if pts is None:
            continue
        b, ym, mm, tt, _, tok = pts
        keep = tok <= max_tokens
        b, ym, mm, tt, tok = b[keep], ym[keep], mm[keep], tt[keep], tok[keep]
        pm = mem_time_np(b, bw, getattr(eff, fam))
        rows += _err_rows(fam, pm, ym, [(a, int(c)) for a, c in zip(mm, tt)], tok)
        points[fam] = (ym, pm)


def validate(profiles: Profiles, gpu: GpuSpec, eff: Efficiencies, max_tokens: int = 4096) -> dict:
    """``{"rows": [...], "points": {family: (measured, predicted)}}`` over num_tokens <= max_tokens."""
    rows, points = [], {}
    if profiles.compute:
        _validate_compute(profiles, gpu, eff, max_tokens, rows, points)
    att = attention_points(profiles.attention) if profiles.attention else None
    if att is not None:
        a, labels = att
        pa = attention_time_np(a["qd"], a["kv_tok"], a["tok"], a["pairs"], a["ctx"], gpu.peak_flops,
                               gpu.mem_bw_bytes_per_s, eff.attention)
        rows += _err_rows("attention", pa, a["y"], [(m, int(t)) for m, t in zip(labels, a["tp"])], a["ctx"])
        points["attention"] = (a["y"], pa)
    if fits_fp8(profiles.fp8, gpu):
        M8, K8, N8, y8 = fp8_points(profiles.fp8)
        p8 = fp8_gemm_time_np(M8, K8, N8, gpu, eff.gemm, eff.gemm_fp8)
        rows += _err_rows("gemm_fp8", p8, y8, [("fp8_gemm.csv", "all")] * len(y8), M8)
        points["gemm_fp8"] = (y8, p8)
    for fam, kind, link, data in comm_data(profiles):
        n, size, yc = comm_points(data[1], kind, link, data[0])
        if not len(yc):
            continue
        pc = comm_predicted(gpu, eff, fam, n, size)
        rows += comm_rows(fam, pc, yc, data[0], n, size)
        points[fam] = (yc, pc)
    if profiles.cpu:
        # per-step CPU overhead by batch size; without a fit, the default engine profile's figures
        # (the CPU work before any overlap with the GPU), which a run would use
        from servesim.cost.engines import DEFAULT_ENGINE, PROFILES

        B, T, yo, mo = cpu_points(profiles.cpu)
        p = PROFILES[DEFAULT_ENGINE]
        fit = eff.overhead or OverheadFit((1,), (p.step_s,), (p.per_seq_s,))
        po = overhead_time_np(B, T, fit)
        rows += _err_rows("overhead", po, yo, [(m, int(t)) for m, t in zip(mo, T)], B)
        points["overhead"] = (yo, po)
    return {"rows": rows, "points": points}


def validate_measured(profiles: Profiles, gpu: GpuSpec, eff: Efficiencies, max_tokens: int = 4096) -> dict:
    """``validate``'s rows and points for pricing from measurements (``cost.profiles``), held out:
    each GEMM measurement at a token count <= ``max_tokens`` is predicted by ``interp_time`` from
    the same operator's other measurements (leave one out: its neighbours, twice the grid spacing
    apart, or the roofline-scaled edge), i.e. the price of a token count the profile lacks.
    Families: ``linear`` (per-layer sum, as in ``validate``) and the four GEMMs."""
    import numpy as np

    from servesim.cost.measured import interp_time, tables_of

    peak, bw = gpu.peak_flops, gpu.mem_bw_bytes_per_s
    rows, points = [], {}
    per_op: dict = {name: ([], [], [], []) for name in ("qkv_proj", "o_proj", "mlp_up", "mlp_down")}
    lin: dict = {}
    for p in profiles.compute:
        for tp in sorted({int(t) for t in p.tp.tolist()}):
            dims = {GEMM_OPS[k]: v for k, v in gemm_dims(p, tp).items()}
            for op, xs, ys in tables_of(p, tp):
                if op not in dims or len(xs) < 3:
                    continue
                K, N = dims[op]

                def roof(x, K=K, N=N):
                    return float(gemm_time_np(x, K, N, PROFILE_DTYPE_BYTES, peak, bw, eff.gemm))

                for i, x in enumerate(xs):
                    if x > max_tokens:
                        break
                    pred = interp_time(xs[:i] + xs[i + 1:], ys[:i] + ys[i + 1:], x, roof)
                    for lst, v in zip(per_op[op], (pred, ys[i], (p.model, tp), x)):
                        lst.append(v)
                    acc = lin.setdefault((p.model, tp, x), [0.0, 0.0, 0])
                    acc[0] += ys[i]
                    acc[1] += pred
                    acc[2] += 1
    keys = [k for k, v in lin.items() if v[2] == 4]
    if keys:
        lm = np.array([lin[k][0] for k in keys])
        lp = np.array([lin[k][1] for k in keys])
        rows += _err_rows("linear", lp, lm, [(k[0], k[1]) for k in keys], np.array([k[2] for k in keys]))
        points["linear"] = (lm, lp)
    for op, (pred, meas, groups, xs) in per_op.items():
        if pred:
            rows += _err_rows(op, np.array(pred), np.array(meas), groups, np.array(xs))
            points[op] = (np.array(meas), np.array(pred))
    return {"rows": rows, "points": points}


def validate_held_out_models(profiles: Profiles, gpu: GpuSpec, max_tokens: int = 4096, progress=None) -> dict:
    """``validate``'s rows and points for models the fit never saw: each model's profiles (compute
    and attention) predicted by ``fit_profiles`` on the other models' profiles alone (leave one
    model out), i.e. the accuracy to expect for a model priced from its ``config.json`` without
    measurements. Collectives are left out (they do not depend on the model). ``progress(model)``:
    called after each model."""
    import dataclasses

    import numpy as np

    from servesim.cost.fitting import fit_profiles
    from servesim.errors import InputError

    models = list(dict.fromkeys(p.model for p in profiles.compute))
    if len(models) < 2:
        raise InputError(f"--held-out-models needs profiles of at least two models; found {', '.join(models)}")
    rows, pts, worst = [], {}, {}
    for m in models:
        rest = dataclasses.replace(profiles, compute=[p for p in profiles.compute if p.model != m],
                                   attention=[a for a in profiles.attention if a.model != m])
        own = dataclasses.replace(profiles, compute=[p for p in profiles.compute if p.model == m],
                                  attention=[a for a in profiles.attention if a.model == m],
                                  allreduce=None, send_recv=None, allreduce_pcie=None)
        v = validate(own, gpu, fit_profiles(rest, gpu), max_tokens)
        for r in v["rows"]:
            if r["model"] != "all":
                rows.append(r)
            elif r["family"] not in worst or r["worst"] > worst[r["family"]]["worst"]:
                worst[r["family"]] = r
        for fam, (meas, pred) in v["points"].items():
            acc = pts.setdefault(fam, ([], []))
            acc[0].append(meas)
            acc[1].append(pred)
        if progress is not None:
            progress(m)
    points = {fam: (np.concatenate(a), np.concatenate(b)) for fam, (a, b) in pts.items()}
    for fam, (meas, pred) in points.items():
        e = np.abs(pred / meas - 1.0)
        rows.append({"family": fam, "model": "all", "tp": "all", "points": int(len(e)), "mape": float(e.mean()),
                     "worst": float(e.max()), "worst_at": worst[fam]["worst_at"]})
    return {"rows": rows, "points": points}


def format_table(rows: list, families=None) -> str:
    """A Markdown table: family, model, TP / GPUs, points, MAPE, worst (at)."""
    out = ["| family | model / node | TP / GPUs | points | MAPE | worst | worst at |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if families and r["family"] not in families:
            continue
        at = r["worst_at"]
        unit = " seqs" if r["family"] == "overhead" else " B" if r["family"] in COMM_FIT_FAMILIES else " tok"
        out.append(f"| {r['family']} | {r['model']} | {r['tp']} | {r['points']} | {100 * r['mape']:.1f}% | "
                   f"{100 * r['worst']:.1f}% | {at:.0f}{unit} |")
    return "\n".join(out)


def plot_predicted_vs_measured(points: dict, title: str, path) -> None:
    import numpy as np

    from servesim.plots.figures import _plain_log_ticks, subplots

    fams = [f for f in points if len(points[f][0])]  # (a family with no point has no panel)
    cols = 3
    rows = -(-len(fams) // cols)
    fig, axes = subplots(rows, cols, figsize=(4 * cols, 3.6 * rows), squeeze=False)
    for ax, fam in zip(axes.flat, fams):
        meas, pred = points[fam]
        ax.loglog(meas * 1e6, pred * 1e6, ".", ms=2, alpha=0.5)
        lo, hi = float(np.min([meas.min(), pred.min()])) * 1e6, float(np.max([meas.max(), pred.max()])) * 1e6
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.plot([lo, hi], [lo * 1.25, hi * 1.25], "k:", lw=0.6)
        ax.plot([lo, hi], [lo / 1.25, hi / 1.25], "k:", lw=0.6)
        e = np.abs(pred / meas - 1)
        ax.set_title(f"{fam}: MAPE {100 * e.mean():.1f}%, worst {100 * e.max():.0f}%", fontsize=9)
        ax.set_xlabel("measured (us)", fontsize=8)
        ax.set_ylabel("predicted (us)", fontsize=8)
        # plain numbers (a panel within one decade labelled its minor ticks "2x10^0 3x10^0 4x10^0",
        # one over the next)
        _plain_log_ticks(ax.xaxis)
        _plain_log_ticks(ax.yaxis)
    for ax in list(axes.flat)[len(fams):]:
        ax.axis("off")
    fig.suptitle(title + " (dotted: +-25%)", fontsize=10)
    # (room at the top for the title: laid out without it, it sat over the first row's titles)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    fig.savefig(path, dpi=110)
