"""The one place that holds roofline efficiencies: what fraction of datasheet peak each operator
family reaches, and the few shape terms that make small kernels slower than the plain roofline.

``DEFAULT_EFFICIENCIES`` are the v0 round, literature-typical figures (not fits): dense GEMMs
reach ~70-80% of tensor peak at large M and ~80-90% of HBM bandwidth when weight-read bound;
FlashAttention-2 forward ~50-70% of peak; elementwise kernels ~70% of bandwidth.

Calibration replaces them with coefficients fitted to measured kernel timings
(``sim/cost/fitting.py``); the fits for the GPUs we have measurements of ship in
``sim/cost/calibrations/*.yaml`` (``sim/cost/calibration.py``) and are turned into an
``Efficiencies`` by ``from_dict``.

Operator time models (M tokens, K x N weight, w / a weight / activation bytes per element):

* GEMM: ``latency_s + smoothmax(C, Mem)`` with
  ``C = (F + tile_quant * (F_padded - F)) / (peak * compute * K / (K + k_half))``,
  ``F = 2 M N K``, ``F_padded`` the same with M rounded up to ``tile_m`` (the tile-quantization
  steps seen in cuBLAS timings; with fp8 or int4 weights at most ``LOWBIT_TILE_M`` rows),
  ``Mem = (w K N + a M (K + N)) / (bw * memory)`` and
  ``smoothmax(x, y) = (x^p + y^p)^(1/p)`` with ``p = smooth`` (``0``: a hard max). Every term only
  ever adds time, so an operator is never faster than its plain roofline.
* Bandwidth-bound kernels (norms, activation, rotary, residual add, embedding): ``kernels x
  latency_s + max(flops / peak, bytes / (bw * memory))``.
* Collectives: ``smoothmax(base_latency_s + hop_latency_s * (n - 1), transfer)`` with ring
  all-reduce transfer ``2 (n - 1) / n * bytes / (link_bw * link)``; ``smooth = 1`` is the sum
  (the alpha-beta model).
* Per-step CPU overhead (``overhead``, when measured): ``step_s + per_seq_s * sequences`` per TP
  size; without a fit the scenario's ``cost.step_overhead_s`` / ``cost.per_seq_overhead_s`` apply.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from servesim.errors import InputError
from servesim.inputs.schema import build_file
from servesim.inputs.schema import field_ as _f


# Rows a low-bit (fp8, int4) weight GEMM pads M to. The fitted ``tile_m`` is cuBLAS's 16-bit
# tiling (the profiles are fp16); at small M, weight-only int4 kernels (Marlin) and vLLM's FP8
# CUTLASS configurations use 16-row tiles, so a decode GEMM stays weight-read bound, as in 16-bit.
LOWBIT_TILE_M = 16


# The families below are also the schema of a calibration file (``from_dict``): the bounds are
# what a file may say; the fits and the v0 figures are built directly.
_SHARE = {"ge": 1e-4, "le": 1, "valid": "in [1e-4, 1]"}  # a fraction of a datasheet peak (fits: >= 0.07)
_LATENCY = {"ge": 0, "le": 1}  # seconds per kernel or hop


def _coefficients(data: dict, path: str) -> dict:
    """Every coefficient of a family is a finite number >= 0 (or null where the field allows it);
    checked before the fields' own bounds, as the one rule they all share."""
    for k, v in data.items():
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v < math.inf):
            raise InputError(f"{path}.{k} must be a finite number >= 0, got {v!r}")
    return data


@dataclass(frozen=True, slots=True)
class OpEfficiency:
    """Plain roofline efficiencies (used for attention, which our measurements do not cover)."""

    compute: float = _f(**_SHARE, doc="fraction of peak FLOP/s")
    memory: float = _f(**_SHARE, doc="fraction of peak HBM bytes/s")
    latency_s: float = _f(0.0, **_LATENCY, doc="per kernel launch")
    expand = staticmethod(_coefficients)


@dataclass(frozen=True, slots=True)
class GemmEfficiency:
    compute: float = _f(**_SHARE, doc="fraction of peak FLOP/s reached at large K")
    memory: float = _f(**_SHARE, doc="fraction of HBM bandwidth when weight-read bound")
    latency_s: float = _f(0.0, **_LATENCY, doc="fixed per-kernel time")
    smooth: float = _f(0.0, ge=0, le=100, doc="p of the smooth max (0: hard max)")
    tile_quant: float = _f(0.0, ge=0, le=1, valid="in [0, 1]", doc="share of the FLOPs of M padded up to tile_m")
    tile_m: int = _f(128, ge=1, le=65536)
    k_half: float = _f(0.0, ge=0, le=1e9, doc="inner dimension at which the compute efficiency is halved (0: none)")
    expand = staticmethod(_coefficients)


@dataclass(frozen=True, slots=True)
class MemEfficiency:
    memory: float = _f(**_SHARE, doc="fraction of HBM bandwidth")
    latency_s: float = _f(0.0, **_LATENCY, doc="fixed per-kernel time")
    expand = staticmethod(_coefficients)


@dataclass(frozen=True, slots=True)
class CommEfficiency:
    link: float = _f(0.80, **_SHARE, doc="fraction of the link bandwidth a collective reaches")
    base_latency_s: float = _f(0.0, **_LATENCY)
    hop_latency_s: float | None = _f(None, **_LATENCY, doc="per (n - 1); None: 2 x the GPU's link_latency_s (v0)")
    smooth: float = _f(1.0, ge=1, le=100, doc="1: latency + transfer (alpha-beta); larger: a smooth max of the two")
    expand = staticmethod(_coefficients)


@dataclass(frozen=True, slots=True)
class OverheadFit:
    """Per-step CPU overhead (scheduling, input preparation, sampling, output processing and, with
    TP > 1, the workers' RPC) fitted per measured TP size: ``step_s + per_seq_s x sequences``."""

    tp: tuple[int, ...] = _f((), ge=1, le=4096)
    step_s: tuple[float, ...] = _f((), ge=0, le=60)
    per_seq_s: tuple[float, ...] = _f((), ge=0, le=1)

    @staticmethod
    def expand(data: dict, path: str) -> dict:
        keys = ("tp", "step_s", "per_seq_s")
        if not set(keys) <= set(data):
            raise InputError(f"{path} needs exactly the keys {list(keys)} (lists, one entry per TP size), got "
                             f"{sorted(data)}")
        return data

    def check(self, path: str) -> None:
        cols = (self.tp, self.step_s, self.per_seq_s)
        if not all(cols) or len({len(c) for c in cols}) != 1:
            raise InputError(f"{path}.tp, .step_s and .per_seq_s must be non-empty lists of one length")
        if not all(t >= 1 for t in self.tp) or len(set(self.tp)) != len(self.tp):
            raise InputError(f"{path}.tp must hold distinct integers >= 1, got {list(self.tp)!r}")
        for k in ("step_s", "per_seq_s"):
            if not all(v >= 0 for v in getattr(self, k)):
                raise InputError(f"{path}.{k} must hold numbers >= 0 (seconds), got {list(getattr(self, k))!r}")

    def at(self, tp: int) -> tuple:
        """(step_s, per_seq_s) of the measured TP size closest to ``tp`` (log distance; a tie
        takes the larger, which pays the workers' RPC as ``tp`` does)."""
        i = min(range(len(self.tp)), key=lambda k: (abs(math.log(self.tp[k] / tp)), -self.tp[k]))
        return self.step_s[i], self.per_seq_s[i]


@dataclass(frozen=True, slots=True)
class Efficiencies:
    gemm: GemmEfficiency = GemmEfficiency(0.75, 0.85)
    attention: OpEfficiency = OpEfficiency(0.60, 0.80)
    norm: MemEfficiency = MemEfficiency(0.70)
    activation: MemEfficiency = MemEfficiency(0.70)
    rotary: MemEfficiency = MemEfficiency(0.70)
    residual: MemEfficiency = MemEfficiency(0.70)
    embedding: MemEfficiency = MemEfficiency(0.70)
    allreduce: CommEfficiency = CommEfficiency()
    send_recv: CommEfficiency = CommEfficiency()
    overhead: OverheadFit | None = None  # None: the scenario's (or the v0) per-step overhead
    source: str = "v0 literature figures (not fitted)"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# written by ``servesim calibrate`` next to the families; not efficiencies, so not read here
FILE_METADATA = ("gpu", "fit_quality")


def from_dict(data: dict, where: str = "calibration") -> Efficiencies:
    """An ``Efficiencies`` from a calibration file's mapping; families it lacks keep the v0 values.
    Errors name ``where`` (the option or field and the file) and the family's field."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: must be a mapping of operator families")
    return build_file(Efficiencies, {k: v for k, v in data.items() if k not in FILE_METADATA}, where,
                      "a calibration file")


DEFAULT_EFFICIENCIES = Efficiencies()
V0_STEP_OVERHEAD_S = 0.002  # v0 round figures: ~2 ms of scheduling, launch and sampling per step
V0_PER_SEQ_OVERHEAD_S = 1e-5


def step_overheads(eff: Efficiencies, tp: int, step_s: float | None = None,
                   per_seq_s: float | None = None) -> tuple:
    """(step_s, per_seq_s, source) of a replica's per-step overhead: each figure the scenario's
    where it sets one, else the calibration's fit at ``tp`` (``overhead``), else the v0 figure."""
    fit = eff.overhead.at(tp) if eff.overhead is not None else None
    out, src = [], []
    for given, k, v0 in ((step_s, 0, V0_STEP_OVERHEAD_S), (per_seq_s, 1, V0_PER_SEQ_OVERHEAD_S)):
        if given is not None:
            out.append(float(given))
            src.append("scenario")
        elif fit is not None:
            out.append(fit[k])
            src.append("calibration")
        else:
            out.append(v0)
            src.append("v0")
    return out[0], out[1], src[0] if src[0] == src[1] else f"{src[0]} (step), {src[1]} (per sequence)"
