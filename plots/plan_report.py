"""Figures and report.md of a deployment plan folder (``servesim plan``, or ``servesim report`` on
its folder). Every figure stands alone: its title names the model, the rate and the SLO, and
its legend the GPU types and counts.

- ``cost_vs_capacity``: each feasible configuration's $/hour against its capacity within the SLO
  (with its interval over seeds), the Pareto front and the target rate;
- ``cost_vs_latency``: p99 TTFT and TPOT at the target rate (worst seed) against $/hour, for
  every configuration run at that rate, those that met and those that did not;
- ``latency_cdfs``: TTFT, TPOT and E2E distributions of the chosen configuration and the
  runner-up at the target rate (first seed), with the SLO limits.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from servesim.outputs import metrics
from servesim.outputs.metrics import parse_slo
from servesim.outputs import plandoc as D
from servesim.outputs.rundir import read_table
from servesim.outputs.wording import plural
from servesim.plots import figures as F


def _gpu_key(c: dict) -> str:
    s = c["shape"]
    return s["gpu"] if s["kind"] != "pd" or s["decode_gpu"] == s["gpu"] else f"{s['gpu']} + {s['decode_gpu']}"


def _run_label(c: dict, run: dict) -> str:
    """The configuration of candidate ``c``'s ``run`` as plan.json labels candidates
    (``plandoc.describe_shape`` of its shape at the run's units)."""
    return D.describe_shape(c["shape"], run["units"])


def _judged_p99(run: dict, metric: str):
    """A run's worst p99 ``metric`` over its seeds, as the plan judged it: with the requests that
    never completed counted as never served (``<metric>_p99`` of each seed, where the plan's SLO
    has that limit; null there: over 1% never completed, so unbounded, inf), else the p99 of the
    completed requests (``<metric>_p99_s``). The completed requests' alone drew a P/D split that
    lost a tenth of its requests at 250 ms, under the 1 s TTFT limit the plan said it broke."""
    vals = []
    for s in run.get("seeds") or ():
        if f"{metric}_p99" in s:
            vals.append(math.inf if s[f"{metric}_p99"] is None else s[f"{metric}_p99"])
        elif s.get(f"{metric}_p99_s") is not None:
            vals.append(s[f"{metric}_p99_s"])
    return max(vals) if vals else None


def _limits(doc: dict) -> dict:
    """{metric: seconds} of the plan's limits (the dotted SLO lines; the first limit of a metric)."""
    out = {}
    for (metric, _), v in parse_slo(str(doc["slo"])).items():
        out.setdefault(metric, v)
    return out


def _title(doc: dict, what: str) -> str:
    model = str(doc.get("model") or doc.get("scenario")).split("/")[-1]
    return f"{model} at {doc['rate_rps']:g} req/s: {what}\nSLO {D.slo_text(doc)}"


def cost_latency_figure(runs: list, title: str, lim: dict, colors: dict):
    """The cost_vs_latency figure: p99 TTFT and TPOT (``runs``: ``F.cost_latency``'s data with a
    "metric") against $/hour, ``title`` above. Larger than the other figures, as it names each of
    dozens of runs; the names are placed once the figure is laid out, where they stay (placed
    before, the layout slid them onto each other and over the titles, and 18 of 32 were named)."""
    fig, axes = F.subplots(1, 2, figsize=(15, 7))
    deferred: list = []
    for ax, m in zip(axes, ("ttft", "tpot")):
        F.cost_latency([x for x in runs if x["metric"] == m], ax, m, lim.get(m), colors, deferred)
    fig.suptitle(title, fontsize=10)
    F.lay_out(fig)
    F.place_names(deferred)
    return fig


def cost_capacity_figure(pts: list, title: str, rate_rps: float, colors: dict, prices: str):
    """The cost_vs_capacity figure (``pts``: ``F.cost_capacity``'s data), ``title`` above; the names
    are placed once the figure is laid out, as cost_vs_latency's are (placed before, the layout
    moved the points and the legend under them)."""
    fig, ax = F.subplots(figsize=(8, 5.5))
    # (the title first: the names are placed in the axes the title leaves, and a count of those
    # with no room is added to it)
    ax.set_title(title, fontsize=10)
    deferred: list = []
    F.cost_capacity(pts, ax, rate_rps, colors, prices, deferred)
    F.lay_out(fig)
    F.place_names(deferred)
    return fig


def build_plan_report(folder: str | Path) -> Path:
    """Write ``folder/figures/*.png|svg`` and ``folder/report.md`` for the plan in ``folder``."""
    folder = Path(folder)
    doc = D.read_plan(folder)
    figdir = folder / "figures"
    best = D.ranked(doc)
    lim = _limits(doc)
    colors = F.colors_for(sorted({_gpu_key(c) for c in doc["candidates"] if c["status"] in ("feasible",
                                                                                              "infeasible")}))
    md = [f"# servesim plan: {doc.get('scenario')}", "", f"**{D.answer_sentence(doc)}**", ""]
    for note in (D.short_run_note(doc), D.burst_note(doc), D.layout_note(doc)):
        if note:
            md += [note, ""]
    statuses = ", ".join(f"{v} {k}" for k, v in D.counts(doc).items())
    md += [f"Searched {plural(len(doc['candidates']), 'shape')} ({statuses}) "
           + (f"with {len(doc['seeds'])} seeds (workload seeds {', '.join(map(str, doc['seeds']))})"
              if len(doc['seeds']) != 1 else f"with one seed (workload seed {doc['seeds'][0]})") + "; every run at "
           f"{doc['rate_rps']:g} req/s has {doc.get('requests_at_rate')} requests; objective: {doc.get('objective')}; "
           f"the plan took {doc.get('wall_s', 0):.0f} s.", ""]
    md += ["## Ranked configurations", "",
           "Capacity: the highest rate meeting the SLO, "
           + ("mean and 95% t-interval over the seeds" if len(doc["seeds"]) != 1 else "on one seed (no interval)")
           + "; measured for the top configurations, otherwise units x one unit's capacity (marked ~). Power: "
           "the modeled mean board power at the target rate (idle + (TDP - idle) x busy share). $/M in, $/M out: "
           "what serving the target rate without end costs per million input and output tokens, the fleet's $/h "
           "over the span its requests arrived in (not the drain after the last arrival) per token served, split "
           "by the GPU time of prefill and decode work (mean over the seeds).", "",
           D.markdown(D.table_rows(doc)) if best else "None: no shape was simulated as serving the rate.", ""]
    if best and D.table_notes(doc):
        md += [f"- `{x[0]}`{x[1:]}" for x in D.table_notes(doc)] + [""]  # (a mark opening a line: a bullet)
    checks = [f"- {x}" for x in D.verification_lines(doc) + D.failure_lines(doc)]
    md += ["## Verification", ""] + (checks or ["Nothing to verify: no configuration was ranked."]) + [""]
    pruned = [f"- {x}" for x in D.pruned_lines(doc)]
    md += ["## Pruned before simulating", ""] + (pruned or ["None: every shape was simulated."]) + [""]
    md += ["## Figures", ""]

    def add(name, title, fig, sentence):
        F.save(fig, figdir / name)
        md.extend([f"### {title}", "", f"![{title}](figures/{name}.png)", "", sentence, ""])

    pts = []
    for c in best:
        cap = c.get("capacity")
        if cap and c.get("usd_per_hour") is not None:
            pts.append({"fleet": c["fleet"], "label": c["label"], "gpu": _gpu_key(c), "kind": c["shape"]["kind"],
                        "usd_per_hour": c["usd_per_hour"], "capacity": cap["estimate"], "low": max(cap["low"], 0.0),
                        "high": cap["high"], "chosen": c is best[0]})
    if pts:
        fig = cost_capacity_figure(pts, _title(doc, "cost vs capacity (Pareto front)"), doc["rate_rps"], colors,
                                   D.price_source(doc))
        front = F.pareto_front([(p["usd_per_hour"], p["capacity"], p) for p in pts])
        add("cost_vs_capacity", "Cost vs capacity", fig,
            f"{plural(len(pts), 'feasible configuration')}; the Pareto front (no other is both cheaper and higher in "
            "capacity): "
            + "; ".join(f"{p[2]['fleet']} ${p[0]:.2f}/h, {p[1]:.3g} req/s" for p in front) + ".")

    runs = []
    for c in doc["candidates"]:
        for r in c.get("runs", []):
            usd = (c["unit_usd_per_hour"] or 0.0) * r["units"] if c.get("unit_usd_per_hour") is not None else None
            if usd is None:
                continue
            for m in ("ttft", "tpot"):
                runs.append({"metric": m, "fleet": r["fleet"], "label": _run_label(c, r),
                             "gpu": _gpu_key(c), "kind": c["shape"]["kind"],
                             "usd_per_hour": usd, "p99": _judged_p99(r, m), "meets": r["meets"]})
    if runs:
        fig = cost_latency_figure(runs, _title(doc, "cost vs p99 latency of every configuration run at the target "
                                                    "rate"), lim, colors)
        met = [x for x in runs if x["meets"] and x["metric"] == "ttft"]
        failed = [x for x in runs if not x["meets"] and x["metric"] == "ttft"]
        cheapest_fail = max(failed, key=lambda x: x["usd_per_hour"]) if failed else None
        add("cost_vs_latency", "Cost vs p99 latency at the target rate", fig,
            f"{plural(len(met), 'run')} met the SLO with every seed (filled), {len(failed)} did not (hollow: they "
            "broke this limit or another one)"
            + (f"; the most expensive that failed is {cheapest_fail['fleet']} at ${cheapest_fail['usd_per_hour']:.2f}/h"
               if cheapest_fail else "") + ".")

    if best:
        chosen = [("chosen", best[0])] + ([("runner-up", best[1])] if len(best) > 1 else [])
        samples = {}
        # the fleet (GPU type x count) once, in the title, when both have the same: each entry said it
        # again after its label, which names the GPUs already ("2 x a100-80g TP1, continuous (2 x a100-80g)")
        fleets = {c["fleet"] for _, c in chosen}
        for role, c in chosen:
            run = D.final_run(c)
            if run and run["seeds"] and run["seeds"][0].get("dir"):
                req = read_table(folder / run["seeds"][0]["dir"], "requests")
                samples[f"{role}: {c['label']}" + (f" ({c['fleet']})" if len(fleets) > 1 else "")] = req
        if samples:
            ms = ("ttft", "tpot", "e2e")
            fig, axes = F.subplots(1, 3, figsize=(15, 4.6))
            cdf_colors = F.colors_for(list(samples))
            sentences = []
            for ax, m in zip(axes, ms):
                data = {k: metrics.latency_samples(req, m) for k, req in samples.items()}
                # (its legend where latency_cdfs puts it, clear of every curve: a legend redrawn here at
                # matplotlib's "best" replaced that, a placer of its own for one figure)
                F.latency_cdfs(data, ax, m, lim.get(m), cdf_colors)
                p99 = {k.split(":")[0]: (float(np.percentile(v, 99)) if len(v) else None)
                       for k, v in data.items()}
                sentences.append(f"p99 {F.METRIC_NAMES[m]} " + ", ".join(f"{k} {D.fmt_s(v)}" for k, v in p99.items()))
            each = (f", {'each ' if len(chosen) > 1 else ''}on {next(iter(fleets))}" if len(fleets) == 1 else "")
            fig.suptitle(_title(doc, f"latency CDFs at the target rate (seed {doc['seeds'][0]}){each}"), fontsize=10)
            add("latency_cdfs", "Chosen vs runner-up: latency CDFs", fig, "; ".join(sentences) + ".")

    if md[-1] == "## Figures" or md[-2:] == ["## Figures", ""]:
        md += ["None: no configuration was simulated, so there is nothing to draw."]
    out = folder / "report.md"
    out.write_text("\n".join(md).rstrip() + "\n")
    return out
