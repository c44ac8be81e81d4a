"""Numbers as text, a column at a time: exactly what Python's ``repr`` / ``str`` writes, without a
Python call per value (the CSV writer's cells).

A column comes back as a ``(rows, width)`` uint8 matrix: each row holds one value's characters
in order, with NUL bytes anywhere in between (NUL never occurs in a number, so the CSV writer
drops every NUL). Contracts:

- ``float_cells(x)``: ``repr(float(v))`` for every value but NaN, whose cell is empty
  (``float_parts``: the same as pieces to lay side by side);
- ``int_cells(x)``: ``str(int(v))``.

Floats need the shortest digits that read back to the same double (Python's choice among them:
the nearest). Done exactly in float64 arithmetic, for values from 1e-6 to 1e16 (every
simulated time, token count, FLOP and byte count we write); ``repr`` does the rest:
- a decimal ``m x 10^-k`` reads back to ``a`` iff it lies within half a binary ulp of ``a``;
  such an interval holds at most one decimal of 15 significant digits (their spacing is at least
  4.5 ulps). ``m = rint(a x 10^k)`` finds it (the product's rounding error, under 0.07 units, is far
  below the 0.12 units a candidate may lie from ``a x 10^k`` and still read back) and ``m / 10^k
  == a`` checks it exactly (``m`` and ``10^k`` are exact doubles and IEEE division rounds
  correctly: Clinger's fast path). With fewer digits reading back, the 15-digit one is that
  decimal padded with zeros, so its trailing zeros are dropped.
- Otherwise 16 or 17 digits: ``a x 10^k`` is taken exactly as a double-double (Dekker's
  product), which gives the nearest integer and its exact distance; 17 digits always read back,
  16 do iff that distance is under ``10^k`` half-ulps (a quarter-ulp below a power of two).
- A value whose answer rests on an exact tie, or on a distance within rounding of the bound, is
  left to ``repr`` (a handful per million).
``tests/test_numfmt.py`` compares both functions with ``repr`` / ``str`` on millions of values.
"""

from __future__ import annotations

import numpy as np

_P10 = np.array([10.0 ** k for k in range(23)])  # exact doubles up to 10^22
_P10_INT = 10 ** np.arange(19, dtype=np.int64)
_SPLIT = 134217729.0  # 2^27 + 1: Veltkamp's splitter for float64
_FRACTION_BITS = np.int64((1 << 52) - 1)  # of a float64's bits
_LO_E, _HI_E = -6, 15  # decimal exponents done here: 10^k stays an exact double for every k used
# characters in memory order, read as uint32 words: four ASCII digits ("0042" for 42); the
# masks keeping a word's first b characters (the others become NUL); single characters placed
# in a word
_DIGITS4 = np.frombuffer(b"".join(b"%04d" % i for i in range(10000)), dtype=np.uint32)
_KEEP_FIRST = np.frombuffer(b"".join(b"\xff" * b + b"\0" * (4 - b) for b in range(5)), dtype=np.uint32)
_MINUS = np.frombuffer(b"-\0\0\0", dtype=np.uint32)[0]
_ZERO = np.frombuffer(b"0\0\0\0", dtype=np.uint32)[0]
_ZERO_AT1 = np.frombuffer(b"\x000\0\0", dtype=np.uint32)[0]  # '0' as a word's second character
_POINT_ZEROS = np.frombuffer(b".000", dtype=np.uint32)[0]
_POINT_ZERO = np.frombuffer(b".0", dtype=np.uint8)
_EXPONENT = np.frombuffer(b"".join(b"e%+03d" % e for e in range(_LO_E, _HI_E + 2)), dtype=np.uint32)


def _split(v):
    c = _SPLIT * v
    hi = c - (c - v)
    return hi, v - hi


_P10_SPLIT = _split(_P10)


def _times_pow10(a, k, a_split=None):
    """(hi, lo) with hi + lo == a x 10^k exactly, for 0 <= k <= 22 (Dekker's product; no
    overflow in the range used here); ``a_split``: ``_split(a)``, when already made."""
    p10 = _P10[k]
    p = a * p10
    ah, al = _split(a) if a_split is None else a_split
    bh, bl = _P10_SPLIT[0][k], _P10_SPLIT[1][k]
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _rows(mask):
    """Index of the rows where ``mask`` holds: a slice when that is every row (no copies)."""
    return slice(None) if mask.all() else np.flatnonzero(mask)


def _exponent(a):
    """floor(log10(a)) exactly, for positive finite doubles a (as int64)."""
    lg = np.log10(a)
    e = np.floor(lg).astype(np.int64)
    # log10 is within a few ulps: only a near a power of ten can land on the wrong side of it
    near = np.flatnonzero(np.abs(lg - np.rint(lg)) < 1e-9)
    if len(near):
        an, j = a[near], np.clip(np.rint(lg[near]).astype(np.int64), -22, 22)
        at_least = np.empty(len(near), dtype=bool)  # an >= 10^j, exactly
        pos = j >= 0
        at_least[pos] = an[pos] >= _P10[j[pos]]
        neg = np.flatnonzero(~pos)  # 10^j is no double: compare an x 10^-j with 1, taken exactly
        hi, lo = _times_pow10(an[neg], -j[neg])
        at_least[neg] = (hi > 1.0) | ((hi == 1.0) & (lo >= 0.0))
        e[near] = np.where(at_least, j, j - 1)
    return e


def _nearest_int(hi, lo):
    """The integer nearest to hi + lo (int64; hi >= 1) and hi + lo less it (rounded once)."""
    r_hi = np.rint(hi)
    rest = (hi - r_hi) + lo  # hi - rint(hi) is exact
    bump = np.rint(rest)
    return r_hi.astype(np.int64) + bump.astype(np.int64), rest - bump


def _digits17(a, e):
    """Shortest digits of positive doubles a with decimal exponent e in [_LO_E, _HI_E]: (m17,
    p, unsure), m17 the 17-digit integer they begin (trailing zeros after them), p how many they
    are, ``unsure`` where to use repr instead."""
    n = len(a)
    k = 14 - e  # 15 digits
    up = k >= 0
    pw = _P10[np.abs(k)]
    if up.all():  # (values under 10^15: only the branch they take, not both)
        m15 = np.rint(a * pw)
        ok = m15 / pw == a
    else:
        m15 = np.rint(np.where(up, a * pw, a / pw))
        ok = np.where(up, m15 / pw, m15 * pw) == a
    m17 = np.empty(n, dtype=np.int64)
    p = np.empty(n, dtype=np.int64)
    unsure = np.zeros(n, dtype=bool)
    if ok.any():
        short = _rows(ok)
        ms = m15[short].astype(np.int64)
        m17[short] = ms * 100
        p[short] = 15 - _trailing_zeros(ms)
    if not ok.all():  # 16 or 17 digits, from the exact products a x 10^k
        long = _rows(~ok)
        al, el = a[long], e[long]
        parts = _split(al)
        k16 = 15 - el
        m16, d16 = _nearest_int(*_times_pow10(al, k16, parts))  # d16: a x 10^k - m16 (units)
        half_ulp = _P10[k16] * (np.spacing(al) / 2)  # exact: 10^k times a power of two
        # the double below a is nearer: half as far (a power of two: no fraction bits; a is normal)
        pow2 = (al.view(np.int64) & _FRACTION_BITS) == 0
        bound = np.where(pow2 & (d16 > 0), half_ulp / 2, half_ulp)
        ad16 = np.abs(d16)
        fits = ad16 < bound
        m, d17 = _nearest_int(*_times_pow10(al, k16 + 1, parts))
        unsure[long] = ((np.abs(ad16 - bound) <= bound * 1e-9) | (np.abs(ad16 - 0.5) <= 1e-9)
                        | (np.abs(np.abs(d17) - 0.5) <= 1e-9))
        m17[long] = np.where(fits, m16 * 10, m)
        p[long] = np.where(fits, 16, 17)
    return m17, p, unsure


def _words(v, groups: int) -> np.ndarray:
    """(n, groups) uint32: the last 4 x groups decimal digits of int64 v >= 0, zero-padded."""
    out = np.empty((len(v), groups), dtype=np.uint32)
    for g in range(groups - 1, -1, -1):
        q = v // 10000  # (numpy divides by a scalar fast; by an array, 10x slower)
        out[:, g] = _DIGITS4.take(v - q * 10000, mode="wrap")  # (in range: "wrap" skips the bounds check)
        v = q
    return out


def _range_masks(chars: int) -> np.ndarray:
    """[lo, hi] -> the word masks keeping characters lo .. hi - 1 of a ``chars``-long field."""
    keep = np.zeros((chars + 1, chars + 1, chars), dtype=np.uint8)
    for lo in range(chars + 1):
        for hi in range(lo, chars + 1):
            keep[lo, hi, lo:hi] = 0xFF
    return keep.view(np.uint32).reshape(chars + 1, chars + 1, chars // 4)


_RANGE20 = _range_masks(20)
_RANGE16 = _range_masks(16)


def _trailing_zeros(v):
    """Trailing decimal zeros of int64 v > 0 (up to 31)."""
    zeros = np.zeros(len(v), dtype=np.int64)
    for t in (16, 8, 4, 2, 1):  # binary search, dividing out what was found
        q = v // _P10_INT[t]
        hit = q * _P10_INT[t] == v
        zeros += t * hit
        v = np.where(hit, q, v)
    return zeros


def _compose(neg, m17, p, e, nan):
    """repr's text from the sign, the p digits that the 17-digit integer m17 begins with, and
    the decimal exponent e; ``nan``: rows left empty. A list of (n, k) uint8 with NULs, from 4-byte
    words: [sign, the 0 of 0.ddd][integer part, 20][point, the zeros of 0.000ddd][fraction,
    20][the zero of x.0, or the exponent]. The digits are written twice: the integer part keeps
    those before the point, the fraction those after. m17 = 0 writes 0.0."""
    n = len(m17)
    sci = (e < -4) | (e >= 16)  # repr's choice of notation
    small = ~sci & (e < 0)  # 0.000ddd
    # (the common case, every value written as ddd.ddd, skips what only the others need)
    any_sci, any_small = bool(sci.any()), bool(small.any())
    whole = np.where(sci, 1, np.where(small, 0, e + 1)) if any_sci or any_small else e + 1  # digits before the point
    last = np.maximum(p, whole)
    digits = _words(m17, 5)  # 3 zeros, then the 17 digits
    word0 = np.where(neg, _MINUS, 0) if neg.any() else np.zeros(n, dtype=np.uint32)
    if any_small:
        word0 |= np.where(small, _ZERO_AT1, 0)
    zeros_after_point = int(np.where(small, -e - 1, 0).max()) if any_small else 0  # of 0.000ddd
    if any_sci or any_small:
        point = np.where(sci & (p == 1), 0, 1) + np.where(small, -e - 1, 0)  # '.' and 0.000ddd's zeros
        point = _POINT_ZEROS & _KEEP_FIRST[point]
    else:
        point = np.full(n, _POINT_ZEROS & _KEEP_FIRST[1], dtype=np.uint32)
    tail = np.where(p <= whole, _ZERO, 0)  # x.0 has a zero after the point
    if any_sci:
        tail = np.where(sci, _EXPONENT[np.clip(e - _LO_E, 0, len(_EXPONENT) - 1)], tail)
    if nan.any():
        word0[nan] = point[nan] = tail[nan] = 0
        whole, last = np.where(nan, 0, whole), np.where(nan, 0, last)
    # only the characters some row uses (fewer bytes for the writer to go through)
    def chars(words, lo: int, hi: int, masks=None, which=None):
        """Characters lo .. hi - 1 of each row of ``words``, each word ANDed with row
        ``which`` of the mask table ``masks``."""
        w = slice(lo // 4, (hi + 3) // 4)  # the words holding them
        kept = words[:, w] if masks is None else words[:, w] & np.take(masks[:, w], which, axis=0)
        return kept.view(np.uint8).reshape(n, -1)[:, lo - 4 * w.start:hi - 4 * w.start]

    parts = [chars(word0[:, None], 0 if neg.any() else 1, 2 if small.any() else 1),
             chars(digits, 3, 3 + int(whole.max()), _RANGE20[3], 3 + whole),
             chars(point[:, None], 0, 1 + zeros_after_point),
             chars(digits, 3 + int(whole.min()), 3 + int(last.max()), _RANGE20.reshape(-1, 5),
                   (3 + whole) * 21 + 3 + last),
             chars(tail[:, None], 0, 4 if any_sci else (1 if tail.any() else 0))]
    return [c for c in parts if c.shape[1]]


def _repr_rows(values, width: int) -> np.ndarray:
    text = np.array([repr(v).encode() for v in values.tolist()], dtype=f"S{width}")
    return text.view(np.uint8).reshape(len(values), width)


def float_parts(x: np.ndarray) -> list:
    """``float_cells`` as pieces: (len(x), k) uint8 matrices whose rows, laid side by side, are
    the cells (the CSV writer lays them out with the other columns' at once)."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    if len(x) == 0:
        return [np.zeros((0, 1), dtype=np.uint8)]
    nan = np.isnan(x)
    if nan.all():  # (kv_transfer_s without a P/D split)
        return [np.zeros((len(x), 0), dtype=np.uint8)]
    a = np.abs(x)
    if a.max() < 2.0 ** 53 and (x == np.rint(x)).all() and not np.signbit(x[x == 0]).any():
        # whole numbers (FLOP and byte counts): repr is the integer's text and ".0"
        return [int_cells(x.astype(np.int64)), np.broadcast_to(_POINT_ZERO, (len(x), 2))]
    here = np.isfinite(x) & (a > 0)
    a = np.where(here, a, 1.0)  # (every row is computed; the others are overwritten below)
    e = _exponent(a)
    inside = (e >= _LO_E) & (e <= _HI_E)
    if not inside.all():
        here &= inside
        a, e = np.where(here, a, 1.0), np.where(here, e, 0)
    m17, p, unsure = _digits17(a, e)
    carry = m17 >= _P10_INT[17]  # 9.99.. rounded up to 10: the next exponent
    if carry.any():
        m17 = np.where(carry, _P10_INT[16], m17)
        p = np.where(carry, 1, p)
        e += carry
    zero = x == 0
    if zero.any():
        m17[zero], p[zero] = 0, 1
    by_repr = (~here & ~zero & ~nan) | (here & unsure)
    parts = _compose(np.signbit(x), m17, p, e, nan | by_repr)  # (those rows left empty)
    other = np.flatnonzero(by_repr)
    if len(other):  # infinities, values outside the range, the undecided few: after the empty ones
        text = np.zeros((len(x), 24), dtype=np.uint8)
        text[other] = _repr_rows(x[other], 24)
        parts.append(text)
    return parts


def float_cells(x: np.ndarray) -> np.ndarray:
    """``(len(x), width)`` uint8 with NULs: ``repr(float(v))`` of each value, NaN empty."""
    return np.concatenate(float_parts(x), axis=1)


def int_cells(x: np.ndarray) -> np.ndarray:
    """``(len(x), width)`` uint8 with NULs: ``str(int(v))`` of each int64 value."""
    x = np.asarray(x, dtype=np.int64)
    n = len(x)
    if n == 0:
        return np.zeros((0, 4), dtype=np.uint8)
    lo, hi = int(x.min()), int(x.max())
    if hi - lo < max(n // 8, 256):  # a small range: each value's text once, then a lookup
        lut = np.arange(lo, hi + 1).astype(f"S{max(len(str(lo)), len(str(hi)))}")
        # (``take`` of the strings: indexing their (values, width) uint8 matrix by rows took ~80x as long)
        return lut.take(x - lo).view(np.uint8).reshape(n, lut.itemsize)
    if lo <= -10 ** 16 or hi >= 10 ** 16:  # (none in our files)
        return np.array([str(v).encode() for v in x.tolist()], dtype="S20").view(np.uint8).reshape(n, 20)
    a = np.abs(x)
    digits = np.ones(n, dtype=np.int64)
    most = len(str(max(hi, -lo)))
    for t in range(1, most):
        digits += a >= _P10_INT[t]
    groups = (most + 3) // 4
    words = _words(a, groups) & np.take(_RANGE16[:, 16, 4 - groups:], 16 - digits, axis=0)  # NUL leading zeros
    if lo < 0:
        words = np.concatenate([np.where(x < 0, _MINUS, 0)[:, None].astype(np.uint32), words], axis=1)
    return words.view(np.uint8)
