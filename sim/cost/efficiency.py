"""The one place that holds roofline efficiencies (fraction of datasheet peak an operator reaches).

v0 values are round, literature-typical figures, not fits: dense GEMMs on Hopper/Ampere reach
~70-80% of tensor peak at large M and ~80-90% of HBM bandwidth when weight-read bound;
FlashAttention-2 forward reaches ~50-70% of peak; elementwise kernels ~70% of bandwidth.
The calibration issue replaces these with coefficients fitted to measured kernel timings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OpEfficiency:
    compute: float  # fraction of peak FLOP/s
    memory: float  # fraction of peak HBM bytes/s


@dataclass(frozen=True, slots=True)
class Efficiencies:
    gemm: OpEfficiency = OpEfficiency(0.75, 0.85)
    attention: OpEfficiency = OpEfficiency(0.60, 0.80)
    elementwise: OpEfficiency = OpEfficiency(0.50, 0.70)
    link: float = 0.80  # fraction of link bandwidth a collective reaches


DEFAULT_EFFICIENCIES = Efficiencies()
