"""Repetitions over seeds: every study point run with N independent seeds, one row per point with
the mean over the seeds and a 95% interval per figure (``servesim.outputs.intervals``: Student's t
over the per-seed figures; the module says why).

Seeds are the scenario's seed and the N - 1 after it (``seeds_for``), so seed 1 of N reuses a
single-seed run's folder. Every configuration of a study gets the same seeds: the same requests go
through each, and differences are paired by seed (``intervals.paired_rows``).

Layout of a study folder with seeds > 1: ``seeds.csv`` has one row per (point, seed), exactly as
results.csv would have for that run (a ``seed`` column added to the point's values);
``results.csv`` has one row per point: the mean of each figure over its seeds, a ``seeds`` count
and ``<figure>_ci95`` (the half-width; empty when undefined); its ``dir`` is the first seed's run.
A point is ``ok`` only when every seed ran.

Library use (the deployment planner builds on this and on ``capacity.capacity_interval``):

    points = make_points(base, variants)            # the study's points, one seed each
    groups = replicate(points, 5)
    execute([p for g in groups for p in g], out, results=SEEDS)
    for p, g in zip(points, groups):
        p.row = aggregate_row([q.row for q in g], METRIC_COLUMNS)
"""

from __future__ import annotations

import copy
import math

from servesim.outputs.intervals import CI_SUFFIX, SEED_KEY, t_interval
from servesim.outputs.verdicts import CLASS_ATTAINMENTS, CLASS_MIN
from servesim.errors import InputError
from servesim.studies.points import Point, scenario_hash

SEEDS = "seeds.csv"
NOT_AVERAGED = ("num_gpus",)  # the same for every seed of a point


SEED_LIMIT = 2**63  # scenario seeds are 0 .. 2**63 - 1 (``Scenario.seed``)
# the most seeds a study runs: each is another full run (and a list of them is held), so a count past
# this is a typo, not a plan (10,000 runs of a one-second scenario are close to three hours)
MAX_SEEDS = 10_000


def check_seed_count(n: int, flag: str = "--seeds", least: int = 1, why: str = "") -> None:
    """An ``InputError`` naming ``flag`` unless ``least <= n <= MAX_SEEDS``."""
    if n < least:
        raise InputError(f"{flag} must be >= {least}{why}, got {n}")
    if n > MAX_SEEDS:
        raise InputError(f"{flag} must be <= {MAX_SEEDS:,} (each seed is another full run), got {n:,}")


def seeds_for(base_seed: int | None, n: int) -> list[int]:
    """The scenario's seed and the n - 1 after it (past the largest seed, from 0 on: every seed
    listed can be given back as ``--seed``)."""
    if n < 1:
        raise ValueError("seeds_for needs n >= 1")
    b = int(base_seed or 0)
    return [(b + k) % SEED_LIMIT for k in range(n)]


def replicate(points: list[Point], n: int) -> list[list[Point]]:
    """For each point, one point per seed (its scenario's seed and the n - 1 after it; values gain
    ``seed``; indices numbered across all, ``point`` the point's own index)."""
    groups, k = [], 0
    for p in points:
        g = []
        for s in seeds_for((p.data or {}).get("seed"), n):
            data = None
            if p.data is not None:
                data = copy.deepcopy(p.data)
                data["seed"] = s
            q = Point(k, {**p.values, SEED_KEY: s}, data, p.error, point=p.number)
            q.hash = scenario_hash(data) if data is not None else ""
            g.append(q)
            k += 1
        groups.append(g)
        if g:
            p.hash = g[0].hash  # the point's folder: its first seed's run
    return groups


def interval_columns(columns) -> list[str]:
    """``<column>_ci95`` for each averaged column."""
    return [c + CI_SUFFIX for c in columns if c not in NOT_AVERAGED]


def aggregate_row(rows: list[dict], columns) -> dict:
    """One row for a point from its seeds' rows: ``columns`` averaged, each with ``_ci95``; status
    ``ok`` only when every seed is ok (else ``error`` naming the seeds that failed)."""
    bad = [(i, r) for i, r in enumerate(rows) if r.get("status") != "ok"]
    out = {"status": "ok", "error": "", "seeds": len(rows)}
    if bad:
        i, r = bad[0]
        out.update(status="error", error=f"{len(bad)} of {len(rows)} seeds failed; the first: {r.get('error', '')}")
        return out
    for c in columns:
        vals = [r.get(c) for r in rows]
        if c == CLASS_MIN and all(isinstance(r.get(CLASS_ATTAINMENTS), dict) for r in rows):
            # the lowest of the classes' means over the seeds on which each drew requests (as the
            # overall share is judged by its mean), not the mean of each seed's lowest class
            by: dict = {}
            for r in rows:
                for name, a in r[CLASS_ATTAINMENTS].items():
                    by.setdefault(name, []).append(a)
            ivs = [t_interval(v) for v in by.values()]
            low = min(ivs, key=lambda iv: iv.mean, default=None)
            out[c] = None if low is None else low.mean
            out[c + CI_SUFFIX] = None if low is None or math.isnan(low.half) else low.half
            continue
        if c in NOT_AVERAGED:
            out[c] = vals[0]
            continue
        nums = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if not nums:
            out[c], out[c + CI_SUFFIX] = None, None
            continue
        iv = t_interval(nums)
        out[c] = iv.mean
        out[c + CI_SUFFIX] = None if math.isnan(iv.half) else iv.half
    return out


# ---------------------------------------------------------------- one scenario, several seeds
# summary.json figures ``run --seeds`` gives intervals for: top-level keys, and (key, statistic)
# of the latency distributions
RUN_FIGURES = ("throughput_rps", "output_tokens_per_s", "total_tokens_per_s", "goodput_rps", "slo_attainment",
               "completed", "rejected", "unfinished", "preemptions")
RUN_DISTS = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s")
RUN_STATS = ("mean", "p50", "p90", "p99")


def _summary_of(scenario) -> dict:
    from servesim.simulation import simulate

    return simulate(scenario).summary


def seed_summaries(scenario, seeds: list, workers: int | None = None, on_done=None) -> list:
    """summary.json of the scenario (a ``Scenario``) on each of ``seeds``, in that order, simulated
    in parallel worker processes (``workers``; default all cores). ``on_done()`` after each."""
    import dataclasses
    import os

    jobs = [dataclasses.replace(scenario, seed=s) for s in seeds]
    workers = min(workers or os.cpu_count() or 1, len(jobs))
    if workers <= 1:
        out = []
        for j in jobs:
            out.append(_summary_of(j))
            if on_done:
                on_done()
        return out
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers) as pool:
        futs = [pool.submit(_summary_of, j) for j in jobs]
        out = []
        for f in futs:
            out.append(f.result())
            if on_done:
                on_done()
        return out


def seeds_section(seeds: list, summaries: list) -> dict:
    """summary.json ``seeds``: for each headline figure, its mean over the seeds, the half-width of
    its 95% interval (``ci95``) and the per-seed values (``values``, in ``seeds`` order); and
    ``warnings``: each warning code any seed's run raised, with the seeds that raised it."""
    figures = {}

    def add(name, values):
        # a figure some seeds have none of (TPOT when every output was one token): the mean over
        # those that have it, ``n`` saying how many; none at all: null (JSON has no NaN)
        iv = t_interval(values)
        figures[name] = {"mean": None if math.isnan(iv.mean) else iv.mean,
                         "ci95": None if not math.isfinite(iv.half) else iv.half, "n": iv.n, "values": values}

    for k in RUN_FIGURES:
        add(k, [s[k] for s in summaries])
    # the arrivals per second (``workload.offered_rps``): what no seed's throughput or goodput
    # exceeds (both count completions over the run's window from 0, which the last arrival ends
    # within), so the printed interval of their mean is cut there too (``intervals.rate_bounds``)
    add("offered_rps", [(s.get("workload") or {}).get("offered_rps") for s in summaries])
    for d in RUN_DISTS:
        for st in RUN_STATS:
            add(f"{d}.{st}", [(s.get(d) or {}).get(st) for s in summaries])
    warnings: dict = {}
    for seed, s in zip(seeds, summaries):
        for w in s.get("warnings") or ():
            warnings.setdefault(w["code"], [])
            if seed not in warnings[w["code"]]:
                warnings[w["code"]].append(seed)
    return {"seeds": list(seeds), "method": "student-t over seeds", "confidence": 0.95, "figures": figures,
            "warnings": warnings}
