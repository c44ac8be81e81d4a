"""Per-phase profiling of a run (``summary.json`` ``profile``) and a one-line diagnosis.

Steps fall into three phases by what they carry: ``prefill`` (prompt tokens only), ``decode``
(decode tokens only) and ``mixed`` (both, e.g. chunked prefill piggybacking decodes). For each
phase: steps and their share of all steps, tokens, busy time and its share of all busy time, mean
batch size (sequences per step), KV usage (time-weighted mean and max share of the replica's KV
blocks), communication time (TP all-reduce and PP sends, recomputed from each step's token count
with the replica's cost model: it depends on nothing else), share of compute-bound steps, MFU and
MBU (FLOPs / bytes over busy time x the replica's peak FLOP/s / HBM bandwidth).

Diagnosis: when requests missed the SLO (rejected, unfinished, or TTFT / TPOT over its limit),
the diagnosis is about those misses (``servesim.outputs.diagnosis``: which SLO, how many
requests, and the cause, from the request and step columns); the bottleneck is then the cause of
the largest group: ``rejections``, ``unfinished``, ``queueing``, ``kv_capacity``,
``decode_backpressure``, ``prefill``,
``prefill_interference``, ``kv_transfer``, ``decode_memory`` or ``decode_compute``, and
``profile.diagnosis.slo_misses`` has the counts. When every request met it (or no SLO is set), the
utilization rules below say what limits the run, checked in this order (the first that matches
names the bottleneck):

1. ``none``: no request completed.
2. ``queueing``: queueing is at least half of the mean TTFT (``queue_s.mean >= 0.5 x
   ttft_s.mean``): "TTFT dominated by queueing". The line adds the busy fraction, the phase that
   takes most busy time, and "KV cache full" when KV usage peaked at >= 95% (admission blocked by
   memory rather than compute).
3. ``communication``: communication is at least 30% of busy time.
4. ``prefill``: prefill-only plus mixed steps take at least half of busy time: "TTFT dominated by
   prefill compute", with the prefill phase's busy share, bound and MFU and the mean prompt.
5. ``decode_memory`` / ``decode_compute``: otherwise (decode-only steps take most busy time),
   by the bound most decode steps hit: "TPOT set by decode: batch small (mean B), memory-bound at
   X% MBU" (or "compute-bound at X% MFU"); "batch capped by KV capacity" when KV usage peaked at
   >= 95%, "batch small" when the mean decode batch is under a quarter of ``max_num_seqs``.
"""

from __future__ import annotations

import numpy as np

from servesim.outputs.diagnosis import miss_line, slo_misses
from servesim.outputs.summary import per_step
from servesim.outputs.wording import noun

PHASES = ("prefill", "decode", "mixed")
QUEUE_SHARE = 0.5  # rule 2
COMM_SHARE = 0.3  # rule 3
PREFILL_SHARE = 0.5  # rule 4
KV_FULL = 0.95
SMALL_BATCH = 0.25  # of max_num_seqs


def comm_seconds(steps: dict, cost_models: list) -> np.ndarray:
    """Communication seconds of each step (``cost_models[replica]``): the cost model's TP all-reduce
    and PP send time at the step's token count (prefill + decode + padding), as its CUDA graph
    runs it (padded up to a capture size; decode-only steps told apart by a negative key)."""
    n = len(steps["duration_s"])
    out = np.zeros(n)
    if not n or all(cm.tp == 1 and cm.pp == 1 for cm in cost_models):  # (no communication anywhere)
        return out
    tokens = steps["prefill_tokens"] + steps["decode_tokens"] + steps["padding_tokens"]
    key = np.where(steps["prefill_tokens"] == 0, -tokens, tokens)
    rep = steps["replica"]
    for r in np.unique(rep):
        cm = cost_models[int(r)]
        if cm.tp == 1 and cm.pp == 1:
            continue
        sel = rep == r
        uniq, inv = np.unique(key[sel], return_inverse=True)
        per = np.array([sum(x for _, x in cm._comm(cm._graphed(abs(int(k)), k <= 0)[0])) for k in uniq])
        out[sel] = per[inv]
    return out


def phase_profile(steps: dict, replicas: list, cost_models: list) -> dict:
    """Per-phase figures (see the module docstring); ``replicas``: ``ReplicaInfo`` per replica."""
    dur = steps["duration_s"]
    pf, dc = steps["prefill_tokens"], steps["decode_tokens"]
    # phase of each step: 0 prefill only, 1 decode only, 2 mixed, 3 neither (padding-only steps);
    # per-phase sums in one pass each (np.bincount), not a copy of every column per phase
    code = np.where(pf > 0, np.where(dc > 0, 2, 0), np.where(dc > 0, 1, 3))
    comm = comm_seconds(steps, cost_models)
    rep = steps["replica"]
    peak_f = per_step([r.peak_flops for r in replicas], rep)
    peak_b = per_step([r.peak_bw for r in replicas], rep)
    kv_use = steps["kv_blocks_used"] / per_step([max(r.kv_blocks, 1) for r in replicas], rep)

    def by_phase(x):
        return np.bincount(code, weights=x, minlength=4) if len(code) else np.zeros(4)

    n_all, busy_all = len(dur), float(dur.sum())
    counts = np.bincount(code, minlength=4) if len(code) else np.zeros(4, dtype=np.int64)
    busy_p, pf_p, dc_p = by_phase(dur), by_phase(pf), by_phase(dc)
    seqs_p, kv_p, comm_p = by_phase(steps["num_seqs"]), by_phase(kv_use * dur), by_phase(comm)
    comp_p, flops_p, bytes_p = by_phase(steps["compute_bound"]), by_phase(steps["flops"]), by_phase(steps["bytes"])
    peakf_p, peakb_p = by_phase(dur * peak_f), by_phase(dur * peak_b)
    out = {}
    for k, name in enumerate(("prefill", "decode", "mixed")):
        busy = float(busy_p[k])
        n = int(counts[k])
        out[name] = {
            "steps": n,
            "share_of_steps": n / n_all if n_all else 0.0,
            "prefill_tokens": int(pf_p[k]),
            "decode_tokens": int(dc_p[k]),
            "busy_s": busy,
            "share_of_busy": busy / busy_all if busy_all > 0 else 0.0,
            "mean_batch_size": float(seqs_p[k] / n) if n else 0.0,
            "kv_usage_mean": float(kv_p[k] / busy) if busy > 0 else 0.0,
            "kv_usage_max": float(np.max(kv_use, where=code == k, initial=0.0)) if n else 0.0,
            "comm_s": float(comm_p[k]),
            "comm_share": float(comm_p[k] / busy) if busy > 0 else 0.0,
            "compute_bound_share": float(comp_p[k] / n) if n else 0.0,
            "mfu": float(flops_p[k] / peakf_p[k]) if busy > 0 else 0.0,
            "mbu": float(bytes_p[k] / peakb_p[k]) if busy > 0 else 0.0,
        }
    out["comm_s"] = float(comm.sum())
    out["comm_share"] = float(comm.sum() / busy_all) if busy_all > 0 else 0.0
    return out


def diagnose(summary: dict, profile: dict, max_num_seqs: int, misses: dict | None = None) -> dict:
    """``{"bottleneck": ..., "line": ...}`` (plus ``slo_misses`` when ``misses``, the result of
    ``diagnosis.slo_misses``, is given) by the rules in the module docstring."""
    if misses is not None and misses["missed"]:
        bottleneck, line = miss_line(misses, profile.get("decode"))
        return {"bottleneck": bottleneck, "line": line, "slo_misses": misses}
    d = _utilization_rules(summary, profile, max_num_seqs)
    if misses is not None:
        if misses.get("has_limits"):
            n = misses["requests"]
            d["line"] = ("the one request" if n == 1 else f"all {n:,} requests") + f" within the SLO; {d['line']}"
        d["slo_misses"] = misses
    return d


def _utilization_rules(summary: dict, profile: dict, max_num_seqs: int) -> dict:
    if not summary["completed"]:
        return {"bottleneck": "none", "line": "no request completed: nothing to diagnose"}
    ttft, queue = summary["ttft_s"]["mean"] or 0.0, summary["queue_s"]["mean"] or 0.0
    u = summary["utilization"]
    p, d, m = profile["prefill"], profile["decode"], profile["mixed"]
    kv_max = max(p["kv_usage_max"], d["kv_usage_max"], m["kv_usage_max"])
    top = max(PHASES, key=lambda k: profile[k]["share_of_busy"])
    if ttft > 0 and queue >= QUEUE_SHARE * ttft:
        why = f"; KV cache full (max {kv_max * 100:.0f}%)" if kv_max >= KV_FULL else ""
        return {"bottleneck": "queueing",
                "line": f"TTFT dominated by queueing: {queue / ttft * 100:.0f}% of TTFT waiting, busy "
                        f"{u['busy_fraction'] * 100:.0f}% "
                        f"({top} {profile[top]['share_of_busy'] * 100:.0f}% of busy){why}"}
    if profile["comm_share"] >= COMM_SHARE:
        return {"bottleneck": "communication",
                "line": f"communication-bound: TP/PP communication {profile['comm_share'] * 100:.0f}% of busy time"}
    pre_share = p["share_of_busy"] + m["share_of_busy"]
    if pre_share >= PREFILL_SHARE:
        pre = p if p["busy_s"] >= m["busy_s"] else m
        bound = "compute-bound" if pre["compute_bound_share"] >= 0.5 else "memory-bound"
        n = summary["num_requests"]
        mean_prompt = (p["prefill_tokens"] + m["prefill_tokens"]) / n if n else 0.0
        return {"bottleneck": "prefill",
                "line": f"TTFT dominated by prefill compute: prefill {pre_share * 100:.0f}% of busy, {bound} at "
                        f"{pre['mfu'] * 100:.0f}% MFU, {mean_prompt:.0f} prompt tokens per request"}
    if kv_max >= KV_FULL:
        size = f"batch capped by KV capacity (mean {d['mean_batch_size']:.1f}, KV max {kv_max * 100:.0f}%)"
    elif d["mean_batch_size"] < SMALL_BATCH * max_num_seqs:
        size = f"batch small (mean {d['mean_batch_size']:.1f})"
    else:
        size = f"batch {d['mean_batch_size']:.1f}"
    if d["compute_bound_share"] >= 0.5:
        return {"bottleneck": "decode_compute",
                "line": f"TPOT set by decode: {size}, compute-bound at {d['mfu'] * 100:.0f}% MFU"}
    return {"bottleneck": "decode_memory",
            "line": f"TPOT set by decode: {size}, memory-bound at {d['mbu'] * 100:.0f}% MBU"}


def profile_summary(summary: dict, steps: dict, replicas: list, cost_models: list, max_num_seqs: int,
                    requests: dict | None = None, limits: tuple | None = None) -> dict:
    """The ``profile`` entry of ``summary.json``: per-phase figures plus ``diagnosis`` (of the SLO
    misses when ``requests`` are given: ``limits`` = (ttft, tpot) limits, numbers, per-request
    arrays or None)."""
    prof = phase_profile(steps, replicas, cost_models)
    misses = None
    if requests is not None:
        lt, lp = limits or (None, None)
        misses = slo_misses(requests, steps, [r.kv_blocks for r in replicas], lt, lp)
    prof["diagnosis"] = diagnose(summary, prof, max_num_seqs, misses)
    return prof


def bound_text(share) -> str:
    """A phase's bound as its profile line says it: the bound most of its steps hit ("compute-bound",
    "memory-bound"), with the share of its steps that hit it when not all ("memory-bound (62% of
    steps)"); "" without ``compute_bound_share`` (a summary written before it)."""
    if share is None:
        return ""
    compute = share >= 0.5
    most = share if compute else 1.0 - share
    return f"{'compute' if compute else 'memory'}-bound" + ("" if round(most * 100) >= 100
                                                            else f" ({most * 100:.0f}% of steps)")


def format_profile(s: dict) -> list:
    """Lines for the printed summary (nothing when the summary has no ``profile``)."""
    prof = s.get("profile")
    if not prof:
        return []
    lines = []
    for i, name in enumerate(PHASES):
        x = prof[name]
        if not x["steps"]:
            continue
        lines.append(f"{'profile' if not lines else '':<14}{name:<8}{x['steps']:>7} {noun(x['steps'], 'step'):<5} "
                     f"({x['share_of_steps'] * 100:.0f}%), "
                     f"{x['busy_s']:.1f} s ({x['share_of_busy'] * 100:.0f}% of busy), "
                     f"batch {x['mean_batch_size']:.1f}, "
                     f"KV {x['kv_usage_mean'] * 100:.0f}%, comm {x['comm_s']:.2f} s, "
                     f"MFU {x['mfu'] * 100:.1f}%, MBU {x['mbu'] * 100:.1f}%"
                     + (f", {b}" if (b := bound_text(x.get("compute_bound_share"))) else ""))
    lines.append(f"diagnosis     {prof['diagnosis']['line']}")
    return lines
