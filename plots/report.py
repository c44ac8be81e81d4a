"""``servesim report DIR``: figures and a ``report.md`` from a run, sweep, capacity or compare folder.

Each figure is written as PNG and SVG under ``DIR/figures/`` and followed in the report by one
sentence generated from the numbers it shows. Kinds of folder:
- a run (``summary.json``): CDFs, timeline, TTFT breakdown, roofline;
- a sweep / compare / capacity folder (``results.csv``): a table of every point; groups are the
  ``label`` column (compare) or the swept fields other than the arrival rate; when the rate is
  swept, latency-vs-load, goodput-vs-load and throughput-latency figures; the per-run figures
  are drawn for each group at the highest rate that every group ran.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from servesim.errors import InputError  # noqa: E402
from servesim.outputs.metrics import LATENCY_METRICS, parse_slo  # noqa: E402
from servesim.outputs.rundir import RunData, read_json_dict, read_results, read_scenario  # noqa: E402
from servesim.plots import figures as F  # noqa: E402
from servesim.plots.service import service_section  # noqa: E402

RATE_KEY = "workload.arrival.rate_rps"
MAX_GROUPS_PER_PANEL = 4
_NOT_SWEPT = {"point", "status", "error", "hash", "dir", "meets"}


def _ms(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if v >= 10:
        return f"{v:.0f} s"
    v = v * 1e3
    return f"{v:.0f} ms" if v >= 100 else f"{v:.1f} ms" if v >= 1 else f"{v:.2f} ms"


def _rate(r) -> str:
    return f"{r:.4g} req/s"


# ---------------------------------------------------------------- reading a folder
def _value_columns(rows) -> list:
    if not rows:
        return []
    keys = list(rows[0])
    end = keys.index("status") if "status" in keys else len(keys)
    return [k for k in keys[1:end] if k not in _NOT_SWEPT and not k.startswith("probe_")]


def _group_label(row, cols) -> str:
    if "label" in cols:
        return str(row["label"])
    others = [c for c in cols if c != RATE_KEY]
    if not others:
        return "all"
    if others == ["policy.name"]:
        return str(row["policy.name"])
    return ", ".join(f"{c.split('.')[-1]}={row[c]}" for c in others)


def load_folder(path: Path) -> dict:
    """{"kind", "rows", "groups": {label: [rows sorted by rate]}, "rate": bool, "runs": {label: RunData}, "meta"}."""
    if (path / "summary.json").is_file():
        run = RunData.from_dir(path)
        return {"kind": "run", "rows": [], "groups": {}, "rate": False, "runs": {run.label: run}, "meta": {},
                "rep_rate": None}
    if not (path / "results.csv").is_file():
        raise InputError(f"servesim report: {path} has neither summary.json (a run) nor results.csv "
                         "(a sweep, capacity or compare folder)")
    meta = read_json_dict(path / "sweep.json", "sweep.json") if (path / "sweep.json").is_file() else {}
    rows = read_results(path / "results.csv")
    cols = _value_columns(rows)
    has_rate = RATE_KEY in cols
    groups: dict = {}
    for r in rows:
        groups.setdefault(_group_label(r, cols), []).append(r)
    if meta.get("kind") == "capacity" and "all" in groups:
        groups = {"probes": groups["all"]}
    if has_rate:
        for g in groups.values():
            g.sort(key=lambda r: r[RATE_KEY])
    ok = {g: [r for r in rs if r["status"] == "ok" and r.get("dir") and (path / r["dir"] / "summary.json").is_file()]
          for g, rs in groups.items()}
    rep_rate = None
    if meta.get("kind") == "capacity":
        # The per-run figures show the probe at the capacity found (the highest that met).
        met = [r for r in ok.get("probes", []) if r.get("meets") in (True, "True")]
        chosen = {"probes": max(met, key=lambda r: r[RATE_KEY])} if met else {}
        rep_rate = chosen["probes"][RATE_KEY] if chosen else None
    elif has_rate:
        ran = [set(r[RATE_KEY] for r in rs) for rs in ok.values() if rs]  # groups that failed throughout: left out
        common = set.intersection(*ran) if ran else set()
        rep_rate = max(common) if common else None
        chosen = {g: next(r for r in rs if r[RATE_KEY] == rep_rate) for g, rs in ok.items() if rep_rate is not None}
    else:
        chosen = {g: rs[0] for g, rs in ok.items() if rs}
    runs = {g: RunData.from_dir(path / r["dir"], label=g) for g, r in chosen.items()}
    return {"kind": meta.get("kind", "sweep"), "rows": rows, "groups": groups, "rate": has_rate, "runs": runs,
            "meta": meta, "cols": cols, "rep_rate": rep_rate}


# ---------------------------------------------------------------- sentences
def _cdf_sentence(metric: str, samples: dict, where: str) -> str:
    name = F.METRIC_NAMES[metric]
    p99 = {g: (float(_pct(x, 99)) if len(x) else None) for g, x in samples.items()}
    p99 = {g: v for g, v in p99.items() if v is not None}
    if not p99:
        return f"No {name} samples{where}."
    if len(p99) == 1:
        g, v = next(iter(p99.items()))
        p50 = _pct(samples[g], 50)
        return f"{name}: p50 {_ms(p50)} and p99 {_ms(v)}{where}."
    base = next(iter(p99))
    best = min(p99, key=p99.get)
    worst = max(p99, key=p99.get)
    if best != base:
        tail = f"; the worst is {worst} at {_ms(p99[worst])}" if worst != base else ""
        return f"{best} cuts p99 {name} from {_ms(p99[base])} ({base}) to {_ms(p99[best])}{where}{tail}."
    return f"{base} has the lowest p99 {name} ({_ms(p99[base])}){where}; the highest is {worst} at {_ms(p99[worst])}."


def _pct(x, q):
    import numpy as np

    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    return float(np.percentile(x, q)) if len(x) else None


def _load_sentence(metric: str, series: dict, slo_s) -> str:
    name = F.METRIC_NAMES[metric]
    parts = []
    for g, d in series.items():
        if slo_s is not None:
            under = [r for r, v in zip(d["rate"], d["p99"]) if v is not None and v <= slo_s]
            if not under:
                parts.append(f"{g} at none of the loads")
            elif max(under) == max(d["rate"]):
                parts.append(f"{g} at every load tried (up to {_rate(max(under))})")
            else:
                parts.append(f"{g} up to {_rate(max(under))}")
        else:
            parts.append(f"{g}: {_ms(d['p99'][0])} at {_rate(d['rate'][0])}, {_ms(d['p99'][-1])} at "
                         f"{_rate(d['rate'][-1])}")
    if slo_s is not None:
        return f"p99 {name} stays within the {_ms(slo_s)} SLO for " + "; ".join(parts) + "."
    return f"p99 {name} at the lowest and highest load: " + "; ".join(parts) + "."


# ---------------------------------------------------------------- the report
def _series(groups, key_p50, key_p99):
    out = {}
    for g, rs in groups.items():
        rs = [r for r in rs if r["status"] == "ok"]
        if rs:
            out[g] = {"rate": [r[RATE_KEY] for r in rs], "p50": [r[key_p50] for r in rs],
                      "p99": [r[key_p99] for r in rs]}
    return out


def _md_table(rows, cols) -> str:
    def cell(c, v):
        if v is None:
            return "-"
        if c.endswith("_s") and c.split("_")[0] in LATENCY_METRICS and isinstance(v, float):
            return f"{v * 1e3:.1f}"
        if isinstance(v, float):
            return f"{v:.3g}"
        return str(v).replace("|", "/")[:60]

    head = [c[:-2] + " (ms)" if c.endswith("_s") and c.split("_")[0] in LATENCY_METRICS
            else c for c in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(c, r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def _run_table(runs: dict) -> str:
    rows = []
    for g, run in runs.items():
        s = run.summary
        rows.append({"run": g, "completed": s["completed"], "throughput_rps": s["throughput_rps"],
                     "goodput_rps": s["goodput_rps"], "slo_attainment": s["slo_attainment"],
                     **{f"{m}_{st}_s": s[f"{m}_s"][st]
                        for m in ("ttft", "tpot", "tbt", "e2e") for st in ("p50", "p99")},
                     "mean_batch_size": s["utilization"]["mean_batch_size"], "mfu": s["utilization"]["mfu"],
                     "mbu": s["utilization"]["mbu"]})
    return _md_table(rows, list(rows[0]))


def build_report(path: str | Path) -> Path:
    """Write ``DIR/figures/*.png|svg`` and ``DIR/report.md``; returns the report's path."""
    path = Path(path)
    data = load_folder(path)
    figdir = path / "figures"
    runs: dict = data["runs"]
    labels = list(data["groups"]) or list(runs)
    colors = F.colors_for(labels)
    first = next(iter(runs.values()), None)
    slo = (first.scenario.get("slo") if first else None) or {}
    if not slo and data["rows"] and data["rows"][0].get("dir"):
        slo = read_scenario(path / data["rows"][0]["dir"]).get("slo") or {}
    ttft_slo, tpot_slo = slo.get("ttft_s"), slo.get("tpot_s")
    if data["kind"] == "capacity" and meta_slo(data["meta"]):
        lim = meta_slo(data["meta"])  # draw the limits the search used, not the scenario's slo
        ttft_slo = next((v for (m, _), v in lim.items() if m == "ttft"), None)
        tpot_slo = next((v for (m, _), v in lim.items() if m == "tpot"), None)
    where = f" at {_rate(data['rep_rate'])}" if data.get("rep_rate") is not None else ""
    md = [f"# servesim report: {path.name}", ""]
    meta = data["meta"]
    if data["kind"] == "run":
        md += [f"One run of scenario `{first.summary['scenario']}` ({first.summary['num_requests']} requests, "
               f"policy `{first.scenario.get('policy', {}).get('name')}`).", ""]
    else:
        md += [f"A {data['kind']} of `{meta.get('scenario', '?')}`: {len(data['rows'])} points, "
               f"{sum(1 for r in data['rows'] if r['status'] == 'ok')} ok.", ""]
        if data["kind"] == "capacity" and (path / "capacity.json").is_file():
            cap = read_json_dict(path / "capacity.json", "capacity.json")
            lacks = [k for k in ("capacity_rps", "capacity_rps_per_gpu", "num_gpus", "slo") if k not in cap]
            if lacks:
                raise InputError(f"{path / 'capacity.json'}: no {', '.join(lacks)}: not a file servesim wrote")
            keep = f", keeping up (>= {cap['keep_up']:g} left per arrival)" if cap.get("keep_up") else ""
            if cap["capacity_rps"] is None:  # the search ran out of probes without an answer
                br = cap.get("bracket_rps") if isinstance(cap.get("bracket_rps"), list) else []
                lo, hi = [v if isinstance(v, (int, float)) else None for v in (br + [None, None])[:2]]
                md += [f"**No capacity found** for `{cap['slo']}`{keep}: the probes ran out "
                       + (f"between {lo:.4g} (meets) and {hi:.4g} req/s (fails)." if lo and hi else
                          f"with every rate up to {lo:.4g} req/s meeting." if lo else
                          f"with no rate meeting, down to {hi:.4g} req/s." if hi else "before any probe."), ""]
            else:
                md += [f"**Capacity: {cap['capacity_rps']:.4g} req/s** ({cap['capacity_rps_per_gpu']:.3g} req/s per "
                       f"GPU, {cap['num_gpus']} GPU{'s' if cap['num_gpus'] != 1 else ''}) for `{cap['slo']}`{keep}"
                       + (f" with {cap['attainment']:.0%} attainment" if cap.get("attainment") else "")
                       + (f"; the check at {cap['check_above_rps']:.4g} req/s fails."
                          if cap.get("check_above_rps") else "."), ""]
    md += ["## Summary", ""]
    if data["rows"]:
        cols = ["point", *data["cols"], "status", "throughput_rps", "goodput_rps", "slo_attainment", "ttft_p50_s",
                "ttft_p99_s", "tpot_p99_s", "tbt_p99_s", "e2e_p99_s", "mean_batch_size", "num_gpus"]
        md += [_md_table(data["rows"], cols), ""]
        errs = [r for r in data["rows"] if r["status"] != "ok"]
        for r in errs:
            md += [f"- point {r['point']} failed: {r.get('error')}"]
        if errs:
            md += [""]
    if runs:
        md += [f"Per-run figures below{where}:" if where else "", "", _run_table(runs), ""]
    md += ["## Figures", ""]

    def add(name, title, fig, sentence):
        F.save(fig, figdir / name)
        plt.close(fig)
        md.extend([f"### {title}", "", f"![{title}](figures/{name}.png)", "", sentence, ""])

    # latency vs load, goodput, throughput-latency
    if data["rate"]:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        s_ttft = _series(data["groups"], "ttft_p50_s", "ttft_p99_s")
        s_tpot = _series(data["groups"], "tpot_p50_s", "tpot_p99_s")
        F.latency_vs_load(s_ttft, axes[0], "ttft", ttft_slo, colors)
        F.latency_vs_load(s_tpot, axes[1], "tpot", tpot_slo, colors)
        add("latency_vs_load", "Latency vs offered load", fig,
            _load_sentence("ttft", s_ttft, ttft_slo) + " " + _load_sentence("tpot", s_tpot, tpot_slo))
        gp = {g: {"rate": [r[RATE_KEY] for r in rs if r["status"] == "ok"],
                  "goodput": [r["goodput_rps"] for r in rs if r["status"] == "ok"],
                  "offered": [r.get("offered_rps") for r in rs if r["status"] == "ok"]}
              for g, rs in data["groups"].items()}
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        F.goodput_vs_load(gp, ax, colors)
        best = {g: max(zip(d["goodput"], d["rate"])) for g, d in gp.items() if d["goodput"]}
        gpus = {g: next((r.get("num_gpus") for r in rs if r.get("num_gpus")), None) for g, rs in data["groups"].items()}
        per_gpu = len({gpus[g] for g in best}) > 1  # unequal hardware: say it per GPU too
        add("goodput_vs_load", "Goodput vs offered load", fig,
            "Peak goodput: " + "; ".join(
                f"{g} {v:.3g} req/s (at {_rate(r)}"
                + (f"; {v / gpus[g]:.3g} per GPU of {gpus[g]}" if per_gpu and gpus[g] else "") + ")"
                for g, (v, r) in best.items()) + ".")
        tl = {g: {"rate": [r[RATE_KEY] for r in rs if r["status"] == "ok"],
                  "throughput": [r["output_tokens_per_s"] for r in rs if r["status"] == "ok"],
                  "latency": [r["tpot_p99_s"] for r in rs if r["status"] == "ok"]} for g, rs in data["groups"].items()}
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        F.throughput_latency(tl, ax, "tpot", "p99", colors)
        add("throughput_latency", "Throughput vs latency", fig,
            "At the highest load each ran, " + "; ".join(
                f"{g} delivers {d['throughput'][-1]:.0f} output tok/s at p99 TPOT {_ms(d['latency'][-1])}"
                for g, d in tl.items() if d["rate"]) + ".")

    service_section(path, data, runs, colors, add, plt)  # per request class, when there are several

    if runs:
        # CDFs
        metrics = ["ttft", "tpot", "e2e"] + (["tbt"] if all(r.tbt_s is not None for r in runs.values()) else [])
        fig, axes = plt.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 4.2))
        sentences = []
        for m, ax in zip(metrics, axes):
            samples = {g: r.latency(m) for g, r in runs.items()}
            slo_m = {"ttft": ttft_slo, "tpot": tpot_slo}.get(m)
            F.latency_cdfs(samples, ax, m, slo_m, colors)
            sentences.append(_cdf_sentence(m, samples, where))
        if "tbt" not in metrics:
            sentences.append("(TBT samples are not kept in a plain run folder; sweeps and comparisons keep them.)")
        used = {g: next((r.get("num_gpus") for r in data["groups"].get(g, []) if r.get("num_gpus")), None)
                for g in runs}
        if len({v for v in used.values() if v}) > 1:
            sentences.append("These runs do not use the same number of GPUs (" + ", ".join(
                f"{g} {v}" for g, v in used.items() if v) + "): at one arrival rate the larger deployment has "
                "more capacity; compare them per GPU (`servesim capacity --per-gpu`).")
        add("latency_cdfs", "Latency CDFs", fig, " ".join(sentences))

        # TTFT breakdown
        bd = {g: r.ttft_breakdown() for g, r in runs.items()}
        fig, ax = plt.subplots(figsize=(max(4.5, 1.6 * len(bd) + 2), 4.2))
        F.ttft_breakdown(bd, ax)
        parts = []
        for g, d in bd.items():
            tot = d["queueing"] + d["prefill"] + d.get("api", 0.0)
            if tot > 0:
                x = f" then {_ms(d['transfer'])} of KV transfer to the decode pool" if d["transfer"] > 0 else ""
                a = f", {d['api'] / tot:.0%} API server" if d.get("api", 0.0) > 0 else ""
                parts.append(f"{g} {_ms(tot)} ({d['queueing'] / tot:.0%} queueing, "
                             f"{d['prefill'] / tot:.0%} prefill{a}){x}")
        add("ttft_breakdown", "TTFT breakdown", fig, "Mean TTFT" + where + ": " + "; ".join(parts) + ".")

        shown = list(runs.items())[:MAX_GROUPS_PER_PANEL]
        # per-replica timeline: the first replica of each pool (a P/D split's decode pool, where
        # TPOT is made, as well as its prefill pool)
        panels = [(g, r, first, pool) for g, r in shown
                  for pool, first, _, _ in (r.pools() or [("colocated", 0, 1, None)])]
        fig, axes = plt.subplots(4, len(panels), figsize=(5.5 * len(panels), 9), sharex="col", squeeze=False)
        parts = []
        for j, (g, r, first, pool) in enumerate(panels):
            td = r.timeline_data(first)
            F.replica_timeline(td, axes[:, j])
            name = f"replica {first}" + ("" if pool == "colocated" else f" ({pool} pool)")
            axes[0, j].set_title(f"{g}: {name}")
            kv = td["kv_usage"]
            qmax = int(td["waiting"].max()) if len(td["waiting"]) else 0
            tq = float(td["queue_t"][td["waiting"].argmax()]) if len(td["waiting"]) else 0.0
            parts.append(f"{g} {name}: mean batch {td['num_seqs'].mean() if len(td['num_seqs']) else 0:.1f} "
                         f"sequences, KV peaks at {(kv.max() if len(kv) else 0) * 100:.0f}%, up to {qmax} "
                         f"request{'' if qmax == 1 else 's'} waiting (at {tq:.0f} s)")
        add("timeline", "Per-replica timeline", fig,
            "The first replica of each pool" + where + ": " + "; ".join(parts) + ".")

        # roofline
        fig, axes = plt.subplots(1, len(shown), figsize=(6 * len(shown), 4.8), squeeze=False)
        parts = []
        for j, (g, r) in enumerate(shown):
            rd = r.roofline_data()
            F.roofline(rd, axes[0, j])
            axes[0, j].set_title(f"{g}: steps on the roofline")
            parts.append(_roofline_sentence(g, rd, brief=j > 0))
        add("roofline", "Roofline", fig, " ".join(parts))

    out = path / "report.md"
    out.write_text("\n".join(md).rstrip() + "\n")
    return out


def meta_slo(meta) -> dict:
    try:
        return parse_slo(meta.get("slo") or "")
    except Exception:  # noqa: BLE001 - an old or hand-edited sweep.json: fall back to the scenario's
        return {}


def _share(x: float) -> str:
    return f"{x:.1%}" if x < 0.01 else f"{x:.0%}"


def _roofline_sentence(g, rd, brief: bool = False) -> str:
    import numpy as np

    fl, by, dur, kind = rd["flops"], rd["bytes"], rd["duration_s"], np.asarray(rd["kind"])
    ridge = rd["peak_flops"] / rd["mem_bw"]
    ok = (by > 0) & (dur > 0)
    ai = np.where(ok, fl / np.where(by > 0, by, 1), 0)
    below = float((ai[ok] < ridge).mean()) if ok.any() else 0.0
    if brief:
        parts = [f"{g}: {below:.0%} left of the ridge"]
    else:
        parts = [f"{g}: {below:.0%} of steps lie left of the ridge ({ridge:.0f} FLOP/B, memory-bound side)"]
    for k in ("decode", "prefill", "mixed"):
        m = ok & (kind == k)
        if m.any():
            ach = fl[m].sum() / dur[m].sum()
            if brief:
                parts.append(f"{k} {ach / 1e12:.0f} TFLOP/s")
            else:
                parts.append(f"{k} steps reach a median {np.median(ai[m]):.0f} FLOP/B and "
                             f"{ach / 1e12:.0f} TFLOP/s ({_share(ach / rd['peak_flops'])} of peak)")
    return ("; " if not brief else ", ").join(parts) + "."
