"""Confidence intervals over independent seeds, and numbers printed to the precision they support.

Method (every ``--seeds N`` figure): each seed is one independent replication of the whole run
(its own arrivals and lengths, everything else equal); a headline figure is computed per seed (a
run's p99 TTFT, its goodput, a capacity search's answer) and the interval is Student's t over
those N values: mean +- t(0.975, N - 1) x s / sqrt(N), s the sample standard deviation.

Why t over seeds and not a bootstrap: the per-seed figures are the independent units; requests
inside one run are not (a burst delays every request behind it), so resampling requests would
understate the spread. With the few seeds a study can afford (3-10), a bootstrap over the seeds
themselves is too narrow (it has no small-sample correction and only N^N distinct resamples),
while the t-interval is exact for normal per-seed figures and close for the smooth, unimodal ones
a run's means, percentiles and capacities are. Differences between two configurations are paired
by seed (the same requests go through both: ``paired_difference``), which removes the workload's
share of the noise.

A share (SLO attainment, ``BOUNDED``) lies in [0, 1], and a difference of two shares in [-1, 1]:
its t-interval is cut at those ends (``Interval.bounds``); every other figure's (a latency, a count,
a capacity: ``NONNEGATIVE``) at 0: only a paired difference can be negative. With few seeds the
t-interval of a share can reach past them (two seeds at 10% and 14%: 12 +- 25%, down to -13%), a
share no run can have; such an interval prints as its mean and its cut ends, "12 (0 to 37)" (``format_interval``;
cut at both ends, it is every value the figure can take, and says so: "50 (anywhere from 0 to 100)"), while
results.csv ``<figure>_ci95`` keeps the half-width of the t-interval itself. So is a rate of
completed requests (goodput, throughput: ``rate_bounds``) cut at 0 and at the row's arrivals per
second (``offered_rps``), which no run's can exceed: "17 (13 to 17) req/s" at 17 req/s arrived;
and a count of requests (completed, rejected, unfinished: ``count_bounds``) at 0 and the requests
that arrived (``num_requests``).

Printed precision follows the interval: the half-width keeps the Particle Data Group's number of
significant digits (two when its leading three digits are 100-354, one for 355-949; 950-999 is
rounded up to two digits of the next power), and the mean is rounded to the same decimal place
(``format_interval``: "19.8 +- 0.9", written with a real plus-minus sign), or, where that place
would leave it no significant digit of its own, to its first one ("0.3 +- 40", not "0 +- 40"; so
too a cut end: "0.3 (anywhere from 0 to 0.4)" cut at 0 and 0.36).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import NormalDist

CONFIDENCE = 0.95
CI_SUFFIX = "_ci95"  # results.csv: <figure>_ci95 is the half-width of <figure>'s interval
SEED_KEY = "seed"  # seeds.csv: the column naming a row's seed
PM = "\u00b1"  # the plus-minus sign
# Student's t quantile at 0.975 (two-sided 95%) for 1..30 degrees of freedom (standard tables)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile: exact for df 1 and 2, the table at p = 0.975 up to df 30, otherwise the
    Cornish-Fisher expansion to 1/df^4 (relative error under 1e-3 from df 3, 1e-5 from df 8)."""
    if df < 1:
        raise ValueError("t_quantile needs df >= 1")
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    if abs(p - 0.975) < 1e-12 and df <= len(_T975):
        return _T975[df - 1]
    z = NormalDist().inv_cdf(p)
    g = ((z ** 3 + z) / 4, (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96,
         (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384,
         (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160)
    return z + sum(gi / df ** (i + 1) for i, gi in enumerate(g))


SHARE = (0.0, 1.0)  # the values a share can take
# the values a count, a rate, a latency or a capacity can take: its t-interval is cut at 0 too (two
# seeds' p50 TTFT printed "100 +- 500 ms", a latency down to -400 ms; now "100 (0 to 600) ms")
NONNEGATIVE = (0.0, math.inf)
BOUNDED = {"slo_attainment": SHARE, "class_slo_attainment_min": SHARE}  # results.csv / summary figures that are shares


@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` seeds and its half-width (NaN when n < 2: no spread to estimate);
    ``bounds``: (low, high) the figure cannot pass (a share's [0, 1]), where its ends are cut."""

    mean: float
    half: float
    n: int
    confidence: float = CONFIDENCE
    bounds: tuple | None = None

    @property
    def low(self) -> float:
        return self.mean - self.half if self.bounds is None else max(self.mean - self.half, self.bounds[0])

    @property
    def high(self) -> float:
        return self.mean + self.half if self.bounds is None else min(self.mean + self.half, self.bounds[1])

    @property
    def cut(self) -> bool:
        """The t-interval reaches past a bound, so its ends are not mean +- half."""
        return (self.bounds is not None and math.isfinite(self.half)
                and (self.mean - self.half < self.bounds[0] or self.mean + self.half > self.bounds[1]))

    @property
    def rel(self) -> float:
        """Half-width relative to |mean| (inf for a zero mean with a spread, NaN when unknown)."""
        if math.isnan(self.half):
            return math.nan
        if self.mean == 0:
            return 0.0 if self.half == 0 else math.inf
        return self.half / abs(self.mean)

    def excludes(self, value: float = 0.0) -> bool:
        """The interval lies wholly on one side of ``value`` (False when its width is unknown)."""
        return not math.isnan(self.half) and (self.low > value or self.high < value)

    def scaled(self, k: float) -> "Interval":
        b = None if self.bounds is None else tuple(sorted(x * k for x in self.bounds))
        return Interval(self.mean * k, self.half * abs(k), self.n, self.confidence, b)

    def to_dict(self) -> dict:
        return {"mean": self.mean, "ci95": None if math.isnan(self.half) else self.half, "n": self.n}


def t_interval(values, confidence: float = CONFIDENCE, bounds: tuple | None = None) -> Interval:
    """Student's t interval of the mean of ``values`` (None and NaN left out). An infinite value
    gives an infinite mean and half-width (a seed that never met: no finite interval). ``bounds``:
    the values the figure can take (``Interval.bounds``)."""
    xs = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    n = len(xs)
    if n == 0:
        return Interval(math.nan, math.nan, 0, confidence, bounds)
    if any(math.isinf(x) for x in xs):
        return Interval(math.fsum(xs) / n, math.inf if n > 1 else math.nan, n, confidence, bounds)
    mean = math.fsum(xs) / n
    if n < 2:
        return Interval(mean, math.nan, n, confidence, bounds)
    # (every value the same: no spread at all, where the mean of three equal values can differ from
    # them in its last bit, and that residue's half-width of 1e-14 printed the mean to 15 decimals)
    sd = 0.0 if min(xs) == max(xs) else math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    return Interval(mean, t_quantile(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n), n, confidence, bounds)


def paired_difference(a, b, confidence: float = CONFIDENCE) -> Interval:
    """Interval of the mean of ``b[i] - a[i]`` (the same seed through both configurations)."""
    if len(a) != len(b):
        raise ValueError("paired_difference needs one value per seed on each side")
    return t_interval([None if x is None or y is None else y - x for x, y in zip(a, b)], confidence)


# figures in completed requests per second: no run's exceeds its arrivals per second (``offered_rps``,
# n / the last arrival: ``stats.offered_rate``), so neither does their mean over seeds exceed the mean
# arrival rate; "_per_gpu": the same divided by the row's GPUs (``verdicts.with_per_gpu``)
UP_TO_ARRIVALS = ("goodput_rps", "throughput_rps", "goodput_arrived_rps")


def rate_bounds(row: dict, column: str) -> tuple | None:
    """(0, the row's arrivals per second) for a column of ``UP_TO_ARRIVALS`` (its per-GPU figure:
    divided by ``num_gpus``); None for other columns, or a row without ``offered_rps``."""
    per_gpu = column.endswith("_per_gpu")
    base = column.replace("_per_gpu", "_rps") if per_gpu else column
    o, n = row.get("offered_rps"), (row.get("num_gpus") if per_gpu else 1)
    if base not in UP_TO_ARRIVALS or not isinstance(o, (int, float)) or isinstance(o, bool) or not o >= 0 \
            or not isinstance(n, (int, float)) or not n > 0:
        return None
    return (0.0, float(o) / n)


# counts of requests: no run's exceeds the requests that arrived in it (``num_requests``: completed +
# rejected + unfinished), so neither does their mean over seeds exceed the mean arrivals
UP_TO_REQUESTS = ("completed", "rejected", "unfinished")


def count_bounds(row: dict, column: str) -> tuple | None:
    """(0, the row's requests, ``num_requests``) for a column of ``UP_TO_REQUESTS``; None for other
    columns, or a row without ``num_requests``."""
    n = row.get("num_requests")
    if column not in UP_TO_REQUESTS or not isinstance(n, (int, float)) or isinstance(n, bool) or not n >= 0:
        return None
    return (0.0, float(n))


def row_interval(row: dict, column: str) -> Interval:
    """A results.csv row's figure as an ``Interval`` (half-width NaN when the row has none: one
    seed; a share's ends cut at 0 and 1: ``BOUNDED``; a rate of completions at 0 and the row's
    arrivals per second: ``rate_bounds``; two seeds' t-interval of a goodput reached above the
    load offered, a rate no run can have; a count of requests at 0 and the row's requests:
    ``count_bounds``; every other figure, a count, a rate or a latency, at 0: ``NONNEGATIVE``)."""
    half = row.get(column + CI_SUFFIX)
    v = row.get(column)
    return Interval(math.nan if v is None else float(v), math.nan if half is None else float(half),
                    int(row.get("seeds") or 1),
                    bounds=BOUNDED.get(column) or rate_bounds(row, column) or count_bounds(row, column) or NONNEGATIVE)


def paired_rows(rows_a: list, rows_b: list, column: str) -> Interval:
    """Interval of B - A in ``column``, paired by seed: seeds.csv rows of two configurations (each
    with a ``seed``); seeds that did not run on both sides are left out."""
    a = {r[SEED_KEY]: r.get(column) for r in rows_a if r.get("status") == "ok"}
    b = {r[SEED_KEY]: r.get(column) for r in rows_b if r.get("status") == "ok"}
    common = sorted(set(a) & set(b))
    iv = paired_difference([a[s] for s in common], [b[s] for s in common])
    lo, hi = BOUNDED.get(column, (None, None))
    return iv if lo is None else replace(iv, bounds=(lo - hi, hi - lo))  # (two shares differ by -1 to 1)


# ---------------------------------------------------------------- printing
def _decimals_for(half: float) -> int:
    """Decimal places to print a value with this half-width (negative: round to tens, hundreds)."""
    e = math.floor(math.log10(half))
    lead = half / 10 ** (e - 2)  # its leading three digits, 100 <= lead < 1000
    if lead >= 949.5:  # rounds up to 1.0 x 10^(e+1): two digits of that
        return -(e + 1) + 1
    digits = 2 if lead < 354.5 else 1
    return -e + digits - 1


def _own_digit(x: float, decimals: int) -> int:
    """``decimals``, or more where ``x`` rounded to them would keep no significant digit of its own:
    a mean of 0.3 beside a half-width of 40 printed "0 (0 to 40)", read as nothing at all."""
    if x == 0 or not math.isfinite(x):
        return decimals
    return max(decimals, -math.floor(math.log10(abs(x))))


def _round(x: float, decimals: int) -> str:
    if decimals > 0:
        return f"{x:.{decimals}f}"
    q = 10 ** (-decimals)
    return f"{round(x / q) * q:.0f}"


def _end(x: float, decimals: int, cut: bool) -> str:
    """An interval's end as printed: rounded as the mean is (keeping a significant digit of its own),
    or, cut at a bound that is a whole number (0, 100%, the requests that arrived), that number as
    it is: the end is the bound, not an estimate, and "1.3 (0.0 to 3.1)" read as a low end measured
    at zero to a tenth (the t-interval went below 0; "1.3 (0 to 3.1)")."""
    if cut and math.isfinite(x) and float(x).is_integer():
        return f"{abs(x) if x == 0 else x:.0f}"
    return _round(x, _own_digit(x, decimals))


def interval_texts(estimate: float, low: float, high: float) -> tuple[str, str, str]:
    """An estimate and its interval's ends as printed (a capacity's "~35 (4-66)", ``plandoc``): to
    the precision of the half-width, (high - low) / 2, as ``format_interval`` rounds them, each keeping a
    significant digit of its own ("~0.3 (0-80)", not "~0 (0-80)"), the low end cut at 0 ("0", not
    "0.0": a bound, not a measurement to a tenth); three significant digits without a half-width
    (none, or an infinite one)."""
    half = (high - low) / 2
    if not half > 1e-9 or math.isinf(half):
        return f"{estimate:.3g}", f"{max(low, 0.0):.3g}", f"{high:.3g}"
    d = _decimals_for(half)
    return (_round(estimate, _own_digit(estimate, d)), _end(max(low, 0.0), d, low <= 0),
            _round(high, _own_digit(high, d)))


def format_value(x: float | None, sig: int = 3) -> str:
    """A number with no interval: ``sig`` significant digits, trailing zeros kept ("6.60": a goodput of
    6.598 req/s read "6.6" beside "6.58" in compare's column, and run printed it "6.60"), integers
    above that as integers; a whole number as it is ("1", every request within the SLO)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    if abs(x) >= 10 ** sig:
        return f"{x:.0f}"
    if float(x).is_integer():
        return f"{x:.{sig}g}"
    text = f"{x:#.{sig}g}"
    return text[:-1] if text.endswith(".") else text


def seeds_text(seeds) -> str:
    """``seed 3`` or ``seeds 1, 2``: the seeds something happened on (``summary.json`` ``seeds.warnings``)."""
    return ("seeds " if len(seeds) > 1 else "seed ") + ", ".join(str(x) for x in seeds)


def format_interval(iv: Interval, scale: float = 1.0, unit: str = "", sig: int = 3) -> str:
    """"19.8 +- 0.9 req/s": the mean rounded to the half-width's precision (module docstring).
    ``scale`` multiplies both (1e3: seconds shown in ms). Without a half-width (one seed) the
    value alone with ``sig`` significant digits; a zero half-width (every seed equal) prints the
    value and "+- 0"."""
    mean, half = iv.mean * scale, iv.half * abs(scale)
    tail = f" {unit}" if unit else ""
    if math.isnan(half) or math.isinf(mean) or math.isnan(mean):
        return format_value(mean, sig) + tail
    if math.isinf(half):
        return f"{format_value(mean, sig)} {PM} inf{tail}"
    if half == 0:
        return f"{format_value(mean, sig)} {PM} 0{tail}"
    d = _decimals_for(half)
    # (the mean, and a cut end, keep at least one significant digit of their own: "0.3 (0 to 40)",
    # not "0 (0 to 40)"; "0.3 (... 0 to 0.4)" where the cut end is close above it, not "0.3 (... 0 to 0)")
    if iv.cut:  # (a share's t-interval past 0 or 1: the mean and the cut ends, "12 (0 to 37)")
        low, high = sorted((iv.low * scale, iv.high * scale))
        # cut at both ends, it is every value the figure can take (a share's 0 to 100%, a count of
        # 4 requests' 0 to 4): "4 (0 to 4)" read as an interval that narrowed it; said plainly
        whole = "anywhere from " if iv.mean - iv.half < iv.bounds[0] and iv.mean + iv.half > iv.bounds[1] else ""
        cut_low, cut_high = iv.mean - iv.half < iv.bounds[0], iv.mean + iv.half > iv.bounds[1]
        if scale < 0:
            cut_low, cut_high = cut_high, cut_low
        return (f"{_round(mean, _own_digit(mean, d))} ({whole}{_end(low, d, cut_low)} to "
                f"{_end(high, d, cut_high)}){tail}")
    return f"{_round(mean, _own_digit(mean, d))} {PM} {_round(half, d)}{tail}"


def format_difference(iv: Interval, scale: float = 1.0, unit: str = "") -> str:
    """A paired difference with an explicit sign: "+3.1 +- 1.2 ms"."""
    text = format_interval(iv, scale, unit)
    return text if text.startswith("-") or text.startswith("n/a") else "+" + text


def given_text(v) -> str:
    """A value the user gave (a grid value, a rate) as a table prints it: a number to all its digits
    (12.25, not 12.2; 2.0 as 2), anything else as its text."""
    if isinstance(v, float) and not math.isnan(v) and not math.isinf(v):
        return f"{v:.15g}"
    return str(v)
