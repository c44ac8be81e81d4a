"""The smooth maximum of two times, ``(x^p + y^p)^(1/p)`` (>= max(x, y); ``p == 0``: the hard
max): how GEMMs blend their compute and memory time and collectives their latency and transfer
(``sim/cost/efficiency.py``). One scalar version for the engine, one numpy version for fitting."""

from __future__ import annotations


def smooth_max(x: float, y: float, p: float) -> float:
    """``(x^p + y^p)^(1/p)`` for scalars; ``p == 0`` (or nothing positive) is the hard max."""
    hi, lo = (x, y) if x >= y else (y, x)
    if not p or hi <= 0:
        return hi
    return hi * (1.0 + (lo / hi) ** p) ** (1.0 / p)


def smooth_max_np(x, y, p):
    """``smooth_max`` elementwise over numpy arrays (the fits' vectorized time models)."""
    import numpy as np

    hi, lo = np.maximum(x, y), np.minimum(x, y)
    if not p:
        return hi
    pos = hi > 0  # (nothing positive: the hard max, as smooth_max; not 0 / 0)
    ratio = np.divide(lo, hi, out=np.zeros(np.shape(hi)), where=pos)
    return np.where(pos, hi * (1.0 + ratio ** p) ** (1.0 / p), hi)
