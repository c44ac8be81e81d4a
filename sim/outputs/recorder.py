"""What happens during a run, recorded with cheap appends: per request (its row, once it ends)
and per step (typed growable arrays), and the TBT gaps. Turned into numpy columns once the run
is over (``request_columns``, ``step_columns``, ``tbt_sample``). The recorder knows nothing of
cost models: the fast engine's runs of decode steps are recorded by their step ends and batch
sizes, and their durations, FLOPs, bytes and bounds are priced by the caller's ``price_runs``
when the step columns are built. Metrics and the summary are made from the columns elsewhere
(``metrics``, ``summary``). With an engine profile's API server, ``first_token_s`` and
``finish_s`` are made client-side after the run (``servesim.simulation.add_api_server``).
"""

from __future__ import annotations

import operator
from array import array
from dataclasses import dataclass

import numpy as np

from servesim.outputs.stats import WeightedSample, dist_stats  # noqa: F401 (dist_stats: re-exported, older imports)


@dataclass(frozen=True)
class ReplicaInfo:
    index: int
    pool: str  # "colocated", or "prefill" / "decode" with P/D split
    peak_flops: float  # all GPUs of the replica
    peak_bw: float
    kv_blocks: int
    engines: int = 1  # the schedulers of its replica: pp with overlap runs pp virtual engines, one info each


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
        # KV tokens that recompute preemptions dropped: computed once more when the request is
        # admitted again (work done twice), less any the prefix cache still holds then
        self.recompute_tokens = 0
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
        # per step its end and the KV blocks grown since the run began; per block (one call)
        # its replica, first start, the end of the step before it (its first gap's other end),
        # steps, how many of its first step's sequences had their gap recorded on their own,
        # and the KV base its steps' growth adds to; per completion's free (f_*) the first row
        # holding fewer blocks, the end of its block and the blocks; per piece of constant
        # sequences: sequences, KV tokens of its first step, steps
        self.r_end = array("d")
        self.r_kv = array("q")
        self.b_replica = array("i")
        self.b_start = array("d")
        self.b_last = array("d")
        self.b_len = array("q")
        self.b_adj = array("q")
        self.b_kv = array("q")
        self.f_row = array("q")
        self.f_end = array("q")
        self.f_blocks = array("q")
        self.p_n = array("q")
        self.p_ctx0 = array("q")
        self.p_len = array("q")
        self.p_g = array("q")
        self._run_tbt = None  # (gaps, counts) of those steps, once expanded

    def tbt_steps(self, gap_s: float, count: int) -> None:
        self.tbt_gap.append(gap_s)
        self.tbt_count.append(count)

    def tbt_sample(self) -> WeightedSample:
        """Every TBT gap, as a ``WeightedSample``. Called once the run is over, after
        ``step_columns`` (which works out the gaps of runs of decode steps): the buffers are
        handed over (or emptied), not copied twice."""
        if len(self.r_end):
            raise RuntimeError("tbt_sample: call step_columns first "
                               "(it works out the gaps of the runs of decode steps)")
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
        if req.outgrown:  # (capped for a decode that outgrows the KV, rejected before: its true length)
            req.output_tokens = req.outgrown
        req.status = "rejected"
        req.reason = reason
        self.rejected += 1
        for hook in self.end_hooks:
            hook(req)
        self._retire(req)

    def complete(self, req) -> None:
        if req.outgrown:  # its last token before its sequence outgrew the KV cache: ended, not completed
            self.reject(req, req.reason)
            return
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

    def run_block(self, replica: int, start_s: float, last_s: float, ends, pn, pc0, plen, adj: int, kv_grown,
                  kv_base: int, frees=None, pg=None) -> None:
        """Consecutive decode-only steps of one replica (the fast engine's runs of decode steps):
        the first starts at ``start_s``, step i ends at ``ends[i]`` (the next starts there),
        with ``kv_base + kv_grown[i]`` blocks in use, less the blocks of ``frees``: (k, blocks)
        freed at the end of step k - 1 (steps k on hold that many fewer); pieces (``pn``,
        ``pc0``, ``plen``): sequences, KV tokens the first step of the piece touches, steps, in
        order, each later step of a piece touching ``sequences`` more tokens (``pg``: that many
        more instead; under a sliding window, members past it touch as many each step). Every sequence
        decodes one token a step; its gap is the step's end less the previous step's end
        (``last_s`` for the first), except for ``adj`` sequences of the first step whose gaps
        were recorded on their own. The rows (their duration, FLOPs, bytes and bound priced by
        ``step_columns``' ``price_runs``), the KV in use and the gaps are worked out,
        vectorized, when the run is over."""
        row0 = len(self.r_end)
        self.r_end.extend(ends)
        self.r_kv.extend(kv_grown)
        self.b_replica.append(replica)
        self.b_start.append(start_s)
        self.b_last.append(last_s)
        self.b_len.append(len(ends))
        self.b_adj.append(adj)
        self.b_kv.append(kv_base)
        self.p_n.extend(pn)
        self.p_ctx0.extend(pc0)
        self.p_len.extend(plen)
        if pg is not None:  # (p_g is kept from the first piece that grows otherwise; before it, g = n)
            self.p_g.extend(self.p_n[len(self.p_g):len(self.p_n) - len(pn)])
            self.p_g.extend(pg)
        elif self.p_g:
            self.p_g.extend(pn)
        if frees:
            end = row0 + len(ends)
            for k, blocks in frees:
                self.f_row.append(row0 + k)
                self.f_end.append(end)
                self.f_blocks.append(blocks)

    _STEP_ARRAYS = (("replica", "s_replica", np.int32), ("start_s", "s_start", np.float64),
                    ("duration_s", "s_dur", np.float64), ("num_seqs", "s_seqs", np.int32),
                    ("prefill_tokens", "s_prefill", np.int64), ("decode_tokens", "s_decode", np.int64),
                    ("context_tokens", "s_ctx", np.int64), ("flops", "s_flops", np.float64),
                    ("bytes", "s_bytes", np.float64), ("compute_bound", "s_compute", np.int8),
                    ("kv_blocks_used", "s_kv", np.int64), ("padding_tokens", "s_pad", np.int64))

    def _expand_runs(self, price_runs, chunk: int = 1 << 16) -> dict:
        """The rows of ``run_block`` as step columns (replica, start, duration, sequences, KV
        tokens, FLOPs, bytes, bound, KV in use), priced by ``price_runs`` ``chunk`` rows at a
        time, and their TBT gaps and counts (kept for ``tbt_sample``)."""
        n = len(self.r_end)
        if not n:
            return {}
        if price_runs is None:
            raise ValueError("step_columns: the run has runs of decode steps; give price_runs to price them")
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
        # each later step of a piece touches g more KV tokens: its sequences (p_g empty: every
        # piece's), or fewer under a sliding window (members past it touch as many each step)
        p_g = np.frombuffer(self.p_g if self.p_g else self.p_n, dtype=np.int64)
        # step j of a piece starting at row f: ctx0 + g (j - f) = (ctx0 - g f) + g j
        ctx = np.repeat(np.frombuffer(self.p_ctx0, dtype=np.int64) - p_g * (np.cumsum(plen) - plen), plen)
        growth = np.repeat(p_g, plen) if self.p_g else seqs  # (no second array of every row without a window)
        replica = np.repeat(np.frombuffer(self.b_replica, dtype=np.int32), blen)
        dur, flops, nbytes, comp = np.empty(n), np.empty(n), np.empty(n), np.empty(n, dtype=np.int8)
        # a chunk at a time: the temporaries stay small (in cache, and no fresh pages to fault in)
        for lo in range(0, n, chunk):
            rows = slice(lo, min(lo + chunk, n))
            ctx[rows] += growth[rows] * np.arange(lo, rows.stop, dtype=np.int64)
            dur[rows], flops[rows], nbytes[rows], comp[rows] = price_runs(replica[rows], seqs[rows], ctx[rows])
            # the durations the engine used: its step ends are their running sums
            assert np.array_equal(start[rows] + dur[rows], ends[rows]), "a run's step times differ from price_runs'"
        # KV in use: each block's base plus what its steps grew, less what completions freed
        # before each step (a free holds from its step to the end of its block)
        kv = np.frombuffer(self.r_kv, dtype=np.int64) + np.repeat(np.frombuffer(self.b_kv, dtype=np.int64), blen)
        if len(self.f_row):
            delta = np.zeros(n + 1, dtype=np.int64)
            blocks = np.frombuffer(self.f_blocks, dtype=np.int64)
            np.subtract.at(delta, np.frombuffer(self.f_row, dtype=np.int64), blocks)
            np.add.at(delta, np.frombuffer(self.f_end, dtype=np.int64), blocks)
            kv += np.cumsum(delta[:n])
        cols = {"replica": replica, "start_s": start, "duration_s": dur, "num_seqs": seqs, "decode_tokens": seqs,
                "context_tokens": ctx, "flops": flops, "bytes": nbytes, "compute_bound": comp, "kv_blocks_used": kv}
        for attr in ("r_end", "r_kv", "b_replica", "b_start", "b_last", "b_len", "b_adj", "b_kv", "f_row", "f_end",
                     "f_blocks", "p_n", "p_ctx0", "p_len", "p_g"):
            setattr(self, attr, array(getattr(self, attr).typecode))  # free the buffers
        return cols

    def step_columns(self, price_runs=None) -> dict[str, np.ndarray]:
        """Step columns as numpy arrays, one row per step in the order steps ended. Called once
        the run is over: each column moves out of its growable buffers one at a time (the
        buffers are emptied), so the peak stays near one copy.

        ``price_runs(replica, num_seqs, context_tokens) -> (duration_s, flops, bytes,
        compute_bound)``, arrays in, arrays out, one element per decode-only step of the runs
        recorded by ``run_block`` (needed when there are any): what the engine's cost model
        gave each such step, element for element."""
        if self._steps_np is not None:
            return self._steps_np
        runs = self._expand_runs(price_runs)
        n_dec = len(runs["start_s"]) if runs else 0
        n_s = len(self.s_start)
        where = None
        if n_dec or (self.order_steps and n_s > 1):
            # the fast engine records a run of decode steps when it is settled, possibly after
            # other replicas' later steps: put rows back in the order steps ended (as the
            # reference engine commits them); ties: the rows of ``step`` first, then those of
            # ``run_block``, each in recording order
            end = np.empty(n_s + n_dec)
            if n_s:
                np.add(np.frombuffer(self.s_start), np.frombuffer(self.s_dur), out=end[:n_s])
            if n_dec:
                np.add(runs["start_s"], runs["duration_s"], out=end[n_s:])
            if not (end[1:] >= end[:-1]).all():
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
            codes = np.frombuffer(ended["status"], dtype=np.int8)
            status[rows] = np.array(["completed", "rejected"], dtype=object)[codes]
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
