"""Reading and wording a deployment plan (``plan.json``, written by ``servesim plan``): the
ranked table, the answer in one sentence, the failures that show it is the cheapest, and what
was pruned. The CLI prints these and ``plots/plan_report.py`` puts them in report.md.
"""

from __future__ import annotations

import math
from pathlib import Path

from servesim.errors import InputError
from servesim.outputs.intervals import interval_texts
from servesim.outputs.metrics import PER_REQUEST, parse_slo
from servesim.outputs.rundir import check_fields, damaged, read_json_dict
from servesim.outputs.wording import limit_text, plural

PLAN_JSON = "plan.json"
RUN_S = 300.0  # seconds of arrivals at R in every run at R (unless --requests): tails need many requests
PRUNED = ("pruned-memory", "pruned-latency", "pruned-bound", "dominated")
PRUNE_WHY = {"pruned-memory": "does not fit (weights leave no KV room, or TP does not divide the heads)",
             "pruned-latency": "the SLO fails even unloaded (latency floors, or requests too long for the KV cache)",
             "pruned-bound": "needs more than --max-gpus by the cost-model throughput bound",
             "dominated": "its bound alone costs more than the best verified configuration"}


def describe_shape(shape: dict, units: int | None = None) -> str:
    """A deployment shape (``plan_space.Shape``'s fields, as plan.json's ``shape`` holds them) at
    ``units`` units, e.g. ``2 x h100-sxm TP4, continuous`` or ``P/D 1 x h100-sxm TP4 : 2 x
    a100-80g TP8`` (``units`` None: the shape alone, no count). The counts are replicas: a unit
    of a class layout's ``block`` is that many (``plan_space.class_layout``)."""
    s = shape
    block = s.get("block") if isinstance(s.get("block"), int) and s.get("block") > 0 else 1
    if s["kind"] == "pd":
        p, d = s["ratio"]
        k = (units or 1) * block
        return (f"P/D {p * k} x {s['gpu']} TP{s['tp']} : {d * k} x {s['decode_gpu']} TP{s['decode_tp']}"
                + ("" if units else " per unit"))
    pol = ("continuous" if s["policy"] == "continuous" else f"chunked prefill {s['chunk']}"
           if s["policy"] == "chunked_prefill" else s["policy"])  # (a plug-in policy: its name)
    pp = s.get("pp", 1)
    par = f"TP{s['tp']}" + (f" PP{pp}" if pp > 1 else "")
    return (f"{units * block} x " if units else f"{block} x " if block > 1 else "") + f"{s['gpu']} {par}, {pol}"


def read_plan(folder: str | Path) -> dict:
    """plan.json of a plan folder, checked for what every plan has."""
    p = Path(folder) / PLAN_JSON
    if not p.is_file():
        raise InputError(f"{folder}: no {PLAN_JSON} (not a servesim plan folder)")
    doc = read_json_dict(p, PLAN_JSON)
    lacks = [k for k in ("kind", "candidates", "rate_rps", "slo", "ranking") if k not in doc]
    if lacks or doc.get("kind") != "plan":
        raise InputError(f"{p}: no {', '.join(lacks) or 'kind: plan'}: not a plan servesim wrote")
    if doc.get("in_progress"):  # (rewritten after each shape: its ranking so far is no answer)
        raise InputError(f"{folder} holds a plan that stopped before its answer ({PLAN_JSON} has the shapes "
                         "searched so far); run the same servesim plan command again to resume it")
    # (an edited plan.json would otherwise fail deep in the report; the keys every plan has are there)
    check_fields(p, doc, _PLAN_TYPES, _PLAN_AGAIN)
    for i, c in enumerate(doc["candidates"]):
        if not (isinstance(c, dict) and isinstance(c.get("key"), str) and isinstance(c.get("status"), str)
                and isinstance(c.get("shape"), dict)):
            raise damaged(p, f"candidates[{i}]", c, "a mapping with a key, a status and a shape", _PLAN_AGAIN)
    _check_verdicts(p, doc)
    return doc


def _check_verdicts(p: Path, doc: dict) -> None:
    """What the report states as the answer must be what the plan found: at least one shape (a
    plan records every shape of its space, pruned ones too), a ranking of feasible candidates
    whose runs at R, at their unit count, met the SLO with every seed, and an answer that is the
    ranking's first. An emptied or edited plan.json was reported as "No configuration in the
    space serves ..." (or credited a configuration whose run failed) with exit 0."""
    if not doc["candidates"]:
        raise InputError(f"{p}: candidates is empty, where servesim writes every shape the plan searched (pruned "
                         f"ones too; a plan's space is never empty): no plan to report; {_PLAN_AGAIN}")
    cands = {}
    for i, c in enumerate(doc["candidates"]):
        if c["key"] in cands:
            raise damaged(p, f"candidates[{i}].key", c["key"], "each shape's key once", _PLAN_AGAIN)
        cands[c["key"]] = c
    if len(set(doc["ranking"])) != len(doc["ranking"]):
        raise damaged(p, "ranking", doc["ranking"], "each configuration's key once", _PLAN_AGAIN)
    for i, key in enumerate(doc["ranking"]):
        c = cands.get(key)
        if c is None:
            raise damaged(p, f"ranking[{i}]", key, "the key of one of its candidates", _PLAN_AGAIN)
        # (runs that are not lists of mappings: a KeyError or TypeError, which servesim report names)
        run = final_run(c) if c["status"] == "feasible" else None
        failed = ([] if run is None else [s.get("seed") for s in run["seeds"] if s.get("meets") is not True]
                  + ([] if run["meets"] is True and run["seeds"] else ["all"]))
        if c["status"] != "feasible" or run is None or failed:
            why = (f"its status is {c['status']!r}" if c["status"] != "feasible"
                   else f"it has no run at R with its {plural(c.get('units'), 'unit')}" if run is None
                   else f"its run at R with {plural(c.get('units'), 'unit')} did not meet the SLO with every seed")
            raise InputError(f"{p}: ranking[{i}] is {key!r}, but {why}: a plan ranks only configurations that met "
                             f"the SLO at R with every seed; {_PLAN_AGAIN}")
    # (the answer is the ranking's first: a ranking out of the objective's order, or one that leaves
    # out a configuration that met, would credit one that is not the cheapest)
    objs = [cands[k].get("objective") for k in doc["ranking"]]
    if all(_number(v) for v in objs):
        for i in range(1, len(objs)):
            if float(f"{objs[i]:.12g}") < float(f"{objs[i - 1]:.12g}"):
                raise InputError(f"{p}: ranking[{i}] ({doc['ranking'][i]!r}) has a lower objective ({objs[i]:g}) than "
                                 f"ranking[{i - 1}] ({objs[i - 1]:g}), where servesim ranks the best first; "
                                 f"{_PLAN_AGAIN}")
    left = [k for k, c in cands.items() if c["status"] == "feasible" and _number(c.get("objective"))
            and k not in doc["ranking"]]
    if left:
        raise InputError(f"{p}: candidate {left[0]!r} is feasible but not in the ranking, where servesim ranks every "
                         f"feasible configuration; {_PLAN_AGAIN}")
    ans = doc.get("answer")
    if ans is not None and (not isinstance(ans, dict) or not doc["ranking"] or ans.get("key") != doc["ranking"][0]
                            or ans.get("units") != cands[doc["ranking"][0]].get("units")):
        raise damaged(p, "answer", ans, "the first ranked configuration and its units", _PLAN_AGAIN)


_PLAN_AGAIN = "the plan folder is damaged (edited): run servesim plan again"


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


_PLAN_TYPES = (  # (key, check, what servesim writes) for the keys the report and the CLI read
    ("candidates", lambda v: isinstance(v, list), "a list"),
    ("ranking", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of keys"),
    ("rate_rps", lambda v: _number(v) and v > 0, "a rate > 0"),
    ("slo", lambda v: isinstance(v, str), "the SLO as --slo gave it"),
    ("seeds", lambda v: isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v),
     "a list of seeds"),
    ("attainment", lambda v: v is None or (_number(v) and 0 < v <= 1), "a share (or null)"),
    ("requests_at_rate", lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)), "a count"),
    ("wall_s", lambda v: v is None or _number(v), "seconds"),
    ("objective", lambda v: v is None or isinstance(v, str), "an objective's name"),
)


def fmt_s(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if math.isinf(v) or v >= 1e17:
        return "never"
    return f"{v * 1e3:.0f} ms" if v < 1 else f"{v:.2f} s" if v < 100 else f"{v:.0f} s"


def limits_text(limits: dict) -> str:
    """Parsed SLO limits (``parse_slo``) as a phrase: "ttft_p99 <= 2 s, tpot_p99 <= 100 ms"."""
    return ", ".join(f"{m}_{st} <= {limit_text(v)}" for (m, st), v in limits.items())


def slo_text(doc: dict) -> str:
    """The SLO as a phrase: "ttft_p99 <= 2 s, tpot_p99 <= 100 ms" (with the attainment share)."""
    limits = parse_slo(str(doc["slo"]))
    if doc.get("attainment") is None:
        return limits_text(limits)
    # with an attainment share the per-request limits hold per request (tbt stays a percentile)
    per = ", ".join(f"{m} <= {limit_text(v)}" for (m, st), v in limits.items() if m in PER_REQUEST)
    rest = [f"{m}_{st} <= {limit_text(v)}" for (m, st), v in limits.items() if m not in PER_REQUEST]
    return ", ".join([f"{doc['attainment']:.0%} of requests within {per}"] + rest)


def by_key(doc: dict) -> dict:
    return {c["key"]: c for c in doc["candidates"]}


def ranked(doc: dict) -> list:
    """The feasible candidates, best first."""
    cands = by_key(doc)
    return [cands[k] for k in doc["ranking"] if k in cands]


def final_run(c: dict) -> dict | None:
    """A feasible candidate's runs at R with its final unit count."""
    return next((r for r in c.get("runs", []) if r["units"] == c.get("units")), None)


def worst(run: dict | None, key: str):
    """The worst (largest) value of ``key`` over a run's seeds."""
    if not run:
        return None
    vals = [s.get(key) for s in run["seeds"] if s.get(key) is not None]
    return max(vals) if vals else None


def capacity_numbers(cap: dict) -> tuple[str, str, str]:
    """A capacity's estimate and interval bounds (the low one at least 0) as printed: to the
    interval's precision (``intervals.format_interval``'s rule), three significant digits without
    one. ("34.9 (3.53-66.3)" was printed for 35 +- 31 req/s.)"""
    # (as ``format_interval`` prints them: each keeps a significant digit of its own ("~10 (0-80)" read
    # as if it could serve nothing, "~0 (0-80)" of 0.3 req/s), and a low end cut at 0 is "0", not
    # "0.0" ("~1.3 (0.0-3.1)" read as a floor measured at zero to a tenth))
    return interval_texts(cap["estimate"], cap["low"], cap["high"])


def capacity_text(cap: dict | None) -> str:
    if not cap:
        return "-"
    est = cap["estimate"]
    lo, hi = max(cap["low"], 0.0), cap["high"]
    pre = "" if cap.get("measured") else "~"
    if hi - lo < 1e-9:
        return f"{pre}{est:.3g}"
    if len(cap.get("samples") or [0, 0]) == 1:  # one seed: its search bracket is no confidence interval
        return f"{pre}{est:.4g}"
    e, low, high = capacity_numbers(cap)
    return f"{pre}{e} ({low}-{high})"


def _money(v, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def table_rows(doc: dict, top: int | None = None) -> list[dict]:
    """The ranked table: one dict of formatted cells per feasible candidate."""
    rows = []
    for i, c in enumerate(ranked(doc)[:top], 1):
        run = final_run(c)
        cap = c.get("capacity")
        head = (("" if cap.get("measured") else "~") + f"{(cap['estimate'] / doc['rate_rps'] - 1) * 100:+.0f}%"
                if cap else "-")
        power = run.get("mean_power_w") if run else None
        rows.append({
            "rank": str(i), "configuration": c["label"], "GPUs": str(c["gpus"]),
            "$/h": _money(c.get("usd_per_hour")),
            "$/M in": _money(run.get("usd_per_million_input_tokens") if run else None, 3),
            "$/M out": _money(run.get("usd_per_million_output_tokens") if run else None, 3),
            "power kW": "-" if power is None else f"{power / 1e3:.2f}",
            # (one seed: no interval, the cell shows the estimate alone)
            ("capacity req/s (95% CI)" if len(doc.get("seeds") or ()) != 1 else "capacity req/s"):
                capacity_text(cap) + "".join(m for m, key, _ in _CAP_MARKS if _marked(cap, key)),
            "headroom": head,
            "p99 TTFT": fmt_s(worst(run, "ttft_p99_s")), "p99 TPOT": fmt_s(worst(run, "tpot_p99_s")),
            "seeds met": f"{sum(s['meets'] for s in run['seeds'])}/{len(run['seeds'])}" if run else "-",
        })
    return rows


# a capacity cell's marks: (mark, the capacity's field, what it says), each explained under the table
_CAP_MARKS = (("*", "filling", "may be low: the keep-up rule set it on probes whose batch was still filling"),
              ("+", "too_short", "a lower bound: its probes were still too short to tell whether they keep up"))


def _marked(cap: dict | None, key: str) -> bool:
    """Whether the capacity ``cap`` carries the mark of its field ``key`` (a text saying why)."""
    return bool(cap) and isinstance(cap.get(key), str) and bool(cap[key])


def table_notes(doc: dict, top: int | None = None) -> list[str]:
    """What a capacity cell's mark (``*``, ``+``) says, for the rows of ``table_rows(doc, top)`` that
    carry one: every configuration whose capacity (its own search's, or one unit's for an estimate)
    rests on probes still filling or too short, where only the answer's said so (after its seeds'
    lines) and the other rows showed nothing."""
    out = []
    for mark, key, says in _CAP_MARKS:
        ranks = [str(i) for i, c in enumerate(ranked(doc)[:top], 1) if _marked(c.get("capacity"), key)]
        if ranks:
            out.append(f"{mark} capacity {says} (rank {', '.join(ranks)}; each configuration's {key} in "
                       f"{PLAN_JSON} names its seeds and the rerun)")
    return out


def aligned(rows: list[dict]) -> str:
    """Rows of equal keys as a plain-text table (first column left-aligned, the rest right)."""
    if not rows:
        return ""
    cols = list(rows[0])
    cells = [cols] + [[r[c] for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    return "\n".join("  ".join(x.ljust(w) if i == 1 else x.rjust(w) for i, (x, w) in enumerate(zip(row, widths)))
                     for row in cells)


def markdown(rows: list[dict]) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    return "\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
                     + ["| " + " | ".join(r[c].replace("|", "/").replace("*", "\\*") for c in cols) + " |"
                        for r in rows])


def objective_text(objective: str, v) -> str:
    """An objective's value in its unit: $26.32/h, 8 GPUs, 5.57 kW."""
    if v is None:
        return "-"
    if objective == "gpus":
        return f"{v:.0f} GPU{'' if v == 1 else 's'}"
    return f"${v:.2f}/h" if objective == "cost" else f"{v / 1e3:.2f} kW"


def answer_sentence(doc: dict) -> str:
    """The answer in one sentence, with its capacity interval."""
    model = doc.get("model") or doc.get("scenario")
    R = doc["rate_rps"]
    best = ranked(doc)
    if not best:
        return (f"No configuration in the space serves {model} at {R:g} req/s within {slo_text(doc)} with every "
                f"seed (within --max-gpus {doc.get('max_gpus')}).")
    c = best[0]
    run = final_run(c)
    n = len(run["seeds"]) if run else 0
    cap = c.get("capacity") or {}
    conf = cap.get("confidence", 0.95)
    cap_txt = ""
    if cap:
        est, lo, hi = capacity_numbers(cap)
        kind = "" if cap.get("measured") else " (estimated from one unit's)"
        k = len(cap.get("samples") or [])
        # (an estimate had no search of its own: "its search bracket 27.4-27.4" named none)
        spread = (f"{conf:.0%} interval {lo}-{hi} over {k} seeds" if k != 1
                  else f"one seed: no interval; its search bracket {lo}-{hi}" if cap.get("measured")
                  else "one seed: no interval")
        cap_txt = f"; its capacity is {est} req/s{kind} ({spread}), {cap['estimate'] / R - 1:+.0%} headroom"
    cost = f"${c['usd_per_hour']:.2f}/h" if c.get("usd_per_hour") is not None else "price unknown"
    objective = doc.get("objective", "cost")
    obj = "" if objective == "cost" else f", {objective_text(objective, c.get('objective'))}"
    return (f"Serve {model} at {R:g} req/s on {c['label']} ({c['fleet']}, {cost}{obj}): it meets {slo_text(doc)} "
            + ("with its one seed" if n == 1 else "with both seeds" if n == 2 else f"with all {n} seeds")
            + f"{cap_txt}.")


def verification_lines(doc: dict) -> list[str]:
    """Per seed, what the answer's runs at R measured."""
    best = ranked(doc)
    run = final_run(best[0]) if best else None
    if not run:
        return []
    out = []
    for s in run["seeds"]:
        bits = [f"p99 TTFT {fmt_s(s.get('ttft_p99_s'))}", f"p99 TPOT {fmt_s(s.get('tpot_p99_s'))}",
                f"within every limit {s.get('attainment', 0):.1%}"]
        if s.get("keep_up") is not None:
            bits.append(f"keeps up {s['keep_up']:.2f}")
        out.append(f"seed {s['seed']}: {'meets' if s['meets'] else 'FAILS'}: " + ", ".join(bits))
    cap = best[0].get("capacity") or {}
    short = cap.get("too_short")
    if short:  # (its capacity search: the headroom is then a lower bound)
        out.append(f"warning: its capacity is a lower bound: {short}")
    fill = cap.get("filling")
    if isinstance(fill, str) and fill:  # (the search its capacity rests on: a unit's, for an estimate)
        whose = ("its capacity search" if cap.get("measured")
                 else "its estimated capacity rests on one unit's capacity search, which")
        out.append(f"warning: {whose} may have answered low: {fill}")
    return out


def failure_lines(doc: dict) -> list[str]:
    """The next-cheaper configuration failing, and the answer with one unit fewer failing."""
    out = []
    nc = doc.get("next_cheaper")
    if nc:
        objective = doc.get("objective", "cost")
        cost = f"${nc['usd_per_hour']:.2f}/h" if nc.get("usd_per_hour") is not None else None
        if objective != "cost" or cost is None:  # (what makes it "cheaper": its GPUs or its power)
            cost = ", ".join(x for x in (cost, objective_text(objective, nc.get("objective"))) if x)
        how = f"fails at {doc['rate_rps']:g} req/s" if not nc.get("meets") else "MEETS the SLO"
        out.append(f"next cheaper: {nc['label']} ({nc['fleet']}, {cost}) {how}: " + "; ".join(nc["why"]))
    elif ranked(doc):
        out.append("next cheaper: none: no configuration in the space costs less")
    of = doc.get("one_fewer")
    if of and (not nc or (of["key"], of["units"]) != (nc["key"], nc["units"])):
        state = "also meets" if of["meets"] else f"fails at {doc['rate_rps']:g} req/s"
        out.append(f"one unit fewer: {of['label']} ({of['fleet']}) {state}: " + ("; ".join(of["why"]) or "-"))
    return out


# fewer requests in a run at R, and the keep-up ratio over its second half is Poisson noise as large
# as the rule's slack (docs/sizing.md, Keeping up)
SHORT_RUN = 1000


def short_runs_only(runs: list, keep_up: float | None) -> bool:
    """Whether a shape's runs at R (plan.json's ``runs``) failed, at their largest unit count,
    the keep-up rule and nothing else, with every seed that broke it still too short to tell
    (``too_short``: its own arrivals and service times, with no queue, could make its shortfall,
    even run again longer): more units did not clear it, and the runs cannot judge it. A seed the
    rule judged (``too_short`` false: it fell further behind than that) fell behind however long
    the run."""
    if not runs or not keep_up:
        return False
    last = max(runs, key=lambda r: r["units"])
    seeds = last.get("seeds", [])
    broke = {w.get("limit") for s in seeds for w in s.get("why", [])}
    behind = [s for s in seeds if any(w.get("limit") == "keep_up" for w in s.get("why", []))]
    return not last.get("meets") and broke == {"keep_up"} and all(s.get("too_short") is True for s in behind)


def _requests_to_tell(seed: dict) -> int | None:
    """Requests for a seed's run at R whose keep-up window lasts its p99 service time (10% over,
    as ``capacity.longer_requests``); None when the seed does not say."""
    n, w, p99 = seed.get("requests"), seed.get("keep_up_window_s"), seed.get("service_p99_s")
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (n, w, p99)) or w <= 0:
        return None
    return math.ceil(n * max(1.0, 1.1 * p99 / w))


def short_run_note(doc: dict) -> str | None:
    """The fix for shapes found infeasible only by the keep-up rule in runs too short to judge it
    (``short_runs_only``): a run count that can (enough for the window to last the p99 service
    time, at least the plan's default for the rate), or the rule off. ``servesim plan --requests
    60`` called every shape infeasible and said only "fails at R with every unit count up to 64"."""
    keep = doc.get("keep_up")
    bad = [c for c in doc["candidates"] if c["status"] == "infeasible"
           and short_runs_only(c.get("runs") or [], keep)]
    if not bad:
        return None
    need = [_requests_to_tell(s) for c in bad for s in max(c["runs"], key=lambda r: r["units"]).get("seeds", [])]
    suggest = max([SHORT_RUN, math.ceil(doc["rate_rps"] * RUN_S)] + [k for k in need if k is not None])
    return (f"note: {plural(len(bad), 'shape')} met every latency limit with the most units --max-gpus allows and "
            f"failed only the keep-up rule (>= {keep:g} requests leave per arrival over a run's second half), in runs "
            f"too short to judge it even run again longer: a request takes longer to serve (p99) than that half of the "
            f"arrivals lasts, so it cannot leave within it, queue or not. Give --requests {suggest} or more "
            f"(enough for that half to last the p99 service time, and at least {RUN_S:.0f} s of arrivals at "
            f"{doc['rate_rps']:g} req/s and {SHORT_RUN:,} requests), or --keep-up 0 to judge the latency limits alone.")


def burst_note(doc: dict) -> str | None:
    """With an arrival process whose rate_rps is a burst rate (on_off), what --rate means and the
    mean offered rate at it (``servesim capacity`` says the same); None otherwise."""
    mean, rate = doc.get("mean_rate_rps"), doc["rate_rps"]
    if not _number(mean) or not abs(mean - rate) > 1e-9 * rate:
        return None
    return (f"--rate {rate:g} req/s is the on_off process's burst rate (workload.arrival.rate_rps): the mean offered "
            f"rate is {mean:.4g} req/s")


def layout_note(doc: dict) -> str | None:
    """With ``cluster.class_replicas``: the replicas a unit is, and each class's positions in it
    (``plan_space.class_layout``); None without a class layout."""
    cands = doc.get("candidates")
    first = cands[0] if isinstance(cands, list) and cands else None
    shape = first.get("shape") if isinstance(first, dict) else None
    classes = shape.get("classes") if isinstance(shape, dict) else None
    block = shape.get("block") if isinstance(shape, dict) else None
    if (not isinstance(classes, (list, tuple)) or not classes or not isinstance(block, int)
            or not all(isinstance(x, (list, tuple)) and len(x) == 2 for x in classes)):
        return None
    where = "; ".join(f"{n} on replica{'s' if len(pos) > 1 else ''} {', '.join(map(str, pos))}" for n, pos in classes)
    return (f"cluster.class_replicas: units of {block} replicas (a P/D split: {block} x its prefill:decode "
            f"ratio), the scenario's layout repeated at every size ({where} of each {block}, from 0; a class not "
            "listed: every replica)")


def pruned_lines(doc: dict, examples: int = 2) -> list[str]:
    """What was pruned before simulating, by reason, with examples."""
    out = []
    for status in PRUNED:
        cs = [c for c in doc["candidates"] if c["status"] == status]
        if not cs:
            continue
        ex = "; ".join(f"{c['label']}: {c['reason']}" for c in cs[:examples])
        out.append(f"{status}: {plural(len(cs), 'shape')}, {PRUNE_WHY[status]}. E.g. {ex}")
    bad = [c for c in doc["candidates"] if c["status"] in ("infeasible", "error")]
    for c in bad:
        out.append(f"{c['status']}: {c['label']}: {c['reason']}")
    return out


def counts(doc: dict) -> dict:
    out: dict = {}
    for c in doc["candidates"]:
        out[c["status"]] = out.get(c["status"], 0) + 1
    return out


def price_source(doc: dict) -> str:
    """Where the plan's prices per GPU-hour came from, for the cost axis: the catalog's on-demand
    list prices, or (--price, the scenario's cost.gpu_hour_usd, a GPU YAML) prices of one's own.
    The axis said "on-demand list prices" of prices the user gave."""
    from servesim.inputs.specs import GPUS

    prices = doc.get("prices_usd_per_gpu_hour")
    if not isinstance(prices, dict):
        return "prices per GPU-hour"
    listed = all(g in GPUS and GPUS[g].price_per_gpu_hour_usd == v for g, v in prices.items())
    return "on-demand list prices" if listed else "prices given to the plan"
