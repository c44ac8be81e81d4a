"""Measured vs simulated latency distributions (``servesim validate-run``): functions
``(data, ax) -> ax``; latencies come in seconds and are drawn in milliseconds."""

from __future__ import annotations

import numpy as np

from servesim.plots.figures import _plain_log_ticks

MEASURED, SIMULATED = "#d62728", "#1f77b4"
QQ_LEVELS = np.arange(1, 100)  # percentiles drawn in a Q-Q plot


def qq(data: dict, ax):
    """Q-Q plot: each percentile 1..99 of the measured sample against the same percentile of the
    simulated one, with the y = x line (points above it: the simulator is slower there). ``data``:
    {"metric": "TTFT", "measured": seconds, "simulated": seconds}; the median and p99 are marked."""
    m, s = np.asarray(data["measured"], float), np.asarray(data["simulated"], float)
    ax.set_title(data["metric"])
    if len(m) == 0 or len(s) == 0:
        return _empty(ax, m, s)
    qm, qs = np.percentile(m, QQ_LEVELS) * 1e3, np.percentile(s, QQ_LEVELS) * 1e3
    lo = max(min(qm.min(), qs.min()), 1e-3)
    hi = max(qm.max(), qs.max(), lo * 1.01)
    log = hi / lo > 30
    ax.plot([lo, hi], [lo, hi], color="#7f7f7f", lw=1, ls="--", label="y = x")
    ax.scatter(qm, qs, s=10, color=SIMULATED, label="percentiles 1-99")
    for p, mark in ((50, "o"), (99, "s")):
        ax.scatter(qm[p - 1], qs[p - 1], s=60, facecolors="none", edgecolors=MEASURED, marker=mark,
                   label=f"p{p}", zorder=3)
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
        _plain_log_ticks(ax.xaxis)
        _plain_log_ticks(ax.yaxis)
    pad = (hi / lo) ** 0.05 if log else 0.05 * (hi - lo)
    ax.set_xlim(lo / pad if log else lo - pad, hi * pad if log else hi + pad)
    ax.set_ylim(lo / pad if log else lo - pad, hi * pad if log else hi + pad)
    ax.set_xlabel(f"measured {data['metric']} (ms)")
    ax.set_ylabel(f"simulated {data['metric']} (ms)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left")
    return ax


def _empty(ax, m, s):
    side = "measured (none in the file)" if len(m) == 0 else "simulated"
    ax.text(0.5, 0.5, f"no samples {side}", ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])
    return ax


def cdf(data: dict, ax):
    """Measured and simulated empirical CDFs of one metric; ``data`` as for ``qq``."""
    ax.set_title(data["metric"])
    if len(data["measured"]) == 0 or len(data["simulated"]) == 0:
        return _empty(ax, data["measured"], data["simulated"])
    for label, key, color in (("measured", "measured", MEASURED), ("simulated", "simulated", SIMULATED)):
        x = np.sort(np.asarray(data[key], float)) * 1e3
        if len(x):
            ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", color=color, label=f"{label} ({len(x)})")
    ax.set_xlabel(f"{data['metric']} (ms)")
    ax.set_ylabel("share of samples")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    return ax
