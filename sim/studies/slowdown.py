"""Capacity under slowdown SLOs (Splitwise's, ISCA'24 Table VI): limits on percentiles of each
request's latency divided by the same request's latency alone on a reference deployment.

A request's slowdowns are its TTFT, its TBT (mean time between tokens: servesim's TPOT) and its
E2E, each divided by the same figure of the same request (same prompt and output lengths) served
alone on the reference deployment (``uncontended``: a simulation of those requests one at a time,
each arriving after the one before has finished). Percentiles are taken over every arrived request;
one that did not complete is infinitely slowed (as in ``servesim capacity``); a request with one
output token has no TBT. A probe meets the SLO when every limit holds and it keeps up with its rate
by the capacity search's rule (``servesim.outputs.metrics.keep_up_ratio``, with its allowance for
the shortfall a run's own arrivals and service times make with no queue, ``keep_up_warmup``: a
probe that meets every limit and falls short by no more than that is too short to tell and runs
again longer, up to ``capacity.MAX_LONGER`` x its requests, as capacity's probes do). The search is the
capacity search's own (``search_capacity``: bracket, bisect to ``tol``, probe 10% above),
with probes simulated in this process: every probe at one seed and request count sees the same
requests, so the uncontended run is done once and reused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from servesim.outputs import metrics
from servesim.inputs.scenario import mean_rate_at
from servesim.outputs.metrics import KEEP_UP, arrival_period_s, keep_up_check
from servesim.studies.capacity import MAX_LONGER, Search as _CapacitySearch, longer_requests, search_capacity

SLOWDOWN_METRICS = ("ttft", "tbt", "e2e")
_BIG = 1e18  # a request that did not complete: infinitely slowed


@dataclass(frozen=True)
class Uncontended:
    """Per request (in ``request_id`` order), its latencies served alone (seconds; tbt NaN for
    one output token)."""

    ttft_s: np.ndarray
    tbt_s: np.ndarray
    e2e_s: np.ndarray


def uncontended(scenario, prompt_tokens: np.ndarray, output_tokens: np.ndarray, gap_s: float = 120.0) -> Uncontended:
    """Latencies of each request (these lengths) alone on ``scenario`` (a ``Scenario``; give it one
    replica): request k arrives at k x ``gap_s``; when one is still running as the next arrives,
    the gap doubles and it runs again."""
    from servesim.inputs.workload import RequestSpecs
    from servesim.simulation import simulate

    n = len(prompt_tokens)
    while True:
        specs = RequestSpecs(arrival_s=np.arange(n, dtype=np.float64) * gap_s,
                             prompt_tokens=np.asarray(prompt_tokens, dtype=np.int64),
                             output_tokens=np.asarray(output_tokens, dtype=np.int64))
        req = _by_id(simulate(scenario, specs=specs).requests)
        if not metrics.is_completed(req).all():
            bad = int(np.argmin(metrics.is_completed(req)))
            raise ValueError(f"the uncontended run did not complete request {bad} ({prompt_tokens[bad]} prompt, "
                             f"{output_tokens[bad]} output tokens): {req['reason'][bad]}")
        if n < 2 or (req["finish_s"][:-1] <= req["arrival_s"][1:]).all():
            return Uncontended(metrics.ttft_s(req), metrics.tpot_s(req), metrics.e2e_s(req))
        gap_s *= 2


def _by_id(req: dict) -> dict:
    order = np.argsort(req["request_id"], kind="stable")
    return {k: np.asarray(v)[order] for k, v in req.items()}


def slowdowns(req: dict, base: Uncontended) -> dict:
    """{metric: per-request slowdown} of a run's requests (``Results.requests``) against ``base``
    (the same requests alone); not completed: ``_BIG``; tbt NaN for one output token."""
    req = _by_id(req)
    done = metrics.is_completed(req)
    out = {}
    for m, x, b in (("ttft", metrics.ttft_s(req), base.ttft_s), ("tbt", metrics.tpot_s(req), base.tbt_s),
                    ("e2e", metrics.e2e_s(req), base.e2e_s)):
        s = np.where(done, x / b, _BIG)
        out[m] = np.where(np.isnan(b), np.nan, s)
    return out


def evaluate(res, base: Uncontended, limits: dict, keep_up: float = KEEP_UP) -> dict:
    """{"meets": bool, "<metric>_<pXX>": slowdown percentile, ..., and the keep-up fields of
    ``metrics.keep_up_check`` ("keep_up": ratio, "keeps_up", "keep_up_warmup", ...)}: ``limits`` maps (metric,
    "pXX") to the highest slowdown allowed at that percentile; ``keep_up`` the share of arrivals
    that must leave (0: not checked), by ``servesim capacity``'s rule: the ratio over the keep-up
    window (whole periods of a periodic rate, ``metrics.keep_up_window``), and ``too_short`` when
    the probe meets every limit and the ratio falls short by no more than the run's own arrivals
    and service times make with no queue (``metrics.keep_up_warmup``: a longer probe tells; it
    still does not meet)."""
    sd = slowdowns(res.requests, base)
    ev, ok = {}, True
    for (m, stat), limit in limits.items():
        x = sd[m][~np.isnan(sd[m])]
        v = float(np.percentile(x, float(stat[1:]))) if len(x) else 0.0
        ev[f"{m}_{stat}"] = v if v < _BIG / 10 else math.inf
        ok &= v <= limit
    if keep_up > 0:  # 0: not checked
        scenario = getattr(res, "scenario", None)
        arrival = scenario.workload.arrival if scenario is not None else None
        period = arrival_period_s(arrival) if arrival is not None else None
        # (the nominal mean rate: a window whose arrivals came slower shows nothing about it, metrics.keeps_up)
        rate = mean_rate_at(arrival, arrival.rate_rps) if hasattr(arrival, "rate_rps") else None
        ev.update(keep_up_check(res.requests, keep_up, period, rate, meets_otherwise=bool(ok)))
        ok &= ev["keeps_up"]
    ev["meets"] = bool(ok)
    return ev


class SlowdownSearch:
    """The capacity search's probing contract (``probe(rates)``, ``results``, ``bracket()``,
    ``floor_violation()`` and ``floor``) with probes simulated here: ``run(rate)`` returns a probe's
    ``Results``, ``run(rate, requests)`` one of that many requests (a probe too short to tell
    whether it keeps up runs again longer: ``evaluate``'s too_short, up to ``MAX_LONGER`` x the
    first probe's requests, as ``servesim capacity``'s probes do; a probe still too short there
    does not meet); ``base(results)`` the uncontended latencies of its requests."""

    bracket = _CapacitySearch.bracket

    def __init__(self, run, base, limits: dict, keep_up: float = KEEP_UP):
        self.run, self.base, self.limits, self.keep_up = run, base, limits, keep_up
        self.results = {}  # rate -> evaluation (with "requests": the probe's, after any run longer)
        self.floor = None

    def floor_violation(self) -> None:
        """None: the limits are slowdowns against each request alone, which an idle deployment
        meets by definition (no latency floor rules a rate out)."""
        return None

    def probe(self, rates) -> None:
        for r in rates:
            r = float(f"{r:.6g}")
            if r not in self.results:
                res = self.run(r)
                n = first = len(res.requests["arrival_s"])
                ev = evaluate(res, self.base(res), self.limits, self.keep_up)
                while ev.get("too_short") and n < first * MAX_LONGER:
                    n = longer_requests(ev, n, first * MAX_LONGER)
                    res = self.run(r, n)
                    ev = evaluate(res, self.base(res), self.limits, self.keep_up)
                self.results[r] = {**ev, "requests": n}


def slowdown_capacity(run, base, limits: dict, start_rps: float, tol: float, max_probes: int,
                      keep_up: float = KEEP_UP) -> tuple[float, bool, SlowdownSearch]:
    """(the highest rate meeting ``limits``, whether the search confirmed it, the search) by
    ``search_capacity`` from ``start_rps``, one probe at a time."""
    s = SlowdownSearch(run, base, limits, keep_up)
    cap, _, done = search_capacity(s, start_rps, tol, max_probes, workers=1)
    return cap, done, s
