"""Open-loop arrival times for every arrival process (closed loop is driven in ``sim/core/clients.py``).

Renewal processes (poisson, fixed, gamma) draw gaps; time-varying ones draw in windows of time:
a piecewise-constant rate (piecewise, on_off) takes a Poisson count per segment and uniform times
inside it, and sinusoidal thins a Poisson stream at the peak rate. Everything comes from the
Generator passed in, in a fixed order, so a scenario and seed always give the same times.
"""

from __future__ import annotations

import math

import numpy as np

from servesim.errors import InputError
from servesim.inputs.scenario import (AllAtOnceArrival, FixedArrival, GammaArrival, OnOffArrival, PiecewiseArrival,
                          PoissonArrival, SinusoidalArrival)

CHUNK = 4096  # arrivals aimed for per window of time
MAX_SEGMENTS = 20_000_000  # rate segments (piecewise, on_off) drawn for one run's arrivals: ~2 s of work
MAX_CANDIDATES = 50_000_000  # sinusoidal: arrivals drawn at the peak rate before thinning, ~2 s of work


def inter_arrivals(arrival, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` gaps (seconds) between consecutive arrivals of a renewal process; the first request
    arrives after one gap."""
    mean = 1.0 / arrival.rate_rps
    if isinstance(arrival, PoissonArrival):
        return rng.exponential(mean, n)
    if isinstance(arrival, FixedArrival):
        return np.full(n, mean)
    if isinstance(arrival, GammaArrival):
        shape = 1.0 / arrival.cv**2  # gamma CV = 1/sqrt(shape)
        return rng.gamma(shape, mean / shape, n)
    raise TypeError(f"not a renewal process: {arrival!r}")


RENEWAL = (PoissonArrival, FixedArrival, GammaArrival)


def _schedule(arrival) -> tuple[np.ndarray, np.ndarray]:
    """(duration_s, rate_rps) of the segments of one cycle of a piecewise-constant rate (on_off:
    the mean durations)."""
    if isinstance(arrival, PiecewiseArrival):
        return (np.array([s.duration_s for s in arrival.segments]), np.array([s.rate_rps for s in arrival.segments]))
    return np.array([arrival.on_s, arrival.off_s]), np.array([arrival.rate_rps, arrival.off_rate_rps])


def segments_needed(arrival, num_requests: int | None, duration_s: float | None) -> float:
    """About how many rate segments drawing the arrivals of a piecewise or on_off process takes
    (0 for other processes): cycles until ``num_requests`` are expected or ``duration_s`` has
    passed, times the segments per cycle. Segments of 1e-300 s would take forever."""
    if not isinstance(arrival, (PiecewiseArrival, OnOffArrival)):
        return 0.0
    dur, rate = _schedule(arrival)
    cycle_s, per_cycle = float(dur.sum()), float((dur * rate).sum())
    cycles = math.inf
    if duration_s is not None and cycle_s > 0:
        cycles = duration_s / cycle_s
    if num_requests is not None and per_cycle > 0:
        cycles = min(cycles, num_requests / per_cycle)
    return (cycles + 1) * len(dur)


def _expected_sinusoidal(a: SinusoidalArrival, t: float) -> float:
    """Arrivals expected in [0, t): the integral of the rate."""
    w = 2 * math.pi / a.period_s
    return a.rate_rps * t + a.rate_rps * a.amplitude * (math.cos(w * a.phase_s) - math.cos(w * (t - a.phase_s))) / w


def candidates_needed(arrival, num_requests: int | None, duration_s: float | None) -> float:
    """About how many arrivals a sinusoidal process draws at its peak rate before thinning (0 for
    other processes): the peak rate times the time until ``num_requests`` are expected or
    ``duration_s`` has passed. A deep valley of a long cycle (amplitude near 1) can take millions
    of draws per arrival kept."""
    if not isinstance(arrival, SinusoidalArrival):
        return 0.0
    r, a = arrival.rate_rps, arrival.amplitude
    span = math.inf if duration_s is None else duration_s
    if num_requests is not None:
        # the expected count rises monotonically and is within 2 r a / w of r t: bisect for it
        slack = 2 * a * arrival.period_s / (2 * math.pi)
        lo, hi = max(0.0, num_requests / r - slack), num_requests / r + slack
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if _expected_sinusoidal(arrival, mid) < num_requests:
                lo = mid
            else:
                hi = mid
        span = min(span, hi)
    return r * (1 + a) * span


def expected_count(arrival, duration_s: float) -> float:
    """Arrivals an open-loop process is expected to make in [0, ``duration_s``) (inf: all at
    once). A piecewise or on/off schedule starts with its first segment at 0: its segments are
    counted in order (a run shorter than a cycle expects the rates of the segments it spans, not
    the cycle's mean: an on period of 5e8 req/s then a long off one makes its arrivals up front);
    sinusoidal integrates its rate; a renewal process makes ``duration_s x rate_rps``."""
    if isinstance(arrival, AllAtOnceArrival):
        return math.inf
    if isinstance(arrival, (PiecewiseArrival, OnOffArrival)):
        dur, rate = _schedule(arrival)
        cycle_s = float(dur.sum())  # (every duration > 0)
        full = math.floor(duration_s / cycle_s)
        rest = duration_s - full * cycle_s
        n = full * float((dur * rate).sum())
        for d, r in zip(dur.tolist(), rate.tolist()):
            if rest <= 0:
                break
            n += min(d, rest) * r
            rest -= d
        return n
    if isinstance(arrival, SinusoidalArrival):
        return _expected_sinusoidal(arrival, duration_s)
    return duration_s * arrival.rate_rps


def check_segments(arrival, num_requests: int | None, duration_s: float | None, path: str) -> None:
    """An ``InputError`` naming ``path`` when drawing the arrivals would take more than
    ``MAX_SEGMENTS`` segments, or ``MAX_CANDIDATES`` draws before thinning (it would run for
    minutes, or forever)."""
    cand = candidates_needed(arrival, num_requests, duration_s)
    if cand > MAX_CANDIDATES:
        peak = arrival.rate_rps * (1 + arrival.amplitude)
        raise InputError(f"{path}: drawing these arrivals at the peak rate ({peak:.3g} req/s) and thinning them "
                         f"to the sinusoid takes ~{cand:.3g} draws (at most "
                         f"{MAX_CANDIDATES}): the cycle's low part (amplitude {arrival.amplitude:g}, period "
                         f"{arrival.period_s:.3g} s) keeps almost none; lower the amplitude, shorten period_s or "
                         f"lower workload.duration_s / num_requests")
    need = segments_needed(arrival, num_requests, duration_s)
    if need > MAX_SEGMENTS:
        dur, rate = _schedule(arrival)
        cycle_s, per_cycle = float(dur.sum()), float((dur * rate).sum())
        raise InputError(f"{path}: its schedule repeats every {cycle_s:.3g} s with {per_cycle:.3g} "
                         f"arrivals expected per cycle, so these arrivals take ~{need:.3g} rate segments to draw "
                         f"(at most {MAX_SEGMENTS}); lengthen the segments (on_s, off_s) or lower "
                         f"workload.duration_s / num_requests")


def _segment_windows(arrival, rng):
    """Yield (start_s, duration_s, rate_rps) arrays of consecutive segments, window by window."""
    dur, rate = _schedule(arrival)
    per_cycle = float((dur * rate).sum())
    # cycles per window: about CHUNK arrivals, at most 100,000 cycles (check_segments bounds the windows)
    cycles = 100_000 if per_cycle * 100_000 <= CHUNK else max(1, math.ceil(CHUNK / per_cycle))
    t = 0.0
    while True:
        if isinstance(arrival, OnOffArrival) and arrival.durations == "exponential":
            on = rng.exponential(arrival.on_s, cycles)
            off = rng.exponential(arrival.off_s, cycles)
            d = np.column_stack([on, off]).ravel()
        else:
            d = np.tile(dur, cycles)
        r = np.tile(rate, cycles)
        starts = t + np.concatenate([[0.0], np.cumsum(d)[:-1]])
        yield starts, d, r
        t = float(starts[-1] + d[-1])


BIG_WINDOW = 1_000_000  # arrivals in one window past which only the ones still needed are drawn


def _piecewise_windows(arrival, rng, need: int | None = None):
    """Yield (times, window_end) for a piecewise-constant rate: Poisson counts per segment, then
    uniform times within each segment. With ``need`` (arrivals wanted in all), a window whose
    count is huge next to what is still wanted (a segment of 1e8 expected arrivals for 12
    requests: gigabytes of uniform draws) draws only those: the segments before the one where
    they run out whole, and of that one its first arrivals, the first order statistics of its
    uniform times (exponential spacings over their Gamma-distributed total); it is the last."""
    for starts, d, r in _segment_windows(arrival, rng):
        counts = rng.poisson(r * d)
        k = int(counts.sum())
        if need is not None and k > BIG_WINDOW and 0 < 4 * need < k:
            c = np.cumsum(counts)
            j = int(np.searchsorted(c, need))  # the segment where the wanted arrivals run out
            whole = int(c[j - 1]) if j else 0
            m = need - whole
            u = rng.random(whole)
            times = np.sort(np.repeat(starts[:j], counts[:j]) + u * np.repeat(d[:j], counts[:j]))
            # U_(i) = S_i / S_(n + 1), S the partial sums of n + 1 standard exponentials (n the
            # segment's count): the first m drawn, the other n + 1 - m summed as one Gamma draw
            s = np.cumsum(rng.exponential(1.0, m))
            first = starts[j] + d[j] * (s / (s[-1] + rng.gamma(int(counts[j]) - m + 1)))
            yield np.concatenate([times, first]), float(starts[j] + d[j])
            return
        u = rng.random(k)
        times = np.repeat(starts, counts) + u * np.repeat(d, counts)
        if need is not None:
            need -= k
        yield np.sort(times), float(starts[-1] + d[-1])


def _sinusoidal_windows(arrival: SinusoidalArrival, rng):
    peak = arrival.rate_rps * (1 + arrival.amplitude)
    width = CHUNK / peak
    t = 0.0
    w = 2 * math.pi / arrival.period_s
    while True:
        k = int(rng.poisson(peak * width))
        times = np.sort(t + rng.random(k) * width)
        rate = arrival.rate_rps * (1 + arrival.amplitude * np.sin(w * (times - arrival.phase_s)))
        keep = rng.random(k) * peak < rate
        yield times[keep], t + width
        t += width


def arrival_times(arrival, num_requests: int | None, duration_s: float | None, rng) -> np.ndarray:
    """Sorted arrival times: the first ``num_requests`` (if given) that fall before ``duration_s``
    (if given)."""
    if isinstance(arrival, RENEWAL):
        return _renewal_times(arrival, num_requests, duration_s, rng)
    if isinstance(arrival, AllAtOnceArrival):
        t = np.full(num_requests, arrival.time_s)
        return t[t < duration_s] if duration_s is not None else t
    if isinstance(arrival, (PiecewiseArrival, OnOffArrival)):
        windows = _piecewise_windows(arrival, rng, num_requests)
    elif isinstance(arrival, SinusoidalArrival):
        windows = _sinusoidal_windows(arrival, rng)
    else:
        raise TypeError(f"not an open-loop arrival process: {arrival!r}")
    chunks, have = [], 0
    for times, end in windows:
        chunks.append(times)
        have += len(times)
        if (num_requests is not None and have >= num_requests) or (duration_s is not None and end >= duration_s):
            break
    t = np.concatenate(chunks)
    if num_requests is not None:
        t = t[:num_requests]
    return t[t < duration_s] if duration_s is not None else t


def _renewal_times(arrival, num_requests, duration_s, rng) -> np.ndarray:
    if num_requests is not None:
        t = np.cumsum(inter_arrivals(arrival, num_requests, rng))
        return t[t < duration_s] if duration_s is not None else t
    # Only a duration: draw in chunks until past it.
    chunks, last = [], 0.0
    expected = int(duration_s * arrival.rate_rps)
    while last < duration_s:
        t = last + np.cumsum(inter_arrivals(arrival, max(1024, expected // 4), rng))
        chunks.append(t)
        last = float(t[-1])
    t = np.concatenate(chunks)
    return t[t < duration_s]
