"""Service per request class: figures and the report's section for runs with more than one class.

Figures take plain data and an Axes (as ``plots.figures``). Runs on several seeds (``--seeds``):
each figure is the mean over the seeds with the 95% Student-t interval across them. One seed:
SLO attainment is drawn with a 95% Wilson interval over the class's requests; requests of one
run are not independent draws (they queue behind each other), so that interval understates
run-to-run spread: run with ``--seeds`` to see it.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from servesim.outputs.rundir import read_summary
from servesim.outputs.verdicts import attainment_pct, loads_up_to
from servesim.outputs.wording import limit_text
from servesim.plots.figures import (_error_bars, _legend_off_the_lines, _ms, _plain_log_ticks, colors_for,
                                     legend_below, panel_grid, slo_text, wrap_label)

ATTAINMENT_TARGET = 0.9  # the share the report's sentence counts loads against


def wilson(share: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion ``share`` of ``n``."""
    if n <= 0:
        return (math.nan, math.nan)
    d = 1 + z * z / n
    mid = (share + z * z / (2 * n)) / d
    half = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / d
    return (max(0.0, mid - half), min(1.0, mid + half))


def class_series(summaries: dict) -> dict:
    """{class: {label: {"rate", "attainment", "lo", "hi", "ttft_p99"}}} from {label: [(rate, summary)]}."""
    out: dict = {}
    for label, points in summaries.items():
        for rate, s in points:
            for name, c in (s.get("classes") or {}).items():
                d = out.setdefault(name, {}).setdefault(label, {"rate": [], "attainment": [], "lo": [], "hi": [],
                                                                "ttft_p99": []})
                # a class that drew no request at this point has no attainment (0 of 0 is not 0%)
                a = c["slo_attainment"] if c["num_requests"] else math.nan
                lo, hi = wilson(a, c["num_requests"])
                d["rate"].append(rate)
                d["attainment"].append(a)
                d["lo"].append(lo)
                d["hi"].append(hi)
                d["ttft_p99"].append(c["ttft_s"]["p99"])
    return out


def class_series_over_seeds(summaries: dict) -> dict:
    """As ``class_series``, from {label: [(rate, [summary of each seed])]}: each figure the mean
    over the seeds; ``lo``/``hi`` (attainment) and ``ttft_lo``/``ttft_hi`` the 95% Student-t
    interval across them."""
    from servesim.outputs.intervals import t_interval

    out: dict = {}
    for label, points in summaries.items():
        for rate, runs in points:
            names = dict.fromkeys(n for s in runs for n in (s.get("classes") or {}))
            for name in names:
                # (seeds on which the class drew no request judge nothing: their 0 of 0 is left out)
                cs = [s["classes"][name] for s in runs
                      if name in (s.get("classes") or {}) and s["classes"][name].get("num_requests", 1)]  # (none: NaN)
                d = out.setdefault(name, {}).setdefault(label, {"rate": [], "attainment": [], "lo": [], "hi": [],
                                                                "ttft_p99": [], "ttft_lo": [], "ttft_hi": []})
                a = t_interval([c["slo_attainment"] for c in cs])
                t = t_interval([c["ttft_s"]["p99"] for c in cs])
                d["rate"].append(rate)
                d["attainment"].append(a.mean)
                d["lo"].append(max(0.0, a.low) if a.n > 1 else a.mean)
                d["hi"].append(min(1.0, a.high) if a.n > 1 else a.mean)
                d["ttft_p99"].append(t.mean)
                d["ttft_lo"].append(t.low if t.n > 1 else t.mean)
                d["ttft_hi"].append(t.high if t.n > 1 else t.mean)
    return out


def slo_label(slo: dict | None) -> str:
    """A class's SLO ({"ttft_s", "tpot_s"}) as a figure names it: "TTFT <= 1 s, TPOT <= 50 ms"
    ("" without limits)."""
    return slo_text((slo or {}).get("ttft_s"), (slo or {}).get("tpot_s"))


def attainment_vs_load(data: dict, ax, name: str, colors: dict | None = None, slo: dict | None = None,
                       slo_by_label: dict | None = None):
    """One class's SLO attainment against offered load, one line per label, with 95% intervals.
    ``data``: {label: {"rate", "attainment", "lo", "hi"}}; ``slo``: the class's own limits
    ({"ttft_s", "tpot_s"}), named in the title (classes differ: 1 s for chat, 30 s for a batch);
    ``slo_by_label``: {label: its limits} when they differ between the labels (a sweep over the
    class's SLO), each then named in its legend entry instead."""
    colors = colors or colors_for(data)
    for label, d in data.items():
        y = np.asarray(d["attainment"], dtype=float)
        err = np.clip(np.array([y - np.asarray(d["lo"]), np.asarray(d["hi"]) - y]), 0, None)  # (rounding at 0 and 1)
        lim = slo_label((slo_by_label or {}).get(label))
        ax.errorbar(d["rate"], y * 100, yerr=err * 100, fmt="-o", markersize=4, capsize=3, color=colors[label],
                    label=str(label) + (f": SLO {lim}" if lim else ""))
    _none_drawn(ax, data, "attainment")
    ax.axhline(ATTAINMENT_TARGET * 100, color="k", linestyle=":", linewidth=1,
               label=f"{ATTAINMENT_TARGET:.0%}: meets the SLO")
    if data:  # (what the bars are: the figure stands alone)
        over_seeds = any("ttft_lo" in d for d in data.values())
        ax.plot([], [], " ", label="bars: 95% interval " + ("over seeds" if over_seeds else "(Wilson, over requests)"))
    ax.set_xlabel("offered load (req/s)")
    ax.set_ylabel("SLO attainment (%)")
    ax.set_ylim(0, 102)
    limits = "" if slo_by_label else slo_label(slo)
    ax.set_title(f"class {name}: SLO attainment vs load" + (f"\n(SLO {limits})" if limits else "")
                 + ("\n(each against its own SLO, in the legend)" if slo_by_label else ""))
    ax.grid(True, alpha=0.3)
    _legend_off_the_lines(ax, fontsize="small")  # (as latency_vs_load's: under the axes where none is clear)
    return ax


def _none_drawn(ax, data: dict, key: str) -> None:
    """Say so in a class's panel when it has no value at any load (a rare class that drew no
    request at any point): the panel was blank, its x axis around 0, with no word why."""
    if any(v is not None and not math.isnan(v) for d in data.values() for v in d[key]):
        return
    rates = sorted({r for d in data.values() for r in d["rate"] if r is not None})
    if rates:
        ax.set_xlim(rates[0] - 0.05 * (rates[-1] - rates[0] or 1), rates[-1] + 0.05 * (rates[-1] - rates[0] or 1))
    ax.text(0.5, 0.5, "no requests at any load tried", transform=ax.transAxes, ha="center", va="center",
            color="#555555")


def class_ttft_vs_load(data: dict, ax, name: str, slo_s: float | None = None, colors: dict | None = None,
                       slo_by_label: dict | None = None):
    """One class's p99 TTFT against offered load. ``data``: {label: {"rate", "ttft_p99"}};
    ``slo_by_label``: {label: its TTFT limit} when it differs between the labels: a limit line
    in each label's colour instead of one black one (which read as every label's)."""
    colors = colors or colors_for(data)
    for label, d in data.items():
        y = [v if v is not None else math.nan for v in d["ttft_p99"]]
        ax.plot(d["rate"], _ms(y), "-o", markersize=4, color=colors[label], label=wrap_label(label))
        if "ttft_lo" in d:  # means over seeds, with their (symmetric Student-t) intervals
            # as latency_vs_load draws them: a bar whose low end is at or below 0 (two seeds far
            # apart) runs open off the bottom, and the legend says what the bars are and that;
            # drawn by errorbar on the log axis it was cut at the axes' edge, as if it ended there
            half = [None if lo is None or hi is None else (hi - lo) / 2 for lo, hi in zip(d["ttft_lo"], d["ttft_hi"])]
            _error_bars(ax, d["rate"], y, half, colors[label], 1e3)
    if slo_by_label:
        for label in data:
            v = slo_by_label.get(label)
            if v is not None:
                ax.axhline(v * 1e3, color=colors[label], linestyle=":", linewidth=1.2,
                           label=f"SLO {limit_text(v)} ({wrap_label(label)})")
    elif slo_s is not None:
        ax.axhline(slo_s * 1e3, color="k", linestyle=":", linewidth=1.2, label=f"SLO {limit_text(slo_s)}")
    _none_drawn(ax, data, "ttft_p99")
    ax.set_yscale("log")
    _plain_log_ticks(ax.yaxis)
    ax.set_xlabel("offered load (req/s)")
    ax.set_ylabel("p99 TTFT (ms)")
    ax.set_title(f"class {name}: p99 TTFT vs load")
    ax.grid(True, which="both", alpha=0.3)
    _legend_off_the_lines(ax, fontsize="small")  # (as latency_vs_load's: under the axes where none is clear)
    return ax


def attainment_bars(data: dict, ax, colors: dict | None = None, slos: dict | None = None):
    """SLO attainment per class (groups of bars), one bar per label, with 95% intervals.
    ``data``: {class: {label: {"attainment", "lo", "hi"}}} (one value each); ``slos``: {class:
    its limits, or a text}, written under its name."""
    classes = list(data)
    labels = list(dict.fromkeys(lbl for d in data.values() for lbl in d))
    colors = colors or colors_for(labels)
    width = 0.8 / max(len(labels), 1)
    for j, label in enumerate(labels):
        xs, ys, errs = [], [], [[], []]
        for i, c in enumerate(classes):
            d = data[c].get(label)
            if d is None:
                continue
            y = d["attainment"][-1]
            x = i + (j - (len(labels) - 1) / 2) * width
            if math.isnan(y):  # the class drew no request: no bar (an empty one read as 0%), and why not
                ax.text(x, 2, "no requests", ha="center", va="bottom", fontsize="x-small",
                        rotation=90 if len(labels) > 1 else 0)
                continue
            xs.append(x)
            ys.append(y * 100)
            errs[0].append(max(y - d["lo"][-1], 0.0) * 100)
            errs[1].append(max(d["hi"][-1] - y, 0.0) * 100)
        ax.bar(xs, ys, width=width, yerr=errs, capsize=3, color=colors[label], label=str(label))
    ax.axhline(ATTAINMENT_TARGET * 100, color="k", linestyle=":", linewidth=1,
               label=f"{ATTAINMENT_TARGET:.0%}: meets the SLO")
    if data:  # (what the error bars are, as attainment_vs_load says: one seed's run still has them)
        over_seeds = any("ttft_lo" in d for by_label in data.values() for d in by_label.values())
        ax.plot([], [], " ", label="error bars: 95% interval " + ("over seeds" if over_seeds else
                                                                   "(Wilson, over requests)"))
    ax.set_xticks(range(len(classes)))
    ax.set_xlim(-0.5, len(classes) - 0.5)  # (every class's slot, a last one without bars too)
    def limits(c):  # (a text as it is: "SLO differs by configuration")
        v = (slos or {}).get(c)
        return v if isinstance(v, str) else slo_label(v)

    ax.set_xticklabels([c + (f"\n{limits(c)}" if limits(c) else "") for c in classes], fontsize="small")
    ticks = [t.get_window_extent() for t in ax.get_xticklabels()]
    if any(a.overlaps(b) for a, b in zip(ticks, ticks[1:])):  # (many classes: each limit on a line of its own)
        ax.set_xticklabels([wrap_label(c, 16) + (f"\n{limits(c)}".replace(", ", ",\n") if limits(c) else "")
                            for c in classes], fontsize="small")
    ax.set_ylabel("SLO attainment (%)")
    ax.set_ylim(0, 105)
    ax.set_title("SLO attainment per class")
    ax.grid(True, axis="y", alpha=0.3)
    # under the axes, beside each other: bars that meet the SLO reach the top, so a legend inside
    # the axes (matplotlib's "best" spot) lay over a class's bar and its error bar
    # (side by side only where they fit under the axes: a wider legend made the tight layout
    # narrow the axes until the classes' names ran into each other)
    n = len(ax.get_legend_handles_labels()[0])
    legend = legend_below(ax, fontsize="small", ncol=min(n, 3))
    if n > 1 and legend.get_window_extent().width > ax.get_window_extent().width:
        legend_below(ax, fontsize="small", ncol=1)
    return ax


def _pct(x: float) -> str:
    return attainment_pct(x)  # (99.97% is not "100.0%")


def class_sentence(series: dict, with_rate: bool) -> str:
    """One sentence per class: how far each label keeps it within its SLO."""
    parts = []
    for name, by_label in series.items():
        bits = []
        for label, d in by_label.items():
            # loads at which the class drew no request judge nothing (NaN): left out, and named
            judged = [r for r, a in zip(d["rate"], d["attainment"]) if not math.isnan(a)]
            none = ", ".join(f"{r:.4g}" for r, a in zip(d["rate"], d["attainment"]) if math.isnan(a) and with_rate)
            if not judged:
                bits.append(f"{label} no requests" + (f" at any load tried ({none} req/s)" if with_rate else ""))
                continue
            if with_rate:
                ok = [r for r, a in zip(d["rate"], d["attainment"]) if a >= ATTAINMENT_TARGET]
                upto = loads_up_to(judged, ok)  # ("up to R": every load up to R)
                at = ("at none of the loads" if not ok else f"at every load tried (up to {max(judged):.4g} req/s)"
                      if len(ok) == len(judged) else f"up to {max(upto):.4g} req/s" if upto
                      else "only at " + ", ".join(f"{r:.4g}" for r in ok) + " req/s")
                if upto and len(upto) < len(ok):
                    at += " (also at " + ", ".join(f"{r:.4g}" for r in ok if r not in upto) + " req/s)"
                # over seeds, the mean's interval too: "72.5%" alone was printed for two seeds' 99.7% and 45%
                last = max(i for i, a in enumerate(d["attainment"]) if not math.isnan(a))  # highest judged load
                iv = (f", 95% interval over seeds {_pct(d['lo'][last])}-{_pct(d['hi'][last])}"
                      if "ttft_lo" in d and d["lo"][last] < d["hi"][last] else "")
                bits.append(f"{label} {at} ({_pct(d['attainment'][last])} at {d['rate'][last]:.4g} req/s{iv}"
                            + (f"; no requests at {none} req/s" if none else "") + ")")
            else:  # (one run per label)
                bits.append(f"{label} {_pct(d['attainment'][-1])} "
                            f"(95% interval {_pct(d['lo'][-1])}-{_pct(d['hi'][-1])})")
        if with_rate:
            parts.append(f"class {name} meets its SLO for >= {ATTAINMENT_TARGET:.0%} of requests: " + "; ".join(bits))
        else:
            parts.append(f"class {name}: " + "; ".join(bits))
    return ". ".join(parts) + "."


def jain_sentence(summaries: dict, seeds: int = 1) -> str:
    """Jain's index over tenants (else classes) at each label's highest load; ``seeds`` > 1: the
    summaries are each point's first seed's run (said so: the class sentence beside it is the
    mean over the seeds)."""
    bits = []
    for label, points in summaries.items():
        if not points:
            continue
        f = (points[-1][1].get("fairness") or {}).get("jain") or {}
        j = f.get("tenants", {}) if (f.get("tenants") or {}).get("service_share") is not None else f.get("classes", {})
        if j.get("slo_attainment") is not None:
            bits.append(f"{label} {j['slo_attainment']:.2f} (service share {j['service_share']:.2f})")
    first = f" (the first of {seeds} seeds' runs)" if seeds > 1 else ""
    return (f"Jain's fairness index of SLO attainment across tenants{first}: " + "; ".join(bits) + ".") if bits \
        else ""


def _summaries(path: Path, rows: list, rate: bool) -> list:
    """(its rate, or None without one; summary.json) of each row whose run finished, in order."""
    out = []
    for r in rows:
        f = path / str(r.get("dir") or "") / "summary.json"
        if r["status"] == "ok" and r.get("dir") and f.is_file():
            out.append((r.get("workload.arrival.rate_rps") if rate else None, read_summary(f.parent)))
    return out


def _seeds(data: dict) -> int:
    return int((data.get("meta") or {}).get("seeds") or 1)


def service_section(path: Path, data: dict, runs: dict, colors: dict, add, subplots,
                    title=lambda what, rate=True: what, label_of=str, keep=list) -> None:
    """The report's "service per class" figures, for folders whose runs have more than one class.
    ``add(name, title, fig, sentence)`` saves a figure into the report; ``title(what, rate)`` makes
    a figure's title (the report's: what, model, GPUs, policy, load and SLO); ``label_of(group)`` a
    legend entry and ``keep(groups)`` the groups to draw (the report's: identical configurations
    once, named together, with their GPU counts); ``colors`` is keyed by those entries."""
    if data["rows"]:
        summaries = {label: _summaries(path, rows, data["rate"]) for label, rows in data["groups"].items()}
    else:
        summaries = {label: [(None, run.summary)] for label, run in runs.items()}
    firsts = [p[0][1] for p in summaries.values() if p]
    if not firsts or len(firsts[0].get("classes") or {}) < 2:
        return
    seeded = data.get("seed_groups") or {}
    if seeded and data["rows"]:  # runs on several seeds: means and intervals across them
        over: dict = {}
        for label, rows in seeded.items():
            by_rate: dict = {}
            for rate, s in _summaries(path, rows, data["rate"]):
                by_rate.setdefault(rate, []).append(s)
            over[label] = sorted(by_rate.items(), key=lambda x: (x[0] is None, x[0] or 0.0))
        series = class_series_over_seeds(over)
    else:
        series = class_series(summaries)
    # drawn as the other figures draw their groups (the sentences keep the groups' own names):
    # two identical configurations were two curves, one hidden under the other, and no legend
    # entry gave a GPU count
    drawn = {c: {label_of(g): d for g, d in s.items() if g in set(keep(list(s)))} for c, s in series.items()}
    # each drawn label's limits per class (a sweep over workload.classes[i].slo gives them apart:
    # the title and limit line of the first run's were drawn as every label's)
    slos: dict = {}
    kept = set(keep(list(summaries)))
    for g, pts in summaries.items():
        if g in kept:
            for _, s in pts[:1]:
                for name, c in (s.get("classes") or {}).items():
                    slos.setdefault(name, {})[label_of(g)] = c.get("slo") or {}
    differs = {name: by if len({tuple(sorted(v.items())) for v in by.values()}) > 1 else None
               for name, by in slos.items()}
    if data["rate"]:
        names = list(series)
        # (a class's two panels one above the other, at most 4 classes side by side: more wrap)
        fig, columns = panel_grid(len(names), 2, (5.5, 8.5))
        for j, name in enumerate(names):
            by = differs.get(name)
            attainment_vs_load(drawn[name], columns[j][0], name, colors, firsts[0]["classes"][name].get("slo"), by)
            slo = firsts[0]["classes"][name]["slo"]["ttft_s"]
            class_ttft_vs_load(drawn[name], columns[j][1], name, slo, colors,
                               {k: v.get("ttft_s") for k, v in by.items()} if by else None)
        add("classes_vs_load", title("Service per class vs load", False), fig,
            class_sentence(series, True) + " " + jain_sentence(summaries, len(seeded) and _seeds(data)))
    else:
        # (wider with each class up to 16 inches: ten classes made a figure 24 inches wide)
        fig, ax = subplots(figsize=(min(16.0, max(5.0, 2.2 * len(series) + 2)), 4.2))
        attainment_bars(drawn, ax, colors, {c: "SLO differs by configuration" if differs.get(c)
                                            else (firsts[0]["classes"].get(c) or {}).get("slo") for c in series})
        add("classes", title("Service per class"), fig,
            class_sentence(series, False) + " " + jain_sentence(summaries, len(seeded) and _seeds(data)))
