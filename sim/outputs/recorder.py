"""Per-request and per-step records, and the summary computed from them.

Definitions (also in the README): TTFT = first_token_s - arrival_s (the first token exists at
the end of the step that finishes the prompt; with an engine profile's API server, the client
receives it ``api_request_s`` later, and ``first_token_s`` / ``finish_s`` are made client-side
after the run, ``servesim.simulation.add_api_server``); TPOT = (finish_s - first_token_s) /
(output_tokens - 1), for requests with more than one output token; TBT = every gap between
consecutive tokens of a request; E2E = finish_s - arrival_s; queue = scheduled_s - arrival_s.
Latency distributions are over completed requests, except TBT: every gap the run produced,
unfinished requests' included (gaps are recorded per step, not per request). SLO attainment is the share of ALL arrived
requests that completed within every SLO; goodput is those requests per second of sim time.
"""

from __future__ import annotations

import operator
from array import array
from dataclasses import dataclass

import numpy as np

STEP_COLUMNS = ("replica", "start_s", "duration_s", "num_seqs", "prefill_tokens", "decode_tokens",
                "context_tokens", "flops", "bytes", "bound", "kv_blocks_used", "padding_tokens")
REQUEST_COLUMNS = ("request_id", "arrival_s", "scheduled_s", "first_token_s", "finish_s", "prompt_tokens",
                   "output_tokens", "replica", "status", "preemptions", "reason", "decode_replica",
                   "kv_transfer_s", "prefix_hit_tokens", "api_s", "class")


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
        # head-of-line waits for the token budget (``Replica._note_blocked``), over all replicas
        self.budget_blocked_s = 0.0
        self.budget_blocked_requests = 0
        self.kv_transfer_bytes = 0.0
        self._progress = progress
        self.order_steps = False  # set by the fast engine (see step_columns)
        self._ended = None  # column -> array of the rows of ended requests
        self._ended_buf: list = []  # rows not yet moved there (tuples, see _retire)
        self._reasons: dict = {}  # row -> reason, for rejected requests
        self._steps_np = None
        self.end_hooks: list = []  # f(request), called when a request completes or is rejected
        self.decode_cost_models: dict = {}  # replica -> CostModel, for the rows of run_block
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
        # decode-only steps recorded by run_block (the fast engine's runs of decode steps):
        # per step its end and KV in use; per block (one call) its replica, first start, the
        # end of the step before it (its first gap's other end), steps, and how many of its
        # first step's sequences had their gap recorded on their own; per piece of constant
        # sequences: sequences, KV tokens of its first step, steps
        self.r_end = array("d")
        self.r_kv = array("q")
        self.b_replica = array("i")
        self.b_start = array("d")
        self.b_last = array("d")
        self.b_len = array("q")
        self.b_adj = array("q")
        self.p_n = array("q")
        self.p_ctx0 = array("q")
        self.p_len = array("q")
        self._run_tbt = None  # (gaps, counts) of those steps, once expanded

    def tbt_steps(self, gap_s: float, count: int) -> None:
        self.tbt_gap.append(gap_s)
        self.tbt_count.append(count)

    def tbt_sample(self) -> "WeightedSample":
        """Every TBT gap, as a ``WeightedSample``. Called once the run is over (after
        ``step_columns``, which works out the gaps of runs of decode steps): the buffers are
        handed over (or emptied), not copied twice."""
        self.step_columns()
        single = np.frombuffer(self.tbt) if len(self.tbt) else np.zeros(0)
        runs = self._run_tbt
        if not len(self.tbt_gap) and runs is None:
            return WeightedSample(single, None)  # a view: keeps the buffer alive, no copy
        r_gaps, r_counts = runs if runs is not None else (np.zeros(0), np.zeros(0, np.int64))
        steps_gaps = np.frombuffer(self.tbt_gap) if len(self.tbt_gap) else np.zeros(0)
        steps_counts = np.frombuffer(self.tbt_count, dtype=np.int64) if len(self.tbt_count) else np.zeros(0, np.int64)
        counts = np.concatenate([np.ones(len(single), np.int64), steps_counts, r_counts])
        values = np.concatenate([single, steps_gaps, r_gaps])
        del single, steps_gaps, steps_counts
        self.tbt, self.tbt_gap = array("d"), array("d")
        self.tbt_count = array("q")
        self._run_tbt = None
        return WeightedSample(values, counts)

    def arrive(self, req) -> None:
        req.row = len(self.requests)
        self.requests.append(req)

    def reject(self, req, reason: str) -> None:
        req.status = "rejected"
        req.reason = reason
        self.rejected += 1
        for hook in self.end_hooks:
            hook(req)
        self._retire(req)

    def complete(self, req) -> None:
        req.status = "completed"
        self.completed += 1
        if self._progress is not None:
            self._progress(req)
        for hook in self.end_hooks:
            hook(req)
        self._retire(req)

    # A request that has ended is kept as one compact row (numbers in typed arrays), not as an
    # object: ``requests[row]`` becomes None. ``request_columns`` merges rows and live objects.
    _F = ("arrival_s", "scheduled_s", "first_token_s", "finish_s", "kv_transfer_s")
    _I = ("request_id", "prompt_tokens", "output_tokens", "replica", "preemptions", "decode_replica",
          "prefix_hit_tokens", "row")

    _row_of = operator.attrgetter(*_F, *_I, "status")

    def _retire(self, req) -> None:
        if req.row < 0 or self.requests[req.row] is not req:
            return
        self._ended_buf.append(self._row_of(req))
        if len(self._ended_buf) >= 4096:
            self._flush_ended()
        if req.reason:
            self._reasons[req.row] = req.reason
        self.requests[req.row] = None

    def _flush_ended(self) -> None:
        """Move the buffered rows of ended requests into their typed columns."""
        buf = self._ended_buf
        if not buf:
            return
        cols = self._ended
        if cols is None:
            cols = self._ended = {**{k: array("d") for k in self._F}, **{k: array("q") for k in self._I},
                                  "status": array("b")}
        for k, values in zip(self._F + self._I, zip(*buf)):
            cols[k].extend(values)
        cols["status"].extend([0 if row[-1] == "completed" else 1 for row in buf])
        buf.clear()

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

    def run_block(self, replica: int, start_s: float, last_s: float, ends, pieces, adj: int, kv_used) -> None:
        """Consecutive decode-only steps of one replica (the fast engine's runs of decode steps):
        the first starts at ``start_s``, step i ends at ``ends[i]`` (the next starts there),
        with ``kv_used[i]`` blocks in use; ``pieces``: (sequences, KV tokens the first step of
        the piece touches, steps) in order, each later step of a piece touching ``sequences``
        more tokens. Every sequence decodes one token a step; its gap is the step's end less
        the previous step's end (``last_s`` for the first), except for ``adj`` sequences of the
        first step whose gaps were recorded on their own. The rows (their duration, FLOPs,
        bytes and bound from ``decode_cost_models[replica]``) and the gaps are worked out,
        vectorized, when the run is over (``step_columns``)."""
        self.r_end.extend(ends)
        self.r_kv.extend(kv_used)
        self.b_replica.append(replica)
        self.b_start.append(start_s)
        self.b_last.append(last_s)
        self.b_len.append(len(ends))
        self.b_adj.append(adj)
        for n, c0, k in pieces:
            self.p_n.append(n)
            self.p_ctx0.append(c0)
            self.p_len.append(k)

    _STEP_ARRAYS = (("replica", "s_replica", np.int32), ("start_s", "s_start", np.float64),
                    ("duration_s", "s_dur", np.float64), ("num_seqs", "s_seqs", np.int32),
                    ("prefill_tokens", "s_prefill", np.int64), ("decode_tokens", "s_decode", np.int64),
                    ("context_tokens", "s_ctx", np.int64), ("flops", "s_flops", np.float64),
                    ("bytes", "s_bytes", np.float64), ("compute_bound", "s_compute", np.int8),
                    ("kv_blocks_used", "s_kv", np.int64), ("padding_tokens", "s_pad", np.int64))

    def _expand_runs(self, chunk: int = 1 << 20) -> dict:
        """The rows of ``run_block`` as step columns (replica, start, duration, sequences, KV
        tokens, FLOPs, bytes, bound, KV in use; durations and the rest from each replica's cost
        model, ``CostModel.decode_rows``, element for element what ``step_time`` gave that step,
        ``chunk`` rows at a time), and their TBT gaps and counts (kept for ``tbt_sample``)."""
        n = len(self.r_end)
        if not n:
            return {}
        ends = np.frombuffer(self.r_end)
        blen = np.frombuffer(self.b_len, dtype=np.int64)
        first = np.cumsum(blen) - blen
        start = np.empty(n)
        start[1:] = ends[:-1]
        start[first] = np.frombuffer(self.b_start)
        gaps = ends - start  # each gap: the step's end less the previous step's end ...
        gaps[first] = ends[first] - np.frombuffer(self.b_last)  # (the one before the block's)
        plen = np.frombuffer(self.p_len, dtype=np.int64)
        seqs = np.repeat(np.frombuffer(self.p_n, dtype=np.int64), plen)  # (int64: ctx below)
        counts = seqs.copy()
        counts[first] -= np.frombuffer(self.b_adj, dtype=np.int64)
        self._run_tbt = (gaps, counts)
        p_n = np.frombuffer(self.p_n, dtype=np.int64)
        # step j of a piece starting at row f: ctx0 + n (j - f) = (ctx0 - n f) + n j
        ctx = np.repeat(np.frombuffer(self.p_ctx0, dtype=np.int64) - p_n * (np.cumsum(plen) - plen), plen)
        ctx += seqs * np.arange(n, dtype=np.int64)
        replica = np.repeat(np.frombuffer(self.b_replica, dtype=np.int32), blen)
        dur, flops, nbytes, comp = np.empty(n), np.empty(n), np.empty(n), np.empty(n, dtype=np.int8)
        models: dict = {}  # id -> (index, cost model)
        model_of = np.full(max(self.decode_cost_models, default=0) + 1, -1)
        for i, cm in self.decode_cost_models.items():
            model_of[i] = models.setdefault(id(cm), (len(models), cm))[0]
        assert (model_of[np.unique(replica)] >= 0).all(), "decode rows of a replica without a cost model"
        for lo in range(0, n, chunk):
            hi = min(lo + chunk, n)
            for k, cm in models.values():
                rows = slice(lo, hi) if len(models) == 1 else lo + np.flatnonzero(model_of[replica[lo:hi]] == k)
                dur[rows], flops[rows], nbytes[rows], comp[rows] = cm.decode_rows(seqs[rows], ctx[rows])
        # the durations the engine used: its step ends are their running sums
        assert np.array_equal(start + dur, ends), "a run's step times differ from the cost model's"
        cols = {"replica": replica, "start_s": start, "duration_s": dur, "num_seqs": seqs, "decode_tokens": seqs,
                "context_tokens": ctx, "flops": flops, "bytes": nbytes, "compute_bound": comp,
                "kv_blocks_used": np.frombuffer(self.r_kv, dtype=np.int64)}  # (keeps its buffer alive)
        for attr in ("r_end", "r_kv", "b_replica", "b_start", "b_last", "b_len", "b_adj", "p_n", "p_ctx0", "p_len"):
            setattr(self, attr, array(getattr(self, attr).typecode))  # free the buffers
        return cols

    def step_columns(self) -> dict[str, np.ndarray]:
        """Step columns as numpy arrays, one row per step in the order steps ended. Called once
        the run is over: each column moves out of its growable buffers one at a time (the
        buffers are emptied), so the peak stays near one copy."""
        if self._steps_np is not None:
            return self._steps_np
        runs = self._expand_runs()
        n_dec = len(runs["start_s"]) if runs else 0
        n_s = len(self.s_start)
        where = None
        if n_dec or (self.order_steps and n_s > 1):
            # the fast engine records a run of decode steps when it is settled, possibly after
            # other replicas' later steps: put rows back in the order steps ended (as the
            # reference engine commits them); ties: the rows of ``step`` first, then those of
            # ``run_block``, each in recording order
            end = np.concatenate([np.frombuffer(self.s_start) if n_s else np.zeros(0),
                                  runs["start_s"] if n_dec else np.zeros(0)])
            end += np.concatenate([np.frombuffer(self.s_dur) if n_s else np.zeros(0),
                                   runs["duration_s"] if n_dec else np.zeros(0)])
            if not (np.diff(end) >= 0).all():
                order = np.argsort(end, kind="stable")
                del end
                # where each recorded row goes: rows are scattered into place, column by column
                where = np.empty(n_s + n_dec, dtype=np.int64)
                where[order] = np.arange(n_s + n_dec)
                del order
        cols = {}
        for name, attr, dt in self._STEP_ARRAYS:
            buf = getattr(self, attr)
            col = np.empty(n_s + n_dec, dtype=dt)
            col[slice(0, n_s) if where is None else where[:n_s]] = np.frombuffer(buf, dtype=dt) if n_s else 0
            setattr(self, attr, array(buf.typecode))  # free the buffer
            del buf
            if n_dec:  # prefill and padding tokens: none
                col[slice(n_s, None) if where is None else where[n_s:]] = runs.pop(name, 0)
            if name == "compute_bound":
                col = col.astype(bool)
            cols[name] = col
        self._steps_np = cols
        return cols

    def request_columns(self) -> dict[str, np.ndarray]:
        """One row per arrived request, in arrival order (ended ones from their compact rows)."""
        self._flush_ended()
        reqs = self.requests
        n = len(reqs)
        live = [r for r in reqs if r is not None]
        live_rows = np.array([r.row for r in live], dtype=np.int64)
        ended = self._ended
        rows = np.frombuffer(ended["row"], dtype=np.int64) if ended is not None and len(ended["row"]) else None
        out = {}
        for name, dt in (("request_id", np.int64), ("arrival_s", float), ("scheduled_s", float),
                         ("first_token_s", float), ("finish_s", float), ("prompt_tokens", np.int64),
                         ("output_tokens", np.int64), ("replica", np.int64), ("preemptions", np.int64),
                         ("decode_replica", np.int64), ("kv_transfer_s", float), ("prefix_hit_tokens", np.int64)):
            col = np.empty(n, dtype=dt)
            if rows is not None:
                col[rows] = np.frombuffer(ended[name], dtype=np.float64 if dt is float else np.int64)
            if live:
                col[live_rows] = np.array([getattr(r, name) for r in live], dtype=dt)
            out[name] = col
        status = np.empty(n, dtype=object)
        reason = np.full(n, "", dtype=object)
        if rows is not None:
            status[rows] = np.array(["completed", "rejected"], dtype=object)[np.frombuffer(ended["status"], dtype=np.int8)]
        for row, why in self._reasons.items():
            reason[row] = why
        for r in live:
            status[r.row] = r.status
            reason[r.row] = r.reason
        cols = {k: out[k] for k in ("request_id", "arrival_s", "scheduled_s", "first_token_s", "finish_s",
                                    "prompt_tokens", "output_tokens", "replica")}
        cols["status"] = status
        cols["preemptions"] = out["preemptions"]
        cols["reason"] = reason
        for k in ("decode_replica", "kv_transfer_s", "prefix_hit_tokens"):
            cols[k] = out[k]
        return cols

    def release_request_rows(self) -> None:
        """Drop the compact rows once ``request_columns`` has been taken (memory)."""
        self._ended = None
        self._ended_buf = []


def _kth_smallest(v: np.ndarray, c: np.ndarray):
    """``kth(k)``: the k-th smallest (from 0) of the sample where ``v[i]`` appears ``c[i]`` times,
    without sorting it all: the values are bucketed by the leading bits of an order-preserving
    integer image of their floats, the bucket holding rank k found from the buckets' running
    counts, and only that bucket sorted."""
    bits = np.ascontiguousarray(v, dtype=np.float64).view(np.int64)
    key = np.where(bits < 0, bits ^ np.int64(0x7FFFFFFFFFFFFFFF), bits)  # ordered as the floats
    lo, hi = int(key.min()), int(key.max())
    shift = max(0, (hi - lo).bit_length() - 20)  # at most ~1M buckets
    bucket = (key >> shift) - (lo >> shift)
    del key, bits
    cum = np.cumsum(np.bincount(bucket, weights=c, minlength=int(bucket.max()) + 1))  # exact: integers
    cache: dict = {}

    def kth(k: int) -> float:
        j = int(np.searchsorted(cum, k, side="right"))
        if j not in cache:
            sel = bucket == j
            vv, cc = v[sel], c[sel]
            o = np.argsort(vv)
            cache[j] = (vv[o], np.cumsum(cc[o]), int(cum[j - 1]) if j else 0)
        vv, cs, base = cache[j]
        return vv[int(np.searchsorted(cs, k - base, side="right"))]

    return kth


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
        v, c = (self.values, self.counts) if keep.all() else (self.values[keep], self.counts[keep])
        del keep
        if len(v) == 0:
            return {"mean": None, "p50": None, "p90": None, "p99": None, "max": None}
        n = int(c.sum())
        kth = _kth_smallest(v, c)
        out = []
        for q in (0.5, 0.9, 0.99):
            # numpy's linear method: virtual index (n - 1) q, lerp between its neighbours
            h = (n - 1) * q
            lo = int(np.floor(h))
            g = h - lo
            a = kth(lo)
            b = kth(min(lo + 1, n - 1))
            d = b - a
            out.append(float(b - d * (1 - g)) if g >= 0.5 else float(a + d * g))
        mean = float(np.dot(v, c.astype(float)) / n)
        return {"mean": mean, "p50": out[0], "p90": out[1], "p99": out[2], "max": float(v.max())}


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
        "utilization": overall,
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
