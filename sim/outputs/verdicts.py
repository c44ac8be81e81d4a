"""Judging a study's rows (results.csv of a compare or sweep) by the SLO first, and the caveats a
reader must see before trusting a comparison. Used by the printed tables (``servesim compare``)
and by report.md, so both say the same.

- A configuration *meets the SLO* when its SLO attainment (the share of all arrived requests
  completed within every SLO limit) is at least ``SLO_TARGET`` (90%, the usual goodput target,
  e.g. DistServe's), so is each request class's (each against its own SLO: results.csv
  ``class_slo_attainment_min``, the lowest; a class that drew no request judges nothing), and
  the run kept up. Rows that meet it rank above those that fail it, each ranked by goodput
  (requests per second within the SLO), then SLO attainment; rows that failed to run come last.
- Caveats: configurations that gave exactly the same results (every figure equal at every rate:
  e.g. chunked prefill whose token budget never chunks these prompts), unequal GPU counts (the
  rows then also carry per-GPU goodput and throughput), configurations that errored, one seed only.
- Differences between configurations (``differences``) are paired by seed (seeds.csv rows) and
  called significant only when their 95% interval excludes zero.
"""

from __future__ import annotations

import math
from dataclasses import replace

from servesim.outputs.metrics import KEEP_UP, too_short_to_tell
from servesim.outputs.wording import plural
from servesim.outputs.intervals import (CI_SUFFIX, format_difference, format_interval, format_value, given_text,
                                        paired_rows, row_interval)

SLO_TARGET = 0.9
RATE_KEY = "workload.arrival.rate_rps"
# results.csv: the lowest SLO attainment of the run's request classes (each against its own SLO; over
# seeds, the lowest of the classes' means); a run's rows carry each class's in CLASS_ATTAINMENTS
CLASS_MIN = "class_slo_attainment_min"
CLASS_ATTAINMENTS = "class_slo_attainments"
# columns that name a row or describe its run, not results
_NOT_RESULTS = {"point", "label", "status", "error", "hash", "dir", "seed", "seeds", "wall_time_s",
                "wall_time_s" + CI_SUFFIX, "meets", CLASS_ATTAINMENTS}
# (column, name, scale to print, unit, better when larger) of the differences worth reporting
HEADLINE = (("goodput_rps", "goodput", 1.0, "req/s", True),
            ("slo_attainment", "SLO attainment", 100.0, "percentage points", True),
            ("ttft_p99_s", "p99 TTFT", 1e3, "ms", False), ("tpot_p99_s", "p99 TPOT", 1e3, "ms", False),
            ("tbt_p99_s", "p99 ITL", 1e3, "ms", False))  # (ITL: vLLM's name for TBT)


def fell_behind(row: dict) -> bool:
    """The run's backlog grew: fewer than ``KEEP_UP`` as many requests left as arrived over the
    second half of the arrivals, and its run is long enough to tell (``too_short_to_tell``).
    ``row``: a results.csv row (``keep_up``, ``keep_up_warmup``) or a run's summary.json
    (``workload.keep_up``)."""
    ratio, warmup = row.get("keep_up"), row.get("keep_up_warmup")
    if ratio is None and isinstance(row.get("workload"), dict):
        keep = row["workload"].get("keep_up")
        if isinstance(keep, dict):
            ratio, warmup = keep.get("ratio"), keep.get("warmup")
    return isinstance(ratio, (int, float)) and ratio < KEEP_UP and not too_short_to_tell(ratio, warmup)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


def class_attainments(summary: dict) -> dict:
    """{class: SLO attainment} of a run's summary.json (``classes``, each request against its
    class's SLO), over the classes that drew requests (one that drew none has no attainment)."""
    classes = summary.get("classes")
    out = {}
    for name, c in classes.items() if isinstance(classes, dict) else ():
        if isinstance(c, dict) and c.get("num_requests") and _is_number(c.get("slo_attainment")):
            out[str(name)] = float(c["slo_attainment"])
    return out


def lowest_class_attainment(row: dict) -> float | None:
    """The lowest SLO attainment of a request class: a results.csv row's ``CLASS_MIN``, or over a
    summary.json's ``classes`` (None: neither has one, e.g. a results.csv from before the column)."""
    v = row.get(CLASS_MIN)
    if _is_number(v):
        return float(v)
    att = class_attainments(row)
    return min(att.values()) if att else None


def class_fails(row: dict) -> bool:
    """A request class of the row (a results.csv row or a summary.json) is under ``SLO_TARGET`` of
    its own SLO: the configuration fails the SLO, whatever share of all requests is within it
    (a small class with a tight SLO hides under a large one with a loose SLO)."""
    low = lowest_class_attainment(row)
    return low is not None and low < SLO_TARGET


def class_means(summaries: list) -> list:
    """[(class, attainment, requests, runs)] of each request class over one configuration's runs
    (one, or one per seed): the mean attainment over the runs in which the class drew requests,
    the requests it drew over them, and how many such runs."""
    by: dict = {}
    for s in summaries:
        classes = s.get("classes") if isinstance(s, dict) else None
        for name, a in class_attainments(s).items():
            by.setdefault(name, []).append((a, int(classes[name]["num_requests"])))
    return [(name, sum(a for a, _ in v) / len(v), sum(n for _, n in v), len(v)) for name, v in by.items()]


def classes_under_target(summaries: list) -> list:
    """``class_means`` of the request classes under ``SLO_TARGET`` of their own SLO."""
    return [c for c in class_means(summaries) if c[1] < SLO_TARGET]


def class_shortfall_text(under: list) -> str:
    """"class chat: 20.0% of its 38 requests within its own SLO" (``classes_under_target``), over
    seeds "... of its requests within its own SLO (mean over 3 seeds)"."""
    parts = []
    for name, a, n, runs in under:
        if runs > 1:
            parts.append(f"class {name}: {attainment_pct(a)} of its requests within its own SLO (mean over {runs} "
                         "seeds)")
        else:
            parts.append(f"class {name}: {attainment_pct(a)} of its {plural(n, 'request')} within its "
                         "own SLO")
    return "; ".join(parts)


def meets_slo(row: dict) -> bool | None:
    """The row's SLO attainment is at least ``SLO_TARGET``, so is each request class's
    (``class_fails``), and it kept up (None: the row has no attainment). A run whose backlog grew
    (``fell_behind``) does not meet it, whatever share of its requests were within it: that share
    only falls the longer the load lasts. ``row``: a results.csv row or a run's summary.json."""
    a = row.get("slo_attainment")
    return None if a is None else a >= SLO_TARGET and not fell_behind(row) and not class_fails(row)


def attainment_pct(a: float) -> str:
    """An SLO attainment as a percentage that reads 100% only when every request was within it
    (99.97% is not "100.0%"), nor 0% unless none was: one decimal, more near the ends."""
    pct = a * 100
    for d in range(1, 10):
        text = f"{pct:.{d}f}"
        if (float(text) == 100) == (a == 1) and (float(text) == 0) == (a == 0):
            return text + "%"
    return f"{pct!r}%"


def slo_phrase(row: dict, under: list | None = None) -> str:
    """"meets the SLO (98.0% of requests within it)", "fails the SLO (0.5% ...)", for a run that
    fell behind "fails the SLO at this load: 100.0% of requests within it over this run, but ...",
    and for one with a request class under ``SLO_TARGET`` of its own SLO "fails the SLO (94.7% of
    requests within it, but class chat: 20.0% of its 38 requests within its own SLO, under 90%)".
    ``under``: the row's ``classes_under_target`` (from its runs' summaries; a summary.json row
    gives its own), which name the classes; without them, the lowest class's share is given."""
    a = row.get("slo_attainment")
    if a is None:
        return "has no SLO attainment"
    share = attainment_pct(a)
    half = row.get("slo_attainment" + CI_SUFFIX)
    if isinstance(half, (int, float)) and half > 0 and not math.isinf(half):
        # a mean over seeds: its interval, and no more digits than that supports ("93.5%" was
        # printed for 93 +- 23%)
        share = format_interval(row_interval(row, "slo_attainment"), 100.0) + "%"
    if a >= SLO_TARGET and fell_behind(row):
        return (f"fails the SLO at this load ({share} of requests within it over this run, but it did not keep up: "
                "the backlog grew, so that share falls the longer the load lasts)")
    if a >= SLO_TARGET and class_fails(row):
        if under is None and isinstance(row.get("classes"), dict):
            under = classes_under_target([row])
        if under:
            which = class_shortfall_text(under)
        else:
            low = lowest_class_attainment(row)
            half = row.get(CLASS_MIN + CI_SUFFIX)
            low_text = (format_interval(row_interval(row, CLASS_MIN), 100.0) + "%"
                        if _is_number(half) and half > 0 and not math.isinf(half) else attainment_pct(low))
            which = f"a request class: {low_text} of its requests within its own SLO ({CLASS_MIN})"
        return f"fails the SLO ({share} of requests within it, but {which}, under {SLO_TARGET:.0%})"
    return f"{'meets' if a >= SLO_TARGET else 'fails'} the SLO ({share} of requests within it)"


def rank_key(row: dict, per_gpu: bool = False):
    """Sort key: rows that ran first, then those that meet the SLO (``meets_slo``; no attainment
    counts as not failing), then by goodput (per GPU with ``per_gpu``; higher first), then SLO
    attainment. (SLO first: a configuration that fails the SLO, e.g. one GPU that fell behind,
    can have more goodput per GPU than a larger one that meets it, and was ranked above it.)"""
    ok = row.get("status") == "ok"
    g = row.get("goodput_rps") or 0.0
    if per_gpu and row.get("num_gpus"):
        g /= row["num_gpus"]
    a = row.get("slo_attainment") or 0.0
    if not row.get("seeds"):  # one seed: by the digits printed (format_value's three), a tie in the order given
        g, a = _as_printed(g), _as_printed(a)
    return (not ok, ok and meets_slo(row) is False, -g, -a)


def _as_printed(x: float) -> float:
    """``x`` to the digits a figure without an interval is printed with (``format_value``): two
    configurations' goodputs 6.5988 and 6.5953 req/s, both printed 6.6, were ranked by the digits
    the reader never saw."""
    return float(format_value(x)) if isinstance(x, (int, float)) and math.isfinite(x) else x


def tied(rows: list) -> list:
    """Groups (lists, two or more) of the rows that ran on one seed and rank equal (``rank_key``:
    the same SLO verdict, goodput and SLO attainment to the digits printed) at one rate, in the
    order ``ranked`` lists them (the order given, ``sorted`` being stable)."""
    per_gpu = len({r.get("num_gpus") for r in rows if r.get("num_gpus")}) > 1
    groups: dict = {}
    for r in ranked(rows):
        if r.get("status") == "ok" and not r.get("seeds"):
            groups.setdefault((rate_order(r.get(RATE_KEY)), rank_key(r, per_gpu)), []).append(r)
    return [g for g in groups.values() if len(g) > 1]


def rate_order(v) -> tuple:
    """Sort key of a results row's rate cell: numbers in rising order (none: as 0), then any other
    value by its text (a sweep point that failed on a rate that is no number, ``rate_rps=abc``)."""
    if v is None:
        return (0, 0.0, "")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (0, float(v), "")
    return (1, 0.0, str(v))


def loads_up_to(rates, within) -> list:
    """The loads of ``rates`` from the lowest up to the first not in ``within``: what "within
    up to R" claims (a load outside between two within, noise near a knee, was read as within)."""
    upto = []
    for r in sorted(rates, key=rate_order):
        if r not in within:
            break
        upto.append(r)
    return upto


def rate_text(v, spec: str = "g", unit: str = "req/s") -> str:
    """A results row's rate as the reports write it: ``12.5 req/s`` (``spec``: the number's
    format; ``unit``: "sessions/s" where the rate starts multi-turn sessions), or ``rate 'abc'``
    for a value that is no number (a sweep point that failed on it)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"{v:{spec}} {unit}"
    return f"rate {v!r}"


def ranked(rows: list) -> list:
    """Rows grouped by arrival rate (when swept, in rising order) and ranked within each rate, by
    goodput per GPU when the rows use different numbers of GPUs."""
    per_gpu = len({r.get("num_gpus") for r in rows if r.get("num_gpus")}) > 1
    return sorted(rows, key=lambda r: (rate_order(r.get(RATE_KEY)), rank_key(r, per_gpu)))


def _signature(row: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in row.items() if k not in _NOT_RESULTS and k != RATE_KEY
                        and not k.startswith("probe_")))


def identical_labels(rows: list, key: str = "label") -> dict:
    """{label: the earlier label whose results it repeats exactly, at every rate it ran}."""
    by: dict = {}
    for r in rows:
        if r.get("status") == "ok" and r.get(key) is not None:
            by.setdefault(str(r[key]), {})[r.get(RATE_KEY)] = _signature(r)
    out, labels = {}, list(by)
    for i, lbl in enumerate(labels):
        for prev in labels[:i]:
            if prev not in out and by[prev] == by[lbl]:
                out[lbl] = prev
                break
    return out


def gpu_counts(rows: list, key: str = "label") -> dict:
    """{label: GPUs} over rows that say (num_gpus)."""
    out = {}
    for r in rows:
        if r.get("num_gpus") and r.get(key) is not None:
            out.setdefault(str(r[key]), int(r["num_gpus"]))
    return out


def with_per_gpu(rows: list) -> list:
    """Rows with ``goodput_per_gpu`` and ``throughput_per_gpu`` (req/s per GPU) added."""
    out = []
    for r in rows:
        r = dict(r)
        n = r.get("num_gpus")
        for col, new in (("goodput_rps", "goodput_per_gpu"), ("throughput_rps", "throughput_per_gpu")):
            r[new] = r[col] / n if n and r.get(col) is not None else None
            if n and r.get(col + CI_SUFFIX) is not None:
                r[new + CI_SUFFIX] = r[col + CI_SUFFIX] / n
        out.append(r)
    return out


def swept_values(r: dict) -> dict:
    """{column: value} a study's row was run with: results.csv's columns between ``point`` and
    ``status`` (a sweep's grid; compare's label and rate; a seed)."""
    keys = list(r)
    if "point" not in keys or "status" not in keys:
        return {}
    return {k: r[k] for k in keys[keys.index("point") + 1:keys.index("status")]}


def values_name(values: dict, key: str = "label", unit: str = "req/s") -> str:
    """A study point named by what it was run with: its label and rate, "continuous at 4 req/s"
    (compare), or its swept values, "max_num_seqs=32, rate_rps=4" (a sweep: each key's last part,
    the whole key where two share it; each value as given); its seed left out. "" for none.
    ``unit``: the rate's ("sessions/s" where it starts multi-turn sessions, ``rate_text``)."""
    values = {k: v for k, v in values.items() if k != "seed"}
    if values.get(key) is not None:
        rate = values.get(RATE_KEY)
        return f"{values[key]}" if rate is None else f"{values[key]} at {rate_text(rate, unit=unit)}"
    short = [k.split(".")[-1] for k in values]
    return ", ".join(f"{s if short.count(s) == 1 else k}={given_text(v)}" for (k, v), s in zip(values.items(), short))


def names_text(names: list) -> str:
    """Names of study points in a list: ", " between them, or "; " when a name holds ", " itself
    (a sweep point of two swept values, "rate_rps=40, replicas=1"), else two points of two values
    read as four ("rate_rps=40, replicas=1, rate_rps=40, replicas=2")."""
    return ("; " if any(", " in n for n in names) else ", ").join(names)


def row_name(r: dict, key: str, unit: str = "req/s") -> str:
    """A results row as a warning names it: its label and rate (as written when it is no number: a
    sweep point that failed on it), or a sweep's row its swept values (``values_name``; it said
    "point 2", which the reader had to look up in the table); "point N" when it has neither."""
    if r.get(key) is not None:
        rate = r.get(RATE_KEY)
        return f"{r[key]}" if rate is None else f"{r[key]} at {rate_text(rate, unit=unit)}"
    return values_name(swept_values(r), key, unit) or f"point {r.get('point')}"


def not_run_text(r: dict) -> str:
    """Why a row of a study did not run: its error, or, for a row still pending (the study was
    stopped before it: Ctrl-C, SIGTERM), that the same command runs it (its error is empty: the
    report said "did not run: None")."""
    if r.get("status") == "pending":
        return "the study stopped before it; the same command runs it"
    return str(r.get("error") or "no reason recorded")


# what a workload that draws nothing from its seed is, and how to draw one (seeds_alike's messages)
NOTHING_DRAWN = ("a trace replayed row by row, workload.trace without workload.arrival, or fixed lengths arriving "
                 "at set times: all at once, or evenly spaced by arrival process fixed")
DRAW_ONE = ("a trace's rows: workload.trace.sample with workload.arrival draws them; fixed lengths: a length "
            "distribution or a random arrival process such as poisson")


def seeds_alike_figures(figures: dict) -> bool:
    """``run --seeds`` figures (summary.json ``seeds.figures``: {name: {mean, ci95, ...}}) that every
    seed gave alike: each interval that has a width has width 0 (the simulator's wall time apart)."""
    halves = [x.get("ci95") for k, x in figures.items() if isinstance(x, dict) and not k.startswith("wall_time")
              and isinstance(x.get("ci95"), (int, float)) and not isinstance(x.get("ci95"), bool)]
    return bool(halves) and not any(halves)


def seeds_alike(row: dict) -> bool:
    """A results.csv row over several seeds whose every figure was the same on each seed (every
    ``_ci95`` half-width 0, the simulator's own wall time apart): its runs drew nothing from the seed."""
    halves = [v for k, v in row.items() if k.endswith(CI_SUFFIX) and not k.startswith("wall_time")
              and isinstance(v, (int, float))
              and not isinstance(v, bool) and not math.isnan(v)]
    return row.get("status") == "ok" and (row.get("seeds") or 0) > 1 and bool(halves) and not any(halves)


def study_warnings(rows: list, key: str = "label", unit: str = "req/s") -> list:
    """``{code, message}`` for what the rows themselves show: ``identical_variants``,
    ``unequal_gpus``, ``failed`` (a configuration that did not run), ``not_keeping_up`` (runs
    whose backlog grew: ``keep_up`` below ``metrics.KEEP_UP``; those whose runs are too short to
    tell, by ``keep_up_warmup``, named apart), ``seeds_alike`` (points whose every seed gave the same
    figures: ``seeds_alike``), ``one_seed``. ``unit``: the rows' rate's (``rate_text``)."""
    out = []
    for lbl, same in identical_labels(rows, key).items():
        out.append({"code": "identical_variants",
                    "message": f"{lbl} gave exactly the same results as {same} (every figure equal at every rate): "
                               f"the two configurations scheduled these requests identically, so they are one curve "
                               f"in the figures"})
    gpus = gpu_counts(rows, key)
    if len(set(gpus.values())) > 1:
        out.append({"code": "unequal_gpus",
                    "message": "the configurations use different numbers of GPUs (" + ", ".join(
                        f"{lbl} {n}" for lbl, n in gpus.items()) + "): at one arrival rate the larger deployment "
                        "has more capacity; goodput and throughput are also given per GPU"})
    for r in rows:
        if r.get("status") != "ok":
            out.append({"code": "failed", "message": f"{row_name(r, key, unit)} did not run: {not_run_text(r)}"})
    behind = [r for r in rows if r.get("status") == "ok" and r.get("keep_up") is not None
              and r["keep_up"] < KEEP_UP]
    # (the shortfall the runs' own arrivals and service times make with no queueing, keep_up_warmup,
    # could be all of it: those runs are too short to tell, see servesim.outputs.checks)
    grew = [r for r in behind if fell_behind(r)]
    unsure = [r for r in behind if r not in grew]
    if behind:
        what = f"over the second half of the arrivals fewer than {KEEP_UP:.0%} as many requests left as arrived: " \
               "results.csv keep_up"
        msg = []
        if grew:
            msg.append(f"{names_text([row_name(r, key, unit) for r in grew])} did not keep up ({what}): the "
                       f"backlog grew through the run, so {'those' if len(grew) > 1 else 'its'} latencies depend on "
                       "the run's length rather than settling")
        if unsure:
            # (one point: its run, it; several: their runs, they; "as short" only after points that grew)
            they, their, runs = ("they", "their", "runs are") if len(unsure) > 1 else ("it", "its", "run is")
            msg.append(f"{names_text([row_name(r, key, unit) for r in unsure])} fell {'as ' if grew else ''}short "
                       f"({what}), but {their} {runs} too short to tell whether {they} "
                       f"{'keep' if len(unsure) > 1 else 'keeps'} up: with no queue at all, {their} own arrivals "
                       "and service times make that shortfall by themselves (keep_up_warmup); more requests tell")
        out.append({"code": "not_keeping_up", "message": "; ".join(msg)})
    alike = [r for r in rows if seeds_alike(r)]
    if alike:
        they = "their" if len(alike) > 1 else "its"
        out.append({"code": "seeds_alike",
                    "message": f"{names_text([row_name(r, key, unit) for r in alike])} gave the same figures on "
                               f"every seed (each interval 0 wide): nothing in {they} runs is drawn from the seed "
                               f"({NOTHING_DRAWN}), so the seeds repeat one workload, and its figures and "
                               f"differences carry no interval over another sample of it ({DRAW_ONE})"})
    if rows and not any(r.get("seeds") for r in rows) and len({r.get(key) for r in rows}) > 1:
        out.append({"code": "one_seed",
                    "message": "one seed per configuration: the figures carry no interval over seeds and small "
                               "differences may be noise (--seeds 5 gives 95% intervals and paired differences)"})
    return out


def caveats(rows: list, meta: dict | None = None, key: str = "label", out_dir=None, run_rows=None,
            unit: str = "req/s") -> list:
    """Sentences a reader must see next to the table: the study's own notes (``sweep.json``
    ``notes``), ``study_warnings`` and, given the study's folder ``out_dir``, the warnings its runs
    raised (``run_warning_caveats``; ``run_rows``: the rows naming every run, seeds.csv's when the
    study ran several seeds, else ``rows``). ``unit``: the rows' rate's ("sessions/s" where it
    starts multi-turn sessions: a comparison's runs are named "static at 2 sessions/s")."""
    # (a capacity or plan search probes rates above what keeps up on purpose: its own keep-up rule
    # judges them, and its probes above capacity warn of the overload by design)
    search = (meta or {}).get("kind") in ("capacity", "plan")
    return [str(n) for n in (meta or {}).get("notes") or []] + [
        w["message"] for w in study_warnings(rows, key, unit) if not (search and w["code"] == "not_keeping_up")] + (
        run_warning_caveats(run_rows or rows, out_dir, key, unit) if out_dir is not None and not search else [])


# run warnings a study's own caveats say from results.csv already
STUDY_SAYS = ("not_keeping_up",)


def _run_names(runs: list) -> str:
    """"continuous at 4 req/s (seeds 1, 2), static at 8 req/s": the (name, seed) of runs, each
    name once, its seeds said when the runs carry them; past 5 names, "and N more"."""
    by: dict = {}
    for name, seed in runs:
        by.setdefault(name, [])
        if seed is not None and seed not in by[name]:
            by[name].append(seed)
    sep = "; " if any(", " in n for n in by) else ", "  # (names_text: a name of two swept values holds ", ")
    names = [n + (f" (seed{'s' if len(sd) > 1 else ''} {', '.join(map(str, sd))})" if sd else "")
             for n, sd in by.items()]
    return sep.join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def run_warning_caveats(rows: list, out_dir, key: str = "label", unit: str = "req/s") -> list:
    """Per warning code that the study's runs raised (each run folder's summary.json ``warnings``:
    preemptions, requests shortened or rejected, head-of-line waits, ...), one sentence: how many
    runs and which configurations (rates, seeds), then the message; when the runs' messages differ
    (their own figures), the first run's, named as such (the first run's figures read as every
    named run's). A folder that cannot be read is left out (``servesim report`` names it)."""
    from pathlib import Path

    from servesim.errors import InputError
    from servesim.outputs.rundir import read_json_dict

    by: dict = {}
    for r in rows:
        if r.get("status") != "ok" or not r.get("dir"):
            continue
        try:
            s = read_json_dict(Path(out_dir) / str(r["dir"]) / "summary.json", "summary.json")
        except InputError:
            continue
        warns = s.get("warnings")
        for w in warns if isinstance(warns, list) else ():
            if isinstance(w, dict) and isinstance(w.get("code"), str) and w["code"] not in STUDY_SAYS:
                by.setdefault(w["code"], []).append((row_name(r, key, unit), r.get("seed"), str(w.get("message", ""))))
    out = []
    for code, hits in by.items():
        names = _run_names([(n, sd) for n, sd, _ in hits])
        if len(hits) == 1:
            out.append(f"{names}: {hits[0][2]}")
        elif len({m for _, _, m in hits}) == 1:
            out.append(f"{len(hits)} runs warn of {code}, all alike ({names}): {hits[0][2]}")
        else:
            out.append(f"{len(hits)} runs warn of {code} ({names}; each run's summary.json has its own figures); "
                       f"the first, {_run_names([hits[0][:2]])}: {hits[0][2]}")
    return out


def differences(seed_rows: list, baseline: str, key: str = "label") -> list:
    """Paired differences of each configuration from ``baseline`` at each rate: [{label, rate,
    column, name, interval (of label - baseline), significant, better}] for ``HEADLINE``
    columns; ``seed_rows``: seeds.csv (rows with ``seed``). Where the two use different numbers
    of GPUs (``num_gpus``), goodput is compared per GPU, as the verdict ranks them: the larger
    deployment's goodput is not a better one."""
    by: dict = {}
    for r in with_per_gpu(seed_rows):
        by.setdefault((str(r.get(key)), r.get(RATE_KEY)), []).append(r)
    out = []
    for (lbl, rate), rs in by.items():
        base = by.get((baseline, rate))
        if lbl == baseline or not base:
            continue
        unequal = len({r.get("num_gpus") for r in base + rs if r.get("num_gpus")}) > 1
        for col, name, scale, unit, larger in HEADLINE:
            if unequal and col == "goodput_rps":
                col, name, unit = "goodput_per_gpu", "goodput per GPU", "req/s per GPU"
            iv = paired_rows(base, rs, col)
            if iv.n < 2 or math.isnan(iv.mean):
                continue
            sig = iv.excludes(0.0)
            out.append({"label": lbl, "rate": rate, "column": col, "name": name, "interval": iv, "scale": scale,
                        "unit": unit, "significant": sig, "better": sig and ((iv.mean > 0) == larger)})
    return out


def difference_sentences(diffs: list, baseline: str, gpus: dict | None = None, rows: list | None = None,
                         key: str = "label", unit: str = "req/s") -> list:
    """One sentence per configuration and rate: the significant differences from the baseline with
    their intervals, and the figures where none was found; ``gpus`` ({label: GPUs}): a note when
    the two use different numbers of GPUs. ``rows`` (results.csv): a configuration that fails the
    SLO at that rate is said to, first, and no figure of it is called better (SLO first). ``unit``:
    the rate's (``rate_text``)."""
    gpus = gpus or {}
    fails = {(str(r.get(key)), r.get(RATE_KEY)): meets_slo(r) is False for r in rows or () if r.get("status") == "ok"}
    by: dict = {}
    for d in diffs:
        by.setdefault((d["label"], d["rate"]), []).append(d)
    out = []
    for (lbl, rate), ds in by.items():
        at = f" at {rate_text(rate, unit=unit)}" if rate is not None else ""
        sig = [d for d in ds if d["significant"]]
        none = [d["name"] for d in ds if not d["significant"]]
        failing = fails.get((lbl, rate), False)

        def word(d):
            if failing and d["better"]:  # never credit a configuration that fails the SLO
                return "lower" if d["interval"].mean < 0 else "higher"
            return "better" if d["better"] else "worse"

        parts = [f"{d['name']} {format_difference(d['interval'], d['scale'], d['unit'])} ({word(d)})" for d in sig]
        hw = (f"; {lbl} uses {gpus[lbl]} GPUs, {baseline} {gpus[baseline]}" if gpus.get(lbl) and gpus.get(baseline)
              and gpus[lbl] != gpus[baseline] else "")
        if all(d["interval"].half == 0 for d in ds):  # (every seed the same runs: seeds_alike says why)
            parts = [f"{d['name']} {format_difference(replace(d['interval'], half=math.nan), d['scale'], d['unit'])}"
                     f" ({word(d)})" for d in sig]
            how = f"every one of the {ds[0]['interval'].n} seeds gave the same difference: one workload's, no interval"
        else:
            how = f"paired by seed, 95% interval of the difference over {ds[0]['interval'].n} seeds"
        text = f"{lbl} vs {baseline}{at} ({how}{hw}): " + (
            f"{lbl} fails the SLO{at}, so none of its figures counts as better; " if failing
            else "") + ("; ".join(parts) if parts else "no significant difference")
        if parts and none:
            text += "; no significant difference in " + ", ".join(none)
        out.append(text + ".")
    return out


def value_text(row: dict, column: str, scale: float = 1.0, unit: str = "") -> str:
    """A row's figure, with its interval when the row has one (printed to that precision)."""
    v = row.get(column)
    if v is None:
        return "n/a"
    if row.get(column + CI_SUFFIX) is None:
        return format_value(v * scale) + (f" {unit}" if unit else "")
    return format_interval(row_interval(row, column), scale, unit)

