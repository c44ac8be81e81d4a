"""``summary.json``: a run's counts, latency distributions, SLO attainment and utilization, from
its request and step columns (see docs/outputs.md for each key, and ``metrics`` for the latency
definitions). Per request class too (``summarize_classes``)."""

from __future__ import annotations

import numpy as np

from servesim.outputs.metrics import is_completed, e2e_s, multi_token, queue_s, slo_met, tpot_s, ttft_s
from servesim.outputs.stats import dist_stats


def per_step(values: list, rep: np.ndarray):
    """``values[rep]`` (one per step, from its replica's index), or the one value when all
    replicas share it (the same numbers, without a gather over millions of steps)."""
    if all(v == values[0] for v in values):
        return values[0]
    return np.array(values)[rep]


def utilization(steps: dict, sel, sim_time_s: float, members: list, table: list) -> dict:
    """Busy fraction, batch size, KV usage, MFU and MBU over the steps ``sel`` of ``members``
    (``ReplicaInfo``s); ``table`` is every replica in index order (per-step peaks and KV size)."""
    if sel is None:  # every step (no copies)
        sel = slice(None)
    dur = steps["duration_s"][sel]
    busy = float(dur.sum())
    rep = steps["replica"][sel]
    peak_f = per_step([r.peak_flops for r in table], rep)
    peak_b = per_step([r.peak_bw for r in table], rep)
    kv_use = steps["kv_blocks_used"][sel] / per_step([r.kv_blocks for r in table], rep)
    n_sched = len(members)  # schedulers: with pp overlap, each replica's virtual engines
    n_rep = round(sum(1 / r.engines for r in members))
    return {
        "replicas": n_rep,
        **({"virtual_engines": n_sched} if n_sched != n_rep else {}),
        # (the mean over the schedulers: a virtual engine is busy from its step's start to its end)
        "busy_fraction": busy / (sim_time_s * n_sched) if sim_time_s > 0 and n_sched else 0.0,
        "mean_batch_size": float(steps["num_seqs"][sel].mean()) if len(dur) else 0.0,
        "kv_usage_mean": float((kv_use * dur).sum() / busy) if busy > 0 else 0.0,
        "kv_usage_max": float(kv_use.max()) if len(dur) else 0.0,
        "mfu": float(steps["flops"][sel].sum() / (dur * peak_f).sum()) if busy > 0 else 0.0,
        "mbu": float(steps["bytes"][sel].sum() / (dur * peak_b).sum()) if busy > 0 else 0.0,
    }


def summarize(scenario, req: dict, steps: dict, tbt, sim_time_s: float, replicas: list,
              extra: dict | None = None, slo_limits: tuple | None = None) -> dict:
    """The ``summary.json`` contract (see docs/outputs.md for each key). ``tbt``: every TBT gap (an
    array or a ``WeightedSample``); ``replicas``: one ``ReplicaInfo`` (index, pool, peak_flops,
    peak_bw, kv_blocks) per replica, in index order.
    ``slo_limits``: per-request (ttft_s, tpot_s) limit arrays (inf = none) replacing the scenario's
    SLO, for request classes with their own."""
    status = req["status"]
    done = is_completed(req)
    n = len(status)
    ttft, e2e, queue, tpot = ttft_s(req), e2e_s(req), queue_s(req), tpot_s(req)
    out = req["output_tokens"]
    multi = multi_token(req)

    met = done.copy()
    if slo_limits is not None:
        met &= slo_met(ttft, tpot, *slo_limits)
    elif scenario.slo.ttft_s is not None:
        met &= ttft <= scenario.slo.ttft_s
    if slo_limits is None and scenario.slo.tpot_s is not None:
        met &= ~(tpot > scenario.slo.tpot_s)  # NaN (single-token outputs) has no TPOT to miss
    completed = int(done.sum())
    per = lambda v: v / sim_time_s if sim_time_s > 0 else 0.0  # noqa: E731

    dur = steps["duration_s"]
    pf, dc = steps["prefill_tokens"], steps["decode_tokens"]
    only_p, only_d = (pf > 0) & (dc == 0), (dc > 0) & (pf == 0)
    mixed = (pf > 0) & (dc > 0)
    nsteps = len(dur)
    overall = utilization(steps, None, sim_time_s, replicas, replicas)
    pools = {}
    names = list(dict.fromkeys(r.pool for r in replicas))
    for name in names:
        members = [r for r in replicas if r.pool == name]
        if len(names) == 1:  # the pool is everything
            pools[name] = dict(overall)
            continue
        sel = np.isin(steps["replica"], [r.index for r in members])
        pools[name] = utilization(steps, sel, sim_time_s, members, replicas)
    summary = {
        "scenario": scenario.name,
        "num_requests": n,
        "completed": completed,
        "rejected": int((status == "rejected").sum()),
        "unfinished": int((status == "unfinished").sum()),
        "preemptions": int(req["preemptions"].sum()),
        "sim_time_s": sim_time_s,
        "wall_time_s": 0.0,
        "throughput_rps": per(completed),
        "output_tokens_per_s": per(float(out[done].sum())),
        # vLLM's "total token throughput": prompt + output tokens of completed requests
        "total_tokens_per_s": per(float(out[done].sum() + req["prompt_tokens"][done].sum())),
        "ttft_s": dist_stats(ttft[done]),
        "tpot_s": dist_stats(tpot[multi]),
        "tbt_s": dist_stats(tbt),
        "itl_s": None,  # = tbt_s under vLLM's name (inter-token latency), set below
        "e2e_s": dist_stats(e2e[done]),
        "queue_s": dist_stats(queue[done]),
        "slo": {"ttft_s": scenario.slo.ttft_s, "tpot_s": scenario.slo.tpot_s},
        # (no request arrived: 0 of 0 is no share, neither met nor missed; it read 0.0)
        "slo_attainment": float(met.sum() / n) if n else None,
        "goodput_rps": per(int(met.sum())),
        "phases": {
            "prefill_tokens": int(pf.sum()),
            "decode_tokens": int(dc.sum()),
            "padding_tokens": int(steps["padding_tokens"].sum()),
            "steps": nsteps,
            "prefill_steps": int(only_p.sum()),
            "decode_steps": int(only_d.sum()),
            "mixed_steps": int(mixed.sum()),
            "prefill_time_s": float(dur[only_p].sum()),
            "decode_time_s": float(dur[only_d].sum()),
            "mixed_time_s": float(dur[mixed].sum()),
            "compute_bound_steps": int(steps["compute_bound"].sum()),
        },
        "utilization": overall,
        "pools": pools,
    }
    summary["itl_s"] = summary["tbt_s"]
    if extra:
        summary.update(extra)
    return summary


def summarize_classes(req: dict, sim_time_s: float, names, slo_by_class: dict) -> dict:
    """``summary.json`` ``classes``: per request class (the ``class`` column), the request counts,
    throughput, latency distributions and SLO keys of the overall summary, over that class's
    requests (``slo_attainment`` null for a class that drew no request). Counts add up to the
    overall ones. ``slo_by_class``: name -> (ttft_s, tpot_s)."""
    status, cls = req["status"], req["class"]
    done_all = is_completed(req)
    out = req["output_tokens"]
    ttft, tpot, e2e, queue = ttft_s(req), tpot_s(req), e2e_s(req), queue_s(req)
    multi_all = multi_token(req)
    per = lambda v: v / sim_time_s if sim_time_s > 0 else 0.0  # noqa: E731
    result = {}
    for name in names:
        sel = cls == name
        done, multi = done_all & sel, multi_all & sel
        lim_ttft, lim_tpot = slo_by_class[name]
        met = done & slo_met(ttft, tpot, np.inf if lim_ttft is None else lim_ttft,
                             np.inf if lim_tpot is None else lim_tpot)
        n = int(sel.sum())
        completed = int(done.sum())
        result[name] = {
            "num_requests": n,
            "completed": completed,
            "rejected": int((sel & (status == "rejected")).sum()),
            "unfinished": int((sel & (status == "unfinished")).sum()),
            "preemptions": int(req["preemptions"][sel].sum()),
            "throughput_rps": per(completed),
            "output_tokens_per_s": per(float(out[done].sum())),
            "total_tokens_per_s": per(float(out[done].sum() + req["prompt_tokens"][done].sum())),
            "ttft_s": dist_stats(ttft[done]),
            "tpot_s": dist_stats(tpot[multi]),
            "e2e_s": dist_stats(e2e[done]),
            "queue_s": dist_stats(queue[done]),
            "slo": {"ttft_s": lim_ttft, "tpot_s": lim_tpot},
            # (a class that drew no request has no attainment: 0 of 0 is no share, and 0.0 read as failing)
            "slo_attainment": float(met.sum() / n) if n else None,
            "goodput_rps": per(int(met.sum())),
        }
    return result
