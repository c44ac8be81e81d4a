"""Design-review figures. Each function takes plain data (dicts of arrays) and a matplotlib Axes
and returns the Axes: labelled axes with units, a legend, colours fixed per policy/label. None of
them runs a simulation; ``plots.rundata`` turns results into the data they take.

Latencies come in seconds and are drawn in milliseconds.
"""

from __future__ import annotations

import math

import numpy as np

# One colour per policy wherever it appears; other labels take the remaining colours in order.
POLICY_COLORS = {"static": "#7f7f7f", "continuous": "#1f77b4", "chunked_prefill": "#2ca02c", "pd_split": "#d62728"}
_OTHER = ["#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#393b79", "#637939"]
KIND_COLORS = {"prefill": "#d62728", "decode": "#1f77b4", "mixed": "#9467bd"}
COMPONENT_COLORS = {"queueing": "#bdbdbd", "prefill": "#ff7f0e", "transfer": "#17becf"}
METRIC_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "tbt": "TBT", "e2e": "E2E", "queue": "queueing delay"}


def colors_for(labels) -> dict:
    """label -> colour: known policy names keep theirs; others get the rest in order of first appearance."""
    out, i = {}, 0
    for lbl in labels:
        if lbl in out:
            continue
        key = str(lbl).split(" ")[0].split("=")[-1]
        if key in POLICY_COLORS:
            out[lbl] = POLICY_COLORS[key]
        else:
            out[lbl] = _OTHER[i % len(_OTHER)]
            i += 1
    return out


def _plain_log_ticks(axis):
    """Log-scale ticks written as plain numbers (10, 100, 1000). Minor ticks are labelled (at 2, 3
    and 5 x 10^k) only when the view spans less than a decade, which may hold no major tick."""
    from matplotlib.ticker import FuncFormatter

    def minor(v, _):
        lo, hi = axis.get_view_interval()
        if v <= 0 or lo <= 0 or hi / lo >= 10:
            return ""
        m = v / 10 ** math.floor(math.log10(v))
        return f"{v:g}" if any(abs(m - k) < 1e-6 for k in (2, 3, 5)) else ""

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(FuncFormatter(minor))


def _ms(x):
    return np.asarray(x, dtype=float) * 1e3


# ---------------------------------------------------------------- distributions
def latency_cdfs(data: dict, ax, metric: str = "ttft", slo_s: float | None = None, colors: dict | None = None):
    """Empirical CDF per label. ``data``: {label: samples in seconds}."""
    colors = colors or colors_for(data)
    lo, hi = np.inf, 0.0
    for label, x in data.items():
        x = np.sort(np.asarray(x, dtype=float))
        x = x[~np.isnan(x)]
        if len(x) == 0:
            continue
        y = np.arange(1, len(x) + 1) / len(x)
        ax.step(_ms(x), y, where="post", label=str(label), color=colors[label])
        pos = x[x > 0]
        if len(pos):
            lo, hi = min(lo, pos.min()), max(hi, x.max())
    if slo_s is not None:
        ax.axvline(slo_s * 1e3, color="k", linestyle="--", linewidth=1, label=f"SLO {slo_s * 1e3:g} ms")
    if hi > 0 and hi / lo > 100:
        ax.set_xscale("log")
    name = METRIC_NAMES.get(metric, metric)
    ax.set_xlabel(f"{name} (ms)")
    ax.set_ylabel("fraction of token gaps" if metric == "tbt" else "fraction of requests")
    ax.set_ylim(0, 1.0)
    ax.set_title(f"{name} CDF")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    return ax


# ---------------------------------------------------------------- versus load
def latency_vs_load(data: dict, ax, metric: str = "ttft", slo_s: float | None = None, colors: dict | None = None):
    """p99 (solid) and p50 (dashed) latency against offered load.

    ``data``: {label: {"rate": [req/s], "p50": [s], "p99": [s]}}.
    """
    colors = colors or colors_for(data)
    name = METRIC_NAMES.get(metric, metric)
    for label, d in data.items():
        c = colors[label]
        ax.plot(d["rate"], _ms(d["p99"]), "-o", color=c, markersize=4, label=f"{label} p99")
        ax.plot(d["rate"], _ms(d["p50"]), "--", color=c, alpha=0.8, label=f"{label} p50")
    return _log_latency_axes(ax, slo_s, "offered load (req/s)", f"{name} (ms)", f"{name} vs load")


def _log_latency_axes(ax, slo_s, xlabel: str, ylabel: str, title: str):
    """A latency (ms) axis on a log scale, with the SLO limit dotted, labels, grid and legend."""
    if slo_s is not None:
        ax.axhline(slo_s * 1e3, color="k", linestyle=":", linewidth=1.2, label=f"SLO {slo_s * 1e3:g} ms")
    ax.set_yscale("log")
    _plain_log_ticks(ax.yaxis)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    return ax


def goodput_vs_load(data: dict, ax, colors: dict | None = None):
    """Goodput (completed within every SLO, req/s) against the scenario's rate, with the ideal: all
    that arrived, from the runs' ``offered`` (req/s that arrived) where given, else y = x.

    ``data``: {label: {"rate": [req/s], "goodput": [req/s], "offered": [req/s] (optional)}}.
    """
    colors = colors or colors_for(data)
    top = 0.0
    offered = {}
    for label, d in data.items():
        ax.plot(d["rate"], d["goodput"], "-o", markersize=4, color=colors[label], label=str(label))
        top = max(top, max(d["rate"], default=0.0))
        for r, o in zip(d["rate"], d.get("offered") or ()):
            if o is not None and o == o:  # (NaN: a results file from before the column)
                offered.setdefault(r, o)
    if offered:
        xs = sorted(offered)
        ax.plot([0, *xs], [0, *(offered[x] for x in xs)], ":", color="k", linewidth=1,
                label="arrived (ideal goodput)")
    else:
        ax.plot([0, top], [0, top], ":", color="k", linewidth=1, label="offered load (ideal)")
    ax.set_xlabel("offered load: workload.arrival.rate_rps (req/s)")
    ax.set_ylabel("goodput (req/s within SLO)")
    ax.set_title("goodput vs load")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return ax


def throughput_latency(data: dict, ax, metric: str = "tpot", stat: str = "p99", colors: dict | None = None):
    """Throughput-latency trade-off: one point per load, each annotated with its rate.

    ``data``: {label: {"rate": [req/s], "throughput": [output tok/s], "latency": [s]}}.
    """
    colors = colors or colors_for(data)
    for label, d in data.items():
        ax.plot(d["throughput"], _ms(d["latency"]), "-o", markersize=4, color=colors[label], label=str(label))
        for r, x, y in zip(d["rate"], d["throughput"], _ms(d["latency"])):
            ax.annotate(f"{r:g}", (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7, color=colors[label])
    name = METRIC_NAMES.get(metric, metric)
    ax.set_xlabel("throughput (output tokens/s)")
    ax.set_ylabel(f"{stat} {name} (ms)")
    ax.set_title(f"throughput vs {stat} {name} (labels: req/s)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return ax


# ---------------------------------------------------------------- per-replica timeline
def batch_size_timeline(data: dict, ax):
    """Sequences in each step over simulated time (``RunData.timeline_data``)."""
    ax.plot(data["t"], data["num_seqs"], drawstyle="steps-post", linewidth=0.8, color="#1f77b4",
            label="sequences per step")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("batch size (sequences)")
    ax.legend(loc="upper right", fontsize="small")
    return ax


def tokens_timeline(data: dict, ax):
    """Prefill and decode tokens in each step."""
    ax.plot(data["t"], data["prefill_tokens"], ".", markersize=2, color=KIND_COLORS["prefill"], label="prefill tokens",
            rasterized=True)
    ax.plot(data["t"], data["decode_tokens"], ".", markersize=2, color=KIND_COLORS["decode"], label="decode tokens",
            rasterized=True)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("tokens per step")
    ax.legend(loc="upper right", fontsize="small", markerscale=4)
    return ax


def kv_timeline(data: dict, ax):
    """KV cache blocks in use, as a percentage of the replica's blocks."""
    ax.plot(data["t"], np.asarray(data["kv_usage"]) * 100, linewidth=0.8, color="#9467bd", label="KV blocks in use")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("KV usage (%)")
    ax.set_ylim(0, 105)
    ax.legend(loc="upper right", fontsize="small")
    return ax


def queue_timeline(data: dict, ax):
    """Requests waiting and running on the replica over time."""
    ax.plot(data["queue_t"], data["waiting"], drawstyle="steps-post", color="#d62728", label="waiting")
    ax.plot(data["queue_t"], data["running"], drawstyle="steps-post", color="#2ca02c", label="running")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("requests")
    ax.legend(loc="upper right", fontsize="small")
    return ax


def replica_timeline(data: dict, axes):
    """The four timeline panels on a column of four Axes; returns the Axes."""
    axes = list(axes)
    for fn, ax in zip((batch_size_timeline, tokens_timeline, kv_timeline, queue_timeline), axes):
        fn(data, ax)
        ax.grid(True, alpha=0.3)
        if ax is not axes[-1]:
            ax.set_xlabel("")
    return axes


# ---------------------------------------------------------------- TTFT breakdown
def ttft_breakdown(data: dict, ax):
    """Mean TTFT as queueing + prefill, with the P/D split's KV transfer stacked on top, per label.

    ``data``: {label: {"queueing": s, "prefill": s, "transfer": s}} (``RunData.ttft_breakdown``).
    The transfer comes after the first token (it delays the second), so the bar's top is the mean
    time until decoding can start; without a P/D split it is 0 and the bar is the mean TTFT.
    Each bar carries its total. When totals differ more than 50-fold the bars show shares (%)
    instead of milliseconds, so the small ones stay readable.
    """
    labels = list(data)
    x = np.arange(len(labels))
    comps = (("queueing", "queueing"), ("prefill", "prefill compute"),
             ("transfer", "KV transfer (P/D, before 2nd token)"))
    ms = {c: np.array([data[lbl].get(c, 0.0) for lbl in labels]) * 1e3 for c, _ in comps}
    totals = sum(ms.values())
    pos = totals[totals > 0]
    shares = len(pos) > 1 and pos.max() / pos.min() > 50
    scale = np.where(totals > 0, 100 / np.where(totals > 0, totals, 1), 0) if shares else np.ones(len(labels))
    bottom = np.zeros(len(labels))
    for comp, name in comps:
        vals = ms[comp] * scale
        ax.bar(x, vals, bottom=bottom, color=COMPONENT_COLORS[comp], label=name, width=0.6)
        bottom += vals
    def fmt(v):
        return f"{v / 1e3:.0f} s" if v >= 1e4 else f"{v:.0f} ms" if v >= 10 else f"{v:.1f} ms"

    for i, (xi, top) in enumerate(zip(x, bottom)):  # on each bar: the TTFT, and the transfer after it
        ttft, kv = ms["queueing"][i] + ms["prefill"][i], ms["transfer"][i]
        text = f"TTFT {fmt(ttft)}" + (f"\n+ {fmt(kv)} KV" if kv > 0 else "")
        ax.annotate(text, (xi, top), textcoords="offset points", xytext=(0, 2), ha="center", fontsize=8)
    ax.set_xticks(x, [str(lbl) for lbl in labels], rotation=20 if len(labels) > 3 else 0)
    if shares:
        ax.set_ylim(0, 125)
    else:
        ax.set_ylim(0, max(bottom.max(initial=0.0), 1e-9) * 1.2)  # room for the labels under the title
    ax.set_ylabel("share of mean time (%)" if shares else "mean time (ms)")
    ax.set_title("TTFT breakdown (+ KV transfer)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.14 if len(labels) <= 3 else -0.2),
              ncol=3, frameon=False)
    return ax


# ---------------------------------------------------------------- roofline
def roofline(data: dict, ax):
    """Each step at (arithmetic intensity, achieved FLOP/s) under the replica's roofline.

    ``data``: ``RunData.roofline_data()``: flops, bytes, duration_s, kind per step; peak_flops and
    mem_bw of the replica (all its GPUs); hardware (a name for the legend).
    """
    fl, by, dur = (np.asarray(data[k], dtype=float) for k in ("flops", "bytes", "duration_s"))
    ok = (by > 0) & (dur > 0) & (fl > 0)
    ai = fl[ok] / by[ok]
    achieved = fl[ok] / dur[ok]
    kind = np.asarray(data["kind"])[ok]
    for k in ("prefill", "decode", "mixed"):
        m = kind == k
        if m.any():
            ax.scatter(ai[m], achieved[m] / 1e12, s=6, alpha=0.5, color=KIND_COLORS[k], label=f"{k} steps ({m.sum()})",
                       edgecolors="none", rasterized=True)
    peak, bw = data["peak_flops"], data["mem_bw"]
    ridge = peak / bw
    lo = min(ai.min() if len(ai) else 1.0, ridge) / 3
    hi = max(ai.max() if len(ai) else 1.0, ridge) * 3
    xs = np.geomspace(lo, hi, 200)
    ax.plot(xs, np.minimum(peak, xs * bw) / 1e12, "k-", linewidth=1.5,
            label=f"roofline {data.get('hardware', '')} (ridge {ridge:.0f} FLOP/B)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title("steps on the roofline")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="lower right", markerscale=2)
    return ax


# ---------------------------------------------------------------- deployment plans
_KIND_MARKERS = {"colocated": "o", "pd": "s"}


def pareto_front(points) -> list:
    """The points no other point beats on both cost (lower) and capacity (higher): ``points`` are
    (cost, capacity, ...) tuples; returned in order of cost."""
    front, best = [], -math.inf
    for p in sorted(points, key=lambda p: (p[0], -p[1])):
        if p[1] > best:
            front.append(p)
            best = p[1]
    return front


def cost_capacity(data: list, ax, rate_rps: float, colors: dict | None = None):
    """Deployments by $/hour (x) and capacity (y, req/s, with its interval as an error bar), the
    Pareto front (cheapest for its capacity) as a step line, the target rate as a dotted line.

    ``data``: [{"fleet": "8 x h100-sxm", "gpu": colour key, "kind": "colocated" | "pd",
    "usd_per_hour", "capacity", "low", "high", "chosen": bool}]; each point is labelled with its fleet
    (GPU type x count) when on the front."""
    colors = colors or colors_for([d["gpu"] for d in data])
    seen = set()
    for d in data:
        c = colors[d["gpu"]]
        lab = f"{d['gpu']} ({'P/D' if d['kind'] == 'pd' else 'colocated'})"
        err = [[max(d["capacity"] - d["low"], 0.0)], [max(d["high"] - d["capacity"], 0.0)]]
        ax.errorbar([d["usd_per_hour"]], [d["capacity"]], yerr=err,
                    fmt=_KIND_MARKERS.get(d["kind"], "o"), color=c, markersize=6, capsize=2, alpha=0.85,
                    label=None if lab in seen else lab)
        seen.add(lab)
    front = pareto_front([(d["usd_per_hour"], d["capacity"], d) for d in data])
    if front:
        xs = [p[0] for p in front]
        ys = [p[1] for p in front]
        ax.step(xs, ys, where="post", color="k", linewidth=1, alpha=0.6, label="Pareto front")
        for x, y, d in front:
            ax.annotate(d["fleet"], (x, y), textcoords="offset points", xytext=(4, -10), fontsize=7)
    for d in data:
        if d.get("chosen"):
            ax.plot([d["usd_per_hour"]], [d["capacity"]], "*", color="gold", markeredgecolor="k", markersize=16,
                    label=f"chosen: {d['fleet']}")
    ax.axhline(rate_rps, color="k", linestyle=":", linewidth=1.2, label=f"target {rate_rps:g} req/s")
    ax.set_xlabel("cost ($/hour, on-demand list prices)")
    ax.set_ylabel("capacity within the SLO (req/s; bars: interval over seeds)")
    # intervals from a few seeds can be very wide: keep the estimates readable (bars run off the top)
    ax.set_ylim(0, max([1.6 * d["capacity"] for d in data] + [1.3 * rate_rps]))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="upper left")
    return ax


def cost_latency(data: list, ax, metric: str, slo_s: float | None = None, colors: dict | None = None):
    """p99 latency at the target rate (worst seed) against $/hour: filled markers met the whole
    SLO with every seed, hollow ones did not (by this limit or another); the SLO limit dotted.

    ``data``: [{"fleet", "gpu", "kind", "usd_per_hour", "p99": seconds, "meets": bool}]."""
    colors = colors or colors_for([d["gpu"] for d in data])
    name = METRIC_NAMES.get(metric, metric)
    seen = set()
    for d in data:
        if d["p99"] is None or not math.isfinite(d["p99"]) or d["p99"] >= 1e17:  # 1e17+: never served
            continue
        c = colors[d["gpu"]]
        lab = f"{d['gpu']}{' P/D' if d['kind'] == 'pd' else ''}, {'meets' if d['meets'] else 'fails'}"
        ax.plot([d["usd_per_hour"]], [d["p99"] * 1e3], _KIND_MARKERS.get(d["kind"], "o"), color=c, markersize=6,
                markerfacecolor=c if d["meets"] else "none", label=None if lab in seen else lab)
        seen.add(lab)
    return _log_latency_axes(ax, slo_s, "cost ($/hour)", f"p99 {name} at the target rate (ms, worst seed)",
                             f"cost vs p99 {name}")


def save(fig, stem) -> list:
    """Write ``stem``.png and ``stem``.svg; returns the two paths."""
    from pathlib import Path

    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    fig.savefig(paths[0], dpi=110)
    fig.savefig(paths[1])
    return paths
