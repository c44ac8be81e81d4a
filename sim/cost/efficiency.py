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
  ever adds time, so an operator is never faster than its plain roofline. Kernel timings are
  bursts; a GPU kept busy runs at its power cap with lower clocks, so a run prices GEMMs with
  ``compute x sustained`` (measured where known: H200, 10 s of back-to-back GEMMs).
* Bandwidth-bound kernels (norms, activation, rotary, residual add, embedding): ``kernels x
  latency_s + max(flops / peak, bytes / (bw * memory))``.
* Collectives (``sim/cost/comm.py``): each algorithm ``a`` costs
  ``smoothmax_p(latency_a + steps_a(n) * hop_latency_s, volume_a(n) * bytes / (link_bw * eta_a))``
  and a collective takes the fastest algorithm available at its size: NCCL's ring in two
  protocols (``CommEfficiency``: Simple/LL128, ``base_latency_s`` / ``link``, and LL,
  ``small_latency_s`` / ``small_link``) and, where the engine uses it, a custom all-reduce through
  peer memory (``CustomAllReduce``: one-shot and two-shot, up to ``max_bytes``). ``smooth = 1`` is
  the sum of latency and transfer (the alpha-beta model).
* Per-step CPU overhead (``overhead``, when measured): ``step_s + per_seq_s * sequences`` per TP
  size; it replaces the engine profile's figures (``sim/cost/engines.py``) unless the scenario
  sets ``cost.step_overhead_s`` / ``cost.per_seq_overhead_s``.
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
    smooth: float = _f(0.0, ge=0, le=100, doc="p of the smooth max (0: hard max; else at least 0.5)")
    tile_quant: float = _f(0.0, ge=0, le=1, valid="in [0, 1]", doc="share of the FLOPs of M padded up to tile_m")
    tile_m: int = _f(128, ge=1, le=65536)
    k_half: float = _f(0.0, ge=0, le=1e9, doc="inner dimension at which the compute efficiency is halved (0: none)")
    # (a share of a rate, as _SHARE: sustained 1e-300 ran a 5-request run for 2.7e302 simulated s)
    sustained: float = _f(1.0, **_SHARE,
                          doc="share of the compute rate kept under sustained load (the GPU at its power cap): runs "
                              "price GEMMs at compute x sustained; fits and per-kernel validation, timed in short "
                              "bursts, at compute (1: not measured)")
    expand = staticmethod(_coefficients)

    def check(self, path: str) -> None:
        # (p below 1 blends compute and memory time into more than their sum, by up to 2^(1/p): a
        # calibration file's smooth: 1e-4 overflowed the first step's time, a traceback; the fits
        # give p >= 1, and a collective's smooth is at least 0.5, as here)
        if 0 < self.smooth < 0.5:
            raise InputError(f"{path}.smooth must be 0 (a hard max) or from 0.5 to 100, got {self.smooth:g}")


@dataclass(frozen=True, slots=True)
class Fp8GemmEfficiency:
    """GEMMs with FP8 weights and activations on a GPU with FP8 tensor cores run at the FP8 peak with
    the 16-bit GEMM family's time model, their compute efficiency scaled by ``compute_scale``: the
    share of the FP8 peak the best FP8 GEMMs reach over the share of the 16-bit peak the best 16-bit
    ones reach on the same GPU (the memory side, latency and tiles stay the 16-bit fit's)."""

    compute_scale: float = _f(1.0, ge=1e-4, le=1.5, doc="FP8 GEMM share of the FP8 peak / 16-bit share of the "
                                                    "16-bit peak (1: the same share)")
    expand = staticmethod(_coefficients)

    def applied(self, g: GemmEfficiency) -> GemmEfficiency:
        """The 16-bit family ``g`` as FP8 GEMMs run it (at the FP8 peak): its compute share scaled,
        at most 1."""
        return dataclasses.replace(g, compute=min(1.0, g.compute * self.compute_scale))


@dataclass(frozen=True, slots=True)
class MemEfficiency:
    memory: float = _f(**_SHARE, doc="fraction of HBM bandwidth")
    latency_s: float = _f(0.0, **_LATENCY, doc="fixed per-kernel time")
    expand = staticmethod(_coefficients)


@dataclass(frozen=True, slots=True)
class CommEfficiency:
    """NCCL-style collectives on one kind of link (fitted to measured NCCL timings): a ring whose
    ``2 (n - 1)`` steps (all-reduce; all-gather ``n - 1``, a send 1) each pay ``hop_latency_s``, in
    a bandwidth protocol (Simple/LL128: ``base_latency_s``, ``link``) and, when fitted, a latency
    protocol (LL: ``small_latency_s``, ``small_link``) that wins below some size."""

    link: float = _f(0.80, **_SHARE, doc="fraction of the link bandwidth the bandwidth protocol reaches")
    base_latency_s: float = _f(0.0, **_LATENCY, doc="fixed time of one call of the bandwidth protocol")
    hop_latency_s: float | None = _f(None, **_LATENCY, doc="per ring step; None: the GPU's link_latency_s (v0)")
    smooth: float = _f(1.0, ge=0.5, le=8, doc="p of the smooth max of latency and transfer: 1 = their sum "
                                              "(alpha-beta); > 1 the latency hides behind the transfer; < 1 "
                                              "slower than the sum near the crossover (fewer NCCL channels)")
    small_latency_s: float | None = _f(None, **_LATENCY, doc="fixed time of the latency protocol (NCCL LL); None: none")
    small_link: float | None = _f(None, **_SHARE, doc="fraction of the link bandwidth the latency protocol reaches")
    expand = staticmethod(_coefficients)

    def check(self, path: str) -> None:
        if (self.small_latency_s is None) != (self.small_link is None):
            raise InputError(f"{path}.small_latency_s and .small_link go together (both or neither)")


@dataclass(frozen=True, slots=True)
class CustomAllReduce:
    """An engine's custom all-reduce through peer memory (vLLM ``custom_all_reduce``, TensorRT-LLM's
    one-/two-shot kernels), used inside one NVLink domain for messages up to ``max_bytes``: one-shot
    (one step, every GPU reads all peers' buffers: ``(n - 1) x bytes`` each) and two-shot
    (reduce-scatter + all-gather through peer memory: two steps, ``2 (n - 1) / n x bytes``).

    The defaults are an A100 estimate (sglang PR #2688: vLLM's custom all-reduce on A100 without
    CUDA graphs, 11-14 us at 16 KiB for TP 2-8 and ~184 GB/s one-shot ingress at TP 2; latency
    scaled by H100's graph / no-graph ratio, vLLM PR #24111 vs sglang PR #2904); the H100 fit is in
    ``calibrations/h100-sxm.yaml``."""

    oneshot_latency_s: float = _f(7e-6, **_LATENCY)
    oneshot_link: float = _f(0.6, **_SHARE)
    twoshot_latency_s: float = _f(15e-6, **_LATENCY)
    twoshot_link: float = _f(0.45, **_SHARE)
    max_bytes: int = _f(8 * 2**20, gt=0, le=2**40, doc="largest message it takes (vLLM: 8 MiB)")
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
    gemm_fp8: Fp8GemmEfficiency = Fp8GemmEfficiency()
    attention: OpEfficiency = OpEfficiency(0.60, 0.80)
    norm: MemEfficiency = MemEfficiency(0.70)
    activation: MemEfficiency = MemEfficiency(0.70)
    rotary: MemEfficiency = MemEfficiency(0.70)
    residual: MemEfficiency = MemEfficiency(0.70)
    embedding: MemEfficiency = MemEfficiency(0.70)
    allreduce: CommEfficiency = CommEfficiency()  # over the GPU's peer link (NVLink / NVSwitch)
    allreduce_pcie: CommEfficiency = CommEfficiency()  # TP beyond the NVLink domain: over PCIe
    allreduce_custom: CustomAllReduce = CustomAllReduce()
    send_recv: CommEfficiency = CommEfficiency()
    overhead: OverheadFit | None = None  # None: the scenario's (or the engine profile's) per-step overhead
    source: str = "v0 literature figures (not fitted)"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# written by ``servesim calibrate`` next to the families; not efficiencies, so not read here
FILE_METADATA = ("gpu", "fit_quality")
# the operator families of a calibration file, in the order ``servesim calibrate`` writes them
FAMILIES = tuple(f.name for f in dataclasses.fields(Efficiencies) if f.name != "source")


def from_dict(data: dict, where: str = "calibration") -> Efficiencies:
    """An ``Efficiencies`` from a calibration file's mapping; families it lacks keep the v0 values.
    Errors name ``where`` (the option or field and the file) and the family's field."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: must be a mapping of operator families")
    eff = build_file(Efficiencies, {k: v for k, v in data.items() if k not in FILE_METADATA}, where,
                     "a calibration file")
    if not any(k in FAMILIES for k in data):
        # (with every family missing it would price silently with the v0 figures, as ``none`` does)
        raise InputError(f"{where}: holds no operator family; give at least one of {', '.join(FAMILIES)} "
                         "(servesim calibrate writes them), or use --calibration none / cost.calibration: none "
                         "for the v0 figures")
    return eff


DEFAULT_EFFICIENCIES = Efficiencies()
# a bare ``CostModel``'s per-step overhead (v0 round figures: ~2 ms of scheduling, launch and
# sampling per step); runs take theirs from the engine profile (``sim/cost/engines.py``)
V0_STEP_OVERHEAD_S = 0.002
V0_PER_SEQ_OVERHEAD_S = 1e-5
