"""Distributions of a sample: ``dist_stats`` ({mean, p50, p90, p99, max}, linear-interpolated
percentiles, numpy's default) of an array, or of a ``WeightedSample``: values with integer
counts (the TBT gaps of a run: one value per step shared by every sequence in it), exact
without expanding it."""

from __future__ import annotations

import itertools
import math

import numpy as np

DIST_STATS = ("mean", "p50", "p90", "p99", "max")  # the keys of ``dist_stats``


def offered_rate(arrival_s) -> float | None:
    """Requests per second that arrived: n / the last arrival, times from the run's start (as
    every rate of a run is per its window from 0: so no run's goodput or throughput exceeds it); None
    with fewer than two requests or all at one instant: no rate. The one definition of an offered
    load: summary.json ``workload.offered_rps``, validate's "req/s on average" and its overload
    probe, validate-run's replay. (validate's line and validate-run said (n - 1) / (last - first),
    the probe n / (last - first), the summary n / last: a trace of 4 requests over 900 s read
    0.00333 req/s in validate and 0.00444 in the run's summary.)"""
    a = np.asarray(arrival_s, dtype=np.float64)
    if len(a) < 2 or not float(a.max()) > float(a.min()):
        return None
    return len(a) / float(a.max())


def _kth_smallest(v: np.ndarray, c: np.ndarray):
    """``kth(k)``: the k-th smallest (from 0) of the sample where ``v[i]`` appears ``c[i]`` times,
    without sorting it all: the values are bucketed by the leading bits of an order-preserving
    integer image of their floats, the bucket holding rank k found from the buckets' running
    counts, and only that bucket sorted."""
    bits = np.ascontiguousarray(v, dtype=np.float64).view(np.int64)
    key = np.where(bits < 0, bits ^ np.int64(0x7FFFFFFFFFFFFFFF), bits)  # ordered as the floats
    lo, hi = int(key.min()), int(key.max())
    shift = max(0, (hi - lo).bit_length() - 20)  # at most ~1M buckets
    bucket = (key >> shift) - (lo >> shift)
    del key, bits
    cum = np.cumsum(np.bincount(bucket, weights=c, minlength=int(bucket.max()) + 1))  # exact: integers
    cache: dict = {}

    def kth(k: int) -> float:
        j = int(np.searchsorted(cum, k, side="right"))
        if j not in cache:
            sel = bucket == j
            vv, cc = v[sel], c[sel]
            o = np.argsort(vv)
            cache[j] = (vv[o], np.cumsum(cc[o]), int(cum[j - 1]) if j else 0)
        vv, cs, base = cache[j]
        return vv[int(np.searchsorted(cs, k - base, side="right"))]

    return kth


class WeightedSample:
    """A sample stored as distinct-ish ``values`` with integer ``counts`` (None: each once): the
    sample is ``np.repeat(values, counts)``, without building it. ``percentile`` is exactly
    ``np.percentile``'s default (linear) method on that sample."""

    __slots__ = ("values", "counts")

    def __init__(self, values: np.ndarray, counts: np.ndarray | None):
        self.values = np.asarray(values, dtype=float)
        self.counts = None if counts is None else np.asarray(counts, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.values) if self.counts is None else int(self.counts.sum())

    def expand(self) -> np.ndarray:
        return self.values if self.counts is None else np.repeat(self.values, self.counts)

    def stats(self) -> dict:
        if self.counts is None:  # (the mean exactly rounded, as below: the same with counts or without)
            return _array_stats(self.values, exact_mean=True)
        keep = ~np.isnan(self.values) & (self.counts > 0)
        v, c = (self.values, self.counts) if keep.all() else (self.values[keep], self.counts[keep])
        del keep
        if len(v) == 0:
            return dict.fromkeys(DIST_STATS)
        n = int(c.sum())
        kth = _kth_smallest(v, c)
        out = []
        for q in (0.5, 0.9, 0.99):
            # numpy's linear method: virtual index (n - 1) q, lerp between its neighbours
            h = (n - 1) * q
            lo = int(np.floor(h))
            g = h - lo
            a = kth(lo)
            b = kth(min(lo + 1, n - 1))
            d = b - a
            out.append(float(b - d * (1 - g)) if g >= 0.5 else float(a + d * g))
        # exactly rounded: the same whatever order the values were recorded in (the fast engine
        # records gaps in another order than the reference) and whatever BLAS would sum with, and
        # whether a gap was recorded once with its count or count times (the fast engine keeps
        # a step's members as one (gap, count) pair): the products v c summed exactly, in
        # integers (``_weighted_sum_by_exponent``) or else by fsum of each one's rounded value
        # and rounding error (``_exact_products``), and rounded once
        total = _weighted_sum_by_exponent(v, c)
        mean = (math.fsum(_exact_products(v, c)) if total is None else total) / n
        return {"mean": mean, "p50": out[0], "p90": out[1], "p99": out[2], "max": float(v.max())}


_SUM_CHUNK = 1 << 16


def exact_sum(x) -> float:
    """The exactly rounded sum of the float array ``x`` (``math.fsum``: independent of the order),
    fed to it a chunk at a time (a list of Python floats of a whole sample, tens of millions of
    token gaps in a long run, took ~30 bytes a value and doubled the run's peak memory)."""
    return math.fsum(itertools.chain.from_iterable(x[i:i + _SUM_CHUNK].tolist()
                                                   for i in range(0, len(x), _SUM_CHUNK)))


_SIGNIFICAND = np.int64((1 << 52) - 1)  # a float64's fraction bits
_PIECE_BITS = 21
_PIECE = np.int64((1 << _PIECE_BITS) - 1)
_COUNT_LIMIT = 1 << 10  # a 53-bit significand times a count below it stays within int64


def _weighted_sum_by_exponent(v, c) -> float | None:
    """The exactly rounded sum of ``v * c`` (the value ``math.fsum(_exact_products(v, c))``
    gives: the exact sum, rounded once), worked out in integers, ~4x faster: each product is its
    value's 53-bit significand times the count (an integer below 2^63) times a power of two set
    by the value's exponent. Per exponent, the products' three 21-bit pieces are summed by
    ``np.bincount``, in doubles but exactly (fewer than 2^32 pieces below 2^21: every partial sum
    is an integer below 2^53), a chunk at a time; the sums are then put together as one Python
    integer, whose quotient by a power of two Python rounds correctly. None where this does not
    apply (a count of 2^10 or more, 2^31 values or more, an infinite or NaN value, an exact sum of
    zero, whose sign fsum sets, or one beyond a double's range): ``math.fsum`` then."""
    v = np.ascontiguousarray(v, dtype=np.float64)
    c = np.asarray(c, dtype=np.int64)
    if not len(v) or len(v) >= 1 << 31 or int(c.min()) < 0 or int(c.max()) >= _COUNT_LIMIT:
        return None
    sums = [np.zeros(2048) for _ in range(3)]
    for i in range(0, len(v), _SUM_CHUNK):
        bits = v[i:i + _SUM_CHUNK].view(np.int64)
        ex = (bits >> 52) & 0x7FF
        if (ex == 0x7FF).any():  # inf, NaN
            return None
        p = ((bits & _SIGNIFICAND) | ((ex != 0).astype(np.int64) << 52)) * c[i:i + _SUM_CHUNK]
        if (bits < 0).any():
            p = np.where(bits < 0, -p, p)
        ex = np.maximum(ex, 1)  # (subnormals: the exponent of the smallest normals, no implicit bit)
        for k, piece in enumerate((p & _PIECE, (p >> _PIECE_BITS) & _PIECE, p >> 2 * _PIECE_BITS)):
            sums[k] += np.bincount(ex, weights=piece, minlength=2048)
    used = np.flatnonzero((sums[0] != 0) | (sums[1] != 0) | (sums[2] != 0)).tolist()
    if not used:
        return None
    total = 0
    for e in used:
        at_e = int(sums[0][e]) + (int(sums[1][e]) << _PIECE_BITS) + (int(sums[2][e]) << 2 * _PIECE_BITS)
        total += at_e << (e - used[0])
    if total == 0:
        return None
    shift = used[0] - 1075  # the exponent of a significand's unit at the smallest exponent used
    try:
        return float(total << shift) if shift >= 0 else total / (1 << -shift)
    except OverflowError:
        return None


def _exact_products(v, c):
    """v * c as floats whose sum is exactly the products' (each product's rounded value and its
    rounding error: Dekker's two-product with Veltkamp's split, exact barring overflow and
    underflow), an iterator over them made a chunk at a time; the counts ``c`` are integers below
    2**53. (Chunks chained in C: a generator yielding each value cost as much as fsum itself.)"""
    return itertools.chain.from_iterable(_product_chunks(v, c))


def _product_chunks(v, c):
    """``_exact_products``' values, one list per chunk: the products, then (unless every count of
    the chunk is 1) their rounding errors."""
    v = np.asarray(v, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    split = 134217729.0  # 2**27 + 1
    for i in range(0, len(v), _SUM_CHUNK):
        vi, ci = v[i:i + _SUM_CHUNK], c[i:i + _SUM_CHUNK]
        p = vi * ci
        yield p.tolist()
        if (ci == 1).all():
            continue
        t = split * vi
        vh = t - (t - vi)
        vl = vi - vh
        t = split * ci
        ch = t - (t - ci)
        cl = ci - ch
        yield (((vh * ch - p) + vh * cl + vl * ch) + vl * cl).tolist()


def dist_stats(x) -> dict:
    """{mean, p50, p90, p99, max} of a sample (linear-interpolated percentiles); nulls if empty.
    ``x``: an array, or a ``WeightedSample``."""
    if isinstance(x, WeightedSample):
        return x.stats()
    return _array_stats(x)


def _array_stats(x, exact_mean: bool = False) -> dict:
    """``dist_stats`` of an array (NaNs left out); ``exact_mean``: the mean as the exactly
    rounded sum over the count (``math.fsum``: independent of the values' order) instead of
    numpy's pairwise sum."""
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return dict.fromkeys(DIST_STATS)
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    mean = exact_sum(x) / len(x) if exact_mean else float(x.mean())
    return {"mean": mean, "p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(x.max())}
