"""Latency CDFs and a per-step timeline."""

from __future__ import annotations

import numpy as np


def latency_cdf(samples_s, ax, label: str | None = None, slo_s: float | None = None):
    """Empirical CDF of latencies (seconds, drawn in ms); an optional SLO as a vertical line."""
    x = np.sort(np.asarray(samples_s, dtype=float))
    x = x[~np.isnan(x)]
    y = np.arange(1, len(x) + 1) / max(len(x), 1)
    ax.step(x * 1e3, y, where="post", label=label)
    if slo_s is not None:
        ax.axvline(slo_s * 1e3, color="k", linestyle="--", linewidth=1, label="SLO")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.0)
    if label or slo_s is not None:
        ax.legend()
    return ax


def step_timeline(steps: dict, ax, replica: int = 0):
    """Prefill and decode tokens per step over simulated time for one replica."""
    sel = steps["replica"] == replica
    t = steps["start_s"][sel]
    ax.plot(t, steps["prefill_tokens"][sel], ".", markersize=2, label="prefill tokens")
    ax.plot(t, steps["decode_tokens"][sel], ".", markersize=2, label="decode tokens")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("tokens per step")
    ax.legend()
    return ax
