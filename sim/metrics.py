"""Per-request and per-step records, and the summary computed from them.

Definitions (also in the README): TTFT = first_token_s - arrival_s (the first token exists at
the end of the step that finishes the prompt); TPOT = (finish_s - first_token_s) /
(output_tokens - 1), for requests with more than one output token; TBT = every gap between
consecutive tokens of a request; E2E = finish_s - arrival_s; queue = scheduled_s - arrival_s.
Latency distributions are over completed requests. SLO attainment is the share of ALL arrived
requests that completed within every SLO; goodput is those requests per second of sim time.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np

STEP_COLUMNS = ("replica", "start_s", "duration_s", "num_seqs", "prefill_tokens", "decode_tokens",
                "context_tokens", "flops", "bytes", "bound", "kv_blocks_used", "padding_tokens")
REQUEST_COLUMNS = ("request_id", "arrival_s", "scheduled_s", "first_token_s", "finish_s", "prompt_tokens",
                   "output_tokens", "replica", "status", "preemptions", "reason", "decode_replica",
                   "kv_transfer_s", "prefix_hit_tokens", "class")


@dataclass(frozen=True)
class ReplicaInfo:
    index: int
    pool: str  # "colocated", or "prefill" / "decode" with P/D split
    peak_flops: float  # all GPUs of the replica
    peak_bw: float
    kv_blocks: int


class Recorder:
    """Collects what happens during a run. Cheap appends only; summaries come later."""

    def __init__(self, progress=None):
        self.requests: list = []
        self.tbt = array("d")  # one gap per entry
        # (gap, count): ``count`` requests had this same gap (the fast engine's decode set: every
        # member's gap is the step's duration); together with ``tbt`` the exact TBT sample
        self.tbt_gap = array("d")
        self.tbt_count = array("q")
        self.completed = 0
        self.rejected = 0
        self.swap_out_bytes = 0.0
        self.swap_in_bytes = 0.0
        self.prefix_query_tokens = 0  # prompt tokens of requests at their first admission
        self.prefix_hit_tokens = 0  # of which found in the prefix cache
        self.kv_transfer_bytes = 0.0
        self._progress = progress
        self.order_steps = False  # set by the fast engine (see step_columns)
        self.end_hooks: list = []  # f(request), called when a request completes or is rejected
        # step columns
        self.s_replica = array("i")
        self.s_start = array("d")
        self.s_dur = array("d")
        self.s_seqs = array("i")
        self.s_prefill = array("q")
        self.s_decode = array("q")
        self.s_ctx = array("q")
        self.s_flops = array("d")
        self.s_bytes = array("d")
        self.s_compute = array("b")
        self.s_kv = array("q")
        self.s_pad = array("q")

    def tbt_steps(self, gap_s: float, count: int) -> None:
        self.tbt_gap.append(gap_s)
        self.tbt_count.append(count)

    def tbt_sample(self) -> "WeightedSample":
        single = np.frombuffer(self.tbt) if len(self.tbt) else np.zeros(0)
        if not len(self.tbt_gap):
            return WeightedSample(single.copy(), None)
        values = np.concatenate([single, np.frombuffer(self.tbt_gap)])
        counts = np.concatenate([np.ones(len(single), np.int64), np.frombuffer(self.tbt_count, dtype=np.int64)])
        return WeightedSample(values, counts)

    def arrive(self, req) -> None:
        self.requests.append(req)

    def reject(self, req, reason: str) -> None:
        req.status = "rejected"
        req.reason = reason
        self.rejected += 1
        for hook in self.end_hooks:
            hook(req)

    def complete(self, req) -> None:
        req.status = "completed"
        self.completed += 1
        if self._progress is not None:
            self._progress(req)
        for hook in self.end_hooks:
            hook(req)

    def step(self, replica: int, start_s: float, cost, batch, kv_used: int, extra_s: float = 0.0) -> None:
        """One step; ``extra_s`` is time outside the cost model's step (swap copies, draft model)."""
        self.s_replica.append(replica)
        self.s_start.append(start_s)
        self.s_dur.append(cost.time_s + extra_s)
        self.s_seqs.append(batch.num_seqs)
        self.s_prefill.append(batch.prefill_tokens)
        self.s_decode.append(batch.decode_tokens)
        self.s_ctx.append(batch.context_tokens)
        self.s_flops.append(cost.flops)
        self.s_bytes.append(cost.bytes)
        self.s_compute.append(1 if cost.bound == "compute" else 0)
        self.s_kv.append(kv_used)
        self.s_pad.append(batch.padding_tokens)

    def steps_block(self, replica: int, start_s, dur_s, num_seqs: int, decode_tokens: int, context_tokens,
                    flops, nbytes, compute, kv_used) -> None:
        """Several decode-only steps of one replica at once (numpy arrays, one element a step):
        the rows ``step`` would append one by one."""
        k = len(start_s)
        self.s_replica.extend([replica] * k)
        self.s_start.frombytes(np.ascontiguousarray(start_s, dtype=np.float64).tobytes())
        self.s_dur.frombytes(np.ascontiguousarray(dur_s, dtype=np.float64).tobytes())
        self.s_seqs.extend([num_seqs] * k)
        self.s_prefill.extend([0] * k)
        self.s_decode.extend([decode_tokens] * k)
        self.s_ctx.frombytes(np.ascontiguousarray(context_tokens, dtype=np.int64).tobytes())
        self.s_flops.frombytes(np.ascontiguousarray(flops, dtype=np.float64).tobytes())
        self.s_bytes.frombytes(np.ascontiguousarray(nbytes, dtype=np.float64).tobytes())
        self.s_compute.frombytes(np.ascontiguousarray(compute, dtype=np.int8).tobytes())
        self.s_kv.frombytes(np.ascontiguousarray(kv_used, dtype=np.int64).tobytes())
        self.s_pad.extend([0] * k)

    def tbt_block(self, gaps, count: int) -> None:
        self.tbt_gap.frombytes(np.ascontiguousarray(gaps, dtype=np.float64).tobytes())
        self.tbt_count.extend([count] * len(gaps))

    def step_columns(self) -> dict[str, np.ndarray]:
        cols = self._step_columns()
        if self.order_steps and len(cols["start_s"]) > 1:
            # the fast engine records a run of decode steps when it is settled, possibly after
            # other replicas' later steps: put rows back in the order steps ended (as the
            # reference engine commits them); ties keep the recording order
            end = cols["start_s"] + cols["duration_s"]
            if not (np.diff(end) >= 0).all():
                order = np.argsort(end, kind="stable")
                cols = {k: v[order] for k, v in cols.items()}
        return cols

    def _step_columns(self) -> dict[str, np.ndarray]:
        return {
            "replica": np.frombuffer(self.s_replica, dtype=np.int32),
            "start_s": np.frombuffer(self.s_start),
            "duration_s": np.frombuffer(self.s_dur),
            "num_seqs": np.frombuffer(self.s_seqs, dtype=np.int32),
            "prefill_tokens": np.frombuffer(self.s_prefill, dtype=np.int64),
            "decode_tokens": np.frombuffer(self.s_decode, dtype=np.int64),
            "context_tokens": np.frombuffer(self.s_ctx, dtype=np.int64),
            "flops": np.frombuffer(self.s_flops),
            "bytes": np.frombuffer(self.s_bytes),
            "compute_bound": np.frombuffer(self.s_compute, dtype=np.int8).astype(bool),
            "kv_blocks_used": np.frombuffer(self.s_kv, dtype=np.int64),
            "padding_tokens": np.frombuffer(self.s_pad, dtype=np.int64),
        }

    def request_columns(self) -> dict[str, np.ndarray]:
        reqs = self.requests
        f = lambda name, dt=float: np.array([getattr(r, name) for r in reqs], dtype=dt)  # noqa: E731
        return {
            "request_id": f("request_id", np.int64),
            "arrival_s": f("arrival_s"),
            "scheduled_s": f("scheduled_s"),
            "first_token_s": f("first_token_s"),
            "finish_s": f("finish_s"),
            "prompt_tokens": f("prompt_tokens", np.int64),
            "output_tokens": f("output_tokens", np.int64),
            "replica": f("replica", np.int64),
            "status": np.array([r.status for r in reqs], dtype=object),
            "preemptions": f("preemptions", np.int64),
            "reason": np.array([r.reason for r in reqs], dtype=object),
            "decode_replica": f("decode_replica", np.int64),
            "kv_transfer_s": f("kv_transfer_s"),
            "prefix_hit_tokens": f("prefix_hit_tokens", np.int64),
        }


class WeightedSample:
    """A sample stored as distinct-ish ``values`` with integer ``counts`` (None: each once): the
    sample is ``np.repeat(values, counts)``, without building it. ``percentile`` is exactly
    ``np.percentile``'s default (linear) method on that sample."""

    __slots__ = ("values", "counts")

    def __init__(self, values: np.ndarray, counts: np.ndarray | None):
        self.values = np.asarray(values, dtype=float)
        self.counts = None if counts is None else np.asarray(counts, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.values) if self.counts is None else int(self.counts.sum())

    def expand(self) -> np.ndarray:
        return self.values if self.counts is None else np.repeat(self.values, self.counts)

    def stats(self) -> dict:
        if self.counts is None:
            return dist_stats(self.values)
        keep = ~np.isnan(self.values) & (self.counts > 0)
        v, c = self.values[keep], self.counts[keep]
        if len(v) == 0:
            return {"mean": None, "p50": None, "p90": None, "p99": None, "max": None}
        order = np.argsort(v, kind="stable")
        v, c = v[order], c[order]
        cum = np.cumsum(c)  # cum[i] - 1: the last position of v[i] in the sorted sample
        n = int(cum[-1])
        out = []
        for q in (0.5, 0.9, 0.99):
            # numpy's linear method: virtual index (n - 1) q, lerp between its neighbours
            h = (n - 1) * q
            lo = int(np.floor(h))
            g = h - lo
            a = v[np.searchsorted(cum, lo, side="right")]
            b = v[np.searchsorted(cum, min(lo + 1, n - 1), side="right")]
            d = b - a
            out.append(float(b - d * (1 - g)) if g >= 0.5 else float(a + d * g))
        mean = float(np.dot(v, c.astype(float)) / n)
        return {"mean": mean, "p50": out[0], "p90": out[1], "p99": out[2], "max": float(v[-1])}


def dist_stats(x) -> dict:
    """{mean, p50, p90, p99, max} of a sample (linear-interpolated percentiles); nulls if empty.
    ``x``: an array, or a ``WeightedSample``."""
    if isinstance(x, WeightedSample):
        return x.stats()
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    return {"mean": float(x.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(x.max())}


def utilization(steps: dict, sel, sim_time_s: float, members: list, table: list) -> dict:
    """Busy fraction, batch size, KV usage, MFU and MBU over the steps ``sel`` of ``members``
    (``ReplicaInfo``s); ``table`` is every replica in index order (per-step peaks and KV size)."""
    dur = steps["duration_s"][sel]
    busy = float(dur.sum())
    rep = steps["replica"][sel]
    peak_f = np.array([r.peak_flops for r in table])[rep]
    peak_b = np.array([r.peak_bw for r in table])[rep]
    kv_use = steps["kv_blocks_used"][sel] / np.array([r.kv_blocks for r in table])[rep]
    n_rep = len(members)
    return {
        "replicas": n_rep,
        "busy_fraction": busy / (sim_time_s * n_rep) if sim_time_s > 0 and n_rep else 0.0,
        "mean_batch_size": float(steps["num_seqs"][sel].mean()) if len(dur) else 0.0,
        "kv_usage_mean": float((kv_use * dur).sum() / busy) if busy > 0 else 0.0,
        "kv_usage_max": float(kv_use.max()) if len(dur) else 0.0,
        "mfu": float(steps["flops"][sel].sum() / (dur * peak_f).sum()) if busy > 0 else 0.0,
        "mbu": float(steps["bytes"][sel].sum() / (dur * peak_b).sum()) if busy > 0 else 0.0,
    }


def summarize(scenario, req: dict, steps: dict, tbt: np.ndarray, sim_time_s: float, replicas: list,
              extra: dict | None = None, slo_limits: tuple | None = None) -> dict:
    """The ``summary.json`` contract (see the README for each key). ``replicas``: one
    ``ReplicaInfo`` (index, pool, peak_flops, peak_bw, kv_blocks) per replica, in index order.
    ``slo_limits``: per-request (ttft_s, tpot_s) limit arrays (inf = none) replacing the scenario's
    SLO, for request classes with their own."""
    status = req["status"]
    done = status == "completed"
    n = len(status)
    ttft = req["first_token_s"] - req["arrival_s"]
    e2e = req["finish_s"] - req["arrival_s"]
    queue = req["scheduled_s"] - req["arrival_s"]
    out = req["output_tokens"]
    multi = done & (out > 1)
    tpot = np.full(n, np.nan)
    tpot[multi] = (req["finish_s"][multi] - req["first_token_s"][multi]) / (out[multi] - 1)

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
    everything = np.ones(nsteps, dtype=bool)
    pools = {}
    for name in dict.fromkeys(r.pool for r in replicas):
        members = [r for r in replicas if r.pool == name]
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
        "ttft_s": dist_stats(ttft[done]),
        "tpot_s": dist_stats(tpot[multi]),
        "tbt_s": dist_stats(tbt),
        "e2e_s": dist_stats(e2e[done]),
        "queue_s": dist_stats(queue[done]),
        "slo": {"ttft_s": scenario.slo.ttft_s, "tpot_s": scenario.slo.tpot_s},
        "slo_attainment": float(met.sum() / n) if n else 0.0,
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
        "utilization": utilization(steps, everything, sim_time_s, replicas, replicas),
        "pools": pools,
    }
    if extra:
        summary.update(extra)
    return summary


def slo_met(ttft: np.ndarray, tpot: np.ndarray, ttft_limit: np.ndarray, tpot_limit: np.ndarray) -> np.ndarray:
    """Per request: TTFT and TPOT within their limits (NaN TPOT, a single-token output, meets any)."""
    with np.errstate(invalid="ignore"):
        return (ttft <= ttft_limit) & ~(tpot > tpot_limit)


def summarize_classes(req: dict, sim_time_s: float, names, slo_by_class: dict) -> dict:
    """``summary.json`` ``classes``: per request class (the ``class`` column), the request counts,
    throughput, latency distributions and SLO keys of the overall summary, over that class's
    requests. Counts add up to the overall ones. ``slo_by_class``: name -> (ttft_s, tpot_s)."""
    status, cls = req["status"], req["class"]
    done_all = status == "completed"
    out = req["output_tokens"]
    ttft = req["first_token_s"] - req["arrival_s"]
    multi_all = done_all & (out > 1)
    tpot = np.full(len(status), np.nan)
    tpot[multi_all] = (req["finish_s"][multi_all] - req["first_token_s"][multi_all]) / (out[multi_all] - 1)
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
            "ttft_s": dist_stats(ttft[done]),
            "tpot_s": dist_stats(tpot[multi]),
            "e2e_s": dist_stats((req["finish_s"] - req["arrival_s"])[done]),
            "queue_s": dist_stats((req["scheduled_s"] - req["arrival_s"])[done]),
            "slo": {"ttft_s": lim_ttft, "tpot_s": lim_tpot},
            "slo_attainment": float(met.sum() / n) if n else 0.0,
            "goodput_rps": per(int(met.sum())),
        }
    return result
