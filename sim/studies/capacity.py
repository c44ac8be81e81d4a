"""``servesim capacity``: the highest arrival rate at which the SLOs hold.

Each probe is a simulation of the scenario at one ``workload.arrival.rate_rps`` with a fixed
number of requests (``--probe-requests``; by default ``auto``: max(the scenario's num_requests, 1000,
4 x the requests the deployment holds at once when full), ``auto_probe_requests``) and the scenario's
seed, so every probe sees the same requests, only closer together or further apart. Above capacity the
queue grows through the run and the tail latencies blow up; below it they stay flat.

A probe *meets* the SLO when each ``METRIC_STAT <= limit`` holds, percentiles taken over every
arrived request (rejected or unfinished ones count as infinitely late). With ``--attainment A``
(DistServe's goodput), the limits on ttft, tpot, e2e and queue instead apply to each request,
and the probe meets when a share >= A of all arrived requests is within every one of them (tbt
limits stay percentiles: TBT is per token, not per request).

A probe must also keep up with its rate (``keep_up``): over the second half of its arrivals (from
the middle request's arrival to the last one's), at least ``--keep-up`` (default 0.9) as many
requests must leave (finish, or be rejected) as arrive. A replica that keeps up serves what
arrives; above its throughput the backlog grows by the difference. Without this, limits that
queueing does not move (a TPOT limit: a full batch decodes at the same speed however long the queue
behind it) or that a probe drains within (an E2E limit longer than the whole probe takes at any
rate) would be met at every rate, and the search would climb without end. The first half is left
out as warm-up; a probe needs requests that finish within it. One whose shortfall its own arrivals
and service times could explain with no queueing (``keep_up_warmup``: requests served in longer than
the window, or arrivals that bunch by chance on a short probe) is run again longer
(``Search._lengthen``, up to ``MAX_LONGER`` x its first probe's requests), so that many replicas at a high
rate are not read as saturated; still too short there, it fails and the answer says it is a lower
bound (``too_short``).

Search: bracket (double or halve from the scenario's rate until one probe meets and one fails),
then shrink the bracket, probing ``--workers`` rates per round (bisection with one worker),
until it is narrower than ``--tol``; finally probe 10% above the answer, which must fail (if it
meets after all, the search continues upwards from there). If ``--max-probes`` run out before that,
there is no answer: the command says what it bracketed and exits 2. Probes run through the sweep machinery:
``--out DIR`` gets results.csv (one row per probe), runs/<hash>/ and capacity.json, and a rerun
reuses finished probes.

Interval over seeds (``capacity_interval``, what ``servesim capacity`` runs unless ``--seeds 1``):
one search per seed, each with its own requests (the scenario's seed, then the next ones); the
capacity is the mean of the per-seed answers with a 95% Student-t interval over them
(``servesim.outputs.intervals``). By default it takes 3 seeds, then adds one at a time until the
half-width is at most 5% of the mean or 10 seeds ran (``SeedOptions``); it then says it stopped
short. Every seed's search starts the same way, from the start rate: one that started from the
answers so far landed elsewhere in its bracket (up to --tol), or past a rate whose verdict a
rerun longer turned (3.5% on chat), so a seed's answer hung on the seeds before it.
The per-seed answers are bracket floors (each within ``--tol`` below its seed's knee); their
spread is the workload's sampling noise, which longer probes shrink too.

Library use (the deployment planner's entry point):

    ci = capacity_interval("scenarios/default.yaml", "ttft_p99=1,tpot_p99=0.05", CapacityOptions(),
                           SeedOptions(), out=None, overrides=["cluster.replicas=2"])
    ci.interval.mean, ci.interval.half, ci.per_gpu    # req/s; Interval objects (low, high, rel)
    ci.stopped_short, ci.error, ci.result             # why not narrower; no answer; capacity.json
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servesim.errors import InputError
from servesim.inputs.scenario import MAX_RATE_RPS, MAX_REQUESTS, MAX_SECONDS, MIN_RATE_RPS, mean_rate_at
from servesim.outputs import metrics
from servesim.outputs.metrics import LATENCY_METRICS as METRICS, PER_REQUEST, SLO_STATS as STATS, parse_slo  # noqa: F401
from servesim.outputs.metrics import KEEP_UP, arrival_period_s, keep_up_check, queue_growth
from servesim.outputs.intervals import NONNEGATIVE, SEED_KEY, Interval, t_interval
from servesim.outputs.rundir import read_table, read_tbt
from servesim.outputs.writer import json_text
from servesim.studies.executors import ExecutorOptions, check_numbers
from servesim.studies.points import load_base, make_points, num_gpus, require_rate, scenario_label
from servesim.studies.replicates import check_seed_count, seeds_for
from servesim.studies.lock import folder_lock
from servesim.studies.sweep import RESULTS, RUNS, begin_study, execute, write_results
from servesim.outputs.wording import plural

RATE_KEY = "workload.arrival.rate_rps"
MIN_KEEP_UP_REQUESTS = 20
MIN_TOL = 1e-4  # --tol: probed rates have 6 significant digits (a narrower bracket has no rate inside)
# a probe too short to tell whether it keeps up is run again longer, up to this many times the
# requests of --probe-requests (then it counts as failing, and the answer says so)
MAX_LONGER = 64
# A probe's first half is its warm-up; with fewer arrivals in it than the deployment holds at
# once when full, its batch can still be filling when keeping up is counted (docs/sizing.md,
# Keeping up). The rerun the filling warning advises gives the warm-up FILL_SPAN times that many.
FILL_SPAN = 2
# --probe-requests auto (the default): max(the scenario's num_requests, PROBE_FLOOR, PROBE_SPAN x the
# requests the deployment holds at once), rounded up to 100: a warm-up half that holds the full batch
# FILL_SPAN times, the length the filling warning advises. In docs/sizing.md's table the answers
# of probes under 2x the held count came out low and warned (chat on 4 replicas: 53 and 75 req/s at
# 0.6x and 1.5x), those of about 3x or more agreed with the longest probes (chat 79 at 2.9x,
# pd-split 37 at 2.9x, default 27.6 at 4x against 26.1 at 8x).
PROBE_FLOOR = 1000
PROBE_SPAN = 2 * FILL_SPAN
# auto never asks for more than this, the most a probe of the former default (1,000 requests) was
# run again to (MAX_LONGER x): 1,000 replicas of the default scenario hold 377,000 requests at once,
# and 4x that in every probe is hours; an explicit --probe-requests may go longer
AUTO_MAX_REQUESTS = MAX_LONGER * PROBE_FLOOR
_BIG = 1e18  # stands in for "never": a request that did not complete


def request_metrics(run_dir: Path) -> dict:
    """Per-request ttft, tpot, e2e, queue (seconds; non-completed = _BIG, tpot NaN for 1 token), tbt,
    done (completed) and the request columns they come from (requests)."""
    req = read_table(run_dir, "requests", ("arrival_s", "scheduled_s", "first_token_s", "finish_s", "output_tokens",
                                           "status"))
    done = metrics.is_completed(req)
    big = lambda x: np.where(done & ~np.isnan(x), x, _BIG)  # noqa: E731
    tpot = metrics.tpot_s(req)
    tpot[(req["output_tokens"] > 1) & ~done] = _BIG  # a multi-token request that did not complete: late
    tbt = read_tbt(run_dir)
    return {"ttft": big(metrics.ttft_s(req)), "tpot": tpot, "e2e": big(metrics.e2e_s(req)),
            "queue": big(metrics.queue_s(req)), "tbt": tbt if tbt is not None else np.zeros(0),
            "done": done, "requests": req}


def _stat(x: np.ndarray, stat: str) -> float:
    """``stat`` of ``x``; ``_BIG`` ("never") when a request that never completed enters it: the mean
    of any, or a percentile interpolated toward one (np.percentile between a finite sample and
    ``_BIG`` gave e.g. 1e16 s: a p99 of 300 requests with 4 rejected printed as 1e+19 ms, not inf)."""
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return 0.0
    late = x >= _BIG
    if stat == "mean":
        return _BIG if late.any() else float(x.mean())
    if stat == "max":
        return float(x.max())
    v = float(np.percentile(x, float(stat[1:])))
    return _BIG if late.any() and (late.all() or v > x[~late].max()) else v


def evaluate(run_dir: Path, slo: dict, attainment: float | None, keep_up: float = 0.0,
             period_s: float | None = None, rate_rps: float | None = None) -> dict:
    """{"meets": bool, "<metric>_<stat>": value, ..., "attainment": share within per-request limits,
    "keep_up": ``keep_up_ratio`` of the probe (None: too few arrivals to tell), "keeps_up": it is
    >= the given share (given 0: not checked), "keep_up_window_s" and "keep_up_warmup" (the
    shortfall the probe's length alone explains, ``keep_up_warmup``), "too_short": it meets every
    other check but does not keep up, by no more than that shortfall or over a window shorter than
    its own p99 service time while its queue alone kept up (``metrics.window_too_short``; a longer
    probe tells),
    "service_p99_s": the p99 of the completed requests' time from first scheduled to finish}
    (the keep-up fields: ``metrics.keep_up_check``, the slowdown search's rule too); a
    probe meets only if it keeps up and completes at least one request. ``period_s``: the arrival
    rate's period, which the keep-up window spans whole (``metrics.arrival_period_s``).
    ``rate_rps``: the probe's nominal mean rate (None: not known); "keep_up_arrived" is its
    window's arrivals per arrival that rate brings (``metrics.keep_up_arrived``), and a probe whose
    window came slower keeps up only if as many left as that rate would bring (``metrics.keeps_up``):
    else a lull passes an overload."""
    m = request_metrics(run_dir)
    n = len(m["done"])
    res, ok = {}, True
    per_request = {k: v for k, v in slo.items() if k[0] in PER_REQUEST}
    within = m["done"].copy()
    for (metric, _), limit in per_request.items():
        x = m[metric]
        within &= ~(x > limit)  # NaN (no TPOT for one output token) cannot miss
    res["attainment"] = float(within.sum() / n) if n else 0.0
    for (metric, stat), limit in slo.items():
        v = _stat(m[metric], stat)
        res[f"{metric}_{stat}"] = v if v < _BIG / 10 else math.inf
        if attainment is None or metric not in PER_REQUEST:
            ok &= v <= limit
    if attainment is not None:
        ok &= res["attainment"] >= attainment
    ok &= bool(m["done"].any())  # a probe that completes nothing meets no SLO (its TBT sample is empty)
    if keep_up > 0:
        # (too few arrivals, or all at one instant, to tell: not kept up with; a probe that could
        # show it is longer, --probe-duration)
        res.update(keep_up_check(m["requests"], keep_up, period_s, rate_rps, meets_otherwise=bool(ok)))
        ok &= res["keeps_up"]
    res["meets"] = bool(ok)
    return res


def _first_probe(data: dict):
    """A probe's scenario (``data``), its requests' length statistics and its deployment
    (``prepare``), or None where the requests are not drawn ahead of the run (closed-loop or
    multi-turn workloads)."""
    from servesim.inputs.scenario import scenario_from_dict
    from servesim.simulation import prepare
    from servesim.studies.plan_space import workload_stats

    sc = scenario_from_dict(data)
    try:
        stats = workload_stats(sc)
    except InputError:
        return None
    return sc, stats, prepare(sc)


def held_requests(data: dict) -> tuple[int, str] | None:
    """How many requests the deployment of scenario ``data`` holds at once when its batch is
    full, and how that is made up: the pool requests spend longest in (decode with a P/D split),
    its replicas x the fewer of ``max_num_seqs`` and the whole requests (prompt + output, mean of
    its requests) its KV cache holds. None where it cannot tell (not an open-loop workload)."""
    first = _first_probe(data)
    if first is None:
        return None
    sc, stats, setup = first
    pool = setup.pools_by_name.get("decode", setup.pools[0])
    whole = float(np.mean(stats.prompt_total + stats.output)) if len(stats.output) else 0.0
    # (hardware.pp with pp_overlap: each replica's pp virtual engines schedule up to max_num_seqs
    # each, in 1/pp of its KV blocks, as the cluster builds them)
    ve = pool.cost_model.pp if pool.cost_model.pp > 1 and sc.hardware.pp_overlap else 1
    fit = (pool.capacity.num_blocks // ve) * pool.capacity.block_size / whole if whole > 0 else math.inf
    seqs = max(1, math.floor(min(pool.max_num_seqs, fit)))
    where = plural(pool.replicas, "replica" if pool.name == "colocated" else f"{pool.name} replica")
    if ve > 1:
        where += f" x {ve} virtual engines (hardware.pp with pp_overlap)"
    what = f"max_num_seqs {seqs}" if pool.max_num_seqs <= fit else \
        f"{seqs}, the whole requests ({whole:.0f} tokens on average) its KV cache holds"
    return pool.replicas * ve * seqs, f"{where} x {what}"


def filling_span(held: int) -> int:
    """Requests in a probe whose warm-up half holds ``held`` requests ``FILL_SPAN`` times
    (``PROBE_SPAN`` x ``held``), rounded up to 100: what the filling warning advises and
    ``--probe-requests auto`` takes."""
    return math.ceil(PROBE_SPAN * held / 100) * 100


def auto_probe_requests(base: dict, scenario_requests: int | None) -> tuple[int, str]:
    """``--probe-requests auto``: (requests per probe, why) for the scenario ``base`` (its
    ``workload.num_requests`` is ``scenario_requests``): max(those, ``PROBE_FLOOR``,
    ``filling_span`` of ``held_requests``), at most ``AUTO_MAX_REQUESTS``."""
    from servesim.inputs.overrides import with_values

    floor = max(scenario_requests or 0, PROBE_FLOOR)
    base_n = (f"the scenario's num_requests, {floor}" if scenario_requests and scenario_requests >= PROBE_FLOOR
              else f"the least auto takes, {PROBE_FLOOR}")
    held = held_requests(with_values(base, {"workload.num_requests": floor, "workload.duration_s": None},
                                     "--probe-requests"))
    if held is None:
        return floor, (f"auto: {base_n}; the requests are not drawn ahead of the run, so the batch the deployment "
                       "holds at once is not counted")
    want = filling_span(held[0])
    batch = f"{PROBE_SPAN} x the {held[0]} requests the deployment holds at once when full ({held[1]})"
    if want <= floor:
        return floor, f"auto: {base_n}, at least {batch}"
    if want > AUTO_MAX_REQUESTS:
        if floor >= AUTO_MAX_REQUESTS:  # (the cap bounds the batch's term, never the scenario's own count)
            return floor, (f"auto: {base_n}; {batch} would be {want}, capped at the scenario's count: give "
                           "--probe-requests to go longer")
        return AUTO_MAX_REQUESTS, (f"auto: {batch} would be {want}, capped at {AUTO_MAX_REQUESTS}: give "
                                   "--probe-requests to go longer")
    return want, (f"auto: {batch}, rounded up to 100, so that a probe's warm-up half holds the full batch twice; "
                  f"more than {base_n}")


class Search:
    """Probes rates through the sweep executor; remembers every probe."""

    def __init__(self, base: dict, out: Path, slo: dict, attainment, probe_requests: int, ex: ExecutorOptions,
                 probe_duration_s: float | None = None, keep_up: float = 0.0, results: str = RESULTS,
                 desc: str = "capacity probes"):
        self.base, self.out, self.slo, self.attainment = base, out, slo, attainment
        self.results_name, self.desc = results, desc
        self.keep_up = keep_up
        self.n = probe_requests
        self.duration = probe_duration_s
        self.ex = ex
        self.points = []  # every probe, in order
        self.results = {}  # rate -> evaluation (of its longest probe)
        self.evals = {}  # probe index -> its evaluation
        self.longer = {}  # rate -> requests of its probe, when run longer than requests_at's
        self.short = set()  # rates whose longest probe was still too short to tell (counted as failing)
        self.floor = None  # why no rate can meet the limits (the latency floors), once a probe failed
        self.period_s = False  # the arrival rate's period (keep-up window), found at the first probe
        # the mean offered rate at a searched rate_rps (on_off: that is the burst rate), which
        # --probe-duration's arrivals come at (``SearchPlan.mean_rps``; run_search sets it)
        self.mean_rps = lambda rate: rate

    @property
    def rate_unit(self) -> str:
        """The unit of the rate searched: "sessions/s" where ``workload.sessions`` makes the
        arrival rate start sessions (``checks.sessions_rate_note``), else "req/s"."""
        from servesim.outputs.checks import rate_unit

        return rate_unit(self.base)

    def _period_s(self, data: dict) -> float | None:
        """``metrics.arrival_period_s`` of the probes' arrival process (the same at every rate)."""
        if self.period_s is False:
            from servesim.inputs.scenario import scenario_from_dict

            self.period_s = arrival_period_s(scenario_from_dict(data).workload.arrival)
        return self.period_s

    def floor_violation(self) -> str | None:
        """Why the limits cannot hold at any rate, judged on the first probe's requests: each
        request's TTFT is at least its prompt's prefill alone and its TPOT at least one decode
        step of it alone (``plan_space.latency_floors``, what ``servesim plan`` prunes with); None
        when they can. Multi-turn sessions draw their requests as the run goes: they are the first
        probe's own (its requests.csv), and with prefix caching a turn's conversation so far may be
        cached on an idle deployment, so only its decode steps give it a floor (its prefill is taken
        as one token)."""
        from servesim.studies.plan_space import WorkloadStats, floor_violation, latency_floors

        first = _first_probe(self.points[0].data)
        if first is not None:
            _, stats, setup = first
        else:
            from servesim.inputs.scenario import scenario_from_dict
            from servesim.simulation import prepare

            try:
                req = read_table(self.out / RUNS / self.points[0].hash, "requests", ("prompt_tokens", "output_tokens"))
            except (InputError, OSError):
                return None
            total = np.asarray(req["prompt_tokens"], dtype=float)
            if not len(total):
                return None
            sc = scenario_from_dict(self.points[0].data)
            setup = prepare(sc)
            prompt = np.ones_like(total) if sc.policy.prefix_caching else total
            stats = WorkloadStats(prompt, np.asarray(req["output_tokens"], dtype=float), total)
        kind = "pd" if "decode" in setup.pools_by_name else "colocated"
        return floor_violation(latency_floors(kind, setup, stats), self.slo, self.attainment)

    def held_requests(self) -> tuple[int, str] | None:
        """``held_requests`` of the first probe's scenario."""
        return held_requests(self.points[0].data)

    def probe(self, rates) -> None:
        rates = [float(f"{r:.6g}") for r in rates if float(f"{r:.6g}") not in self.results]
        if not rates:
            return
        first = len(self.points)
        variants = [({RATE_KEY: r}, {RATE_KEY: r, "workload.num_requests": self.requests_at(r),
                                      "workload.duration_s": None}) for r in rates]
        new = make_points(self.base, variants, what="capacity probe")
        for i, p in enumerate(new):
            p.index = first + i
        if any(p.data is None for p in new):
            raise InputError(next(p.error for p in new if p.data is None))
        self.points += new
        ex = self.ex
        execute(new, self.out, ex.executor, ex.workers, ex.address, ex.progress, desc=self.desc,
                results=self.results_name, outputs=ex.outputs)
        for p in new:
            if p.row.get("status") != "ok":
                raise InputError(f"probe at {p.values[RATE_KEY]} {self.rate_unit} failed: {p.row.get('error')}")
            ev = evaluate(self.out / RUNS / p.hash, self.slo, self.attainment, self.keep_up, self._period_s(p.data),
                          self.mean_rps(p.values[RATE_KEY]))
            ev["throughput_rps"] = p.row.get("throughput_rps")
            ev["goodput_rps"] = p.row.get("goodput_rps")
            ev["requests"] = self.requests_at(p.values[RATE_KEY])
            self.results[p.values[RATE_KEY]] = self.evals[p.index] = ev
            p.values["meets"] = ev["meets"]
            for k, v in ev.items():
                if k != "meets" and k not in ("throughput_rps", "goodput_rps"):
                    p.values[f"probe_{k}"] = v
        write_results(self.out, self.points, self.results_name)
        again = [r for r in rates if self._lengthen(r)]
        if again:
            for p in new:  # (results.csv keeps them, marked: the longer probe at the rate decides)
                p.values["probe_rerun"] = p.values[RATE_KEY] in again
            self.probe(again)

    def _lengthen(self, rate: float) -> bool:
        """When the probe at ``rate`` failed only for want of length (``evaluate``'s too_short: a
        deployment whose requests take longer to serve than the probe's keep-up window lasts
        cannot show that it keeps up), give the rate a probe long enough (its window at least the
        p99 service time, and at least twice the requests), up to ``MAX_LONGER`` times
        --probe-requests; True when it is to be probed again. At the limit the rate stays failing
        and is remembered in ``short``."""
        ev = self.results[rate]
        if not ev.get("too_short"):
            return False
        n = ev["requests"]
        # (MAX_LONGER x the rate's own first probe: one of --probe-duration's arrivals may hold more
        # than MAX_LONGER x --probe-requests, and was then never run longer)
        limit = min(self.first_requests(rate) * MAX_LONGER, MAX_REQUESTS)
        if n >= limit:
            self.short.add(rate)
            return False
        self.longer[rate] = longer_requests(ev, n, limit)
        del self.results[rate]
        return True

    def first_requests(self, rate: float) -> int:
        """Requests in the first probe at ``rate``: ``--probe-requests``, or more to span
        ``--probe-duration`` of arrivals at the mean rate (not ``rate``, an on/off process's burst
        rate: that many spanned (on_s + off_s) / on_s times the duration, 4x with 5 s on, 15 s off)."""
        return self.n if self.duration is None else max(self.n, math.ceil(self.mean_rps(rate) * self.duration))

    def requests_at(self, rate: float) -> int:
        """Requests in a probe at ``rate``: its first's (``first_requests``), or more when run longer."""
        return max(self.first_requests(rate), self.longer.get(rate, 0))

    def bracket(self):
        """(lo, hi): the largest meeting rate below the smallest failing rate above it."""
        live = {r: e for r, e in self.results.items() if not e.get("superseded")}
        fails = sorted(r for r, e in live.items() if not e["meets"])
        oks = sorted(r for r, e in live.items() if e["meets"])
        hi = fails[0] if fails else None
        below = [r for r in oks if hi is None or r < hi]
        lo = below[-1] if below else None
        if lo is not None:  # a meeting rate above a failure (noise): keep the failure just above lo
            above = [r for r in fails if r > lo]
            hi = above[0] if above else None
        return lo, hi


def longer_requests(ev: dict, n: int, limit: int) -> int:
    """Requests for a run again of one that was too short to tell (``evaluate``'s too_short, run
    with ``n``): enough for its keep-up window to last the p99 service time (10% over), at least
    twice ``n``, at most ``limit``. The rule of capacity's probes and of plan's runs at R."""
    w = ev["keep_up_window_s"]
    grow = ev["service_p99_s"] / w if w > 0 else 2.0
    return min(limit, math.ceil(n * max(2.0, 1.1 * grow)))


def search_capacity(s: Search, start: float, tol: float, max_probes: int,
                    workers: int) -> tuple[float, float | None, bool]:
    """Returns (capacity rate, rate of the failing check above it or None, done): ``done`` is
    false when ``max_probes`` ran out first, and the pair is then only the bracket so far. ``s``:
    a ``Search``, or anything with its probing contract (``probe``, ``results``, ``bracket``,
    ``floor_violation`` and ``floor``: ``servesim.studies.slowdown.SlowdownSearch``); when the
    first probe fails and ``floor_violation()`` says no rate can meet the limits, the answer is 0.
    It brackets by doubling or halving from ``start``."""
    w = max(1, workers)
    s.probe([start])
    seen = None
    while len(s.results) < max_probes:
        state = (len(s.results), sum(1 for e in s.results.values() if e.get("superseded")))
        if state == seen:  # (a round that probed nothing new and changed nothing would repeat forever)
            break
        seen = state
        lo, hi = s.bracket()
        if lo is None:  # nothing meets yet: go down
            if len(s.results) == 1 and s.floor is None:
                s.floor = s.floor_violation() or ""
                if s.floor:  # no rate can meet the limits: nothing to search for
                    return 0.0, min(s.results), True
            base = min(s.results)
            # Only the lowest rate a scenario takes ends the descent: a floor relative to the start
            # (2^20 below it) answered 0 from --start 1e9 at 238 req/s, where 30 meets.
            if base <= MIN_RATE_RPS:
                return 0.0, base, True
            s.probe(sorted({max(base / 2.0 ** (k + 1), MIN_RATE_RPS)
                            for k in range(min(w, 20))}, reverse=True))
            continue
        if hi is None:  # nothing fails above lo: go up
            if lo >= MAX_RATE_RPS:  # (the highest rate a scenario takes: no answer, run_search says why)
                break
            s.probe(sorted({min(lo * 2.0 ** (k + 1), MAX_RATE_RPS) for k in range(min(w, 60))}))
            continue
        if hi / lo - 1 > tol:
            before = len(s.results)
            s.probe([lo + (hi - lo) * (k + 1) / (w + 1) for k in range(w)])
            if len(s.results) > before:
                continue
            # (no rate strictly inside the bracket at 6 significant digits: as narrow as it gets)
        check = float(f"{lo * 1.1:.6g}")
        s.probe([check])
        if not s.results[check]["meets"]:
            return lo, check, True
        # Met 10% above the answer after all: forget the failures below it and go on up.
        for r, e in s.results.items():
            if not e["meets"] and r <= check:
                e["superseded"] = True
    lo, hi = s.bracket()
    return (lo or 0.0), hi, False


@dataclass(frozen=True)
class CapacityOptions:
    """The search's knobs (the ``servesim capacity`` flags of the same names)."""

    attainment: float | None = None  # None: percentile limits; else the share of requests within them all
    probe_requests: int | None = None  # None: auto (auto_probe_requests)
    probe_duration_s: float | None = None  # None: two periods of a periodic arrival process, else off
    start_rps: float | None = None  # None: the scenario's rate
    tol: float = 0.02
    max_probes: int = 40
    keep_up: float = KEEP_UP  # 0: off

    def __post_init__(self):
        check_numbers(self, ("attainment", "probe_requests", "probe_duration_s", "start_rps"),
                      required=("tol", "max_probes", "keep_up"))


@dataclass
class CapacityResult:
    """A search's outcome; ``result`` is what capacity.json holds."""

    search: Search  # every probe, in order, and its evaluation
    slo: dict  # {(metric, stat): seconds}
    capacity_rps: float  # the highest rate that met (0.0: none did); only the bracket's floor when not done
    above_rps: float | None  # the failing check above it (the bracket's ceiling when not done)
    done: bool  # False: --max-probes ran out before an answer was confirmed
    num_gpus: int
    probe_requests: int
    probe_duration_s: float | None
    arrival: object  # the scenario's arrival process
    mean_capacity_rps: float  # the mean offered rate at capacity (on_off: rate_rps is the burst rate)
    result: dict
    none_served: str  # a note when no probe completed a request ("" otherwise)
    error: str | None  # why there is no answer (the command says it and exits 2), else None
    too_short: str | None = None  # failing probes above the answer too short to tell (a lower bound), else None
    filling: str | None = None  # the keep-up rule set the answer on probes too short for the batch to fill, else None
    growing: str | None = None  # the answer's probe kept up by the rule while its queue grew: not sustained, else None


@dataclass
class SearchPlan:
    """A checked capacity search, ready to run on any seed: what ``prepare_search`` derives from
    the scenario file and the options."""

    scenario: str
    slo_text: str
    slo: dict  # {(metric, stat): seconds}
    opts: CapacityOptions
    base: dict  # scenario data with --set applied (the seed is set per search)
    arrival: object  # the scenario's arrival process
    probe_requests: int
    probe_duration_s: float | None
    start_rps: float
    num_gpus: int
    overrides: list
    probe_requests_why: str = "given (--probe-requests)"  # how probe_requests was chosen (auto_probe_requests)

    def mean_rps(self, rate: float) -> float:
        """The mean offered rate when the search sets ``rate_rps`` to ``rate`` (on_off: the burst rate)."""
        return mean_rate_at(self.arrival, rate)


def check_search_options(attainment, tol: float, keep_up: float, max_probes: int) -> None:
    """The options of a capacity search (``capacity``, and ``plan``'s) that need no scenario:
    ``InputError``s naming the flag. (Comparisons written so that NaN fails them.)"""
    if attainment is not None and not 0 < attainment <= 1:
        share = f" (a share: {attainment / 100:g} for {attainment:g}%)" if 1 < attainment <= 100 else ""
        raise InputError(f"--attainment must be in (0, 1], got {attainment}{share}")
    if not MIN_TOL <= tol < 0.1:
        raise InputError(f"--tol must be in [{MIN_TOL:g}, 0.1): below, rates (probed to 6 significant digits) cannot "
                         f"split the bracket; at 0.1 or more the 10%-above check is inside it; got {tol}")
    if not 0 <= keep_up <= 1:
        raise InputError(f"--keep-up must be a share in [0, 1] (0: off), got {keep_up}")
    if max_probes < 2:
        raise InputError(f"--max-probes must be >= 2 (a rate that meets and one that fails), got {max_probes}")


def check_run_requests(n: int, keep_up: float, flag: str = "--probe-requests", auto: bool = False) -> None:
    """Requests in a probe or a verifying run (``flag``): at least 1, at most a scenario's
    ``workload.num_requests`` allows, and enough to tell whether a run keeps up when that rule
    is on. ``auto``: the flag also takes ``auto``, which the message names."""
    if not 1 <= n <= MAX_REQUESTS:
        raise InputError(f"{flag} must be >= 1 and <= {MAX_REQUESTS:g}{', or auto (the default)' if auto else ''}, "
                         f"got {n}")
    if keep_up and n < MIN_KEEP_UP_REQUESTS:
        raise InputError(f"{flag} {n}: a run needs at least {MIN_KEEP_UP_REQUESTS} requests to tell "
                         "whether it keeps up with its rate (or turn the rule off with --keep-up 0)")


def prepare_search(scenario, slo_text: str, opts: CapacityOptions = CapacityOptions(), overrides=(),
                   seed: int | None = None) -> SearchPlan:
    """Check the options against the scenario file; bad ones are ``InputError``s naming the flag."""
    slo = parse_slo(slo_text)
    check_search_options(opts.attainment, opts.tol, opts.keep_up, opts.max_probes)
    base, _ = load_base(scenario, overrides, seed)
    from servesim.inputs.scenario import scenario_from_dict

    label = scenario_label(scenario, base)
    try:
        sc = scenario_from_dict(base)
        # the deployment's own checks (a policy's setup refusing the cluster, TP that does not divide
        # the heads) named the scenario file with servesim run and not here (before every probe)
        from servesim.simulation import prepare

        prepare(sc)
    except InputError as e:
        raise InputError(e if label in str(e) else f"{label}: {e}") from None
    base["seed"] = sc.seed
    arrival = sc.workload.arrival
    require_rate(arrival, "servesim capacity searches")
    if opts.probe_requests is not None:
        n, why = opts.probe_requests, "given (--probe-requests)"
        check_run_requests(n, opts.keep_up, auto=True)
    else:
        n, why = auto_probe_requests(base, sc.workload.num_requests)
    duration = opts.probe_duration_s
    if duration is not None and not 0 < duration <= MAX_SECONDS:
        raise InputError(f"--probe-duration must be > 0 and <= {MAX_SECONDS:g} seconds, got {duration}")
    period = arrival_period_s(arrival)  # (a sinusoid's period_s; on/off of fixed durations: on_s + off_s)
    if duration is None and period:
        duration = 2 * period  # a rate that repeats on a cycle: each probe spans two of its periods
    start = arrival.rate_rps if opts.start_rps is None else opts.start_rps  # (0 is refused, not the default)
    if not MIN_RATE_RPS <= start <= MAX_RATE_RPS:
        from servesim.outputs.checks import rate_unit

        raise InputError(f"--start must be >= {MIN_RATE_RPS:g} and <= {MAX_RATE_RPS:g} {rate_unit(base)}, "
                         f"got {start:g}")
    return SearchPlan(label, slo_text, slo, opts, base, arrival, n, duration, start,
                      num_gpus(sc.to_dict()), list(overrides or []), why)


def _meta(plan: SearchPlan, **extra) -> dict:
    o = plan.opts
    return {"kind": "capacity", "scenario": plan.scenario, "slo": plan.slo_text, "attainment": o.attainment,
            "probe_requests": plan.probe_requests, "probe_requests_why": plan.probe_requests_why,
            "probe_duration_s": plan.probe_duration_s,
            "keep_up": o.keep_up, "set": plan.overrides, **extra}


def run_search(plan: SearchPlan, out: Path, ex: ExecutorOptions = ExecutorOptions(), seed: int | None = None,
               results: str = RESULTS, desc: str = "capacity probes") -> CapacityResult:
    """One search on one seed (default: the scenario's), its probes in ``out`` (``results``: one row
    per probe; runs/<hash>/); capacity.json is the caller's. It brackets from the plan's start
    rate, every seed alike."""
    base = dict(plan.base)
    if seed is not None:
        base["seed"] = seed
    opts = plan.opts
    workers = ex.workers or (os.cpu_count() or 1)
    s = Search(base, out, plan.slo, opts.attainment, plan.probe_requests, ex, plan.probe_duration_s, opts.keep_up,
               results, desc)
    s.mean_rps = plan.mean_rps
    cap, above, done = search_capacity(s, plan.start_rps, opts.tol, opts.max_probes,
                                       workers if ex.executor == "local" else (ex.workers or 2))
    gpus = plan.num_gpus
    mean_cap = plan.mean_rps(cap) if cap else 0.0
    result = {"capacity_rps": cap if done else None, "capacity_rps_per_gpu": cap / gpus if done else None,
              "num_gpus": gpus, "slo": plan.slo_text, "attainment": opts.attainment,
              "capacity_mean_rps": mean_cap if done else None,
              "keep_up": opts.keep_up, "check_above_rps": above if done else None,
              "probe_requests": plan.probe_requests, "probe_requests_why": plan.probe_requests_why,
              "bracket_rps": None if done else [cap or None, above],
              "probes": [{"rate_rps": p.values[RATE_KEY], **s.evals.get(p.index, {})} for p in s.points]}
    result["too_short"] = too_short = _too_short_note(s, cap)
    result["floor"] = s.floor or None  # why no rate can meet the limits, when the floors say so
    # the keep-up rule set the answer on probes too short for the batch to fill (a warning)
    result["filling"] = filling = _filling_note(s, cap) if done else None
    # the answer's own probe: its queue grew past chance (a rate the deployment does not sustain)
    result["growing"] = growing = _growing_note(s, cap) if done else None
    unit = s.rate_unit
    none_served = "" if any(e.get("throughput_rps") for e in s.results.values()) else \
        "; no probe completed a request (run the scenario, servesim run, to see why: e.g. rejections)"
    # no rate met because the TTFT admission rule rejects requests at any rate: said, with what helps
    # (more probes only went lower; "Raise --max-probes" was the advice)
    admission = _admission_floor(s, plan.opts.attainment) if not cap else None
    if admission:
        none_served += f"; {admission}"
        result["floor"] = result["floor"] or admission
    error = None
    if not done:
        got = (f"the last rate that met was {cap:.4g} {unit}" if cap else "no rate met") + (
            f", the first that failed above it {above:.4g} {unit}" if above is not None and cap else
            f", down to {min(s.results):.4g} {unit}" if not cap else ", and no rate above it failed")
        unbounded = cap and above is None and (not opts.keep_up or cap >= MAX_RATE_RPS)
        error = (f"no capacity found: the limits still hold at {MAX_RATE_RPS:g} {unit}, the highest rate a scenario "
                 "takes" if cap and cap >= MAX_RATE_RPS else f"no capacity found within --max-probes {opts.max_probes}")
        error = (error
                 + (f" (seed {seed})" if seed is not None and seed != plan.base.get("seed") else "")
                 + f": {got}{none_served}" + ("" if admission else ". " + (
                     "The limits may not bound the rate: give a limit that queueing moves (ttft, e2e, "
                     "queue)" + ("" if opts.keep_up else " or keep --keep-up on") if unbounded else "Raise --max-probes"
                     + _narrow_hint(cap, above, opts.tol, unit))))
    return CapacityResult(s, plan.slo, cap, above, done, gpus, plan.probe_requests, plan.probe_duration_s,
                          plan.arrival, mean_cap, result, none_served, error, too_short, filling, growing)


ADMISSION_TTFT = "admission: predicted TTFT"  # (``gateway.Admission.at_replica``'s reason for the TTFT rule)


def _admission_floor(s: Search, attainment: float | None) -> str | None:
    """Why no rate met, where policy.admission.ttft_slo rejects requests at any rate: at the two
    lowest rates probed it rejected requests, and no fewer at the lower one, so those are requests
    whose predicted TTFT is over the rule's limit with nothing ahead of them (a long prompt's
    prefill alone), and a rejected request is never served. What helps is then a looser rule, not
    lower rates. None where that is not so (or it cannot tell: fewer than two rates probed)."""
    rates = sorted(s.results)[:2]
    if len(rates) < 2:
        return None
    last = {p.values[RATE_KEY]: p for p in s.points}  # (a rate's longest probe: its last)
    counts = []
    for r in rates:
        try:
            req = read_table(s.out / RUNS / last[r].hash, "requests", ("status", "reason"))
        except (InputError, OSError, KeyError):
            return None
        n = len(req["status"])
        counts.append((sum(1 for st, why in zip(req["status"], req["reason"])
                           if st == "rejected" and str(why).startswith(ADMISSION_TTFT)), n))
    (k, n), (k2, n2) = counts
    if not k or k / n < 0.9 * k2 / n2:  # (fewer at the lower rate: the queue's doing, which a lower rate cures)
        return None
    share = f"; or --attainment at most {1 - k / n:.3g}" if attainment is None or attainment > 1 - k / n else ""
    return (f"policy.admission.ttft_slo rejected {k} of the {n} requests even at {rates[0]:.4g} {s.rate_unit}, the "
            f"lowest rate probed (and {k2} of {n2} at {rates[1]:.4g}): their predicted TTFT exceeds the rule's limit "
            "with nothing ahead of them (their prompts' prefill alone), so they are rejected at any rate, and a "
            "rejected request is never served; lower rates or more probes do not help: loosen the rule (the TTFT SLO "
            "it holds, slo.ttft_s or a class's, or policy.admission.ttft_slo_share), turn policy.admission.ttft_slo "
            f"off, shorten the prompts or use a faster deployment{share}")


def _narrow_hint(cap: float, above: float | None, tol: float, unit: str = "req/s") -> str:
    """How the end of the advice to raise --max-probes goes for a search that ran out of probes:
    a wider --tol helps only while the bracket is wider than it; once it is within, only the check
    10% above the answer is left, and that needs a probe."""
    if not cap or above is None:
        return ""
    if above / cap - 1 > tol:
        return " or --tol"
    return f" (the bracket is within --tol {tol:g}: the check 10% above it, {cap * 1.1:.4g} {unit}, did not run)"


def _only_keep_up_failed(ev: dict, slo: dict, attainment) -> bool:
    """Whether a failing probe's evaluation (``evaluate``) met every SLO limit and failed only the
    keep-up rule."""
    if ev.get("meets") or ev.get("keeps_up") is not False or not ev.get("throughput_rps"):
        return False
    for (metric, stat), limit in slo.items():
        if (attainment is None or metric not in PER_REQUEST) and not ev[f"{metric}_{stat}"] <= limit:
            return False
    return attainment is None or ev["attainment"] >= attainment


def _filling_note(s: Search, cap: float) -> str | None:
    """A warning when the keep-up rule, not the SLO, decided the answer (the lowest failing probe
    above it met every limit but did not keep up) on a probe whose warm-up half brought fewer
    requests than the deployment holds at once when full (``Search.held_requests``): near
    capacity its batch can still be filling at the keep-up window's start, and the rule reads
    that climb as a backlog, so the answer can be well below the capacity (chat on 4 replicas:
    53 req/s with 600-request probes, 79 with 3,000). It names the --probe-requests to rerun with."""
    fails = sorted(r for r, e in s.results.items() if not e["meets"] and not e.get("superseded") and r > cap)
    if not cap or not fails:
        return None
    rate = fails[0]
    ev = s.results[rate]
    if not _only_keep_up_failed(ev, s.slo, s.attainment):
        return None
    held = s.held_requests()
    n = ev["requests"]
    if held is None or n // 2 >= held[0]:
        return None
    want = max(2 * n, filling_span(held[0]))
    return (f"the keep-up rule, not the SLO, set this answer (at {rate:.4g} {s.rate_unit} the probe met the SLO "
            f"but fewer than {s.keep_up:g} left per arrival) on probes too short for the batch to fill: a probe's "
            f"first half, its warm-up, brought {n // 2} requests, fewer than the {held[0]} the deployment holds at "
            f"once when full ({held[1]}), so near capacity its batch can still be filling when keeping up is counted, "
            f"which reads as a backlog; the capacity may be well above this answer: rerun with --probe-requests {want}")


def _growing_note(s: Search, cap: float) -> str | None:
    """A warning when the answer's probe passed the keep-up rule while its waiting queue grew over
    the keep-up window by more than chance allows (``metrics.queue_growth``): the rule's slack
    (``--keep-up``, 0.9 by default) passes a steady overload of up to 1/share of what the
    deployment serves at any probe length, so the answer is then above the rate the deployment
    sustains, and at it the queue and the latencies grow with the run's length. (With --keep-up 0
    no probe is counted: nothing said.)"""
    ev = s.results.get(cap) if cap else None
    grew = queue_growth(ev) if ev else None
    if grew is None or not ev.get("keep_up_window_s"):
        return None
    growth, allowance = grew
    window = ev["keep_up_window_s"]
    served = ev["keep_up"] * ev["keep_up_window_arrivals"] / window
    return (f"at the answer, {cap:.4g} {s.rate_unit}, the probe's waiting queue grew by {growth:.0f} requests over "
            f"the {window:.3g} s over which keeping up is counted (chance allows about {allowance:.0f}), while "
            f"{ev['keep_up']:.2f} requests left per arrival, within the keep-up rule's slack (--keep-up "
            f"{s.keep_up:g}): the deployment served {served:.3g} req/s there and does not sustain the answer, "
            "whose queue and latencies keep growing with the run's length; the rate it sustains is nearer "
            f"{served:.3g} req/s")


def lull_only(ev: dict, share: float) -> bool:
    """Whether a probe's keep-up ratio reached ``share`` but fell short of it only counted against
    the arrivals the nominal rate brings (``metrics.keeps_up``: its window's arrivals came slower,
    ``keep_up_arrived`` < 1); not a probe whose ratio held against those too (too short to tell
    by the window rule, ``metrics.window_too_short``: its window is shorter than its p99 service)."""
    k, arrived = ev.get("keep_up"), ev.get("keep_up_arrived")
    return k is not None and arrived is not None and k >= share and k * min(1.0, arrived) < share


def _too_short_note(s: Search, cap: float) -> str | None:
    """What to say when probes above the answer failed only for want of length at ``MAX_LONGER``
    times --probe-requests (``Search.short``): the answer is then a lower bound."""
    rates = sorted(r for r in s.short if r > cap)
    if not rates:
        return None
    ev = s.results[rates[0]]
    why = (f"{ev['keep_up']:.2f} requests left per arrival, but the arrivals over which keeping up is counted came "
           f"at {ev['keep_up_arrived']:.0%} of the rate, and at the rate fewer than {s.keep_up:g} would have left"
           if ev.get("keep_up_arrived") is not None and lull_only(ev, s.keep_up) else
           f"a request takes up to {ev['service_p99_s']:.3g} s to serve (p99), longer than the "
           f"{ev['keep_up_window_s']:.3g} s over which keeping up is counted"
           if ev["service_p99_s"] > ev["keep_up_window_s"] else
           f"the requests' own arrivals and service times, with no queueing, leave a shortfall of "
           f"{ev['keep_up_warmup']:.0%} over the {ev['keep_up_window_s']:.3g} s over which keeping up is counted")
    return (f"at {', '.join(f'{r:.4g}' for r in rates)} {s.rate_unit} the probes could not tell whether the deployment "
            f"keeps up: even with {ev['requests']} requests ({MAX_LONGER}x its first probe's) {why}; the capacity is a "
            "lower bound (raise --probe-requests or --probe-duration)")


class _Folder:
    """``out``, or a temporary folder removed by ``close`` when ``out`` is None."""

    def __init__(self, out):
        self.tmp = None if out is not None else tempfile.TemporaryDirectory(prefix="servesim-capacity-")
        self.path = Path(out) if out is not None else Path(self.tmp.name)
        self.path.mkdir(parents=True, exist_ok=True)

    def close(self):
        if self.tmp is not None:
            self.tmp.cleanup()


def _begin(path: Path, meta: dict) -> None:
    """Start a search in ``path``: its meta written, an earlier search's capacity.json removed (another
    --slo perhaps: a search stopped before its own answer left it beside this one's probes, and the
    report showed it as this search's), and so is an earlier study's report (``begin_study``)."""
    begin_study(path, meta)
    (path / "capacity.json").unlink(missing_ok=True)


def find_capacity(scenario, slo_text: str, opts: CapacityOptions = CapacityOptions(), out: str | Path | None = None,
                  overrides=(), seed: int | None = None, ex: ExecutorOptions = ExecutorOptions()) -> CapacityResult:
    """The highest ``workload.arrival.rate_rps`` of the scenario file at which ``slo_text``
    (``METRIC_STAT=SECONDS,...``) holds, on one seed. Probes and capacity.json go to ``out`` (a
    temporary folder, removed again, when None). Bad options are ``InputError``s naming the flag."""
    plan = prepare_search(scenario, slo_text, opts, overrides, seed)
    folder = _Folder(out)
    with folder_lock(folder.path, "capacity"):  # held through every round of probes
        _begin(folder.path, _meta(plan))
        res = run_search(plan, folder.path, ex)
        (folder.path / "capacity.json").write_text(json_text(res.result, indent=2, default=str))
    folder.close()
    return res


# ---------------------------------------------------------------- capacity with an interval over seeds
@dataclass(frozen=True)
class SeedOptions:
    """How many seeds a capacity interval takes (``--seeds``, ``--max-seeds``, ``--ci-target``).

    ``seeds`` given: exactly that many. None (the default): ``min_seeds`` first, then one more at a
    time until the interval's half-width is at most ``target`` x its mean or ``max_seeds`` ran."""

    seeds: int | None = None
    min_seeds: int = 3
    max_seeds: int = 10
    target: float = 0.05

    def __post_init__(self):
        if self.seeds is not None:
            check_seed_count(self.seeds)
        check_seed_count(self.max_seeds, "--max-seeds", 2, " (an interval needs two seeds)")
        if not 0 < self.target < 1:
            raise InputError(f"--ci-target must be a share in (0, 1), got {self.target}")


@dataclass
class CapacityInterval:
    """A capacity over seeds: ``interval`` (req/s; Student's t over the per-seed capacities, see
    ``servesim.outputs.intervals``), each seed's search in ``per_seed``, and whether the target
    half-width was reached (``stopped_short``: why not, else None). ``result`` is capacity.json."""

    plan: SearchPlan
    interval: Interval
    per_seed: list  # CapacityResult, one per seed, in seed order
    seeds: list  # the seeds searched
    target: float | None  # the relative half-width aimed at (None: a fixed number of seeds)
    stopped_short: str | None
    result: dict
    error: str | None  # a seed's search found no answer (the command says it and exits 2)

    @property
    def per_gpu(self) -> Interval:
        return self.interval.scaled(1 / self.plan.num_gpus)


def capacity_interval(scenario, slo_text: str, opts: CapacityOptions = CapacityOptions(),
                      seeds: SeedOptions = SeedOptions(), out: str | Path | None = None, overrides=(),
                      seed: int | None = None, ex: ExecutorOptions = ExecutorOptions(),
                      on_seed=None) -> CapacityInterval:
    """The capacity of the scenario file for ``slo_text`` with a 95% interval over seeds: one search
    per seed (the scenario's seed, then the ones after it), each bracketing from the start rate, so
    that a seed's answer is its own, whatever seeds ran before it (a start from the mean so far,
    15% apart, moved answers by up to 3.5%). All probes share ``out`` (runs/<hash>/; results.csv
    lists every probe with its ``seed``); capacity.json has the interval, each seed's answer and
    every probe. ``on_seed(k, result, interval so far)`` is called after each seed
    (progress). Re-running reuses finished probes."""
    plan = prepare_search(scenario, slo_text, opts, overrides, seed)
    folder = _Folder(out)
    with folder_lock(folder.path, "capacity"):  # held through every seed's probes
        first = int(plan.base["seed"])
        fixed = seeds.seeds
        want = fixed if fixed is not None else seeds.min_seeds
        limit = fixed if fixed is not None else max(seeds.max_seeds, seeds.min_seeds)
        _begin(folder.path, _meta(plan, seeds=want if fixed is not None else None,
                                  ci_target=None if fixed is not None else seeds.target))
        done, error = [], None
        order = seeds_for(first, limit)  # (past the largest seed, from 0 on)
        iv = Interval(math.nan, math.nan, 0)
        while len(done) < limit:
            k = order[len(done)]
            try:
                res = run_search(plan, folder.path, ex, seed=k, results=f"results-seed{k}.csv",
                                 desc=f"capacity probes, seed {k}")
            except BaseException:  # (a probe refused or failed: results.csv has the seeds done, no stale file)
                _write_seed_rows(folder.path, done)
                (folder.path / f"results-seed{k}.csv").unlink(missing_ok=True)
                raise
            done.append(res)
            if res.error:
                error = res.error
                break
            iv = t_interval([r.capacity_rps for r in done], bounds=NONNEGATIVE)
            if on_seed is not None:
                on_seed(k, res, iv)
            if len(done) >= want and (fixed is not None or iv.rel <= seeds.target):
                break
        stopped = None
        if error is None and fixed is None and not iv.rel <= seeds.target:
            stopped = (f"half-width {iv.rel:.1%} of the mean is above the {seeds.target:.0%} target after {len(done)} "
                       f"seeds (--max-seeds {limit}); more seeds (--max-seeds) or longer probes (--probe-requests, "
                       "--probe-duration) narrow it")
        result = _interval_json(plan, iv, done, order[:len(done)], seeds, fixed, stopped)
        _write_seed_rows(folder.path, done)
        (folder.path / "capacity.json").write_text(json_text(result, indent=2, default=str))
    folder.close()
    return CapacityInterval(plan, iv, done, order[:len(done)],
                            None if fixed is not None else seeds.target, stopped, result, error)


def _interval_json(plan: SearchPlan, iv: Interval, done: list, searched: list, seeds: SeedOptions, fixed,
                   stopped) -> dict:
    """capacity.json of ``capacity_interval``: ``done`` the searches, ``searched`` their seeds."""
    gpus = plan.num_gpus
    ok = all(r.done for r in done) and done
    half = None if math.isnan(iv.half) else iv.half
    return {
        "capacity_rps": iv.mean if ok else None,
        "capacity_ci95_rps": half if ok else None,
        "capacity_low_rps": iv.low if ok and half is not None else None,
        "capacity_high_rps": iv.high if ok and half is not None else None,
        "capacity_rps_per_gpu": iv.mean / gpus if ok else None,
        "capacity_ci95_rps_per_gpu": half / gpus if ok and half is not None else None,
        "num_gpus": gpus, "slo": plan.slo_text, "attainment": plan.opts.attainment,
        "capacity_mean_rps": (sum(r.mean_capacity_rps for r in done) / len(done)) if ok else None,
        "keep_up": plan.opts.keep_up,
        "probe_requests": plan.probe_requests, "probe_requests_why": plan.probe_requests_why,
        "interval": {"method": "student-t over seeds", "confidence": iv.confidence, "seeds": len(done),
                     "rel_half_width": None if math.isnan(iv.rel) else iv.rel,
                     "target": None if fixed is not None else seeds.target, "stopped_short": stopped},
        "seeds": [{"seed": k, "capacity_rps": r.result["capacity_rps"],
                   "check_above_rps": r.result["check_above_rps"], "bracket_rps": r.result["bracket_rps"],
                   "probes": len(r.search.points), "too_short": r.too_short, "floor": r.result["floor"],
                   "filling": r.filling, "growing": r.growing}
                  for k, r in zip(searched, done)],
        "too_short": next((f"seed {k}: {r.too_short}" for k, r in zip(searched, done) if r.too_short), None),
        # the keep-up rule set a seed's answer on probes too short for the batch to fill
        "filling": seeds_note(searched, done, "filling"),
        # a seed's answer passed the keep-up rule while its probe's queue grew (not sustained)
        "growing": seeds_note(searched, done, "growing"),
        # why no rate can meet the limits, when the latency floors say so on a seed's requests
        "floor": next((f"seed {k}: {r.result['floor']}" for k, r in zip(searched, done) if r.result["floor"]), None),
        "probes": [{"seed": k, **p} for k, r in zip(searched, done) for p in r.result["probes"]],
    }


def seeds_note(searched: list, done: list, field: str) -> str | None:
    """The first seed's note ``field`` of its ``CapacityResult`` (``filling``: ``_filling_note``;
    ``growing``: ``_growing_note``), saying on how many seeds it held, or None."""
    hit = [(k, getattr(r, field)) for k, r in zip(searched, done) if getattr(r, field)]
    if not hit:
        return None
    k, note = hit[0]
    return f"on {len(hit)} of {len(done)} seeds (seed {k}): {note}"


def _write_seed_rows(out: Path, done: list) -> None:
    """results.csv: every probe of every seed, its ``seed`` first among its values; the searches'
    own files (results-seed<k>.csv, kept current while they ran) are removed."""
    pts = []
    for r in done:
        for p in r.search.points:
            q = dataclasses.replace(p, values={SEED_KEY: r.search.base["seed"], **p.values})
            q.index = len(pts)
            pts.append(q)
        (out / r.search.results_name).unlink(missing_ok=True)
    write_results(out, pts)
