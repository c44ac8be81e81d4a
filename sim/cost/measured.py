"""Measured operator times: a step's per-layer kernels priced from profiled timings of the exact
model shape and TP size (Vidur's way), instead of the fitted roofline.

Why: the fitted roofline is smooth in the token count and cuBLAS is not. At some token counts the
library switches GEMM kernels and the measured time jumps by 30-70% over a range of tokens (A40,
Llama-2-7B at TP 8: MLP up 0.143 ms at 632 tokens, 0.242 ms at 640). A user who has profiled their
model on their GPU (Vidur's ``mlp.csv`` format, ``sim/cost/profiles.py`` reads it) can have
those kernels priced from the measurements: ``cost.profiles`` in a scenario, ``--profiles`` for
``servesim cost``.

Contract (``interp_time``): at a measured token count the price is the measurement (the median;
repeated rows averaged). Between two measured counts it is the roofline's time times the ratio
measured / roofline, interpolated linearly between the two: the roofline carries the shape (its
tile-quantization steps, e.g. at 128 tokens) and the measurements the level. Outside the measured
range it is the nearest measurement scaled by ``roof(T) / roof(edge)``. (Held out, pricing each
point from its neighbours, this beats interpolating the times themselves at the tile steps:
``servesim validate-cost --measured``.) Only time comes from the measurements: an operator's
FLOPs and bytes (and so MFU, MBU and its bound) stay the model's. Operators the profile
lacks (attention, the LM head, collectives) keep the calibrated roofline. The measurements are fp16,
so they are refused for other weight dtypes; MoE layers are not covered.
"""

from __future__ import annotations

import dataclasses
import functools
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from servesim.errors import InputError

# CostModel operator -> the mlp.csv kernels whose per-kernel times price it (norms: the two
# RMSNorms of a layer are the same kernel on the same shape; their mean prices each of the step's)
KERNELS = {"qkv_proj": ("attn_pre_proj",), "o_proj": ("attn_post_proj",), "mlp_up": ("mlp_up_proj",),
           "mlp_down": ("mlp_down_proj",), "mlp_act": ("mlp_act",), "rotary": ("attn_rope",),
           "norms": ("input_layernorm", "post_attention_layernorm"), "residual": ("add",),
           "embedding": ("emb",)}
MEASURED_DTYPES = ("bf16", "fp16")  # the profiles are fp16; bf16 kernels run at the same speed


def interp_time(xs, ys, x: float, roof) -> float:
    """The price at ``x`` tokens from measurements ``ys`` at ascending token counts ``xs`` (the
    module's contract); ``roof(tokens)`` is the roofline time, which shapes the price between and
    beyond the measured counts (never used at one)."""
    if x <= xs[0]:
        return ys[0] if x == xs[0] else ys[0] * roof(x) / roof(xs[0])
    if x >= xs[-1]:
        return ys[-1] if x == xs[-1] else ys[-1] * roof(x) / roof(xs[-1])
    i = bisect_right(xs, x)
    x0, x1 = xs[i - 1], xs[i]
    if x == x0:
        return ys[i - 1]
    r0, r1 = ys[i - 1] / roof(x0), ys[i] / roof(x1)
    return roof(x) * (r0 + (r1 - r0) * (x - x0) / (x1 - x0))


@dataclass(frozen=True)
class MeasuredOps:
    """Per-kernel measured times of one model shape at one TP size on one GPU.

    ``tables`` is ``((op, token_counts, seconds), ...)`` with ascending token counts."""

    source: str  # the mlp.csv it came from
    tp: int
    tables: tuple

    def __post_init__(self):
        object.__setattr__(self, "_by_op", {op: (xs, ys) for op, xs, ys in self.tables})

    @property
    def ops(self) -> tuple:
        return tuple(op for op, _, _ in self.tables)

    def time_s(self, op: str, tokens: float, model_s: float, roof) -> float:
        """The price of one ``op`` kernel at ``tokens``: measured (``interp_time``), or ``model_s``
        when the profile lacks ``op``."""
        tab = self._by_op.get(op)
        if tab is None:
            return model_s
        return interp_time(tab[0], tab[1], tokens, roof)


def tables_of(profile, tp: int) -> tuple:
    """``MeasuredOps.tables`` of one ``ComputeProfile`` at one TP size: per operator, the token
    counts measured and their mean median time."""
    import numpy as np

    rows = profile.tp == tp
    out = []
    for op, kernels in KERNELS.items():
        cols = [profile.ops[k][rows] for k in kernels if k in profile.ops]
        if not cols:
            continue
        y = np.mean(cols, axis=0)
        x = profile.tokens[rows].astype(float)
        ok = ~np.isnan(y)
        if not ok.any():
            continue
        xs, inv = np.unique(x[ok], return_inverse=True)
        ys = np.bincount(inv, weights=y[ok]) / np.bincount(inv)
        out.append((op, tuple(xs.tolist()), tuple(ys.tolist())))
    return tuple(out)


def _shape(n_head, n_kv, hidden, inter, gated) -> str:
    return f"{n_head} heads, {n_kv} KV heads, hidden {hidden}, MLP {inter}{' gated' if gated else ''}"


@functools.lru_cache(maxsize=64)
def _load(root: str, gpu, device: str | None, shape: tuple, tp: int, model_name: str, where: str) -> MeasuredOps:
    from servesim.cost.profiles import find_profiles

    prof = find_profiles(root, gpu.name, device, where=where)
    def shape_of(p):
        return p.n_head, p.n_kv_head, p.hidden, p.inter, p.gated

    match = [p for p in prof.compute if shape_of(p) == shape]
    if not match:
        have = "; ".join(f"{p.model} ({_shape(*shape_of(p))})" for p in prof.compute)
        raise InputError(f"{where}: no profile under {root} matches {model_name} ({_shape(*shape)}); "
                         f"profiles there: {have}")
    for p in match:
        if (p.tp == tp).any():
            from servesim.cost.fitting import check_units

            # (times in seconds would price every kernel 1000x fast, without a word)
            check_units(dataclasses.replace(prof, compute=[p], allreduce=None, send_recv=None, allreduce_pcie=None),
                        gpu)
            return MeasuredOps(str(p.path), tp, tables_of(p, tp))
    tps = sorted({int(t) for p in match for t in p.tp.tolist()})
    raise InputError(f"{where}: {match[0].path} has no measurements at TP {tp}; measured TP sizes: "
                     f"{', '.join(map(str, tps))}")


def load_measured(root: str | Path, model, tp: int, gpu, dtype: str = "bf16", device: str | None = None,
                  where: str = "cost.profiles") -> MeasuredOps:
    """The measured kernel times of ``model`` at TP ``tp`` from a Vidur-format profiling folder
    (``compute/<device>/<org>/<model>/mlp.csv``, or a folder of ``mlp.csv`` files directly),
    matched by the model's shape (heads, KV heads, hidden, MLP size, gating), not its name.
    Every way it cannot serve the request is an ``InputError`` naming ``where``."""
    if dtype not in MEASURED_DTYPES:
        flag = "--dtype" if where.startswith("--") else "hardware.dtype"  # (servesim cost, or a scenario)
        raise InputError(f"{where}: the profiles are fp16 kernel timings; they cannot price {dtype} weights "
                         f"(use {flag} bf16 or fp16, or leave {where} unset)")
    if model.is_moe:
        raise InputError(f"{where}: {model.name} is a mixture-of-experts model; measured profiles cover "
                         "dense MLPs only (leave it unset to use the calibrated roofline)")
    if model.is_mla:
        raise InputError(f"{where}: {model.name} uses multi-head latent attention; measured profiles cover "
                         "standard attention projections only (leave it unset to use the calibrated roofline)")
    shape = (model.num_heads, model.num_kv_heads, model.hidden_size, model.intermediate_size, bool(model.gated_mlp))
    return _load(str(root), gpu, device, shape, int(tp), model.name, where)
