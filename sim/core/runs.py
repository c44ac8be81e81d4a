"""Plain data of the engine's fast path: a run of decode-only steps in flight, the cost row it hands
the recorder, and exact event times."""

from __future__ import annotations

import math
from typing import NamedTuple


class Cost(NamedTuple):  # what Recorder.step reads of a StepCost
    time_s: float
    flops: float
    bytes: float
    bound: str


class Run:
    """A run of decode-only steps in flight (``Replica._macro``), from ``t0``. Per planned step i:
    its end (step i starts when step i - 1 ends) and the KV blocks grown by steps 0..i (``cum``);
    per segment of steps with the same members, ``segs``: (first step, steps, sequences, KV
    tokens the first step touches: sum of c + 1, growth: how many more each later step touches,
    n, or under a sliding window the members not past it). ``K`` steps
    planned, ``done`` settled (ended and committed), ``grown`` started (KV taken), ``sp``
    segments wholly settled. ``pn``, ``psum``, ``pcnt``: members, their sum of computed tokens
    and block-growth counts after the planned steps (``pcap``, ``pcx``: the members past the
    sliding window and their excess, ``Replica._ncap`` and ``_capx``, then); ``dep``: (step, request) of members
    completing at the end of that step (bulk mode), ``dp`` how many of them are settled; ``xdep``:
    the sliding-window crossings the plan took from ``Replica._xheap`` (counter first), ``xp`` how
    many of them are settled (the rest go back when the run ends); ``new``:
    members whose first gap is their own; ``stop``: the run ends after its last planned step (a
    request arrives during it); ``fold``: step 0 is an admission step, (batch, cost, items,
    members before it)."""

    __slots__ = ("S0", "t0", "K", "done", "grown", "ends", "cum", "segs", "sp", "pn", "psum", "pcnt", "pcap", "pcx",
                 "dep", "dp", "xdep", "xp", "new", "fin", "fin_at", "stop", "fold", "next_steps", "priced", "deaf",
                 "behind", "bulk")

    def __init__(self, S0, t0, n, sum_c, cnt, new, ncap=0, capx=0):
        self.S0, self.t0, self.pn, self.psum, self.pcnt, self.new = S0, t0, n, sum_c, cnt, new
        self.pcap, self.pcx = ncap, capx
        self.K = self.done = self.grown = self.dp = self.sp = 0
        self.ends, self.cum, self.segs, self.dep, self.xdep = [], [], [], [], []
        self.xp = 0
        self.fin = False
        self.fin_at = -1
        self.stop = False  # plan no further: the run ends after its last planned step
        self.fold = None
        # steps that are not plain decode steps (``Batch.next_steps``): how to build each, and the
        # (cost, batch) of every planned one, recorded one by one (None: plain decode steps)
        self.next_steps = None
        self.priced = None
        self.deaf = False  # arrivals change nothing (``Batch.steady_arrivals``): they never cut the run
        # (a keyed queue's ``Batch.arrivals_behind``) the key of the waiting head: an arrival ranked
        # behind it (key >= this) changes nothing, one ranked ahead cuts the run; None: not so
        self.behind = None
        # planned past completions, settled in bulk (``Replica._bulk`` when it began): its length
        # is not bounded by the first completion
        self.bulk = False

    def dctx(self, i: int) -> int:
        """KV tokens step ``i`` touches (sum of c + 1, each c capped under a sliding window)."""
        for i0, m, _, d0, g in self.segs:
            if i0 <= i < i0 + m:
                return d0 + g * (i - i0)
        raise IndexError(i)

    def last_step_s(self) -> float:
        """The duration of the last planned step (near enough: an estimate for sizing plans)."""
        K = self.K
        return self.ends[K - 1] - (self.ends[K - 2] if K > 1 else self.t0)


def delay_to(now: float, t: float) -> float:
    """The largest delay ``d`` with ``now + d <= t`` in floating point (SimPy schedules a timeout at
    ``now + delay``): usually ``now + d == t`` exactly. Not always: with ``now`` of a finer binade
    than ``t``, ties-to-even can skip ``t``; a second timeout from the landing point (within a
    factor 2 of ``t``, where ``t - now`` is exact) then reaches it (``Replica._until``). The end of
    a run is a running sum of step times, as the step-by-step engine accumulates them."""
    d = t - now
    if now + d == t:  # the usual case (what the loops below return at once)
        return d if d > 0.0 else 0.0
    for _ in range(4):
        if now + d <= t:
            break
        d = math.nextafter(d, -math.inf)
    for _ in range(4):
        up = math.nextafter(d, math.inf)
        if now + up > t or now + d == t:
            break
        d = up
    return d if d > 0.0 else 0.0
