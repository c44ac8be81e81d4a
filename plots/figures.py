"""Design-review figures. Each function takes plain data (dicts of arrays) and a matplotlib Axes
and returns the Axes: labelled axes with units, a legend, colours fixed per policy/label. None of
them runs a simulation; ``plots.rundata`` turns results into the data they take.

Latencies come in seconds and are drawn in milliseconds.
"""

from __future__ import annotations

import contextlib
import math
import re
import sys
import warnings

import numpy as np

from servesim.outputs.wording import limit_text

# One colour per policy wherever it appears; other labels take the remaining colours in order.
POLICY_COLORS = {"static": "#7f7f7f", "continuous": "#1f77b4", "chunked_prefill": "#2ca02c", "pd_split": "#d62728"}
_OTHER = ["#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#393b79", "#637939"]
KIND_COLORS = {"prefill": "#d62728", "decode": "#1f77b4", "mixed": "#9467bd"}
COMPONENT_COLORS = {"queueing": "#bdbdbd", "prefill": "#ff7f0e", "api": "#9467bd", "transfer": "#17becf"}
METRIC_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "tbt": "ITL (token gap)", "e2e": "E2E", "queue": "queueing delay"}


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


def _labelled_in_view(lo: float, hi: float, mantissas) -> int:
    """How many of 10^k and m x 10^k (m in ``mantissas``) lie in [lo, hi] (0 < lo < hi)."""
    count = 0
    for k in range(math.floor(math.log10(lo)), math.floor(math.log10(hi)) + 1):
        count += sum(lo <= m * 10.0 ** k <= hi for m in (1, *mantissas))
    return count


def _plain_log_ticks(axis):
    """Log-scale ticks written as plain numbers (10, 100, 1000). Minor ticks are labelled only when
    the view spans less than two decades, which holds one or two major ticks (or none): at 2 and 5 x
    10^k from one decade up (40-2,500 ms read "50, 100, 200, 500, 1000, 2000", not "100, 1000"),
    below a decade at 2, 3 and 5 x 10^k, or at every minor tick when fewer than two of those (and
    the major ticks) are in view (e.g. 7-9 ms)."""
    from matplotlib.ticker import FuncFormatter

    def minor(v, _):
        lo, hi = axis.get_view_interval()
        if v <= 0 or lo <= 0 or hi / lo >= 100:
            return ""
        m = v / 10 ** math.floor(math.log10(v))
        if hi / lo >= 10:
            picks = (2, 5)
        else:
            picks = (2, 3, 5) if _labelled_in_view(lo, hi, (2, 3, 5)) >= 2 else range(2, 10)
        return f"{v:g}" if any(abs(m - k) < 1e-6 for k in picks) else ""

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(FuncFormatter(minor))


def _ms(x):
    return np.asarray(x, dtype=float) * 1e3


def slo_text(ttft_s, tpot_s) -> str:
    """An SLO as titles and labels name it: "TTFT <= 1 s, TPOT <= 50 ms" (a None limit left out;
    "" without any)."""
    return ", ".join(f"{n} <= {limit_text(v)}" for n, v in (("TTFT", ttft_s), ("TPOT", tpot_s)) if v is not None)


# ---------------------------------------------------------------- distributions
def latency_cdfs(data: dict, ax, metric: str = "ttft", slo_s: float | None = None, colors: dict | None = None):
    """Empirical CDF per label. ``data``: {label: samples in seconds}."""
    colors = colors or colors_for(data)
    lo, hi = np.inf, 0.0
    drawn = 0
    curves = []
    for label, x in data.items():
        x = np.sort(np.asarray(x, dtype=float))
        x = x[~np.isnan(x)]
        if len(x) == 0:
            continue
        drawn += 1
        # from 0 at the smallest sample: without it the first step had no rise, and one sample
        # (a run of one request) drew nothing at all
        xs, y = _ms(np.concatenate([x[:1], x])), np.arange(len(x) + 1) / len(x)
        ax.step(xs, y, where="post", label=wrap_label(label), color=colors[label])
        curves.append((xs, y))
        pos = x[x > 0]
        if len(pos):
            lo, hi = min(lo, pos.min()), max(hi, x.max())
    name = METRIC_NAMES.get(metric, metric)
    if not drawn:  # (no request completed, or none has the metric: say so on a bare panel; the SLO
        # line alone set an x range of its own, with stray ticks (48, 49.5, 51, 52.5 ms) around it)
        why = {"tpot": "no completed request has two or more output tokens",
               "tbt": "no request streamed two outputs"}.get(metric, "no request completed")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel(f"{name} (ms)")
        ax.set_title(f"{name} CDF")
        ax.text(0.5, 0.5, f"no {name} sample\n({why})", transform=ax.transAxes, ha="center", va="center",
                fontsize="small", color="0.4")
        return ax
    if slo_s is not None:
        ax.axvline(slo_s * 1e3, color="k", linestyle="--", linewidth=1, label=f"SLO {limit_text(slo_s)}")
    if hi > 0 and hi / lo > 100:
        ax.set_xscale("log")
    else:  # (linear: tens of thousands of ms in default ticks ran into each other)
        from matplotlib.ticker import FuncFormatter, MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if abs(v) >= 1000 else f"{v:g}"))
    ax.set_xlabel(f"{name} (ms)")
    ax.set_ylabel("fraction of token gaps" if metric == "tbt" else "fraction of requests")
    ax.set_ylim(0, 1.0)
    ax.set_title(f"{name} CDF")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        _cdf_legend(ax, curves, [slo_s * 1e3] if slo_s is not None else [])
    return ax


_CDF_LEGEND_SPOTS = ("lower right", "upper left", "center right", "center left", "lower center", "center")


def _cdf_legend(ax, curves, vlines=()) -> None:
    """The legend where no CDF runs under it: lower right (below every curve but a slow one's
    start), else upper left (above every curve but a fast one's rise), else the middle of either
    side, else the middle of the bottom or of the axes; where every spot covers a curve (several
    far apart, a long label), below the axes. A CDF rises, so a curve crosses the box [x0, x1] x
    [y0, y1] when F(x1) >= y0 and F(x0) <= y1.
    The box is measured now and taken a third taller (and a little wider): laying the figure out
    later, notes under it, shrinks the axes but not the legend (the lower-right legend used to hide
    an overloaded run's curve, and the slowest of a comparison's). Nor may it cover a vertical
    line at one of ``vlines`` (the SLO limit, ms): the lower-right spot hid the foot of an SLO
    drawn near the right edge."""
    ax.get_xlim(), ax.get_ylim()  # (the limits as drawn: autoscaling is otherwise applied later)
    to_data = ax.transData.inverted()
    for loc in _CDF_LEGEND_SPOTS:
        legend = ax.legend(loc=loc, fontsize="small")
        box = legend.get_window_extent()
        frame = ax.get_window_extent()
        dx, dy = 0.05 * box.width, 0.35 * box.height
        (x0, y0), (x1, y1) = to_data.transform([(max(box.x0 - dx, frame.x0), max(box.y0 - dy, frame.y0)),
                                                (min(box.x1 + dx, frame.x1), min(box.y1 + dy, frame.y1))])
        if not any(_cdf_at(xs, ys, x1) >= y0 and _cdf_at(xs, ys, x0) <= y1 for xs, ys in curves) \
                and not any(x0 <= v <= x1 for v in vlines):
            return
    legend_below(ax, fontsize="small")


def _cdf_at(xs, ys, x: float) -> float:
    """A step CDF (``xs`` ascending, ``ys`` its values from each x on) at ``x``."""
    i = int(np.searchsorted(xs, x, side="right"))
    return float(ys[i - 1]) if i else 0.0


# where ``_legend_off_the_lines`` tries the legend, in turn (fixed spots: matplotlib's "best" is
# worked out again at every draw, so a spot found clear now moved, once the figure was laid out
# with its caption, to wherever "best" then chose, over a curve or error bar)
_LEGEND_SPOTS = ("upper left", "upper right", "lower right", "lower left", "center left", "center right",
                 "upper center", "lower center")


def _covers(ax, box) -> bool:
    """The box (display coordinates) covers something drawn in ``ax``: a line (along its drawn
    path, or a marker of a line of markers), an error bar or other collection (its segments and
    paths, a scatter's points), or a line added as an artist (an open error bar)."""
    from matplotlib.collections import LineCollection, PathCollection
    from matplotlib.lines import Line2D

    lines = [a for a in (*ax.get_lines(), *ax.artists) if isinstance(a, Line2D) and a.get_visible()]
    for line in lines:
        xy = np.asarray(line.get_xydata(), dtype=float)
        if len(xy) == 0:
            continue
        pts = line.get_transform().transform(xy)
        ok = np.isfinite(pts).all(axis=1)
        if any(box.contains(*p) for p in pts[ok]):
            return True
        if line.get_linestyle() in ("None", "none", "", " "):  # (markers alone: nothing between them)
            continue
        for a, b, fine in zip(pts[:-1], pts[1:], ok[:-1] & ok[1:]):
            if fine and _segment_in(a, b, box):
                return True
    for c in ax.collections:
        if not c.get_visible():
            continue
        if isinstance(c, LineCollection):
            for seg in c.get_segments():
                pts = c.get_transform().transform(np.asarray(seg, dtype=float))
                if any(_segment_in(a, b, box) for a, b in zip(pts[:-1], pts[1:])):
                    return True
        elif isinstance(c, PathCollection):
            pts = c.get_offset_transform().transform(np.asarray(c.get_offsets(), dtype=float))
            if any(box.contains(*p) for p in pts if np.isfinite(p).all()):
                return True
        else:  # (a shaded band: its outline, or the box inside it)
            if any(c.get_transform().transform_path(path).intersects_bbox(box, filled=True)
                   for path in c.get_paths()):
                return True
    return False


def _segment_in(a, b, box) -> bool:
    """The segment from ``a`` to ``b`` (display points) passes through the box: checked at points a
    few pixels apart."""
    n = int(min(200, max(2, np.hypot(*(b - a)) / 3)))
    seg = a + np.linspace(0, 1, n)[:, None] * (b - a)
    return bool(((seg[:, 0] >= box.x0) & (seg[:, 0] <= box.x1) & (seg[:, 1] >= box.y0) & (seg[:, 1] <= box.y1)).any())


def _legend_off_the_lines(ax, **kw) -> None:
    """A legend at the first of ``_LEGEND_SPOTS`` where it covers nothing drawn (``_covers``:
    lines, error bars, points), else below the axes. The box is measured now and taken a third
    taller, a little wider: laying the figure out later, notes under it, shrinks the axes but not
    the legend. (It took matplotlib's "best" when that covered no line: "best" is placed again at
    every draw, and after the layout it could land on the lines; nor were error bars checked.)"""
    ax.get_xlim(), ax.get_ylim()  # (the limits as drawn: autoscaling is otherwise applied later)
    for loc in _LEGEND_SPOTS:
        legend = ax.legend(loc=loc, **kw)
        box = legend.get_window_extent()
        box = box.padded(0.05 * box.width / 2, 0.35 * box.height / 2)
        if not _covers(ax, box):
            return
    n = len(legend.get_texts())
    legend = legend_below(ax, ncol=2 if n > 4 else 1, **kw)
    # two columns only where they fit under the axes: a sweep's long names ("max_num_batched_tokens=8192
    # (1 GPU) p99") ran past the axes, under the next panel's legend, text over text
    if n > 4 and legend.get_window_extent().width > ax.get_window_extent().width:
        legend_below(ax, ncol=1, **kw)


def legend_below(ax, **kw):
    """A frameless legend centred under the axes, a few points below its x tick labels and label.
    The gap is in points, not a share of the axes' height: a tall legend makes the later tight
    layout shrink the axes, and a legend placed 15% of the axes' height down then came up over
    the x label."""
    from matplotlib.transforms import offset_copy

    below = ax.get_window_extent().y0 - ax.xaxis.get_tightbbox().y0  # (pixels: tick labels and x label)
    gap = max(below, 0.0) * 72.0 / ax.figure.dpi + 4.0
    legend = ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), frameon=False,
                       bbox_transform=offset_copy(ax.transAxes, fig=ax.figure, y=-gap, units="points"), **kw)
    legend._servesim_below = True  # (``save`` makes the figure taller by it)
    return legend


def _room_for_legends_below(fig) -> None:
    """Make ``fig`` taller by the legends ``legend_below`` put under its axes (the tallest of each
    row of axes), so the tight layout keeps the axes' height: a comparison of eight configurations
    had its CDF panels squeezed to a sliver above their legends."""
    rows: dict = {}
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None and getattr(legend, "_servesim_below", False):
            row = round(ax.get_position().y0, 3)
            rows[row] = max(rows.get(row, 0.0), legend.get_window_extent().height / fig.dpi)
    if rows:
        fig.set_figheight(fig.get_figheight() + sum(rows.values()))


def wrap_label(label, width: int = 40) -> str:
    """A legend label, tick label or panel title in lines of at most ``width`` characters (broken
    at spaces and hyphens): a long scenario, variant or GPU name ran past its axes, over the
    neighbouring panel and out of the figure."""
    import textwrap

    text = str(label)
    return text if len(text) <= width else "\n".join(textwrap.wrap(text, width, break_on_hyphens=True))


# ---------------------------------------------------------------- versus load
_BARS_LABEL = "bars: 95% interval over seeds"
_OPEN_NOTE = "open below: low end <= 0"
_CUT_NOTE = "cut at arrivals"


def _error_bars(ax, x, y, half, color, scale=1.0, top=None):
    """Vertical 95% interval bars where ``half`` (half-widths) has values. A bar whose low end is
    at or below 0 (a wide interval from few seeds) has no end a log axis can draw: it runs open,
    without a cap, off the bottom of the axes, and takes no part in the axis limits below its
    point (the data and the ends that can be drawn set them); the legend entry says so. ``top``:
    per point, the value the figure cannot pass (a goodput's arrivals per second), where the upper
    end is cut (as ``intervals.Interval.bounds`` cuts the printed interval)."""
    if not half or all(h is None for h in half):
        return
    from matplotlib.lines import Line2D

    x = np.asarray(x, dtype=float)
    y = np.asarray([np.nan if v is None else v for v in y], dtype=float) * scale
    h = np.asarray([0.0 if v is None else v for v in half], dtype=float) * scale
    up = h.copy()
    if top is not None:
        cap = np.asarray([np.nan if v is None else v for v in top], dtype=float) * scale
        up = np.where(np.isfinite(cap), np.clip(cap - y, 0.0, None), np.inf)
        up = np.minimum(h, up)
    closed = y - h > 0
    opened = ~closed & (y > 0)
    labelled = getattr(ax, "_servesim_bars", None)
    first = labelled is None
    if closed.any() or not opened.any():
        bars = ax.errorbar(x[closed], y[closed], yerr=[h[closed], up[closed]], fmt="none", ecolor=color, elinewidth=1,
                           capsize=3, alpha=0.8, label=_BARS_LABEL if first else None)
        if first:
            labelled = bars
    for xi, yi, hi in zip(x[opened], y[opened], up[opened]):
        # down to a millionth of its point, far below any axis the data set, so the axes clip it;
        # add_artist, unlike plot, leaves the limits alone (the top end is added to them by hand)
        line = Line2D([xi, xi], [yi + hi, yi * 1e-6], color=color, linewidth=1, alpha=0.8, marker="_",
                      markersize=6, markevery=[0], label=_BARS_LABEL if labelled is None else None)
        ax.add_artist(line)
        ax.update_datalim([(xi, yi + hi)])
        if labelled is None:
            labelled = line
    cut = bool((up < h)[closed | opened].any())
    ax._servesim_cut = getattr(ax, "_servesim_cut", False) or cut
    if opened.any() or ax._servesim_cut:
        # one parenthesis for both ("(open below: ...; cut at arrivals)"), not two side by side
        said = [n for n, on in ((_OPEN_NOTE, opened.any() or _OPEN_NOTE in (labelled.get_label() or "")),
                                (_CUT_NOTE, ax._servesim_cut)) if on]
        labelled.set_label(f"{_BARS_LABEL} ({'; '.join(said)})")
    ax._servesim_bars = labelled


def latency_vs_load(data: dict, ax, metric: str = "ttft", slo_s: float | None = None, colors: dict | None = None,
                    rate_unit: str = "req/s"):
    """p99 (solid) and p50 (dashed) latency against offered load.

    ``data``: {label: {"rate": [req/s], "p50": [s], "p99": [s], "p99_ci": [s] (optional: the 95%
    interval's half-width over seeds, drawn as error bars), "ok": [bool | None] (optional: the run
    meets the SLO; False: its p99 marker is hollow, as ``throughput_latency`` draws it)}}.
    """
    colors = colors or colors_for(data)
    name = METRIC_NAMES.get(metric, metric)
    hollow = False
    for label, d in data.items():
        c = colors[label]
        x, y = np.asarray(d["rate"], dtype=float), _ms(d["p99"])
        # a run that fails the SLO (by either limit, or falling behind) is hollow: a configuration
        # whose TTFT fails looked the best of all on the TPOT panel, filled like the rest
        hollow |= _line_hollow_where_failing(ax, x, y, d.get("ok"), c, f"{wrap_label(label)} p99")
        ax.plot(d["rate"], _ms(d["p50"]), "--", color=c, alpha=0.8, label=f"{wrap_label(label)} p50")
        _error_bars(ax, d["rate"], d["p99"], d.get("p99_ci"), c, 1e3)
    if hollow:
        _hollow_entry(ax)
    rates = [float(r) for d in data.values() for r in d["rate"]]
    if not any(v == v for d in data.values() for v in _ms([*d["p99"], *d["p50"]])):
        # (every request rejected, or none completed with the metric: nothing drawn, and an axis
        # of -0.04 to 0.04 req/s for loads of 4 and 8)
        _no_samples(ax, f"no {name} sample at any load: no request completed with one")
        if rates:
            ax.set_xlim(0, max(rates) * 1.1 or 1.0)
        # (the SLO line alone gave the log axis equal limits: matplotlib warned and widened them)
        mid_ms = slo_s * 1e3 if slo_s else 100.0
        ax.set_ylim(mid_ms / 10, mid_ms * 10)
    return _log_latency_axes(ax, slo_s, _load_label("offered load", rate_unit), f"{name} (ms)", f"{name} vs load")


def _load_label(what: str, rate_unit: str) -> str:
    """The load axis: ``rate_unit`` "sessions/s" where the rate starts multi-turn sessions
    (``workload.sessions``), each sending several requests: "req/s" read as requests."""
    return f"{what} ({rate_unit})" if rate_unit == "req/s" else f"{what}, sessions started per second ({rate_unit})"


def _failing(ok, n: int) -> np.ndarray:
    """Which of ``n`` points' runs fail the SLO: ``ok`` False (None, or no ``ok``: not known, drawn
    as meeting it)."""
    return np.array([v is not None and not v for v in ok or [None] * n], dtype=bool)


def _line_hollow_where_failing(ax, x, y, ok, color, label) -> bool:
    """``x``, ``y`` drawn as a line with markers, filled where the run meets the SLO and hollow where
    it fails (``_failing``); whether any point was hollow (``_hollow_entry`` then says so)."""
    fails = _failing(ok, len(x))
    ax.plot(x, y, "-o", color=color, markersize=4, markevery=[int(i) for i in np.flatnonzero(~fails)], label=label)
    if fails.any():
        ax.plot(x[fails], y[fails], "o", color=color, markersize=4, markerfacecolor="none")
    return bool(fails.any())


def _hollow_entry(ax) -> None:
    """The legend's entry for hollow markers (one of its own: the series' colours stay theirs)."""
    ax.plot([], [], "o", markersize=4, color="0.3", markerfacecolor="none", label="hollow: fails the SLO")


def _no_samples(ax, text: str) -> None:
    """Say on the axes that there is nothing to draw (as the latency CDFs do), not bare axes."""
    ax.text(0.5, 0.3, text, transform=ax.transAxes, ha="center", va="center", fontsize="small", color="0.4",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8})  # (clear of a limit line under it)


def _log_latency_axes(ax, slo_s, xlabel: str, ylabel: str, title: str):
    """A latency (ms) axis on a log scale, with the SLO limit dotted, labels, grid and legend."""
    if slo_s is not None:
        ax.axhline(slo_s * 1e3, color="k", linestyle=":", linewidth=1.2, label=f"SLO {limit_text(slo_s)}")
    ax.set_yscale("log")
    _plain_log_ticks(ax.yaxis)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # (no labelled series: no legend, and no matplotlib warning)
        _legend_off_the_lines(ax, fontsize="small")
    return ax


def capacity_probes(data: dict, ax, metric: str = "ttft", slo_s: float | None = None,
                    capacity: tuple | None = None, rate_unit: str = "req/s"):
    """A capacity search over seeds: each seed's probes (p99 ``metric`` against the probed rate;
    filled: met every limit and kept up; a cross: fell behind (the keep-up rule: the backlog grew),
    whatever its latencies, which the height and the SLO line show; hollow: kept up, or was not
    judged on it, but did not meet a limit) as one thin line per seed, the SLO, and the capacity
    (mean, 95% interval as a band).

    ``data``: {seed: {"rate": [req/s], "p99": [s], "meets": [bool], "keeps_up": [bool | None]
    (optional: the probe's keep-up verdict; None: not judged)}}; ``capacity``: (mean, half-width)
    in req/s or None.
    """
    name = METRIC_NAMES.get(metric, metric)
    color = "#1f77b4"
    kinds = (("met every limit and kept up", {}),
             ("fell behind (keep-up: the backlog grew)", {"marker": "x", "markersize": 5}),
             ("did not meet a limit", {"markerfacecolor": "none"}))
    named = set()
    for i, (seed, d) in enumerate(data.items()):
        order = np.argsort(d["rate"])
        x = np.asarray(d["rate"], dtype=float)[order]
        y = _ms(np.asarray(d["p99"], dtype=float)[order])
        met = np.asarray(d["meets"], dtype=bool)[order]
        # (a probe that fell behind may have met every latency limit: "did not meet a limit" would be false)
        behind = ~met & np.array([v is False for v in d.get("keeps_up") or [None] * len(x)], dtype=bool)[order]
        ax.plot(x, y, "-", color=color, alpha=0.35, linewidth=1, label="each seed's probes (p99)" if i == 0 else None)
        for (label, style), sel in zip(kinds, (met, behind, ~met & ~behind)):
            if sel.any():
                ax.plot(x[sel], y[sel], linestyle="none", **{"marker": "o", "markersize": 4, "color": color, **style},
                        label=None if label in named else label)
                named.add(label)
    if slo_s is not None:
        ax.axhline(slo_s * 1e3, color="k", linestyle=":", linewidth=1.2, label=f"SLO {limit_text(slo_s)}")
    if capacity is not None:
        mean, half = capacity
        if half and half == half:  # (cut at 0, as the label's interval: no rate below it)
            ax.axvspan(max(mean - half, 0.0), mean + half, color="#2ca02c", alpha=0.2, linewidth=0)
        from servesim.outputs.intervals import NONNEGATIVE, Interval, format_interval

        iv = Interval(mean, half if half else math.nan, 2, bounds=NONNEGATIVE)
        ax.axvline(mean, color="#2ca02c", linewidth=1.5, label=f"capacity {format_interval(iv, unit=rate_unit)}"
                   + (" (band: 95% interval)" if half else ""))
    ax.set_yscale("log")
    _plain_log_ticks(ax.yaxis)
    ax.set_xlabel(_load_label("probed rate: workload.arrival.rate_rps", rate_unit))
    ax.set_ylabel(f"p99 {name} (ms)")
    ax.set_title(f"capacity probes: p99 {name}")
    ax.grid(True, which="both", alpha=0.3)
    # (fixed in the upper left it lay over the SLO line and, with probes there, over them)
    _legend_off_the_lines(ax, fontsize="small")
    return ax


def goodput_vs_load(data: dict, ax, colors: dict | None = None, ylabel: str | None = None, rate_unit: str = "req/s"):
    """Goodput (completed within every SLO, req/s) against the scenario's rate, with the ideal: all
    that arrived, from the runs' ``offered`` (req/s that arrived) where given, else y = x.

    ``data``: {label: {"rate": [req/s], "goodput": [req/s], "offered": [req/s] (optional),
    "goodput_ci": [req/s] (optional: 95% half-widths, error bars), "ok": [bool | None] (optional:
    the run meets the SLO; False: hollow)}}.
    """
    colors = colors or colors_for(data)
    top = 0.0
    offered = {}
    hollow = False
    for label, d in data.items():
        # (a label whose every point failed to run has nothing drawn: no legend entry either)
        # a load that fails the SLO is hollow, as latency_vs_load draws it: a run that fell behind
        # had its goodput drawn on the ideal line, filled like one that serves that load
        x, y = np.asarray(d["rate"], dtype=float), np.asarray(d["goodput"], dtype=float)
        hollow |= _line_hollow_where_failing(ax, x, y, d.get("ok"), colors[label],
                                             wrap_label(label) if len(d["rate"]) else None)
        # (cut at the arrivals per second: no run's goodput exceeds them, two seeds' t-interval did)
        _error_bars(ax, d["rate"], d["goodput"], d.get("goodput_ci"), colors[label], top=d.get("offered"))
        top = max(top, max(d["rate"], default=0.0))
        for r, o in zip(d["rate"], d.get("offered") or ()):
            if o is not None and o == o:  # (NaN: a results file from before the column)
                offered.setdefault(r, o)
    if hollow:
        _hollow_entry(ax)
    if offered:
        xs = sorted(offered)
        ax.plot([0, *xs], [0, *(offered[x] for x in xs)], ":", color="k", linewidth=1,
                label="arrived (ideal goodput)")
    else:
        ax.plot([0, top], [0, top], ":", color="k", linewidth=1, label="offered load (ideal)")
    ax.set_xlabel(_load_label("offered load: workload.arrival.rate_rps", rate_unit))
    ax.set_ylabel(ylabel or "goodput (req/s within SLO)")
    ax.set_title("goodput vs load")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    _legend_off_the_lines(ax, fontsize="small")
    return ax


def throughput_latency(data: dict, ax, metric: str = "tpot", stat: str = "p99", colors: dict | None = None,
                       xlabel: str | None = None, slo_s: float | None = None, rate_unit: str = "req/s"):
    """Throughput-latency trade-off: one point per load, each annotated with its rate; a point
    whose run fails the SLO is hollow (a report never credits it), and the ``metric`` limit
    ``slo_s`` is dotted (the axis reaches it).

    ``data``: {label: {"rate": [req/s], "throughput": [output tok/s], "latency": [s], "ok": [bool |
    None] (optional: the run meets the SLO; False: hollow), "latency_ci": [s], "throughput_ci":
    [tok/s] (optional: 95% half-widths over seeds, drawn as error bars)}}. A label with no point is left out
    of the legend; a rate label that would overlap one already drawn is left out.
    """
    colors = colors or colors_for(data)
    xs = [x for d in data.values() for x in d["throughput"] if x == x]
    # (the axis reaches the SLO line: two labels 0.3 ms apart under a 50 ms line were 4% of the
    # points' own span apart, and printed one over the other)
    ys = [y for d in data.values() for y in _ms(d["latency"]) if y == y] + ([slo_s * 1e3] if slo_s else [])
    span_x = (max(xs) - min(xs)) or 1.0 if xs else 1.0
    span_y = (max(ys) - min(ys)) or 1.0 if ys else 1.0
    hollow = bars = cut = False
    shown = []
    for label, d in data.items():
        c = colors[label]
        x, y = np.asarray(d["throughput"], dtype=float), _ms(d["latency"])
        fails = _failing(d.get("ok"), len(x))
        ax.plot(x, y, "-", color=c, label=wrap_label(label) if len(x) else None)
        ax.plot(x[~fails], y[~fails], "o", markersize=4, color=c)
        ax.plot(x[fails], y[fails], "o", markersize=4, color=c, markerfacecolor="none")
        hollow |= bool(fails.any())
        # over seeds, each point's 95% intervals (the latency's and the throughput's): the
        # points were drawn bare though results.csv had them and latency_vs_load drew them
        h_y, h_x = d.get("latency_ci"), d.get("throughput_ci")
        if len(x) and any(v is not None and v == v for v in (h_y or []) + (h_x or [])):
            half = [np.asarray([0.0 if v is None or v != v else v for v in h], dtype=float) if h else None
                    for h in (h_x, h_y)]
            if half[1] is not None:
                half[1] = half[1] * 1e3
            # (the low ends cut at 0: a throughput or a latency below it, two seeds' t-interval
            # drew bars to -4000 tokens/s and -15 ms, as goodput's above the arrivals)
            err = [None if h is None else np.array([np.minimum(h, np.clip(v, 0.0, None)), h])
                   for h, v in zip(half, (x, y))]
            cut |= any(e is not None and bool((e[0] < e[1]).any()) for e in err)
            made = ax.errorbar(x, y, xerr=err[0], yerr=err[1], fmt="none", ecolor=c,
                               elinewidth=1, capsize=3, alpha=0.8, label=None if bars else _BARS_LABEL)
            bars = bars or made
        # (a rate label within 4% of the axes from one already drawn, of any series, would
        # overlap it: left out; two series' labels at one load printed one over the other)
        for r, xi, yi in zip(d["rate"], x, y):
            if not (np.isfinite(xi) and np.isfinite(yi)):  # (no point there to label: no request completed)
                continue
            if any(abs(xi - a) / span_x < 0.04 and abs(yi - b) / span_y < 0.04 for a, b in shown):
                continue
            shown.append((xi, yi))
            ax.annotate(f"{r:.4g}", (xi, yi), textcoords="offset points", xytext=(3, 3), fontsize=7, color=c)
    if cut and bars:
        bars.set_label(_BARS_LABEL + " (cut at 0)")
    if not any(a == a and b == b for d in data.values() for a, b in zip(d["throughput"], _ms(d["latency"]))):
        _no_samples(ax, f"no {stat} {METRIC_NAMES.get(metric, metric)} at any load: no request completed with one")
        ax.set_xlim(0, max([x for x in xs if x > 0], default=1.0) * 1.1)  # (not -0.04 to 0.04 tokens/s)
    if hollow:
        _hollow_entry(ax)
    if slo_s is not None:
        ax.axhline(slo_s * 1e3, color="k", linestyle=":", linewidth=1.2, label=f"SLO {limit_text(slo_s)}")
    name = METRIC_NAMES.get(metric, metric)
    ax.set_xlabel(xlabel or "throughput (output tokens/s)")
    ax.set_ylabel(f"{stat} {name} (ms)")
    ax.set_title(f"throughput vs {stat} {name} (labels: {rate_unit})")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        _legend_off_the_lines(ax, fontsize="small")
    return ax


# ---------------------------------------------------------------- per-replica timeline
MAX_STEP_POINTS = 3000  # more steps than this are drawn as time bins (mean line, min-max band)
_BIN_WIDTHS_S = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600)
MAX_BINS = 300


def bin_width_s(span_s: float, max_bins: int = MAX_BINS) -> float:
    """The smallest round bin width (0.01 s ... 1 h) that cuts ``span_s`` into at most ``max_bins``."""
    for w in _BIN_WIDTHS_S:
        if span_s / w <= max_bins:
            return float(w)
    return float(math.ceil(span_s / max_bins))


def binned(t, y, width_s: float) -> dict:
    """Per time bin of ``width_s`` (from 0): centres, the mean, min, max and sum of ``y`` over the
    steps that started in it (NaN for empty bins: gaps in the line)."""
    t = np.asarray(t, dtype=float)
    y = np.asarray(y, dtype=float)
    n = int(math.floor(t.max() / width_s)) + 1 if len(t) else 1
    idx = np.minimum((t / width_s).astype(np.int64), n - 1) if len(t) else np.zeros(0, np.int64)
    count = np.bincount(idx, minlength=n)
    total = np.bincount(idx, weights=y, minlength=n)
    lo = np.full(n, np.inf)
    hi = np.full(n, -np.inf)
    np.minimum.at(lo, idx, y)
    np.maximum.at(hi, idx, y)
    empty = count == 0
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(empty, np.nan, total / np.maximum(count, 1))
    lo[empty], hi[empty] = np.nan, np.nan
    return {"t": (np.arange(n) + 0.5) * width_s, "mean": mean, "min": lo, "max": hi, "sum": total}


def _bin_label(width_s: float) -> str:
    return f"{width_s:g} s"


def _band(ax, b, color, label, scale=1.0):
    # each bin's band as a flat step across its width: drawn between bin centres, a one-bin peak
    # is a sliver too thin to see, and the band would not show the run's true maximum
    ax.fill_between(b["t"], b["min"] * scale, b["max"] * scale, color=color, alpha=0.25, linewidth=0, step="mid")
    ax.plot(b["t"], b["mean"] * scale, color=color, linewidth=1.0, label=label)


def batch_size_timeline(data: dict, ax, width_s: float | None = None):
    """Sequences in each step over simulated time (``RunData.timeline_data``; with its
    ``duration_s``, 0 while no step runs); with ``width_s``, per time bin: the mean and the min-max
    band."""
    if width_s:
        _band(ax, binned(data["t"], data["num_seqs"], width_s), "#1f77b4",
              f"sequences per step: mean per {_bin_label(width_s)}, band min-max")
    else:
        t, n = np.asarray(data["t"], dtype=float), np.asarray(data["num_seqs"], dtype=float)
        if data.get("duration_s") is not None and len(t):
            # 0 from a step's end to the next start: held until the next step, a replica idle for
            # most of a light run read as running its last batch the whole time
            end = t + np.asarray(data["duration_s"], dtype=float)
            idle = np.flatnonzero(np.append(t[1:] > end[:-1] + 1e-9, True))
            t, n = np.insert(t, idle + 1, end[idle]), np.insert(n, idle + 1, 0.0)
        ax.plot(t, n, drawstyle="steps-post", linewidth=0.8, color="#1f77b4", label="sequences per step")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("batch size (sequences)")
    ax.set_ylim(bottom=0)  # (a count from zero: a prefill pool's batches of one sat on the axis)
    _whole_ticks(ax)
    _legend_clear_of_data(ax, fontsize="small")
    return ax


def _legend_clear_of_data(ax, **kw) -> None:
    """An upper-right legend with the y axis raised so the data stays below it: a timeline's lines
    run the whole width, so wherever the legend sits it would otherwise cover a stretch of them.
    The top is raised to the largest of the current one (axes sharing a row's y keep each other's
    room) and what this axes' data needs. The legend's share of the axes' height is measured now
    and taken a third larger: laying the figure out later (``save``'s tight layout, the notes under
    it) shrinks the axes but not the legend."""
    legend = ax.legend(loc="upper right", **kw)
    lo, hi = ax.get_ylim()
    top = float(ax.dataLim.y1)
    if not math.isfinite(top) or top <= lo:
        return
    # (no renderer passed, here as everywhere in this module: matplotlib finds the figure's own;
    # ``canvas.get_renderer()`` is Agg's only, and an axes of a user's pdf or svg figure raised
    # AttributeError)
    box, frame = legend.get_window_extent(), ax.get_window_extent()
    if frame.height <= 0:
        return
    share = min(0.6, 1.35 * (frame.y1 - box.y0) / frame.height + 0.02)
    need = lo + (top - lo) / (1.0 - share)
    if need > hi:
        ax.set_ylim(lo, need)


def _whole_ticks(ax) -> None:
    """Whole-number ticks on a y axis that counts (requests, sequences) from 0: a small count read
    2.5, and a replica where nothing ran (every request rejected) counted -0.045 to 0.054."""
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if ax.get_ylim()[1] < 1:  # (nothing counted: 0 to 1; otherwise the limits stay as they were)
        ax.set_ylim(0, 1)


def tokens_timeline(data: dict, ax, width_s: float | None = None):
    """Prefill and decode tokens in each step; with ``width_s``, tokens per second in each bin."""
    if width_s:
        for kind in ("prefill", "decode"):
            b = binned(data["t"], data[f"{kind}_tokens"], width_s)
            ax.plot(b["t"], b["sum"] / width_s, color=KIND_COLORS[kind], linewidth=1.0,
                    label=f"{kind} tokens/s (per {_bin_label(width_s)})")
        ax.set_ylabel("tokens per second")
    else:
        ax.plot(data["t"], data["prefill_tokens"], ".", markersize=2, color=KIND_COLORS["prefill"],
                label="prefill tokens", rasterized=True)
        ax.plot(data["t"], data["decode_tokens"], ".", markersize=2, color=KIND_COLORS["decode"],
                label="decode tokens", rasterized=True)
        ax.set_ylabel("tokens per step")
    ax.set_xlabel("simulated time (s)")
    if ax.get_ylim()[1] < 1:  # (no steps: the axis ran -0.04 to 0.04 tokens)
        ax.set_ylim(0, 1)
    _legend_clear_of_data(ax, fontsize="small", markerscale=4)
    return ax


def kv_timeline(data: dict, ax, width_s: float | None = None):
    """KV cache blocks in use, as a percentage of the replica's blocks (binned: mean, min-max)."""
    if width_s:
        _band(ax, binned(data["t"], data["kv_usage"], width_s), "#9467bd",
              f"KV in use: mean per {_bin_label(width_s)}, band min-max", 100.0)
    else:
        ax.plot(data["t"], np.asarray(data["kv_usage"]) * 100, linewidth=0.8, color="#9467bd",
                label="KV blocks in use")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("KV usage (%)")
    ax.set_ylim(0, 105)
    ax.set_yticks(range(0, 101, 20))  # (the room above 100% is the legend's)
    _legend_clear_of_data(ax, fontsize="small")
    return ax


def binned_steps(t, y, width_s: float) -> dict:
    """``binned`` for a level that holds from each time in ``t`` (ascending) to the next (a queue
    length): per bin of ``width_s``, its time-weighted mean and the min and max it took, the level
    carried into the bin included."""
    t = np.asarray(t, dtype=float)
    y = np.asarray(y, dtype=float)
    if not len(t):
        return binned(t, y, width_s)
    end = float(t[-1])
    n = int(math.floor(end / width_s)) + 1
    edges = np.arange(n) * width_s
    starts = np.union1d(t, edges[edges <= end])  # (each piece of the level within one bin)
    at = np.searchsorted(t, starts, side="right") - 1
    level = np.where(at >= 0, y[np.maximum(at, 0)], 0.0)
    dur = np.diff(np.append(starts, end))
    idx = np.minimum((starts / width_s + 1e-9).astype(np.int64), n - 1)
    span = np.bincount(idx, weights=dur, minlength=n)
    total = np.bincount(idx, weights=level * dur, minlength=n)
    lo, hi = np.full(n, np.inf), np.full(n, -np.inf)
    np.minimum.at(lo, idx, level)
    np.maximum.at(hi, idx, level)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(span > 0, total / np.where(span > 0, span, 1), hi)
    return {"t": (np.arange(n) + 0.5) * width_s, "mean": mean, "min": lo, "max": hi, "sum": total}


def queue_timeline(data: dict, ax, width_s: float | None = None):
    """Requests waiting and running on the replica over time; with ``width_s``, per time bin as the
    step panels: the time-weighted mean and the min-max band (drawn change by change, a long run's
    queue lengths were a solid block beside the binned panels above)."""
    for key, color in (("waiting", "#d62728"), ("running", "#2ca02c")):
        if width_s:
            _band(ax, binned_steps(data["queue_t"], data[key], width_s), color,
                  f"{key}: mean per {_bin_label(width_s)}, band min-max")
        else:
            ax.plot(data["queue_t"], data[key], drawstyle="steps-post", color=color, label=key)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("requests")
    _whole_ticks(ax)
    _legend_clear_of_data(ax, fontsize="small")
    return ax


def replica_timeline(data: dict, axes, max_points: int = MAX_STEP_POINTS, width_s: float | None = None):
    """The four timeline panels on a column of four Axes; returns the Axes. A replica with more than
    ``max_points`` steps is drawn in time bins (``width_s``, default ``bin_width_s`` of its span):
    a line of the bin's mean and a min-max band, tokens as tokens per second, instead of every step."""
    axes = list(axes)
    t = np.asarray(data["t"], dtype=float)
    if width_s is None and len(t) > max_points:
        width_s = bin_width_s(float(t.max()) if len(t) else 0.0)
    for fn, ax in zip((batch_size_timeline, tokens_timeline, kv_timeline), axes):
        fn(data, ax, width_s)
    queue_timeline(data, axes[3], width_s)
    for ax in axes:
        ax.grid(True, alpha=0.3)
        if ax is not axes[-1]:
            ax.set_xlabel("")
    if not len(t):  # (say so rather than show empty panels: each one drawn from the steps, not the
        # first alone, which left the token and KV panels blank under legends of nothing)
        for ax in axes[:3]:
            ax.text(0.5, 0.5, "no steps ran on this replica", transform=ax.transAxes, ha="center",
                    va="center", fontsize="small", color="0.4")
    return axes


# ---------------------------------------------------------------- TTFT breakdown
def ttft_breakdown(data: dict, ax):
    """Mean TTFT as queueing + prefill + API server (client-side TTFT), with the P/D split's KV
    transfer stacked on top, per label.

    ``data``: {label: {"queueing": s, "prefill": s, "api": s, "transfer": s}} (``RunData.ttft_breakdown``;
    a missing component is 0; an empty mapping: no request completed, said on the axis instead of a bar).
    The transfer comes after the first token (it delays the second), so the bar's top is the mean
    time until decoding can start; without a P/D split it is 0 and the bar is the mean TTFT.
    Each bar carries its total. When totals differ more than 50-fold the bars show shares (%)
    instead of milliseconds, so the small ones stay readable.
    """
    labels = list(data)
    x = np.arange(len(labels))
    comps = (("queueing", "queueing"), ("prefill", "prefill compute"), ("api", "API server"),
             ("transfer", "KV transfer (P/D, before 2nd token)"))
    ms = {c: np.array([data[lbl].get(c, 0.0) for lbl in labels]) * 1e3 for c, _ in comps}
    pd = bool((ms["transfer"] > 0).any())  # (no P/D split drawn: no KV-transfer entry or title)
    if not pd:
        comps = comps[:3]
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
        ttft, kv = ms["queueing"][i] + ms["prefill"][i] + ms["api"][i], ms["transfer"][i]
        text = f"TTFT {fmt(ttft)}" + (f"\n+ {fmt(kv)} KV" if kv > 0 else "") if data[labels[i]] else \
            "no request\ncompleted"
        ax.annotate(text, (xi, top), textcoords="offset points", xytext=(0, 2), ha="center", fontsize=8)
    ticks = [wrap_label(lbl, 24) for lbl in labels]  # (long names ran into each other under the bars)
    ax.set_xticks(x, ticks, rotation=20 if len(labels) > 3 else 0)
    if shares:
        ax.set_ylim(0, 125)
    elif bottom.max(initial=0.0) > 0:
        ax.set_ylim(0, bottom.max() * 1.2)  # room for the labels under the title
    else:  # (nothing to draw: no request completed anywhere)
        ax.set_ylim(0, 1)
        ax.set_yticks([])
    ax.set_ylabel("share of mean time (%)" if shares else "mean time (ms)")
    ax.set_title("TTFT breakdown (+ KV transfer)" if pd else "TTFT breakdown")
    ax.grid(True, axis="y", alpha=0.3)
    legend_below(ax, fontsize="small", ncol=len(comps))  # (below every line of the tick labels)
    return ax


# ---------------------------------------------------------------- roofline
# steps of one kind drawn on the roofline at most: a million markers took ten seconds to draw and
# look like a random sample of them
MAX_ROOFLINE_POINTS = 20_000


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
        idx = np.flatnonzero(kind == k)
        n = len(idx)
        if n:
            label = f"{k} steps ({n})"
            if n > MAX_ROOFLINE_POINTS:  # (a sample drawn the same every time: the legend says so)
                idx = np.sort(np.random.default_rng(0).choice(idx, MAX_ROOFLINE_POINTS, replace=False))
                label = f"{k} steps ({n:,}; a sample of {MAX_ROOFLINE_POINTS:,} drawn)"
            ax.scatter(ai[idx], achieved[idx] / 1e12, s=6, alpha=0.5, color=KIND_COLORS[k], label=label,
                       edgecolors="none", rasterized=True)
    peak, bw = data["peak_flops"], data["mem_bw"]
    ridge = peak / bw
    lo = min(ai.min() if len(ai) else 1.0, ridge) / 3
    hi = max(ai.max() if len(ai) else 1.0, ridge) * 3
    xs = np.geomspace(lo, hi, 200)
    ax.plot(xs, np.minimum(peak, xs * bw) / 1e12, "k-", linewidth=1.5,
            label=wrap_label(f"roofline {data.get('hardware', '')} (ridge {ridge:.0f} FLOP/B)"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title("steps on the roofline")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="lower right", markerscale=2)
    if not len(ai):  # (every request rejected, say: the roof alone, with a word on why, above its slope)
        ax.text(0.3, 0.75, "no steps ran", transform=ax.transAxes, ha="center", va="center", fontsize="small",
                color="0.4")
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


def cost_capacity(data: list, ax, rate_rps: float, colors: dict | None = None,
                  prices: str = "on-demand list prices", deferred: list | None = None):
    """Deployments by $/hour (x) and capacity (y, req/s, with its interval as an error bar), the
    Pareto front (cheapest for its capacity) as a step line, the target rate as a dotted line.

    ``data``: [{"fleet": "8 x h100-sxm", "label": "8 x h100-sxm TP1, continuous" (optional: the
    configuration's own, naming its policy; else the fleet), "gpu": colour key, "kind": "colocated" |
    "pd", "usd_per_hour", "capacity", "low", "high", "chosen": bool}]; each point is labelled with
    its configuration (grey off the front: two on one GPU type differ by policy alone), placed as
    ``cost_latency`` places its names. The axis reaches the top of every interval. ``prices``: where
    the prices came from, for the x label. ``deferred``: as ``cost_latency``'s, the names placed by
    ``place_names`` once the figure is laid out (placed here, the layout moved the points and the
    legend under them)."""
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
    on_front = [id(p[2]) for p in front]
    for d in data:
        if d.get("chosen"):
            ax.plot([d["usd_per_hour"]], [d["capacity"]], "*", color="gold", markeredgecolor="k", markersize=16,
                    label=f"chosen: {d.get('label') or d['fleet']}")
    ax.axhline(rate_rps, color="k", linestyle=":", linewidth=1.2, label=f"target {rate_rps:g} req/s")
    ax.set_xlabel(f"cost ($/hour, {prices})")
    ax.set_ylabel("capacity within the SLO (req/s; bars: interval over seeds)")
    # room above the estimates for the labels; the whole of every interval in view (a bar cut off
    # by the top read as one running the axes' full height)
    ax.set_ylim(0, max([1.6 * d["capacity"] for d in data] + [1.05 * d["high"] for d in data] + [1.3 * rate_rps]))
    ax.grid(True, alpha=0.3)
    # below the axes: inside (upper left) it covered the intervals of the cheapest configurations,
    # which sit at the left, their bars reaching the top of the axis with few seeds
    legend = legend_below(ax, fontsize="small", ncol=2)
    # each name beside its point, inside the axes, clear of the others and of the legend (at a
    # fixed offset, two configurations of one cost and close capacities printed over each other,
    # and a name near the right edge ran out of the axes)
    # (and of the target line: a point just above it, as an answer with little headroom is, had its
    # name struck through by the dotted line)
    from matplotlib.transforms import Bbox

    def place():  # (the legend and the target line where they are when the names are placed)
        frame = ax.get_window_extent()
        y_target = ax.transData.transform((0, rate_rps))[1]
        target = Bbox.from_extents(frame.x0, y_target - 1, frame.x1, y_target + 1)
        _place_names(ax, [(d, d["capacity"], ax.transData) for d in data],
                     lambda d: "k" if id(d) in on_front else "0.45", [legend.get_window_extent(), target])

    if deferred is not None:
        deferred.append(place)
    else:
        place()
    return ax


def cost_latency(data: list, ax, metric: str, slo_s: float | None = None, colors: dict | None = None,
                 deferred: list | None = None):
    """p99 latency at the target rate (worst seed) against $/hour: filled markers met the whole
    SLO with every seed, hollow ones did not (by this limit or another); the SLO limit dotted.
    Each point is labelled with its configuration (two on one GPU type differ by policy alone).

    ``data``: [{"fleet", "label" (optional: the configuration's own, naming its policy; else the
    fleet), "gpu", "kind", "usd_per_hour", "p99": seconds (inf, or 1e17 and over: more than 1% of
    the requests never completed, so the p99 is unbounded), "meets": bool}]. A configuration
    with an unbounded p99 is drawn at the top edge as a triangle pointing up (it used to be left
    out, or drawn at the p99 of the requests that did complete, under the limit it broke).
    Each point's name sits on the side of it with room (they ran out of the axes on the right),
    inside the axes and clear of the others (a name moved off its point has a leader line to it),
    and the legend below the axes, clear of the names; a name with no room clear of the others is
    left out, and the title says how many are named. ``deferred``: a list the names are added to,
    a callable each, to be placed with ``place_names`` once the figure is laid out (``lay_out``),
    rather than here: the layout moves the points under names placed before it, onto each other
    and over the titles (a suptitle and legends below take room the axes had)."""
    from matplotlib.transforms import blended_transform_factory

    colors = colors or colors_for([d["gpu"] for d in data])
    name = METRIC_NAMES.get(metric, metric)
    seen = set()
    named, off_scale = [], False
    top = blended_transform_factory(ax.transData, ax.transAxes)
    for d in data:
        if d["p99"] is None or d["p99"] != d["p99"]:  # (not measured: nothing to draw)
            continue
        c = colors[d["gpu"]]
        lab = f"{d['gpu']}{' P/D' if d['kind'] == 'pd' else ''}, {'meets' if d['meets'] else 'fails'}"
        face = c if d["meets"] else "none"
        if math.isinf(d["p99"]) or d["p99"] >= 1e17:
            ax.plot([d["usd_per_hour"]], [0.96], "^", transform=top, color=c, markersize=7, markerfacecolor=face,
                    clip_on=False)
            ax.update_datalim([(d["usd_per_hour"], 1.0)], updatey=False)  # (its x in view; its height is none)
            named.append((d, 0.96, top))
            off_scale = True
            continue
        ax.plot([d["usd_per_hour"]], [d["p99"] * 1e3], _KIND_MARKERS.get(d["kind"], "o"), color=c, markersize=6,
                markerfacecolor=face, label=None if lab in seen else lab)
        named.append((d, d["p99"] * 1e3, ax.transData))
        seen.add(lab)
    if off_scale:
        ax.plot([], [], "^", color="0.3", markerfacecolor="none", markersize=7,
                label="top edge: p99 unbounded (over 1% never completed)")
    if not any(t is ax.transData for _, _, t in named):
        # (every run unbounded: the SLO line alone gave the log axis equal limits, and matplotlib
        # printed a UserWarning into plan's output as it widened them)
        mid_ms = slo_s * 1e3 if slo_s else 100.0
        ax.set_ylim(mid_ms / 10, mid_ms * 10)
    _log_latency_axes(ax, slo_s, "cost ($/hour)", f"p99 {name} at the target rate (ms, worst seed)",
                      f"cost vs p99 {name}")
    if off_scale:  # (a band at the top for them, above every drawn point and the SLO line)
        lo_y, hi_y = ax.get_ylim()
        ax.set_ylim(lo_y, hi_y * (hi_y / lo_y) ** 0.2)
    if ax.get_legend() is not None:
        # (one column: two of these side by side were wider than the axes, and the layout
        # narrowed the axes to fit them)
        legend_below(ax, fontsize="small")
    def place():  # (clear of the SLO line too: a name placed across it was struck through, as
        # cost_capacity's were by its target line)
        avoid = []
        if slo_s is not None:
            from matplotlib.transforms import Bbox

            frame = ax.get_window_extent()
            y = ax.transData.transform((0, slo_s * 1e3))[1]
            avoid.append(Bbox.from_extents(frame.x0, y - 1, frame.x1, y + 1))
        _place_names(ax, named, avoid=avoid)

    if deferred is not None:
        deferred.append(place)
    else:
        place()
    return ax


def lay_out(fig) -> None:
    """Lay ``fig`` out as ``save`` does (room for the legends below its axes, the tight layout),
    so that what is placed in display space after it (``place_names``) stays where it is put;
    ``save`` then does not make room for the legends again."""
    _room_for_legends_below(fig)
    fig._servesim_room_made = True
    if fig.get_layout_engine() is None:
        fig.tight_layout()


def place_names(deferred: list) -> None:
    """Place the names ``cost_latency`` and ``cost_capacity`` kept (``deferred=``), on a figure laid
    out (``lay_out``)."""
    for place in deferred:
        place()


def _place_names(ax, named: list, color_of=None, avoid=()) -> int:
    """Name each point of ``named`` ([(d, y, transform)], x ``d["usd_per_hour"]``, the name
    ``d["label"]`` or ``d["fleet"]``) on the side of it with room, inside the axes and clear of the
    names placed before it and of ``avoid`` (display boxes, e.g. a legend inside the axes); a name
    moved off its point has a leader line to it, one with no room anywhere is left out, and the
    axes' title then says how many are named ("(N of M named: no room for the rest)", added here
    once for both figures that place names). Returns how many were left out. ``color_of(d)``: the
    name's colour (default black)."""
    lo, hi = ax.get_xlim()
    frame = ax.get_window_extent()
    # (the layout to come may take a few percent off the axes' height: kept that far inside)
    inner = frame.padded(0, -0.03 * frame.height)
    placed = list(avoid)
    # (every line drawn in the axes, as display segments: an error bar, the Pareto step line, an SLO
    # or target line; a name was placed clear of points and names only, and lay across them)
    lines = drawn_segments(ax)
    leaders: list = []  # (point, the name's centre) in display space, of the names moved off their points
    # (every point: a name over another's marker read as naming it)
    points = [n[2].transform((n[0]["usd_per_hour"], n[1])) for n in named]
    unnamed = 0
    # (top to bottom, each name first tried lower down: the names of a column of points stack
    # mostly in the points' order)
    for d, y, transform in sorted(named, key=lambda n: -n[2].transform((n[0]["usd_per_hour"], n[1]))[1]):
        at = transform.transform((d["usd_per_hour"], y))
        right = (d["usd_per_hour"] - lo) > 0.5 * (hi - lo)
        kw = dict(xycoords=transform, textcoords="offset points", va="top", fontsize=7,
                  color=color_of(d) if color_of else "k")
        text = ax.annotate(wrap_label(d.get("label") or d["fleet"], 30), (d["usd_per_hour"], y), xytext=(6, -3),
                           ha="left", **kw)
        # a name that would lie over one already placed goes the nearest line down or up, on the side
        # of its point with room first, then the other, where there is room inside the axes, with a
        # leader line to the point once it has left it: moved down alone, names of several shapes of
        # one cost ran out of the axes (over the x label, into the legend) and each sat by another
        # configuration's point. A leader crosses no other name, and a name lies across no leader
        # (they ran through the names of the points between, the line read as another's)
        step = text.get_window_extent().height * 72 / ax.figure.dpi + 2
        sides = ("right", "left") if right else ("left", "right")
        found = None
        for k in (0, *(k * sign for k in range(1, LINES + 1) for sign in (1, -1))):
            for ha in sides:
                dx = -6 if ha == "right" else 6
                text.set_horizontalalignment(ha)
                text.xyann = (dx, -3 - k * step)
                box = text.get_window_extent()
                if (box.y0 < inner.y0 or box.y1 > inner.y1 or box.x0 < frame.x0 or box.x1 > frame.x1
                        or any(box.padded(0.15 * box.width, 2).overlaps(b) for b in placed)
                        or any(_segment_hits(p, q, box.padded(2)) for p, q in leaders)
                        or any(_segment_hits(p, q, box.padded(2)) for p, q in lines)
                        or any(_segment_hits(pt, pt, box.padded(3)) for pt in points if not _same(pt, at))):
                    continue
                # (the leader ends at the name's corner nearest its point, not its middle: down a
                # column of points it then runs beside the names stacked there, not through them)
                rel = (0.0 if ha == "left" else 1.0, 1.0 if k > 0 else 0.0)
                corner = (box.x0 + rel[0] * box.width, box.y0 + rel[1] * box.height)
                # (it may cross a line to avoid, as the target rate's, which is no box: names run
                # out of room between the points' band and it)
                if k and any(_segment_hits(at, corner, b.padded(1)) for b in placed if b.height > 4):
                    continue
                found = (k, ha, dx, box, corner, rel)
                break
            if found:
                break
        if found is None:  # (no room anywhere: left out, counted by the caller; printed over the
            # others, 63 unit counts of one shape smeared into an unreadable band)
            text.remove()
            unnamed += 1
            continue
        k, ha, dx, box, corner, rel = found
        if k:
            text.remove()
            text = ax.annotate(text.get_text(), (d["usd_per_hour"], y), xytext=(dx, -3 - k * step), ha=ha, **kw,
                               arrowprops={"arrowstyle": "-", "color": "0.5", "linewidth": 0.6, "shrinkA": 0,
                                           "shrinkB": 4, "relpos": rel})
            leaders.append((at, corner))
        placed.append(box)  # (the name's own box: an annotation's extent takes its leader line in)
    if unnamed:
        ax.set_title(f"{ax.get_title()} ({len(named) - unnamed} of {len(named)} named: no room for the rest)")
    return unnamed


LINES = 12  # (lines a name may move up or down from its point)


def drawn_segments(ax) -> list:
    """Every straight piece of the lines drawn in ``ax``, as ((x0, y0), (x1, y1)) in display space:
    each ``Line2D`` with a line style (a step line as drawn, its steps; an axhline across the axes)
    and each segment of a ``LineCollection`` (``errorbar``'s bars). Markers alone are not lines."""
    from matplotlib.cbook import STEP_LOOKUP_MAP
    from matplotlib.collections import LineCollection

    out = []

    def add(xy, transform):
        xy = np.asarray(xy, dtype=float).reshape(-1, 2)
        if len(xy) < 2:
            return
        pts = transform.transform(xy)
        for a, b in zip(pts[:-1], pts[1:]):
            if np.isfinite(a).all() and np.isfinite(b).all():
                out.append((tuple(a), tuple(b)))

    for line in ax.get_lines():
        if not line.get_visible() or line.get_linestyle() in ("None", "none", "", " "):
            continue
        x, y = (np.asarray(v, dtype=float) for v in line.get_data())
        step = STEP_LOOKUP_MAP.get(line.get_drawstyle() or "default")
        if step is not None and len(x) > 1:
            x, y = step(x, y)
        add(np.column_stack([x, y]), line.get_transform())
    for coll in ax.collections:
        if isinstance(coll, LineCollection) and coll.get_visible():
            for seg in coll.get_segments():
                add(seg, coll.get_transform())
    return out


def _same(p, q) -> bool:
    return abs(p[0] - q[0]) < 0.5 and abs(p[1] - q[1]) < 0.5


def _segment_hits(p, q, box) -> bool:
    """Whether the segment from ``p`` to ``q`` (display points) meets ``box`` (Liang-Barsky)."""
    x0, y0 = p
    dx, dy = q[0] - x0, q[1] - y0
    t0, t1 = 0.0, 1.0
    for pk, qk in ((-dx, x0 - box.x0), (dx, box.x1 - x0), (-dy, y0 - box.y0), (dy, box.y1 - y0)):
        if pk == 0:
            if qk < 0:
                return False
            continue
        r = qk / pk
        if pk < 0:
            if r > t1:
                return False
            t0 = max(t0, r)
        else:
            if r < t0:
                return False
            t1 = min(t1, r)
    return True


_GLYPH = re.compile(r"Glyph (\d+) \(.*\) missing from font\(s\) (.+?)\.?$")
_noted_glyphs: set = set()


@contextlib.contextmanager
def glyphs_noted():
    """Draw inside: matplotlib's warnings of characters its font lacks (one per character, draw
    and call, naming our source line; a scenario named in Chinese, or with an emoji, gave a dozen
    per figure) become one line on stderr, once per process for each character. Other warnings
    are shown as they were."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    fonts, chars = set(), []
    for w in caught:
        m = _GLYPH.match(str(w.message))
        if m is None:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            continue
        c = chr(int(m.group(1)))
        fonts.add(m.group(2))
        if c not in _noted_glyphs and c not in chars:
            chars.append(c)
    if chars:
        _noted_glyphs.update(chars)
        print(f"servesim: note: the figures' font ({', '.join(sorted(fonts))}) has no {' '.join(chars)}: they are "
              "drawn as empty boxes (a scenario or label named with them)", file=sys.stderr)


def save(fig, stem) -> list:
    """Write ``stem``.png and ``stem``.svg; returns the two paths."""
    from pathlib import Path

    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    with glyphs_noted():
        if not getattr(fig, "_servesim_room_made", False):  # (lay_out made it already)
            _room_for_legends_below(fig)
        if fig.get_layout_engine() is None:  # (a figure laid out by constrained layout keeps it)
            fig.tight_layout()
        # "tight": legends and captions placed outside the axes are kept, not clipped
        fig.savefig(paths[0], dpi=110, bbox_inches="tight")
        fig.savefig(paths[1], bbox_inches="tight")
    return paths


def subplots(nrows: int = 1, ncols: int = 1, *, figsize=None, **kw):
    """``plt.subplots`` for a figure that is only saved: drawn off-screen (Agg) and never made
    known to pyplot. A report drawn from a notebook or a GUI session so leaves the user's matplotlib
    alone: ``matplotlib.use("Agg")`` here switched their backend (a notebook's inline figures, a
    desktop's ``plt.show()``, stopped showing)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, **kw)


MAX_PANEL_COLUMNS = 4  # side-by-side panels per row of a figure: more wrap onto further rows


def panel_grid(n: int, rows: int = 1, size: tuple = (6.0, 5.0), max_cols: int = MAX_PANEL_COLUMNS,
               sharex: bool = False, sharey: bool = False):
    """A figure of ``n`` panels, each a column of ``rows`` Axes ``size`` inches (width, height of
    the column), at most ``max_cols`` side by side: more wrap onto further rows of panels, as even
    as they go (5 panels: 3 and 2). Returns (fig, [each panel's ``rows`` Axes, top to bottom]).
    One row of panels per configuration made a comparison of eight 44 inches wide, its text
    unreadable at any page width. ``sharex``: every Axes shares one x axis (tick labels under each
    panel's bottom Axes only); ``sharey``: each Axes shares its y axis with the same Axes of every
    other panel (tick labels in the first column only). Wrapped panels are laid out with
    matplotlib's constrained layout (``save`` keeps it): the tight layout spaces every row of
    Axes alike, so the room between two rows of panels (tick labels, axis label, the next
    panel's title) also opened between the Axes within each panel."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n = max(int(n), 1)
    blocks = -(-n // max_cols)
    cols = -(-n // blocks)
    fig = Figure(figsize=(size[0] * cols, size[1] * blocks), layout="constrained" if blocks > 1 else None)
    FigureCanvasAgg(fig)
    outer = fig.add_gridspec(blocks, 1)
    panels: list = []
    for b in range(blocks):
        inner = outer[b].subgridspec(rows, cols)
        for c in range(min(cols, n - b * cols)):
            panels.append([fig.add_subplot(inner[k, c]) for k in range(rows)])
    first = panels[0]
    for j, axes in enumerate(panels):
        for k, ax in enumerate(axes):
            if sharex and ax is not first[0]:
                ax.sharex(first[0])
            if sharey and j:
                ax.sharey(first[k])
            if sharex and k < rows - 1:
                ax.xaxis.set_tick_params(labelbottom=False)
            if sharey and j % cols:
                ax.yaxis.set_tick_params(labelleft=False)
    return fig, panels


def panels_png(draw, panels, path, panel_size: tuple = (5.5, 4), title: str | None = None, dpi: int = 120) -> None:
    """Draw ``panels`` ((name of a function of the module ``draw``, its data), ...) side by side,
    ``panel_size`` inches each, into the PNG ``path``, with ``title`` above them if given: the
    figure is that much taller for each of its lines, so the panels keep their size (a six-line
    title squeezed them to half their height, at 90 dpi hard to read)."""
    w, h = panel_size
    lines = len(title.splitlines()) if title else 0
    fig, axes = subplots(1, len(panels), figsize=(w * len(panels), h + 0.17 * lines), squeeze=False)
    for ax, (fn, data) in zip(axes[0], panels):
        getattr(draw, fn)(data, ax)
    if title:
        fig.suptitle(title, fontsize=9)
    with glyphs_noted():
        fig.tight_layout()
        fig.savefig(path, dpi=dpi)
