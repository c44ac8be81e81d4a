"""Calibration: fit the operator-family efficiencies to measured kernel timings, load the fits,
and pick the efficiencies a GPU runs with.

Measurements are read in the column format of Vidur's profiling data (``compute/<device>/<org>/
<model>/mlp.csv``: per-layer non-attention operators by ``num_tokens`` and TP size, medians in ms;
``network/<node>/all_reduce.csv`` and ``send_recv.csv``: collectives by message size in bytes).
Each family is fitted with ``scipy.optimize.least_squares`` on log(predicted) - log(measured), so
every point weighs by its relative error. The model equations are those of
``sim/cost/efficiency.py``; the vectorized twins below are kept equal to the scalar ones in
``sim/cost/roofline.py`` by a test.

Nothing here runs in the simulation's hot path; numpy and scipy are imported lazily.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import math
from dataclasses import dataclass
from datetime import date
from importlib import resources
from pathlib import Path

from servesim.cost.efficiency import (DEFAULT_EFFICIENCIES, LOWBIT_TILE_M, CommEfficiency, Efficiencies, GemmEfficiency,
                                 MemEfficiency, OpEfficiency, OverheadFit, from_dict)
from servesim.cost.smoothmax import smooth_max_np
from servesim.errors import InputError
from servesim.inputs.specs import GPUS, GpuSpec

PROFILE_DTYPE_BYTES = 2.0  # the profiles were measured in fp16
ACT = 2.0

# measured column -> (family, kernel) ; GEMM ops map to the CostModel's operator names
GEMM_OPS = {"attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj", "mlp_up_proj": "mlp_up",
            "mlp_down_proj": "mlp_down"}
MEM_OPS = {"input_layernorm": "norm", "post_attention_layernorm": "norm", "attn_rope": "rotary",
           "mlp_act": "activation", "add": "residual", "emb": "embedding"}
SHAPE_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp", "num_tokens",
                 "num_tensor_parallel_workers")
NET_COLUMNS = ("num_workers", "size", "devices_per_node")

# device folder names in the profiles for our catalog GPUs (others: --device)
DEVICE_DIRS = {"a100-80g": "a100", "a100-40g": "a100", "a40": "a40", "h100-sxm": "h100"}


# ---------------------------------------------------------------- reading profiles
@dataclass
class ComputeProfile:
    """One mlp.csv as columns (numpy arrays); ``ops[name]`` are medians in seconds (NaN: absent)."""

    path: Path
    model: str
    tp: "object"
    tokens: "object"
    n_head: int
    n_kv_head: int
    hidden: int
    inter: int
    gated: bool
    ops: dict


def _read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    try:
        with open(path, newline="") as fh:
            rows = list(csv.reader(fh))
    except OSError as e:
        raise InputError(f"cannot read profile {path}: {e}") from None
    except csv.Error as e:
        raise InputError(f"{path}: not a valid CSV file: {e}") from None
    if not rows:
        raise InputError(f"{path}: empty file, expected a header row and measurements")
    return rows[0], rows[1:]


def _column(path, header, rows, name, conv, required=True):
    import numpy as np

    if name not in header:
        if required:
            raise InputError(f"{path}: missing column {name!r}")
        return None
    i = header.index(name)
    out = []
    for line, r in enumerate(rows, start=2):
        v = r[i] if i < len(r) else ""
        if v == "" and conv is float:
            out.append(math.nan)  # an empty cell: not measured
            continue
        try:
            x = conv(v)
        except ValueError:
            raise InputError(f"{path}: line {line}: column {name!r}: cannot read {v!r} as a number") from None
        if conv is float and not math.isfinite(x):
            raise InputError(f"{path}: line {line}: column {name!r}: {v!r} is not a finite number "
                             "(leave the cell empty when not measured)")
        if conv is int and not -(2**31) < x < 2**31:
            raise InputError(f"{path}: line {line}: column {name!r}: {v!r} is out of range")
        out.append(x)
    return np.array(out)


def _bool(v: str) -> bool:
    if v in ("True", "true", "1"):
        return True
    if v in ("False", "false", "0"):
        return False
    raise ValueError(v)


def _check_shape(path, n_head: int, n_kv_head: int, hidden: int, tp, inter: int = 1) -> None:
    """A profile's model shape and TP sizes make sense: positive sizes, and every TP size divides
    the attention heads (as it must to shard them)."""
    import numpy as np

    if min(n_head, n_kv_head, hidden, inter) < 1 or hidden < n_head:
        raise InputError(f"{path}: n_head, n_kv_head, n_embd (>= n_head) and the MLP width must be positive, got "
                         f"{n_head}, {n_kv_head}, {hidden}, {inter}")
    bad = np.asarray(tp)[n_head % np.asarray(tp) != 0]
    if bad.size:
        raise InputError(f"{path}: num_tensor_parallel_workers {int(bad[0])} does not divide the {n_head} heads")


def read_compute_profile(path: Path, model: str | None = None) -> ComputeProfile:
    import numpy as np

    header, rows = _read_csv(path)
    if not rows:
        raise InputError(f"{path}: no measurement rows")
    cols = {c: _column(path, header, rows, c, _bool if c == "use_gated_mlp" else int) for c in SHAPE_COLUMNS}
    for c in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp"):
        if len(set(cols[c].tolist())) != 1:
            raise InputError(f"{path}: column {c!r} must hold one value (one model per file)")
    if (cols["num_tokens"] <= 0).any() or (cols["num_tensor_parallel_workers"] <= 0).any():
        raise InputError(f"{path}: num_tokens and num_tensor_parallel_workers must be positive")
    _check_shape(path, int(cols["n_head"][0]), int(cols["n_kv_head"][0]), int(cols["n_embd"][0]),
                 cols["num_tensor_parallel_workers"], int(cols["n_expanded_embd"][0]))
    ops = {}
    for op in (*GEMM_OPS, *MEM_OPS):
        col = _column(path, header, rows, f"time_stats.{op}.median", float, required=op in GEMM_OPS)
        if col is not None:
            if (col[~np.isnan(col)] <= 0).any():
                raise InputError(f"{path}: column 'time_stats.{op}.median' has non-positive times")
            ops[op] = col * 1e-3  # ms -> s
    return ComputeProfile(path, model or f"{path.parent.parent.name}/{path.parent.name}",
                          cols["num_tensor_parallel_workers"], cols["num_tokens"],
                          int(cols["n_head"][0]), int(cols["n_kv_head"][0]), int(cols["n_embd"][0]),
                          int(cols["n_expanded_embd"][0]), bool(cols["use_gated_mlp"][0]), ops)


def read_network_profile(path: Path, op: str):
    """(num_workers, size_bytes, devices_per_node, median_s) arrays of one all_reduce/send_recv.csv."""
    header, rows = _read_csv(path)
    if not rows:
        raise InputError(f"{path}: no measurement rows")
    n = _column(path, header, rows, "num_workers", int)
    size = _column(path, header, rows, "size", float)
    dpn = _column(path, header, rows, "devices_per_node", int)
    y = _column(path, header, rows, f"time_stats.{op}.median", float) * 1e-3
    if not ((size > 0).all() and (n > 0).all()):
        raise InputError(f"{path}: size and num_workers must be positive (and present on every row)")
    if not (y > 0).all():
        line = 2 + next(i for i, v in enumerate(y.tolist()) if not v > 0)
        raise InputError(f"{path}: line {line}: time_stats.{op}.median must be a positive time (ms)")
    return n, size, dpn, y


ATTN_COLUMNS = ("n_embd", "n_q_head", "n_kv_head", "num_tensor_parallel_workers", "batch_size",
                "prefill_chunk_size", "kv_cache_size")


@dataclass
class AttentionProfile:
    """One attention.csv as columns: each row one attention kernel call of one layer, either a
    prefill chunk of ``chunk`` tokens after ``kv`` cached ones (batch 1), or a decode step of
    ``batch`` sequences each holding ``kv`` cached tokens. ``y`` is its median in seconds, the
    attention kernel plus, when measured, the KV-cache write (``attn_kv_cache_save``): the cost
    model's ``attention`` operator covers both."""

    path: Path
    model: str
    tp: "object"
    batch: "object"
    chunk: "object"
    kv: "object"
    is_prefill: "object"
    n_q_head: int
    n_kv_head: int
    hidden: int
    y: "object"


def read_attention_profile(path: Path, model: str | None = None) -> AttentionProfile:
    """Vidur's ``attention.csv`` (``vidur/profiling/attention``): rows whose own kernel's median
    is empty (a prefill row's decode column and vice versa) use the other; rows with neither are
    skipped."""
    import numpy as np

    header, rows = _read_csv(path)
    if not rows:
        raise InputError(f"{path}: no measurement rows")
    cols = {c: _column(path, header, rows, c, int) for c in ATTN_COLUMNS}
    pre = _column(path, header, rows, "is_prefill", _bool)
    for c in ("n_embd", "n_q_head", "n_kv_head"):
        if len(set(cols[c].tolist())) != 1:
            raise InputError(f"{path}: column {c!r} must hold one value (one model per file)")
    if (cols["num_tensor_parallel_workers"] <= 0).any() or (cols["batch_size"] <= 0).any():
        raise InputError(f"{path}: num_tensor_parallel_workers and batch_size must be positive")
    _check_shape(path, int(cols["n_q_head"][0]), int(cols["n_kv_head"][0]), int(cols["n_embd"][0]),
                 cols["num_tensor_parallel_workers"])
    if (cols["kv_cache_size"] < 0).any() or (cols["prefill_chunk_size"] < 0).any():
        raise InputError(f"{path}: kv_cache_size and prefill_chunk_size must be >= 0")
    if (pre & (cols["prefill_chunk_size"] < 1)).any():
        raise InputError(f"{path}: a prefill row (is_prefill True) needs prefill_chunk_size >= 1")
    kern = np.where(pre, _column(path, header, rows, "time_stats.attn_prefill.median", float),
                    _column(path, header, rows, "time_stats.attn_decode.median", float))
    save = _column(path, header, rows, "time_stats.attn_kv_cache_save.median", float, required=False)
    y = kern + (np.nan_to_num(save) if save is not None else 0.0)
    ok = ~np.isnan(y)
    if not ok.any():
        raise InputError(f"{path}: no row has its attention median (time_stats.attn_prefill.median for "
                         "prefill rows, time_stats.attn_decode.median for decode rows)")
    if (y[ok] <= 0).any():
        raise InputError(f"{path}: attention medians must be positive")
    return AttentionProfile(path, model or f"{path.parent.parent.name}/{path.parent.name}",
                            cols["num_tensor_parallel_workers"][ok], cols["batch_size"][ok],
                            cols["prefill_chunk_size"][ok], cols["kv_cache_size"][ok], pre[ok],
                            int(cols["n_q_head"][0]), int(cols["n_kv_head"][0]), int(cols["n_embd"][0]),
                            y[ok] * 1e-3)


# the parts of a step's CPU time Vidur measures (ms); their sum is the cost model's ``overhead``
CPU_PARTS = ("schedule", "prepare_inputs_e2e", "sampler_e2e", "process_model_outputs")
CPU_RPC = "ray_comm_time"  # with TP > 1: the driver's RPC to the workers (absent or 0: none)


@dataclass
class CpuOverheadProfile:
    """One ``cpu_overheads.csv`` as columns: per row a model, batch size (sequences per step) and
    TP size, and ``y`` the step's CPU time in seconds: the medians of ``CPU_PARTS`` plus the RPC."""

    path: Path
    model: "object"
    batch: "object"
    tp: "object"
    y: "object"


def read_cpu_overheads(path: Path) -> CpuOverheadProfile:
    """Vidur's ``cpu_overheads.csv`` (``vidur/profiling/cpu_overhead``): columns ``model_name``,
    ``batch_size``, ``tensor_parallel_degree`` and, in ms, ``<part>_median`` (or ``_mean``) for each
    of ``CPU_PARTS`` and optionally ``ray_comm_time_median`` (or ``_mean``); any letter case."""
    import numpy as np

    header, rows = _read_csv(path)
    if not rows:
        raise InputError(f"{path}: no measurement rows")
    low = [h.strip().lower() for h in header]

    def col(name, conv, required=True):
        return _column(path, low, rows, name, conv, required)

    def part(name, required=True):
        for stat in ("median", "mean"):
            if f"{name}_{stat}" in low:
                return col(f"{name}_{stat}", float)
        if required:
            raise InputError(f"{path}: missing column {name + '_median'!r} (or {name + '_mean'!r}); a "
                             f"cpu_overheads.csv needs {', '.join(p + '_median' for p in CPU_PARTS)}")
        return None

    if "model_name" not in low:
        raise InputError(f"{path}: missing column 'model_name'")
    i = low.index("model_name")
    model = np.array([r[i] if i < len(r) else "" for r in rows])
    batch, tp = col("batch_size", int), col("tensor_parallel_degree", int)
    if (batch <= 0).any() or (tp <= 0).any():
        raise InputError(f"{path}: batch_size and tensor_parallel_degree must be positive")
    y = sum(part(n) for n in CPU_PARTS)
    rpc = part(CPU_RPC, required=False)
    if rpc is not None:
        y = y + np.nan_to_num(rpc)
    ok = ~np.isnan(y)
    if not ok.any():
        raise InputError(f"{path}: no row has all of {', '.join(p + '_median' for p in CPU_PARTS)}")
    if (y[ok] <= 0).any():
        raise InputError(f"{path}: CPU overhead times must be positive")
    return CpuOverheadProfile(path, model[ok], batch[ok], tp[ok], y[ok] * 1e-3)


@dataclass
class Profiles:
    compute: list  # ComputeProfile
    allreduce: tuple | None  # (n, size, dpn, y) from the network node
    send_recv: tuple | None
    where: str  # a description for provenance
    attention: list = dataclasses.field(default_factory=list)  # AttentionProfile
    cpu: list = dataclasses.field(default_factory=list)  # CpuOverheadProfile


def find_profiles(root: str | Path, gpu: str, device: str | None = None, node: str | None = None,
                  where: str = "--profiles") -> Profiles:
    """Profiles of ``gpu`` under ``root``: a Vidur ``profiling`` folder (``compute/<device>/...``,
    ``network/<node>/...``) or a folder of ``<org>/<model>/mlp.csv`` directly. ``where`` names the
    option or field in errors."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"{where}: {str(root)!r} is not a folder")
    dev = device or DEVICE_DIRS.get(gpu, gpu)
    cdir = root / "compute" / dev if (root / "compute").is_dir() else root
    if not cdir.is_dir():
        have = sorted(p.name for p in (root / "compute").iterdir() if p.is_dir())
        raise InputError(f"{where}: no measurements for GPU {gpu!r} (looked for {cdir}); "
                         f"device folders there: {', '.join(have) or 'none'}; "
                         + ("name one with --device" if where == "--profiles" else f"point {where} at one of them"))
    files = sorted(cdir.glob("**/mlp.csv"))
    if not files:
        raise InputError(f"{where}: no mlp.csv files under {cdir}")
    def label(f):
        return str(f.parent.relative_to(cdir)) if f.parent != cdir else f.parent.name

    compute = [read_compute_profile(f, label(f)) for f in files]
    attention = [read_attention_profile(f, label(f)) for f in sorted(cdir.glob("**/attention.csv"))]
    # CPU overheads: next to the compute profiles, under cpu_overhead/<device>/, or (Vidur's first
    # layout) <device>/cpu_overheads.csv
    cpu_files = set(cdir.glob("**/cpu_overheads.csv"))
    for d in (root / "cpu_overhead" / dev, root / dev):
        if d.is_dir() and d != cdir:
            cpu_files |= set(d.glob("**/cpu_overheads.csv") if d.parent.name == "cpu_overhead"
                             else d.glob("cpu_overheads.csv"))
    cpu = [read_cpu_overheads(f) for f in sorted(cpu_files)]
    ar = sr = None
    ndir = root / "network"
    if ndir.is_dir():
        nodes = sorted(p for p in ndir.iterdir() if p.is_dir() and (p.name == node if node else p.name.startswith(dev + "_")))
        if node and not nodes:
            raise InputError(f"--node: no folder {node!r} under {ndir}")
        # prefer a switched node (DGX: every pair on NVSwitch) for TP collectives
        nodes.sort(key=lambda p: ("dgx" not in p.name, p.name))
        for p in nodes:
            if ar is None and (p / "all_reduce.csv").exists():
                ar = (p.name, read_network_profile(p / "all_reduce.csv", "all_reduce"))
            if sr is None and (p / "send_recv.csv").exists():
                sr = (p.name, read_network_profile(p / "send_recv.csv", "send_recv"))
    return Profiles(compute, ar, sr, str(root), attention, cpu)


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
        out["qd"].append(qd.astype(float)); out["kv_tok"].append(2.0 * kvd * PROFILE_DTYPE_BYTES)
        out["y"].append(p.y); out["tp"].append(t); out["model"] += [p.model] * len(p.y)
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
            M.append(p.tokens[ok]); K.append(k[ok]); N.append(n[ok]); y.append(p.ops[name][ok])
            model += [p.model] * int(ok.sum()); tp.append(t[ok]); op += [GEMM_OPS[name]] * int(ok.sum())
    cat = np.concatenate
    return cat(M).astype(float), cat(K).astype(float), cat(N).astype(float), cat(y), np.array(model), cat(tp), np.array(op)


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
            b.append((by[name] + 0 * T)[ok]); y.append(p.ops[name][ok])
            model += [p.model] * int(ok.sum()); tp.append(t[ok]); op += [name] * int(ok.sum()); tok.append(T[ok])
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
        tps.append(int(t)); steps.append(float(f"{x[0]:.4g}")); pers.append(float(f"{x[1]:.4g}"))
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


# ---------------------------------------------------------------- files
COMM_FAMILIES = ("allreduce", "send_recv")


def link_kind(gpu: GpuSpec) -> str:
    """``pcie`` when the GPUs of a node talk only over PCIe (no faster peer link), else ``peer``
    (NVLink, Infinity Fabric)."""
    return "pcie" if gpu.link_bw_bytes_per_s <= gpu.pcie_bw_bytes_per_s else "peer"


FAMILIES = ("gemm", "attention", "norm", "activation", "rotary", "residual", "embedding", "allreduce", "send_recv",
            "overhead")


def calibration_yaml(eff: Efficiencies, gpu: GpuSpec, provenance: str, quality: dict | None = None) -> str:
    import yaml

    body = {"gpu": gpu.name, "source": eff.source}
    d = eff.to_dict()
    v0 = DEFAULT_EFFICIENCIES.to_dict()
    for fam in FAMILIES:
        if d[fam] != v0[fam]:  # families left at the v0 figures are omitted (filled in on load)
            body[fam] = d[fam] if fam != "overhead" else {k: list(v) for k, v in d[fam].items()}
    if quality:
        body["fit_quality"] = quality
    head = "".join(f"# {line}\n" for line in provenance.splitlines())
    return head + yaml.safe_dump(body, sort_keys=False, width=110)


def load_calibration(path: str | Path, where: str = "cost.calibration") -> Efficiencies:
    p = Path(path)
    return from_dict(dict(_raw(p, where)), f"{where}: {p}")


def shipped_calibrations() -> dict[str, Path]:
    """GPU name -> packaged calibration file."""
    d = resources.files("servesim.cost") / "calibrations"
    return {Path(str(f)).stem: Path(str(f)) for f in d.iterdir() if str(f).endswith(".yaml")}


def closest_calibrated(gpu: GpuSpec, calibrated: list[str]) -> str | None:
    """The calibrated GPU most like ``gpu``: same memory kind (HBM / GDDR) first, then the smallest
    log-distance in peak FLOP/s and bandwidth."""
    best = None
    for name in calibrated:
        if name not in GPUS:
            continue
        c = GPUS[name]
        d = (c.mem_kind != gpu.mem_kind,
             abs(math.log(c.peak_flops / gpu.peak_flops)) + abs(math.log(c.mem_bw_bytes_per_s / gpu.mem_bw_bytes_per_s)),
             name)
        best = d if best is None or d < best else best
    return best[2] if best else None


def _raw(path: Path, where: str, cached: bool = False) -> dict:
    if not path.is_file():
        raise InputError(f"{where}: calibration file {str(path)!r} does not exist")
    return _raw_packaged(str(path), where) if cached else _read_raw(str(path), where)


@functools.lru_cache(maxsize=32)
def _raw_packaged(path: str, where: str) -> dict:
    """Packaged calibration files do not change while we run: parse each once (callers copy)."""
    return _read_raw(path, where)


def _read_raw(path: str, where: str) -> dict:
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise InputError(f"{where}: cannot read calibration file {path}: {e}") from None
    if not isinstance(data, dict):
        raise InputError(f"{where}: {path} must hold a mapping of operator families")
    return data


def efficiencies_for(gpu: GpuSpec, calibration: str = "auto", where: str = "cost.calibration") -> Efficiencies:
    """``auto``: the shipped fit of this GPU, else the closest calibrated GPU's (transferred);
    ``none``: the v0 round numbers; otherwise a path to a calibration file.

    With ``auto``, a family the GPU's own fit lacks (A40: no all-reduce measurements) comes from the
    closest calibrated GPU that has it."""
    if calibration == "none":
        return DEFAULT_EFFICIENCIES
    if calibration != "auto":
        return load_calibration(calibration, where)
    shipped = shipped_calibrations()
    if not shipped:
        return DEFAULT_EFFICIENCIES
    own = gpu.name in shipped
    name = gpu.name if own else closest_calibrated(gpu, sorted(shipped))
    if name is None:
        return DEFAULT_EFFICIENCIES
    data = dict(_raw(shipped[name], f"{where} (packaged {name})", True))
    notes = [] if own else [f"transferred from {name}"]
    if not own:
        for fam in COMM_FAMILIES:
            # a collective's efficiency is a share of the GPU's link: it means nothing on a link
            # of another kind (an NVLink fit on a PCIe-only GPU)
            if fam in data and link_kind(GPUS[name]) != link_kind(gpu):
                del data[fam]
    for fam in FAMILIES:
        if fam in data:
            continue
        same_link = fam not in COMM_FAMILIES
        donor = closest_calibrated(GPUS[name], [g for g in sorted(shipped) if g != name and g in GPUS
                                                and fam in _raw(shipped[g], where, True)
                                                and (same_link or link_kind(GPUS[g]) == link_kind(gpu))])
        if donor:
            data[fam] = _raw(shipped[donor], where, True)[fam]
            notes.append(f"{fam} from {donor}")
        elif not same_link:
            notes.append(f"{fam}: v0 (no calibrated GPU with a {link_kind(gpu)} link)")
    eff = from_dict(data, f"{where} (packaged {name})")
    if notes:
        eff = dataclasses.replace(eff, source=f"{eff.source} [{'; '.join(notes)}]")
    return eff


def today() -> str:
    return date.today().isoformat()
