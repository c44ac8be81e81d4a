"""``servesim plan``: the cheapest deployment that serves rate R within the SLO, verified by simulation.

The search (``run_plan``):

1. Every shape of the space (``plan_space.enumerate_shapes``: GPU type x TP x PP x {continuous,
   chunked prefill per chunk size} and P/D splits by per-pool GPU and TP and prefill:decode ratio)
   is assessed without simulating (``plan_space.assess``): memory fit, latency floors, and the
   cost-model bound on a unit's throughput, which gives the fewest units R can need
   (``min_units``). Shapes that cannot work are pruned with the reason.
2. The rest are taken in order of their lower bound on the objective (``min_units`` x one
   unit's cost, GPUs or idle power). Unless ``exhaustive``, a shape whose lower bound is above
   the best verified objective so far is not simulated (``dominated``): it cannot win.
3. A shape is evaluated by a capacity search of one unit per seed (``intervals.capacity_interval``:
   the mean and a t-interval across seeds), which estimates the units R needs
   (``ceil(R / capacity)``, at least ``min_units``); that many units are then run at R with every
   seed, and units are removed while every seed still meets, or added until every seed meets
   (``Planner.fewest_units``: in doubling steps until one count meets, then the counts skipped
   below it, lowest first; with none meeting, those skipped below the highest count at which
   some seed met), so the answer is the fewest units that met with every seed, and the run with
   one unit fewer (when simulated) is the failure that shows it. A shape whose every seed fails
   at every count costs ~log2(--max-gpus) runs, not one per count. A run too short to tell whether it keeps up
   is run again longer (``Planner.verify``, as capacity's probes).
4. The best ``verify_top`` configurations get a capacity search of the whole deployment with
   every seed (their capacity interval and headroom at R); the others' capacity is units x the
   unit's capacity (marked as an estimate).
5. The next-cheaper configuration than the answer (any fitting shape at any unit count up to
   ``--max-gpus``; with ``--objective power``, among the runs at R) is shown failing: its runs at R
   and the limits they broke; one that was only ruled out by the bound is simulated now to show it.

Every simulation goes through the sweep machinery (content-hashed run folders), so a rerun of
the same plan reuses every finished run and resumes where it stopped; ``plan.json`` holds every
candidate with its status and is rewritten after each one.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from servesim.errors import InputError, did_you_mean
from servesim.inputs.overrides import with_values
from servesim.outputs.metrics import KEEP_UP, PER_REQUEST, arrival_period_s, parse_slo
from servesim.outputs.plandoc import RUN_S, PLAN_JSON, fmt_s, limit_text, objective_text, short_runs_only
from servesim.outputs.rundir import read_summary
from servesim.outputs.writer import json_text
from servesim.inputs.scenario import MAX_REQUESTS, mean_rate_at, scenario_from_dict
from servesim.studies.capacity import (MAX_LONGER, RATE_KEY, CapacityOptions, lull_only, check_run_requests,
                                       check_search_options, evaluate, filling_span, held_requests,
                                       longer_requests)
from servesim.studies.executors import ExecutorOptions, check_numbers, study_session
from servesim.studies.intervals import Interval, capacity_interval, t_interval
from servesim.studies.plan_space import (POLICIES, Shape, WorkloadStats, assess, class_layout, enumerate_shapes,
                                         workload_stats)
from servesim.studies.points import given_twice, load_base, make_points, require_rate
from servesim.studies.replicates import check_seed_count, seeds_for
from servesim.studies.lock import folder_lock
from servesim.studies.sweep import RESULTS, RUNS, begin_study, execute, write_results
from servesim.outputs.wording import plural

OBJECTIVES = ("cost", "gpus", "power")


@dataclass(frozen=True)
class PlanOptions:
    """The search's knobs (the ``servesim plan`` flags of the same names)."""

    rate_rps: float
    slo: str  # METRIC_STAT=SECONDS,... as servesim capacity
    attainment: float | None = None
    gpus: tuple = ()  # GPU types to try; empty: the scenario's
    tps: tuple = (1, 2, 4, 8)
    pps: tuple = (1,)
    policies: tuple = POLICIES
    chunks: tuple = (512, 2048)  # chunked prefill's token budgets
    pd_ratios: tuple = ((1, 1), (1, 2), (2, 1), (1, 3))  # P/D: prefill:decode replicas per unit
    mixed_pd: bool = False  # P/D splits whose pools use different GPU types
    max_gpus: int = 64
    objective: str = "cost"
    seeds: int = 3
    prices: tuple = ()  # ((gpu, USD per GPU-hour), ...): over the catalog's and the scenario's
    probe_requests: int | None = None  # requests per unit in a capacity probe; None: max(scenario's, 1000)
    requests: int | None = None  # requests in every run at R; None: max(probe requests, RUN_S of arrivals);
    # with a periodic arrival rate, at least two periods of arrivals either way
    tol: float = 0.05  # capacity bracket (the seeds' spread is usually wider)
    keep_up: float = KEEP_UP
    max_probes: int = 30
    verify_top: int = 3
    exhaustive: bool = False  # simulate shapes whose lower bound cannot beat the best verified

    def __post_init__(self):  # a wrong type from Python, named here (check_options judges the values)
        check_numbers(self, ("attainment", "probe_requests", "requests"),
                      required=("rate_rps", "max_gpus", "seeds", "tol", "keep_up", "max_probes", "verify_top"))
        for name in ("gpus", "tps", "pps", "policies", "chunks", "pd_ratios", "prices"):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                raise TypeError(f"PlanOptions({name}=...): a list or tuple, got {value!r:.60}"
                                + (" (one value: put it in a list)" if isinstance(value, str) else ""))
        if not isinstance(self.slo, str):
            raise TypeError(f"PlanOptions(slo=...): text such as 'ttft_p99=0.5,tpot_p99=0.05', got {self.slo!r:.60}")


@dataclass
class Candidate:
    """One shape's record in plan.json."""

    key: str
    shape: Shape
    status: str  # pruned-memory | pruned-latency | pruned-bound | dominated | feasible | infeasible | error
    reason: str = ""
    unit_rate_bound: float = 0.0
    min_units: int = 0
    bound: dict | None = None
    unit_usd_per_hour: float | None = None
    unit_power_w: float | None = None
    lower_bound: float | None = None  # on the objective
    unit_capacity: dict | None = None  # one unit's capacity across seeds: estimate, low, high, samples
    units: int | None = None  # the fewest units that met at R with every seed
    runs: list = field(default_factory=list)  # every verification at R: {units, meets, seeds: [...]}
    capacity: dict | None = None  # the deployment's capacity: estimate, low, high, measured (or units x unit)
    objective: float | None = None

    def verified(self, units: int) -> dict | None:
        return next((r for r in self.runs if r["units"] == units), None)


def _interval_dict(iv: Interval, measured: bool) -> dict:
    return {"estimate": iv.estimate, "low": iv.low, "high": iv.high, "samples": list(iv.samples),
            "confidence": iv.confidence, "measured": measured}


class Planner:
    """State of one plan: the base scenario, its options, every candidate and run so far."""

    def __init__(self, base: dict, opts: PlanOptions, out: Path, ex: ExecutorOptions, stats: WorkloadStats,
                 seeds: list, prices: dict, powers: dict, probe_requests: int, requests_at_rate: int):
        self.base, self.opts, self.out, self.ex = base, opts, out, ex
        self.stats, self.seeds, self.prices, self.powers = stats, seeds, prices, powers
        self.n = probe_requests
        self.n_rate = requests_at_rate  # every configuration sees the same requests at R (per seed)
        self.slo = parse_slo(opts.slo)
        # the arrival rate's period, which a run's keep-up window spans whole (the same at any rate)
        arrival = scenario_from_dict(base).workload.arrival
        self.period_s = arrival_period_s(arrival)
        # --rate sets the arrival's rate_rps: an on_off process's burst rate, not its mean
        self.mean_rate_rps = mean_rate_at(arrival, opts.rate_rps)
        self.candidates: list[Candidate] = []
        self.points: list = []  # every verification run (results.csv)
        # runs keep what the plan reads: requests (latencies) and summary (economics); TBT only for a tbt limit
        files = ("summary", "requests", "scenario") + (("tbt",) if any(m == "tbt" for m, _ in self.slo) else ())
        self.quiet_ex = replace(ex, progress=False, outputs=files)
        self.t0 = time.monotonic()

    # ------------------------------------------------------------ objective
    def unit_objective(self, c: Candidate) -> float | None:
        o = self.opts.objective
        if o == "cost":
            return c.unit_usd_per_hour
        if o == "gpus":
            return float(c.shape.gpus(1))
        from servesim.cost.economics import IDLE_POWER_SHARE

        return None if c.unit_power_w is None else c.unit_power_w * IDLE_POWER_SHARE  # power: idle floor

    def objective_of(self, c: Candidate, units: int, run: dict | None = None) -> float | None:
        o = self.opts.objective
        if o == "power":
            return None if run is None else run.get("mean_power_w")
        per = self.unit_objective(c)
        return None if per is None else per * units

    # ------------------------------------------------------------ simulation
    def scenario_at(self, shape: Shape, units: int, seed: int, rate: float, requests: int) -> dict:
        return {**self.overrides(shape, units), "seed": seed, RATE_KEY: rate,
                "workload.num_requests": requests, "workload.duration_s": None}

    def overrides(self, shape: Shape, units: int) -> dict:
        """The scenario fields of ``units`` units of ``shape``, with the plan's price and power of
        each GPU YAML it runs on: the base scenario's ``cost`` mappings name catalog GPUs only (a
        run refuses another deployment's GPU as a key), so without them a YAML GPU's runs would be
        priced at its file's figures, not at ``--price`` or the scenario's, and their $/M and power
        figures would disagree with the ones the plan ranks by."""
        from servesim.inputs.specs import GPUS, get_gpu

        out = shape.overrides(units, self.base.get("policy") or {})
        for key, table in (("gpu_hour_usd", self.prices), ("gpu_power_w", self.powers)):
            given = (self.base.get("cost") or {}).get(key)
            if given is not None and not isinstance(given, dict):
                continue  # a number for every GPU: the run applies it to this one too
            own = {get_gpu(g, "--gpus").name: table[g] for g in shape.gpu_counts()
                   if g not in GPUS and table.get(g) is not None}
            if own:
                out[f"cost.{key}"] = {**(given or {}), **own}
        return out

    def verify(self, c: Candidate, units: int) -> dict:
        """Run ``units`` units of ``c`` at R with every seed (reusing finished runs); the verdict.
        A seed's run too short to tell whether it keeps up (``evaluate``'s too_short: it meets
        every other limit, and with no queue at all its own arrivals and service times could make
        its shortfall by themselves, ``metrics.keep_up_warmup``) runs again longer, as ``servesim
        capacity``'s probes do, up to ``MAX_LONGER`` x the requests at R; results.csv keeps the
        shorter run with ``rerun``. So does a run that met every limit but fell behind while its
        warm-up half brought fewer requests than the deployment holds at once when full
        (``capacity.held_requests``): its batch can still be filling when keeping up is counted,
        which reads as a backlog (capacity's ``filling`` warning); it runs again with a warm-up
        that holds the full batch twice (``capacity.filling_span``), as ``--probe-requests auto``
        sizes capacity's probes."""
        done = c.verified(units)
        if done is not None:
            return done
        R = self.opts.rate_rps
        n_of = {s: self.n_rate for s in self.seeds}
        limit = min(self.n_rate * MAX_LONGER, MAX_REQUESTS)
        final, todo = {}, list(self.seeds)
        q = self.quiet_ex
        while todo:
            variants = [({"candidate": c.key, "units": units, "seed": s, "requests": n_of[s]},
                         self.scenario_at(c.shape, units, s, R, n_of[s])) for s in todo]
            pts = make_points(self.base, variants, what="plan run")
            for i, p in enumerate(pts):
                p.index = len(self.points) + i
            self.points += pts
            execute(pts, self.out, q.executor, q.workers, q.address, False, desc="plan", outputs=q.outputs)
            again = []
            for s, p in zip(todo, pts):
                ev = None
                if p.row.get("status") == "ok":
                    ev = evaluate(self.out / RUNS / p.hash, self.slo, self.opts.attainment, self.opts.keep_up,
                                  self.period_s, self.mean_rate_rps)
                    if ev.get("too_short") and n_of[s] < limit:
                        n_of[s] = longer_requests(ev, n_of[s], limit)
                        p.values["rerun"] = True
                        again.append(s)
                        continue
                    fill = self.filling(p.data, ev, n_of[s])
                    if fill is not None and n_of[s] < limit:
                        n_of[s] = min(limit, fill)
                        p.values["rerun"] = True
                        again.append(s)
                        continue
                final[s] = (p, ev)
            todo = again
        seeds = []
        for s in self.seeds:
            p, ev = final[s]
            if ev is None:
                err = {"limit": "error", "text": f"the run failed: {p.row.get('error')}", "excess": math.inf}
                seeds.append({"seed": s, "meets": False, "error": p.row.get("error", ""), "why": [err]})
                continue
            run_dir = self.out / RUNS / p.hash
            summary = read_summary(run_dir)
            econ = at_rate(summary)
            seeds.append({"seed": s, "meets": ev["meets"], "dir": f"{RUNS}/{p.hash}", "requests": n_of[s],
                          "why": self.why_not(ev) if not ev["meets"] else [],
                          **{k: v for k, v in ev.items() if k != "meets"},
                          "ttft_p99_s": p.row.get("ttft_p99_s"), "tpot_p99_s": p.row.get("tpot_p99_s"),
                          "mean_power_w": econ.get("mean_power_w"),
                          "arrival_span_s": econ.get("arrival_span_s"), "sim_time_s": summary.get("sim_time_s"),
                          "usd_per_million_input_tokens": econ.get("usd_per_million_input_tokens"),
                          "usd_per_million_output_tokens": econ.get("usd_per_million_output_tokens"),
                          "tokens_per_usd": econ.get("tokens_per_usd"),
                          "tokens_per_joule": econ.get("tokens_per_joule")})
            p.values["meets"] = ev["meets"]
        run = {"units": units, "gpus": c.shape.gpus(units), "fleet": c.shape.fleet(units),
               "meets": all(x["meets"] for x in seeds), "seeds": seeds}
        for k in ("mean_power_w", "usd_per_million_input_tokens", "usd_per_million_output_tokens", "tokens_per_usd",
                  "tokens_per_joule"):
            vals = [x[k] for x in seeds if x.get(k) is not None]
            run[k] = sum(vals) / len(vals) if vals else None
        c.runs.append(run)
        c.runs.sort(key=lambda r: r["units"])
        write_results(self.out, self.points)
        return run

    def filling(self, data: dict, ev: dict, n: int) -> int | None:
        """The requests to run again with a run at R of ``n`` requests (scenario ``data``) whose
        verdict rests on a batch still filling: it met every limit but fell behind, and its warm-up
        half brought fewer requests than the deployment holds at once when full; None otherwise.
        (Runs at R last 300 s of arrivals, so by default this is a deployment whose full batch
        takes over ~75 s to turn over, or a short --requests.)"""
        # (evaluate's verdict: the SLO met, the keep-up rule alone broken; a run that completed none
        # meets no limit)
        if ev.get("meets") or ev.get("keeps_up") is not False or not math.isfinite(ev.get("keep_up") or math.nan):
            return None
        if any(w["limit"] != "keep_up" for w in self.why_not(ev)):
            return None
        held = held_requests(data)
        if held is None or n // 2 >= held[0]:
            return None
        return max(2 * n, filling_span(held[0]))

    def infeasible_reason(self, c: Candidate, k: int, run: dict) -> str:
        """Why no unit count up to ``k`` (the most --max-gpus allows) met: the limits the run at
        ``k`` broke, and the counts run on the way (``fewest_units``: fewer units than one that
        fails carry more load each); ``plandoc.short_run_note`` adds the fix when all it broke is
        the keep-up rule in runs too short to judge it."""
        tried = ", ".join(str(r["units"]) for r in c.runs)
        text = (f"fails at R up to {plural(k, 'unit')} ({c.shape.gpus(k)} GPUs, --max-gpus; ran {tried}); at {k}: "
                + "; ".join(_reasons(run)))
        if short_runs_only(c.runs, self.opts.keep_up):
            text += " (only the keep-up rule, in runs too short to judge it)"
        return text

    def why_not(self, ev: dict) -> list:
        """The limits a run broke: [{"limit", "text", "excess"}], ``excess`` how many times over
        (or under, for a share that must be reached) the limit it was."""
        out = []
        att = self.opts.attainment
        for (metric, stat), limit in self.slo.items():
            if att is not None and metric in PER_REQUEST:
                continue
            v = ev.get(f"{metric}_{stat}")
            if v is not None and v > limit:
                name = f"{metric}_{stat}"
                if math.isinf(v) or v >= 1e17:
                    text = f"{name} > {limit_text(limit)}: too many requests never completed (rejected or unfinished)"
                else:
                    text = f"{name} {fmt_s(v)} > {limit_text(limit)} (+{v / limit - 1:.0%})"
                out.append({"limit": name, "text": text, "excess": v / limit})
        if att is not None and ev.get("attainment", 0.0) < att:
            a = ev["attainment"]
            out.append({"limit": "attainment", "text": f"only {a:.1%} of requests within every limit < {att:.0%}",
                        "excess": att / a if a > 0 else math.inf})
        if ev.get("keeps_up") is False:
            k = ev.get("keep_up")
            text = "falls behind: " + (f"{k:.2f} requests leave per arrival < {self.opts.keep_up:g}"
                                       if k is not None else "too few arrivals to tell")
            # (a ratio at the share that held against R's arrivals too is no lull: too short to tell by the
            # window rule, metrics.window_too_short, whose arrivals came at R)
            slow = lull_only(ev, self.opts.keep_up)
            if slow:  # (metrics.keeps_up: the window's arrivals came slower than R)
                text = (f"{'too short to tell whether it keeps up' if ev.get('too_short') else 'falls behind'}: "
                        f"{k:.2f} requests leave per arrival, but its arrivals came at {ev['keep_up_arrived']:.0%} of "
                        f"R, and at R fewer than {self.opts.keep_up:g} would have left"
                        + (" (raise --requests)" if ev.get("too_short") else ""))
            elif ev.get("too_short"):  # (still, at MAX_LONGER x the requests at R: verify)
                p99, window = ev["service_p99_s"], ev["keep_up_window_s"]
                why = (f"a request takes up to {fmt_s(p99)} to serve (p99), longer than the {fmt_s(window)} over "
                       "which keeping up is counted" if p99 > window else
                       f"the requests' own arrivals and service times, with no queueing, leave a shortfall of "
                       f"{ev['keep_up_warmup']:.0%} over the {fmt_s(window)} over which keeping up is counted")
                text = (f"too short to tell whether it keeps up ({k:.2f} requests leave per arrival): even with "
                        f"{MAX_LONGER}x the requests at R {why} (raise --requests)")
            eff = k * min(1.0, ev["keep_up_arrived"]) if slow else k  # (what keeps_up held to the share)
            out.append({"limit": "keep_up", "excess": self.opts.keep_up / eff if eff else math.inf, "text": text})
        return out or [{"limit": "completed", "text": "no request completed", "excess": math.inf}]

    def capacity_opts(self, start: float) -> CapacityOptions:
        o = self.opts
        return CapacityOptions(o.attainment, self.n, None, start, o.tol, o.max_probes, o.keep_up)

    def capacity(self, shape: Shape, units: int, start: float, folder: Path, requests: int):
        """Capacity of ``units`` units across the seeds (``intervals.capacity_interval``), each
        probe ``requests`` requests."""
        base = with_values(self.base, self.overrides(shape, units), "plan")
        opts = replace(self.capacity_opts(start), probe_requests=requests)
        return capacity_interval(base, self.opts.slo, self.seeds, opts, folder, (), self.quiet_ex)

    # ------------------------------------------------------------ one shape
    def evaluate_shape(self, c: Candidate) -> None:
        """Capacity of one unit, then the fewest units that meet at R with every seed."""
        R, max_units = self.opts.rate_rps, self.opts.max_gpus // c.shape.gpus(1)
        ci = self.capacity(c.shape, 1, max(c.unit_rate_bound * 0.5, 1e-3), self.out / "capacity" / c.key, self.n)
        fill = _filling(ci, "--probe-requests")
        c.unit_capacity = {**_interval_dict(ci.interval, True), "confirmed": ci.done, "too_short": ci.too_short,
                           "filling": fill}
        cap = min(ci.interval.samples)  # every seed must meet: size for the seed with the least capacity
        k = max(c.min_units, math.ceil(R / cap * (1 - 1e-9)) if cap > 0 else c.min_units)
        k = min(k, max_units)
        k = self.fewest_units(c, k, max_units)
        if k is None:
            return
        c.status, c.units = "feasible", k
        c.objective = self.objective_of(c, k, c.verified(k))
        # estimated: k units x one unit's capacity, per seed; k units met at R with every seed, so
        # no seed's capacity is below R, nor is their mean
        iv = t_interval([max(x * k, R) for x in ci.interval.samples])
        # (an estimate from one unit's capacity rests on its probes: their filling warning is its own)
        c.capacity = {**_interval_dict(replace(iv, low=max(iv.low, R)), False), "filling": fill}

    def fewest_units(self, c: Candidate, k: int, max_units: int) -> int | None:
        """The fewest units of ``c`` that meet at R with every seed, searched from the estimate
        ``k`` as the one-unit-at-a-time walk did (down while the count below meets, never below
        ``min_units``; up to the first count that meets), with one change: a climb first runs
        counts in doubling steps (k+1, k+2, k+4, ..., the last ``max_units``) until one meets,
        and only then the counts it skipped below that one, lowest first. So the answer is the
        walk's whenever any count it ran meets (at most one run more than the walk: the doubling
        step that met), and a shape that meets with no count costs ~log2(max_units) runs at R, not
        every count up to --max-gpus (up to 64 runs x seeds for one shape at --max-gpus 64).
        When no doubling count meets with every seed, the counts it skipped are not taken to fail
        on the word of a larger count that failed: a count where some seed met is at the knee
        (its verdict is the seeds' noise: 10 and 11 units met, 12 failed), so the counts skipped
        below the highest such count are run too, lowest first, and the first that meets is the
        walk's answer. Only where every seed failed at every count run is the shape called
        infeasible without the counts between them (more units, the same requests spread over
        more replicas of one shape, each carrying less load, are taken not to turn a deployment
        whose every seed fails into one whose every seed meets). ``None``: the shape is marked
        ``infeasible``."""
        floor = max(1, c.min_units)  # below the bound's minimum no count can meet (not run)
        if self.verify(c, k)["meets"]:
            while k - 1 >= floor and self.verify(c, k - 1)["meets"]:
                k -= 1
            return k
        hi, step = None, 1
        while hi is None and k + step // 2 < max_units:
            x = min(k + step, max_units)
            if self.verify(c, x)["meets"]:
                hi = x
            step *= 2
        if hi is None:
            # no count met with every seed: the highest one where some seed met bounds the counts
            # the doubling skipped that may meet (None: every seed failed at every count run)
            hi = max((r["units"] for r in c.runs if r["units"] > k and any(x["meets"] for x in r["seeds"])),
                     default=None)
            found = (next((u for u in range(k + 1, hi) if self.verify(c, u)["meets"]), None)
                     if hi is not None else None)
            if found is None:
                c.status = "infeasible"
                c.reason = self.infeasible_reason(c, max_units, c.verified(max_units))
            return found
        # the counts the doubling skipped below the one that met, lowest first: the walk's answer
        return next((u for u in range(k + 1, hi) if self.verify(c, u)["meets"]), hi)

    # ------------------------------------------------------------ plan.json
    def candidate_dict(self, c: Candidate) -> dict:
        d = {k: v for k, v in asdict(c).items() if k != "shape"}
        d["shape"] = asdict(c.shape)
        d["label"] = c.shape.describe(c.units)
        d["gpus"] = c.shape.gpus(c.units) if c.units else None
        d["fleet"] = c.shape.fleet(c.units) if c.units else None
        d["usd_per_hour"] = c.unit_usd_per_hour * c.units if c.units and c.unit_usd_per_hour is not None else None
        if c.units and c.capacity:
            d["headroom"] = c.capacity["estimate"] / self.opts.rate_rps - 1
        return d

    def write(self, extra: dict | None = None, done: bool = False) -> dict:
        """plan.json; until the plan's last write (``done``) it says ``in_progress``: a plan
        stopped before its answer is not one (``servesim report`` refuses it)."""
        feasible = self.ranked()
        doc = {
            "kind": "plan", "scenario": self.base.get("name"), "model": self.base.get("model"),
            "rate_rps": self.opts.rate_rps, "mean_rate_rps": self.mean_rate_rps, "slo": self.opts.slo,
            "attainment": self.opts.attainment,
            "keep_up": self.opts.keep_up, "objective": self.opts.objective, "seeds": self.seeds,
            "probe_requests_per_unit": self.n, "requests_at_rate": self.n_rate, "max_gpus": self.opts.max_gpus,
            "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self.opts).items()},
            "prices_usd_per_gpu_hour": self.prices, "power_w": self.powers,
            "workload": {"mean_prompt_tokens": self.stats.mean_prompt, "mean_output_tokens": self.stats.mean_output,
                         "requests": len(self.stats.prompt)},
            "ranking": [c.key for c in feasible],
            "candidates": [self.candidate_dict(c) for c in self.candidates],
            "wall_s": time.monotonic() - self.t0,
        }
        doc.update(extra or {})
        if not done:
            doc["in_progress"] = True
        tmp = self.out / (PLAN_JSON + ".tmp")
        tmp.write_text(json_text(doc, indent=1, default=_json_default))
        os.replace(tmp, self.out / PLAN_JSON)
        return doc

    def ranked(self) -> list:
        feas = [c for c in self.candidates if c.status == "feasible" and c.objective is not None]
        # ties (same objective): a measured capacity (verify_top's search) before an estimated one,
        # then the cheaper per hour (ties on GPUs or power), the larger capacity, the fewer GPUs
        def usd(c):
            return c.unit_usd_per_hour * c.units if c.unit_usd_per_hour is not None and c.units else math.inf

        return sorted(feas, key=lambda c: (_tie(c.objective), not (c.capacity or {}).get("measured", False),
                                           _tie(usd(c)), -(c.capacity or {}).get("estimate", 0.0),
                                           c.shape.gpus(c.units), c.key))

    # ------------------------------------------------------------ the answer's neighbours
    def next_cheaper(self, best: Candidate) -> dict | None:
        """The configuration just below the answer's objective, and why it does not do: its runs
        at R (simulated now if a bound or a latency floor ruled it out before) and the limits they
        broke. Only configurations of the space (up to --max-gpus); with ``--objective power``
        only those run at R (a configuration's power at R is known only from its run: unit counts
        the unit search skipped, and shapes never simulated, are not offered)."""
        target = best.objective
        pool = []  # (objective, candidate, units)
        for c in self.candidates:
            if c.status == "pruned-memory" or c.status == "error":
                continue
            if self.opts.objective == "power":
                pool += [(r["mean_power_w"], c, r["units"]) for r in c.runs
                         if not r["meets"] and r["mean_power_w"] is not None and r["mean_power_w"] < target]
                continue
            per = self.unit_objective(c)
            if not per:  # (None: unknown; 0: free GPUs, nothing of it is cheaper than the answer)
                continue
            # the most units strictly below the target ((1 - 1e-9): 3.29 * 3 / 3.29 is 3.0000000000000004,
            # and 3 units of the answer's own shape are not cheaper than it)
            u = math.ceil(target / per * (1 - 1e-9)) - 1
            # within the space searched: more GPUs than --max-gpus were never the answer's rivals (6 x
            # a100-80g was run as the next cheaper of 3 x h100-sxm at --max-gpus 4, and one that met
            # would have been called a miss of the plan)
            u = min(u, self.opts.max_gpus // c.shape.gpus(1))
            if u >= 1:
                pool.append((per * u, c, u))
        if not pool:
            return None
        obj, c, u = max(pool, key=lambda t: (t[0], -t[1].shape.gpus(t[2])))
        out = {"key": c.key, "units": u, "label": c.shape.describe(u), "fleet": c.shape.fleet(u),
               "gpus": c.shape.gpus(u), "objective": obj,
               "usd_per_hour": c.unit_usd_per_hour * u if c.unit_usd_per_hour is not None else None}
        run = self.verify(c, u)  # shown failing by simulation, also when a floor already rules it out
        why = ([f"{c.reason} (latency floor)"] if c.status == "pruned-latency" else []) + _reasons(run)
        if run["meets"]:  # cannot happen when the search is right: say so plainly
            why = ["MEETS the SLO with every seed: the plan missed it"]
        return {**out, "simulated": True, "meets": run["meets"], "run": run, "why": why,
                "bound_units": c.min_units, "status": c.status}


def at_rate(summary: dict) -> dict:
    """A run at R's ``economics`` (summary.json) with its dollar figures per token at R sustained:
    the fleet's cost over the span its requests arrived in (from the run's start to the last
    arrival, the span ``workload.offered_rps`` is counted over), per token of the requests it
    served, not over the whole run: its drain, after the last arrival while the queue empties,
    is a run's end, which a fleet serving R without end never reaches, and it inflated the $/M of
    a run near the knee (the longer the queue at the last arrival) more than one well below it
    (chat at 20 req/s on 2 H100s, 600-request runs: 32.6 s simulated over 29.3 s of arrivals,
    +11%). ``usd_per_million_input_tokens``, ``..._output_tokens`` and ``tokens_per_usd`` are
    scaled by the span over ``sim_time_s`` (a run's cost is its $/h x its time, split between
    input and output by the same shares); the rest is the run's own. ``arrival_span_s``: that
    span (None, and the run's own figures, where the summary gives no arrival rate)."""
    econ = dict(summary.get("economics") or {})
    n, sim = summary.get("num_requests"), summary.get("sim_time_s")
    offered = (summary.get("workload") or {}).get("offered_rps")
    num = (int, float)
    if not (isinstance(n, num) and isinstance(sim, num) and isinstance(offered, num) and n > 0 and offered > 0
            and sim > 0):
        econ["arrival_span_s"] = None
        return econ
    span = min(n / offered, sim)  # (the last arrival, never after the run's end)
    scale = span / sim
    for k in ("usd_per_million_input_tokens", "usd_per_million_output_tokens"):
        if econ.get(k) is not None:
            econ[k] *= scale
    if econ.get("tokens_per_usd") is not None and scale > 0:
        econ["tokens_per_usd"] /= scale
    econ["arrival_span_s"] = span
    return econ


def _filling(ci, flag: str) -> str | None:
    """A capacity search's warning that the keep-up rule set a seed's answer on probes too short
    for the batch to fill (``intervals.CapacityInterval.filling``, capacity's ``filling``), with
    the rerun it advises given as the plan's flag that sets those probes' length (``flag``:
    ``--probe-requests`` for one unit's, ``--requests`` for a deployment's); None without one."""
    note = ci.filling
    return None if note is None else note.replace("rerun with --probe-requests", f"rerun the plan with {flag}")


def _tie(v: float) -> float:
    """``v`` to 12 significant digits: costs summed in another order are ties (9 x 1.59 is 14.31, 3 x
    (3 x 1.59) 14.310000000000002: a 3-GPU unit would have won on rounding error, not on the tie rules)."""
    return float(f"{v:.12g}")


def _reasons(run: dict) -> list:
    """Each limit a run broke: the worst seed's figure and the seeds that broke it, in the order first seen."""
    worst: dict = {}
    seeds: dict = {}
    for s in run["seeds"]:
        for w in s["why"]:
            k = w["limit"]
            seeds.setdefault(k, []).append(s["seed"])
            if k not in worst or w["excess"] > worst[k]["excess"]:
                worst[k] = w
    n = len(run["seeds"])
    return [f"{worst[k]['text']} ({'every seed' if len(ss) == n and n > 1 else 'seed ' + ', '.join(map(str, ss))}"
            + (f" of {n}" if len(ss) < n else "") + ")" for k, ss in seeds.items()]


def _json_default(o):
    return str(o)


def _gpu_tables(base: dict, names, extra_prices: dict) -> tuple[dict, dict]:
    """({gpu: USD per GPU-hour or None}, {gpu: board power W or None}) under the scenario's cost
    section, with ``--price`` over both."""
    from servesim.cost.economics import gpu_price, gpu_tdp
    from servesim.inputs.scenario import Cost
    from servesim.inputs.schema import build
    from servesim.inputs.specs import get_gpu

    cost = build(Cost, base.get("cost") or {}, "cost")
    prices, powers = {}, {}
    for g in names:
        spec = get_gpu(g, "--gpus")
        prices[g] = extra_prices.get(g, gpu_price(spec, cost))
        powers[g] = gpu_tdp(spec, cost)
    return prices, powers


@dataclass
class PlanResult:
    doc: dict  # plan.json
    out: Path


def check_options(opts: PlanOptions) -> None:
    from servesim.inputs.scenario import MAX_RATE_RPS, MIN_RATE_RPS

    if not opts.rate_rps > 0:
        raise InputError(f"--rate must be > 0 req/s, got {opts.rate_rps}")
    if not MIN_RATE_RPS <= opts.rate_rps <= MAX_RATE_RPS:  # (named as the scenario's rate_rps, not the flag)
        raise InputError(f"--rate must be >= {MIN_RATE_RPS:g} and <= {MAX_RATE_RPS:g} req/s (the rates a scenario "
                         f"takes), got {opts.rate_rps:g}")
    if opts.objective not in OBJECTIVES:
        raise InputError(f"--objective {opts.objective!r}: valid: {', '.join(OBJECTIVES)}")
    check_seed_count(opts.seeds)
    check_search_options(opts.attainment, opts.tol, opts.keep_up, opts.max_probes)
    for flag, n in (("--probe-requests", opts.probe_requests), ("--requests", opts.requests)):
        if n is not None:
            check_run_requests(n, opts.keep_up, flag)
    if opts.max_gpus < 1:
        raise InputError(f"--max-gpus must be >= 1, got {opts.max_gpus}")
    for name, vals in (("--tp", opts.tps), ("--pp", opts.pps), ("--chunks", opts.chunks)):
        if not vals or any(int(v) != v or v < 1 for v in vals):
            raise InputError(f"{name}: expected positive integers, got {','.join(map(str, vals)) or 'none'}")
    _check_once(opts)
    for p in opts.policies:
        _check_plan_policy(p)
    _check_policy_spellings(opts.policies)
    if not opts.policies:
        raise InputError(f"--policies: give at least one of {', '.join(POLICIES)} (or a plug-in policy, module:Class)")
    if "pd_split" in opts.policies and not opts.pd_ratios:  # (no P/D shape: a plan of pd_split alone had none)
        raise InputError("--pd-ratios: give at least one P:D ratio (e.g. 1:2) with --policies pd_split")
    for r in opts.pd_ratios:
        if len(r) != 2 or any(int(x) != x or x < 1 for x in r):
            raise InputError(f"--pd-ratios: expected P:D pairs of positive integers, got {':'.join(map(str, r))}")
    if opts.verify_top < 0:
        raise InputError(f"--verify-top must be >= 0, got {opts.verify_top}")


def _check_once(opts: PlanOptions) -> None:
    """A value given twice in a list option (``--gpus h100-sxm,h100-sxm``, ``--tp 1,1``) is
    refused, as ``compare --rates`` and ``sweep --grid`` refuse one: plan searched each once in
    silence. Two prices for one GPU (``--price h100-sxm=2 --price h100-sxm=3``) are refused too:
    the last was taken in silence."""
    for flag, vals in (("--gpus", opts.gpus), ("--tp", opts.tps), ("--pp", opts.pps), ("--policies", opts.policies),
                       ("--chunks", opts.chunks), ("--pd-ratios", opts.pd_ratios)):
        vals = list(vals or ())
        twice = given_twice(vals)
        if twice:
            v = vals[twice[1]]
            shown = ":".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)
            raise InputError(f"{flag}: {shown!r} is given twice (values {twice[0] + 1} and {twice[1] + 1}); give each "
                             "value once")
    gpus = [g for g, _ in opts.prices or ()]
    twice = given_twice(gpus)
    if twice:
        usd = [u for _, u in opts.prices]
        raise InputError(f"--price: {gpus[twice[1]]!r} is given twice ({usd[twice[0]]:g} and {usd[twice[1]]:g} USD per "
                         "GPU-hour); give one price per GPU")


def _check_policy_spellings(policies) -> None:
    """Two ``--policies`` entries naming one policy (``continuous`` and its ``module:Class``, or a
    plug-in by its registered name and its ``module:Class``) are refused, as a name given twice is
    (``_check_once``): plan searched the one policy twice, as two rows of one configuration."""
    from servesim.plugins import policy_identity, policy_identity_text

    twice = given_twice(list(policies), key=lambda name: policy_identity(name, "--policies"))
    if twice:
        j, i = twice
        what = policy_identity_text(policy_identity(policies[i], "--policies"))
        raise InputError(f"--policies: {policies[i]!r} is {policies[j]!r} given again (values {j + 1} and {i + 1}, "
                         f"both {what}); give each policy once")


def _check_plan_policy(name: str) -> None:
    """A ``--policies`` entry: one of ``POLICIES``, or a plug-in policy as a scenario names it
    (``module:Class``, or a name an installed package registers), colocated with the scenario's
    budgets. Static batching is no shape: plan's throughput bound takes a step of the token budget
    as the most tokens a step holds, and static batching prefills past it."""
    from servesim.plugins import construct_class, names, resolve
    from servesim.policies import POLICIES as PACKAGED, StaticPolicy

    if name in POLICIES:
        return
    valid = list(POLICIES) + [n for n in names("policy") if n not in PACKAGED]
    if name in PACKAGED or (":" not in name and name not in valid):
        raise InputError(f"--policies: unknown policy {name!r};{did_you_mean(name, valid)} (or a plug-in policy, "
                         "module:Class)" + (" (static batching is no shape plan searches)" if name == "static" else ""))
    cls = construct_class(resolve("policy", name, "--policies"))
    if isinstance(cls, type) and issubclass(cls, StaticPolicy):
        raise InputError(f"--policies: {name} is static batching (a StaticPolicy), which plan does not search: its "
                         "prefill runs a whole batch past the token budget that plan's throughput bound assumes")


def _check_gpu_names(gpus) -> None:
    """Refuse two GPUs of ``--gpus`` that differ but go by one name (two GPU files with ``base:``
    and no ``name:`` are both ``<base>-custom``; a file may also take a catalog GPU's name with a
    price of its own): a run prices a GPU YAML's pools by name (``Planner.overrides``), so one
    file's price and power went to the other's runs, and the two read the same in every output.
    Two files of ``base: h100-sxm`` priced at $1 and $5/h made a P/D split of both report the
    all-$1 split's $/M tokens."""
    from servesim.inputs.specs import check_gpu_names, get_gpu

    check_gpu_names([(g, g, "--gpus") for g in gpus], "--gpus", "the plan's runs price and label GPUs by name")
    # one GPU by two spellings (g.yaml and ./g.yaml, or a file the same as a catalog GPU of its
    # name): each shape was searched twice, as two rows of one configuration
    twice = given_twice(list(gpus), key=lambda g: get_gpu(g, "--gpus").name)
    if twice:
        j, i = twice
        raise InputError(f"--gpus: {gpus[j]!r} and {gpus[i]!r} are one GPU, {get_gpu(gpus[i], '--gpus').name!r}, given "
                         f"twice (values {j + 1} and {i + 1}); give each GPU once")


def _check_memory(base: dict, rate_rps: float, requests: int, shape) -> None:
    """Refuse, once and before anything runs, a request count that one unit's run cannot hold in
    this machine's memory (``servesim.resources``): otherwise every configuration's runs are
    refused one by one and the plan would read as if nothing served the rate. ``shape``: a shape
    that fits (one unit of it is sized; the scenario's own hardware may not fit the model: plan
    searches it, and a 70B model written on one GPU was refused as not fitting there)."""
    from servesim import resources
    from servesim.inputs.scenario import scenario_from_dict
    from servesim.inputs.workload import mean_output_tokens
    from servesim.simulation import prepare

    sc = scenario_from_dict(with_values(base, {**shape.overrides(1, base.get("policy") or {}), RATE_KEY: rate_rps,
                                               "workload.num_requests": requests, "workload.duration_s": None},
                                        "plan"))
    setup = prepare(sc)
    resources.check(setup, float(requests), mean_output_tokens(sc.workload, setup.cost_model.model.max_context_tokens),
                    f"plan: a run of {requests:,} requests (--requests, --probe-requests)")


# what each field the plan sets in every run is searched by (or set from), and how to pin it
_SEARCHED = {
    "policy.name": ("--policies", "--policies {v}"),
    "hardware.gpu": ("--gpus", "--gpus {v}"),
    "hardware.tp": ("--tp", "--tp {v}"),
    "hardware.pp": ("--pp (colocated shapes; a P/D split runs PP 1)", "--pp {v}"),
    "cluster.replicas": ("the unit count, from the fewest that meet the SLO up to --max-gpus", None),
    "policy.max_num_batched_tokens": ("--chunks for chunked prefill shapes; continuous ones keep the scenario's "
                                      "budget, 8192 where it is a chunk size", "--chunks {v}"),
    "policy.prefill.replicas": ("--pd-ratios P:D, times the unit count", None),
    "policy.decode.replicas": ("--pd-ratios P:D, times the unit count", None),
    "policy.prefill.gpu": ("--gpus (and --mixed-pd)", "--gpus {v}"),
    "policy.decode.gpu": ("--gpus (and --mixed-pd)", "--gpus {v}"),
    "policy.prefill.tp": ("--tp", "--tp {v}"),
    "policy.decode.tp": ("--tp", "--tp {v}"),
    "policy.prefill.max_num_batched_tokens": ("8192 where the scenario's budget is a chunk size and the prefill "
                                              "pool sets none", None),
    RATE_KEY: ("--rate", "--rate {v}"),
    "workload.num_requests": ("--requests for the runs at the rate, --probe-requests for the capacity probes",
                              "--requests {v}"),
    "workload.duration_s": ("--requests: every run is a count of requests", None),
}


def check_searched_overrides(overrides, base: dict, opts: PlanOptions, gpus) -> None:
    """A ``--set KEY=VALUE`` of a field the plan sets itself in some run (the replica count, TP, the
    policy, the rate, ...) was silently overridden by the search: an ``InputError`` naming the field,
    what sets it, and the flag that pins it, before anything runs. Fields no shape of this space
    sets (a continuous-only plan keeps ``policy.max_num_batched_tokens`` as given; without
    ``--gpus`` the scenario's ``hardware.gpu`` is the GPU searched) are honoured, as any other."""
    from servesim.inputs.overrides import parse_override

    sets = {RATE_KEY, "workload.num_requests", "workload.duration_s"}
    # each field the shapes set, with every value they set it to; None: it varies with the unit
    # count (the replicas), as the rate and the request counts vary between runs
    values: dict = {k: None for k in sets}
    policy = base.get("policy") or {}
    for s in enumerate_shapes(gpus, opts.tps, opts.pps, opts.policies, opts.chunks, opts.pd_ratios, opts.mixed_pd):
        one, two = s.overrides(1, policy), s.overrides(2, policy)
        for k, v in one.items():
            if k == "cluster.class_replicas":
                continue
            sets.add(k)
            if k not in values or values[k] is not None:
                values[k] = None if two.get(k) != v else values.get(k, []) + [v]
    for text in overrides or ():
        parts, value = parse_override(text)
        key = ".".join(parts)
        if key == "hardware.gpu" and not opts.gpus:
            continue  # (--gpus defaults to the scenario's GPU: this one)
        hit = sorted(k for k in sets if k == key or k.startswith(key + "."))
        if not hit:
            continue
        if values.get(key) and all(_same_value(key, value, v) for v in values[key]):
            continue  # (every run sets it to the value given: the --set changes nothing, as --gpus X with X)
        what, pin = _SEARCHED.get(hit[0], ("the search", None))
        field_ = hit[0] if hit[0] == key else f"{key} ({', '.join(hit)})"
        if key == "policy.max_num_batched_tokens" and "chunked_prefill" not in opts.policies:
            pin = None  # (a continuous shape's budget: 8192 in place of the scenario's chunk size)
        how = f"; to pin it, give {pin.format(v=value)}" if pin and hit[0] == key else ""
        runs = ""
        if values.get(key):
            given = list(dict.fromkeys(str(v) for v in values[key]))
            runs = (f": its runs set it to {given[0]}, not {value}" if len(given) == 1 else
                    f": its runs set it to each of {', '.join(given)} in turn")
        raise InputError(f"--set {text}: servesim plan sets {field_} itself in the runs it makes ({what}){runs}, so "
                         f"the --set would be overridden, not honoured; drop it{how}")


def _same_value(key: str, given, searched) -> bool:
    """Whether a ``--set`` value ``given`` of ``key`` is the value ``searched`` the plan's runs set
    it to: equal, or (a GPU field) one GPU by two spellings (a catalog name and a file of it)."""
    if given == searched:
        return True
    if key.endswith(".gpu") and given is not None:
        from servesim.inputs.specs import get_gpu

        try:
            return get_gpu(str(given), key) == get_gpu(str(searched), key)
        except InputError:
            return False
    return False


def run_plan(scenario, opts: PlanOptions, out: str | Path, overrides=(), seed: int | None = None,
             ex: ExecutorOptions = ExecutorOptions(), on_progress=None) -> PlanResult:
    """Plan the deployment of ``scenario`` (a file or scenario data) for ``opts`` (see the module
    docstring); everything goes to ``out``. ``on_progress(done, total, best)`` after each step
    (the CLI's progress bar)."""
    from servesim.inputs.scenario import scenario_from_dict

    check_options(opts)
    parse_slo(opts.slo)  # a bad --slo fails before anything runs
    base, _ = load_base(scenario, overrides, seed)
    where = scenario if not isinstance(scenario, dict) else base.get("name")
    try:  # the scenario as written, first: what follows reads its sections
        written = scenario_from_dict(base)
        # a setting no shape can run (prefix caching under a sliding window): said once, not as
        # every shape "pruned-memory" ("does not fit") and "no configuration serves" (exit 0)
        from servesim.inputs.specs import get_model
        from servesim.simulation import check_prefix_caching

        check_prefix_caching(written, get_model(written.model))
    except InputError as e:
        raise InputError(f"{where}: {e}") from None
    # cluster.class_replicas names replica positions: each unit is the layout's repeating block
    # (plan_space.class_layout), so every deployment tried gives each class its share of replicas
    # (it was refused: the positions past one unit's replicas made every shape "pruned-memory")
    layout = {}
    if written.cluster.class_replicas:
        routed = written.policy.prefill.replicas if written.policy.name == "pd_split" else written.cluster.replicas
        block, classes = class_layout(written.cluster.class_replicas, routed)
        layout = {"block": block, "classes": classes}
    out = Path(out)  # (made once the inputs are checked: a refused plan leaves no folder behind)
    gpus = list(dict.fromkeys(opts.gpus or [str((base.get("hardware") or {}).get("gpu"))]))
    check_searched_overrides(overrides, base, opts, gpus)
    unknown = [(g, usd) for g, usd in opts.prices if g not in gpus]
    if unknown:
        from servesim.errors import did_you_mean

        g, usd = unknown[0]
        raise InputError(f"--price {g}={usd:g}: {g!r} is not one of the GPUs searched (--gpus, else the scenario's "
                         f"hardware.gpu); expected GPU=USD naming one of them, e.g. {gpus[0]}={usd:g};"
                         f"{did_you_mean(g, gpus)}")
    # (the scenario's cost mappings name catalog GPUs or those searched)
    from servesim.inputs.specs import dtype_error, get_gpu
    from servesim.simulation import check_cost_gpus

    _check_gpu_names(gpus)
    given = base.get("cost") or {}
    check_cost_gpus({k: given.get(k) for k in ("gpu_hour_usd", "gpu_power_w")},
                    {get_gpu(g, "--gpus").name for g in gpus}, f"--gpus ({', '.join(gpus)})", f"{where}: ")
    # (a GPU whose every shape the dtype rules out: said once, not shape by shape as "does not fit")
    dtype = str((base.get("hardware") or {}).get("dtype") or "bf16")
    for g in gpus:
        bad = dtype_error(get_gpu(g, "--gpus"), dtype, "hardware.dtype")
        if bad:
            raise InputError(f"--gpus {g}: {bad}")
    prices, powers = _gpu_tables(base, gpus, dict(opts.prices))
    if opts.objective == "cost" and any(v is None for v in prices.values()):
        lacking = [g for g, v in prices.items() if v is None]
        raise InputError(f"no price per GPU-hour for {', '.join(lacking)}: give --price {lacking[0]}=USD "
                         "(or cost.gpu_hour_usd in the scenario)")
    if opts.objective == "power" and any(v is None for v in powers.values()):
        # (the shapes are ranked by their power: one without it cannot be placed among the others)
        lacking = [g for g, v in powers.items() if v is None]
        raise InputError(f"--objective power: no board power for {', '.join(lacking)}: give power_w in its GPU YAML "
                         "(or cost.gpu_power_w in the scenario)")
    cost = dict(base.get("cost") or {})
    # catalog GPUs by name (a run accepts only those and its own GPUs as keys: every shape runs with
    # this table); a GPU YAML's figures go to its own shapes' runs only (Planner.overrides)
    from servesim.inputs.specs import GPUS

    cost["gpu_hour_usd"] = {g: v for g, v in prices.items() if v is not None and g in GPUS} or None
    if isinstance(cost.get("gpu_power_w"), dict):  # (a GPU YAML's entry: Planner.overrides, in its shapes' runs)
        cost["gpu_power_w"] = {g: v for g, v in cost["gpu_power_w"].items() if g in GPUS} or None
    base["cost"] = cost  # every run prices its GPUs as the plan does
    try:
        # (the arrival process as written first: setting a rate on one that has none, a closed loop or
        # a trace, would be refused as an unknown field the user never wrote)
        require_rate(written.workload.arrival, "servesim plan sets")
        sc = scenario_from_dict(with_values(base, {RATE_KEY: opts.rate_rps}, "plan"))
    except InputError as e:
        raise InputError(f"{where}: {e}") from None
    n = opts.probe_requests if opts.probe_requests is not None else max(sc.workload.num_requests or 0, 1000)
    stats = workload_stats(scenario_from_dict(with_values(base, {RATE_KEY: opts.rate_rps, "workload.num_requests": n,
                                                                 "workload.duration_s": None}, "plan")))
    seeds = seeds_for(sc.seed, opts.seeds)
    # lengths in time come at the mean rate: --rate is an on_off process's burst rate, so RUN_S or
    # two periods at it held 1 / (on share) times the arrivals (4x with 5 s on / 15 s off), as
    # capacity's --probe-duration did
    mean_rps = mean_rate_at(sc.workload.arrival, opts.rate_rps)
    n_rate = opts.requests if opts.requests is not None else max(n, math.ceil(mean_rps * RUN_S))
    period = arrival_period_s(sc.workload.arrival)
    if period:
        # a rate that repeats on a cycle: every run at R spans two of its periods, as the capacity
        # probes do (40 requests at 4 req/s saw 6 s of a 20 s sinusoid, its peak never)
        n_rate = max(n_rate, math.ceil(mean_rps * 2 * period))
    pl = Planner(base, opts, out, ex, stats, seeds, prices, powers, n, n_rate)
    shapes = [replace(s, **layout) for s in
              enumerate_shapes(gpus, opts.tps, opts.pps, opts.policies, opts.chunks, opts.pd_ratios, opts.mixed_pd)]
    for s in shapes:
        a = assess(s, base, opts.rate_rps, pl.slo, opts.attainment, stats, opts.max_gpus, prices, powers)
        c = Candidate(s.key, s, a.status, a.reason, a.unit_rate_bound, a.min_units, a.bound, a.unit_usd_per_hour,
                      a.unit_power_w)
        per = pl.unit_objective(c)
        c.lower_bound = per * c.min_units if per is not None and c.status == "ok" else None
        pl.candidates.append(c)
    todo = sorted((c for c in pl.candidates if c.status == "ok"), key=lambda c: (c.lower_bound, c.key))
    if todo:  # (with none to run, a rate no unit can reach is answered without running anything)
        _check_memory(base, opts.rate_rps, max(n, n_rate), todo[0].shape)
    out.mkdir(parents=True, exist_ok=True)
    # held through every shape's runs (their batches take it too): a second study into the folder
    # is refused at once, not left to fail the shapes it reaches, each an "error" of the plan
    with folder_lock(out, "plan"):
        begin_study(out, {"kind": "plan", "scenario": base.get("name"), "slo": opts.slo, "rate_rps": opts.rate_rps,
                          "attainment": opts.attainment, "keep_up": opts.keep_up, "set": list(overrides or [])})
        pl.write()  # (in progress: a plan.json an earlier plan left is not this one's answer)
        # (nor its results.csv: rewritten from this plan's runs after each, it stayed, and was said
        # to be written, when this plan simulated nothing: every shape pruned)
        (out / RESULTS).unlink(missing_ok=True)
        total = len(todo) + opts.verify_top + 1
        step = 0

        def tick(note=""):
            nonlocal step
            step += 1
            if on_progress is not None:
                on_progress(step, total, note)

        best = None
        with study_session(ex):
            for c in todo:
                if best is not None and not opts.exhaustive and _tie(c.lower_bound) > _tie(best.objective):
                    c.status = "dominated"
                    lb = objective_text(opts.objective, c.lower_bound)
                    top = objective_text(opts.objective, best.objective)
                    c.reason = (f"needs >= {plural(c.min_units, 'unit')} by the bound: {lb} > {top}, the best verified "
                                f"({best.shape.describe(best.units)})")  # (its label: it named the key)
                else:
                    try:
                        pl.evaluate_shape(c)
                    except InputError as e:
                        c.status, c.reason = "error", str(e)
                    if c.status == "feasible" and (best is None or (c.objective, c.key) < (best.objective, best.key)):
                        best = c
                pl.write()
                tick(objective_text(opts.objective, best.objective) if best else "")
            ranked = pl.ranked()
            extra = {}
            for c in ranked[:opts.verify_top]:
                # probes of the runs' size: the probe at R is the verified run, so the capacity is >= R.
                # A seed's run at R that was run again longer (too short to tell, or its batch still
                # filling) met only at that length: probes of the first length failed at R with it
                # (chat at 30 req/s, --requests 300: a seed whose 2,100-request run met searched down
                # to 19.7, printed "30 (0-110), -13% headroom"), so the probes take the longest
                ran = c.verified(c.units) or {}
                n_cap = max([n_rate] + [x.get("requests") or 0 for x in ran.get("seeds", [])])
                ci = pl.capacity(c.shape, c.units, opts.rate_rps, out / "deploy" / f"{c.key}-x{c.units}", n_cap)
                iv = ci.interval
                # every seed's search met at R (its probe at R is the verified run): no seed's capacity
                # is below R, nor is their mean, as for the estimates (two seeds of 16 and 12 at R =
                # 12 gave -11.4 to 39.4, printed "14 (0-39)", beside estimates that start at R)
                if iv.samples and min(iv.samples) >= opts.rate_rps:
                    iv = replace(iv, low=max(iv.low, opts.rate_rps))
                # (its probes are as long as the runs at R, which --requests sets)
                c.capacity = {**_interval_dict(iv, True), "confirmed": ci.done, "too_short": ci.too_short,
                              "filling": _filling(ci, "--requests")}
                pl.write()
                tick()
            # ranked again: the measured capacities replace the estimates that broke ties, and the
            # answer, its runner-up and plan.json's ranking must be the same order
            ranked = pl.ranked()
            if ranked:
                win = ranked[0]
                extra["answer"] = {"key": win.key, "units": win.units, "label": win.shape.describe(win.units),
                                   "fleet": win.shape.fleet(win.units), "objective": win.objective}
                extra["runner_up"] = ranked[1].key if len(ranked) > 1 else None
                extra["next_cheaper"] = pl.next_cheaper(win)
                if win.units > 1:  # the answer's own shape one unit smaller: simulated, shown failing
                    run = pl.verify(win, win.units - 1)
                    extra["one_fewer"] = {"key": win.key, "units": win.units - 1,
                                          "label": win.shape.describe(win.units - 1),
                                          "fleet": win.shape.fleet(win.units - 1), "meets": run["meets"],
                                          "why": _reasons(run), "run": run}
            tick()
        doc = pl.write(extra, done=True)
        return PlanResult(doc, out)
