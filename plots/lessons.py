"""Figures of ``servesim lessons``: each function takes a lesson's figure data (a dict computed by
``sim/studies/lessons.py``) and a matplotlib Axes, draws, and returns the Axes. No simulation here."""

from __future__ import annotations

import numpy as np


def roofline(data, ax):
    """Attainable FLOP/s vs arithmetic intensity per GPU, with the prefill and decode steps on it."""
    x = np.logspace(-1, 4, 200)
    # The step's kind is its marker's shape, told once in the legend: a word beside every point
    # ran into the other GPUs' (three 'decode' one over the next, two 'prefill' printed on top of
    # each other). Hollow markers, each GPU's a size smaller, keep two at one spot both in view.
    n = len(data["points"])
    for i, p in enumerate(data["points"]):
        (line,) = ax.loglog(x, np.minimum(p["peak_flops"], x * p["bw"]), label=f"{p['gpu']} roof")
        for kind, marker in (("prefill", "o"), ("decode", "s")):
            ai, fl = p[kind]
            ax.loglog(ai, fl, marker, color=line.get_color(), markerfacecolor="none", markeredgewidth=1.5,
                      markersize=6 + 3 * (n - 1 - i))
    for kind, marker in (("prefill", "o"), ("decode", "s")):
        ax.plot([], [], marker, color="0.3", markerfacecolor="none", markeredgewidth=1.5, markersize=6,
                label=f"{kind} step")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved / attainable FLOP/s")
    ax.set_title("4k-token prefill vs batch-1 decode")
    ax.legend(fontsize=7)
    return ax


def decode_batching(data, ax):
    """Decode step time vs batch size per GPU, the crossover batch marked."""
    for c in data["curves"]:
        (line,) = ax.loglog(c["batch"], np.array(c["time_s"]) * 1e3, "o-", markersize=3,
                            label=f"{c['gpu']} (B* = {c['crossover']})")
        if c["crossover"]:
            ax.axvline(c["crossover"], color=line.get_color(), linestyle="--", linewidth=1)
    ax.set_xlabel("decode batch size B")
    ax.set_ylabel("step time (ms)")
    ax.set_title("flat until the ridge, then linear")
    ax.legend(fontsize=7)
    return ax


def ttft_vs_prompt(data, ax):
    """TTFT vs prompt length (log-log) with the linear extrapolation of the short prompts."""
    p, t = np.array(data["prompt"], float), np.array(data["ttft_s"], float)
    ax.loglog(p, t * 1e3, "o-", label="TTFT (simulated)")
    i = list(p).index(4096) if 4096 in p else len(p) // 2
    slope = (t[i] - t[i - 1]) / (p[i] - p[i - 1])
    ax.loglog(p, (t[i] + slope * (p - p[i])).clip(min=1e-4) * 1e3, "--", label="linear from 2k-4k")
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("TTFT (ms)")
    ax.legend(fontsize=7)
    return ax


def tpot_grid(data, ax):
    """TPOT vs context, one line per batch size."""
    for b, row in zip(data["batches"], data["tpot_s"]):
        ax.loglog(data["contexts"], np.array(row) * 1e3, "o-", label=f"batch {b}")
    ax.set_xlabel("context tokens per sequence")
    ax.set_ylabel("TPOT = decode step time (ms)")
    ax.legend(fontsize=7)
    return ax


def prefill_attention_share(data, ax):
    """Attention's share of a prefill step's time vs prompt length, per model."""
    for name, (p, share) in data["series"].items():
        ax.semilogx(p, np.array(share) * 100, "o-", label=name)
    ax.axhline(50, color="k", linestyle=":", linewidth=1)
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("attention share of prefill time (%)")
    ax.legend(fontsize=7)
    return ax


def chunk_rereads(data, ax):
    """Attention bytes (and all step bytes) of a long prompt's prefill vs the number of chunks."""
    ax.plot(data["chunks"], np.array(data["attention_bytes"]) / 1e9, "o-", label="attention bytes")
    ax.plot(data["chunks"], np.array(data["bytes"]) / 1e9, "s-", label="all bytes (weights re-read too)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("chunks of one prompt")
    ax.set_ylabel("GB read")
    ax.legend(fontsize=7)
    return ax


def bound_flip(data, ax):
    """Decode-only steps over time (their batch size), coloured by bound."""
    b = np.array(data["batch"])
    cb = np.array(data["compute_bound"], bool)
    t = np.array(data["start_s"])
    ax.plot(t[~cb], b[~cb], ".", label="memory-bound")
    ax.plot(t[cb], b[cb], ".", label="compute-bound")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("decode batch size")
    ax.legend(fontsize=7)
    return ax


def bars(data, ax):
    """One bar per label."""
    ax.bar(range(len(data["labels"])), data["values"])
    ax.set_xticks(range(len(data["labels"])), data["labels"], rotation=15, fontsize=7)
    ax.set_ylabel(data["ylabel"])
    return ax


def chunked_tradeoff(data, ax):
    """TTFT p50, TBT p99 and TBT max (the longest stall, which the verdict reads first) per chunk size."""
    x = range(len(data["labels"]))
    ax.plot(x, np.array(data["ttft_p50_s"]) * 1e3, "o-", label="TTFT p50")
    ax.plot(x, np.array(data["tbt_p99_s"]) * 1e3, "s-", label="TBT p99")
    if "tbt_max_s" in data:
        ax.plot(x, np.array(data["tbt_max_s"]) * 1e3, "^--", label="TBT max (the longest stall)")
        from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

        ax.set_yscale("log")  # (the longest stall is 20x the smallest chunk's p99)
        ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))  # (10, 20, 50, 100: read in ms, not powers)
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(list(x), data["labels"])
    ax.set_xlabel("chunk (token budget); none = unchunked")
    ax.set_ylabel("ms")
    ax.legend(fontsize=7)
    return ax


def pd_split(data, ax):
    """TPOT p99 colocated vs split per arrival rate."""
    rows = data["rows"]
    coloc, split = data.get("labels") or ("colocated", "P/D split")
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["coloc_tpot_p99"] * 1e3 for r in rows], 0.4, label=coloc)
    ax.bar(x + 0.2, [r["pd_tpot_p99"] * 1e3 for r in rows], 0.4, label=split)
    ax.set_xticks(x, [f"{r['rate']:g} req/s" for r in rows])
    ax.set_ylabel("TPOT p99 (ms)")
    ax.legend(fontsize=7)
    return ax


def kv_feasible(data, ax):
    """Feasible batch (KV capacity) and the simulated peak batch per model variant."""
    rows = data["rows"]
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["feasible"] for r in rows], 0.4, label="feasible batch (KV)")
    ax.bar(x + 0.2, [r["peak"] for r in rows], 0.4, label=f"peak batch, {data['requests']} requests")
    ax.set_yscale("log")
    ax.set_ylabel("requests in a batch")
    ax.set_xticks(x, [r["label"] for r in rows], rotation=20, fontsize=6)
    ax.legend(fontsize=7)
    return ax


def latency_cdfs(data, ax):
    """Empirical CDFs of several latency samples (seconds, drawn in ms)."""
    for label, xs in data["series"].items():
        x = np.sort(np.asarray(xs, float))
        ax.step(x * 1e3, np.arange(1, len(x) + 1) / max(len(x), 1), where="post", label=label)
    ax.set_xscale("log")
    ax.set_xlabel(data.get("xlabel", "latency (ms)"))
    ax.set_ylabel("fraction of requests")
    ax.legend(fontsize=7)
    return ax
