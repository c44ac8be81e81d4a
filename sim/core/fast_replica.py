"""The fast engine's replica: the same decisions and results as ``Replica``, with the decoding
requests kept as one aggregate so that a step costs O(1) in the number of running requests.

Iteration-level scheduling (``ContinuousPolicy``: continuous and chunked prefill, colocated or
either side of a P/D split) gives every decoding request one token per step, in admission order,
ahead of any request still prefilling. So the running list is (decode set) + (tail):

* the *decode set*: requests that decode, in admission order, each stored as (seq, s0, c0, d0):
  the replica's decode-step counter ``S`` when it joined and its computed tokens and emitted
  output then. At counter ``S`` it has ``c0 + S - s0`` computed tokens. The replica keeps the sum
  of their contexts, a heap of the counter at which each completes (``s0 + output - d0``) and,
  per residue mod ``block_size``, how many need a new KV block at a step (a request with ``c``
  computed tokens needs one exactly when ``c % block_size == 0``). Their ``Request`` counters are
  brought up to date (settled) only when they leave the set.
* the *tail*: requests still prefilling (chunked) or just admitted, handled one by one exactly as
  ``Replica`` does.

A step in which every member decodes and nothing needs preempting is decided, applied and
committed here: the set's blocks, tokens and TBT gaps (one (gap, count) pair per step: each
member's gap is the step's duration) in O(1) plus O(1) per joining or completing request. (A
virtual engine of a pipelined replica takes its steps one at a time through the shared stages,
as ``Replica`` does, and never plans runs.) Any
other step (KV would run out -> preemption; requests in the swapped queue) dissolves the set into
the running list and runs the reference step (``Replica``'s ``policy.next_batch`` -> ``_apply``
-> ``_commit``); the set re-forms after it. Speculative decoding and prefix caching, and the
static policy, use ``Replica`` itself (see ``make_replica``).

When only the decode set runs (nothing waiting, nothing prefilling), the next steps are
identical but for contexts growing by one token each and members leaving as they complete: they
run as one SimPy timeout per planned chunk (``_macro``, ``_Run``), their times from
``CostModel.decode_step_times`` (bit for bit ``step_time``; their FLOPs, bytes and bound are
filled into the step columns afterwards). Completions inside a run are settled in bulk, unless
something reacts to a completion at its time (closed-loop clients, the P/D decode side's retried
hand-offs): then a run stops at the first one. A run is planned up to the step in flight when
the replica's next request arrives, if the router knows it ahead of time (``next_arrival_s``);
whatever else may change the next decision interrupts the run after the step in flight: an
arrival or hand-off off the plan (``wake``), KV mapped from outside (``kv_changed``). Observers
that read a replica's counters or KV mid-run (routers, the P/D hand-off, the queue sampler, the
end of a run cut by ``workload.duration_s``) call ``settle(now)`` first (``Cluster.settle``).
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_left, bisect_right
from math import isnan
from operator import sub
from typing import NamedTuple

import numpy as np
from simpy.events import NORMAL
from simpy.exceptions import Interrupt

from servesim.policies.base import ReplicaState
from servesim.policies.continuous import ContinuousPolicy
from servesim.core.batch import make_batch
from servesim.core.replica import Replica, take_from


class _Row(NamedTuple):  # what Recorder.step reads of a batch
    num_seqs: int
    prefill_tokens: int
    decode_tokens: int
    context_tokens: int
    padding_tokens: int


class _Run:
    """A run of decode-only steps in flight (``FastReplica._macro``), from ``t0``. Per planned
    step i: its end (step i starts when step i - 1 ends) and the KV blocks grown by steps 0..i
    (``cum``); per segment of steps with the same members, ``segs``: (first step, steps,
    sequences, KV tokens the first step touches: sum of c + 1; each later step touches n more).
    ``K`` steps planned, ``done`` settled (ended and committed), ``grown`` started (KV taken),
    ``sp`` segments wholly settled. ``pn``, ``psum``, ``pcnt``: members, their sum of computed
    tokens and block-growth counts after the planned steps; ``dep``: (step, request) of members
    completing at the end of that step (bulk mode), ``dp`` how many of them are settled;
    ``new``: members whose first gap is their own; ``stop``: the run ends after its last
    planned step (a request arrives during it); ``fold``: step 0 is an admission step, (batch,
    cost, items, members before it) (see ``FastReplica._macro``)."""

    __slots__ = ("S0", "t0", "K", "done", "grown", "ends", "cum", "segs", "sp", "pn", "psum", "pcnt", "dep",
                 "dp", "new", "fin", "fin_at", "stop", "fold")

    def __init__(self, S0, t0, n, sum_c, cnt, new):
        self.S0, self.t0, self.pn, self.psum, self.pcnt, self.new = S0, t0, n, sum_c, cnt, new
        self.K = self.done = self.grown = self.dp = self.sp = 0
        self.ends, self.cum, self.segs, self.dep = [], [], [], []
        self.fin = False
        self.fin_at = -1
        self.stop = False  # plan no further: the run ends after its last planned step
        self.fold = None

    def dctx(self, i: int) -> int:
        """KV tokens step ``i`` touches (sum of c + 1)."""
        for i0, m, n, d0 in self.segs:
            if i0 <= i < i0 + m:
                return d0 + n * (i - i0)
        raise IndexError(i)

    def last_step_s(self) -> float:
        """The duration of the last planned step (near enough: an estimate for sizing plans)."""
        K = self.K
        return self.ends[K - 1] - (self.ends[K - 2] if K > 1 else self.t0)


class _Cost(NamedTuple):  # what Recorder.step reads of a StepCost
    time_s: float
    flops: float
    bytes: float
    bound: str


def fast_eligible(policy, kv, spec) -> bool:
    """Whether the fast replica covers this policy and feature set (else ``Replica`` runs)."""
    return type(policy) is ContinuousPolicy and not policy.spec_tokens and spec is None and not kv.caching


def make_replica(engine: str, env, index, policy, cost_model, kv, recorder, max_context_tokens, **kw):
    if engine == "fast" and fast_eligible(policy, kv, kw.get("spec")):
        return FastReplica(env, index, policy, cost_model, kv, recorder, max_context_tokens, **kw)
    return Replica(env, index, policy, cost_model, kv, recorder, max_context_tokens, **kw)


class FastReplica(Replica):
    def __init__(self, *args, **kw):
        self._tail: list = []
        self._members: dict = {}  # request -> (seq, s0, c0, d0), in admission order
        self._S = 0  # decode-set steps so far
        self._sum_c = 0  # sum over members of computed tokens at counter _S
        self._heap: list = []  # (counter at which it completes, seq, request)
        self._seq = itertools.count()
        self._new: list = []  # members that joined since the last step (their first gap is their own)
        self._t_last = 0.0  # end of the last step that advanced the set
        self._mac = None  # a run of decode-only steps in flight (see _macro)
        self._interruptible = False
        self._decode_step_s = 0.0  # the last decode-only step's duration (to size plans)
        self.next_arrival_s = None  # () -> when the next request routed here arrives, if known (Cluster)
        super().__init__(*args, **kw)
        self._cnt = [0] * self.kv.block_size
        self._state = ReplicaState([], self.waiting, self.kv, 0.0, self.swapped, 0, self.landed)

    # ------------------------------------------------------------- the running list, materialized
    @property
    def running(self) -> list:
        """The running list (reference order). Reading it dissolves the decode set (same state,
        slower steps until it re-forms), so the reference code can work on it in place."""
        if self._members:
            assert self._mac is None, "the running list is not materialized during a run of decode steps"
            self._dissolve()
        return self._tail

    @running.setter
    def running(self, value) -> None:
        self._tail = value

    @property
    def num_running(self) -> int:
        return len(self._members) + len(self._tail)

    def _settle(self, r, info, S) -> int:
        """Bring ``r``'s counters to decode-step counter ``S``; return its computed tokens."""
        _, s0, c0, d0 = info
        k = S - s0
        c = c0 + k
        r.num_computed_tokens = c
        r.num_output_done = d0 + k
        r.kv_blocks = -(-c // self.kv.block_size)
        if k:
            r.last_token_s = self._t_last
        return c

    def _dissolve(self) -> None:
        S = self._S
        members = list(self._members.items())
        for r, info in members:
            self._settle(r, info, S)
        self._tail[:0] = [r for r, _ in members]
        self._members.clear()
        self._heap.clear()
        self._new.clear()
        self._cnt = [0] * self.kv.block_size
        self._sum_c = 0

    def _join(self, r, S: int, c: int, d: int) -> None:
        """``r`` joins the decode set at counter ``S`` with ``c`` computed tokens and ``d``
        emitted (``_sum_c`` is the caller's)."""
        seq = next(self._seq)
        self._members[r] = (seq, S, c, d)
        self._cnt[(S - c) % self.kv.block_size] += 1
        heapq.heappush(self._heap, (S + r.output_tokens - d, seq, r))

    def _absorb(self) -> None:
        """Move the decoding requests at the front of the tail into the decode set."""
        tail = self._tail
        bs = self.kv.block_size
        S = self._S
        i = 0
        for r in tail:
            d = r.num_output_done
            c = r.num_computed_tokens
            if not (d > 0 and c == r.prompt_tokens + d - 1 and r.kv_blocks == -(-c // bs) and d < r.output_tokens):
                break
            self._join(r, S, c, d)
            self._sum_c += c
            self._new.append(r)
            i += 1
        if i:
            del tail[:i]

    # ---------------------------------------------------------------- the loop
    def _run(self):
        env = self.env
        kv = self.kv
        bs = kv.block_size
        pol = self.policy
        B = pol.max_num_batched_tokens
        tokens = pol._tokens
        state = self._state
        while True:
            members, tail = self._members, self._tail
            if not members and not tail and not self.waiting and not self.swapped and not self.landed:
                yield self._sleep(None)
                continue
            n = len(members)
            need_d = self._cnt[self._S % bs] if n else 0
            free = kv.num_empty  # no prefix caching here (fast_eligible): no evictable blocks
            fast = not self.swapped and n <= B and need_d <= free
            items = []
            if fast:
                free -= need_d
                budget = B - n
                for r in tail:
                    q = tokens(r, budget)
                    if q > budget or q == 0:
                        continue
                    need = -(-(r.num_computed_tokens + q) // bs) - r.kv_blocks
                    if need > free:
                        fast = False  # the reference preempts here
                        break
                    if need > 0:
                        free -= need
                    budget -= q
                    items.append((r, q))
            if not fast:
                yield from self._reference_step()
                self._absorb()
                continue
            # virtual engines of a pipelined replica wait for each other's stages: no runs
            if n and not items and not tail and not self.waiting and not self.landed and self.pipeline is None:
                K = self._macro_len(n, free + need_d)
                if K >= 2:
                    yield from self._macro(n, K)
                    continue
            _, admitted, hits, blocked = pol.admit(state, n + len(tail), free, budget, items)
            self._note_blocked(blocked, env.now)
            if not items and not n:
                yield self._sleep(None)
                continue
            # apply
            start = env.now
            if need_d:
                kv.num_empty -= need_d
            waiting = self.waiting
            rec = self.recorder
            for r, cached in hits:  # P/D decode side: admitted holding their KV (as Replica._apply)
                r.num_computed_tokens = cached
                if isnan(r.scheduled_s):  # first admission only (as Replica._apply)
                    r.prefix_hit_tokens = cached
                ok = kv.grow(r, cached)
                assert ok, "prefix hit on blocks that are gone"
            for r in admitted:
                take_from(self.landed, waiting, r)
                tail.append(r)
                if isnan(r.scheduled_s):
                    r.scheduled_s = start
                    rec.prefix_query_tokens += r.prompt_tokens
                    rec.prefix_hit_tokens += r.prefix_hit_tokens
            for r, q in items:
                ok = kv.grow(r, r.num_computed_tokens + q)
                assert ok, "scheduled more KV than is free"
            batch = make_batch(items, (), admitted, prefix_hits=hits, decode_set=(n, self._sum_c))
            cost = self.cost_model.step_time(batch)
            if not hits and self.pipeline is None and self._foldable(items):
                yield from self._macro(n, self.MAX_RUN, (batch, cost, items))
                continue
            if self.pipeline is None:
                yield env.timeout(cost.time_s)
                extra = 0.0
            else:
                yield from self._through_stages(batch, cost)
                extra = env.now - start - cost.time_s
            self._commit_fast(batch, cost, start, n, items, extra)
            self._absorb()

    # ---------------------------------------------------------------- runs of decode-only steps
    MAX_RUN = 4096  # steps per run (bounds the arrays)

    @property
    def _bulk(self) -> bool:
        """Whether a run of decode steps may go past completions (settled in bulk, late): only
        when nothing reacts to a completion at its time (a closed-loop client's next request,
        P/D hand-offs retried when KV frees). Otherwise a run ends at the first completion,
        which is committed at its time (``_commit_fast``)."""
        return not self.recorder.end_hooks and self.after_free is None

    def _foldable(self, items) -> bool:
        """Whether this step (the decode set plus ``items``) can be step 0 of a run of decode
        steps: completions are settled in bulk, nothing else waits, every request of the tail is
        in it and finishes its prompt (emits a token) without finishing, so that after it the
        tail has joined the decode set and nothing is left to decide."""
        if not items or self.waiting or self.role == "prefill" or not self._bulk:
            return False
        tail = self._tail
        if len(tail) != len(items):
            return False
        for (r, q), t in zip(items, tail):
            if r is not t or r.num_computed_tokens + q != r.prompt_tokens + r.num_output_done \
                    or r.num_output_done + 1 >= r.output_tokens:
                return False
        return True

    def _leave(self, run, x: int, n: int, sumc: int):
        """Members completing at decode-step counter ``run.S0 + x`` leave the planned steps after
        step x - 1 (``run.dep``); returns the members and their sum of computed tokens after."""
        heap, members, cnt, bs, S0 = self._heap, self._members, run.pcnt, self.kv.block_size, run.S0
        while heap and heap[0][0] == S0 + x:
            r = heapq.heappop(heap)[2]
            _, s0, c0, _ = members[r]
            sumc -= c0 + S0 + x - s0
            n -= 1
            cnt[(s0 - c0) % bs] -= 1
            run.dep.append((x - 1, r))
        return n, sumc

    def _macro_len(self, n: int, free: int) -> int:
        """How many decode-only steps can run from here with nothing changing: while the KV
        blocks they grow fit and, unless completions are settled in bulk, up to the first
        completion (included)."""
        S = self._S
        if self._bulk:  # _plan stops where the KV runs out (not counting blocks freed on the way)
            bs = self.kv.block_size
            return self.MAX_RUN if self._cnt[S % bs] + self._cnt[(S + 1) % bs] <= free else 1
        K = min(self._heap[0][0] - S, self.MAX_RUN)
        if K < 2:
            return K
        bs = self.kv.block_size
        cnt = self._cnt
        if K < bs:
            used = 0
            for i in range(K):
                used += cnt[(S + i) % bs]
                if used > free:
                    return i
            return K
        per_cycle = sum(cnt)
        if per_cycle * (K // bs + 1) <= free:
            return K
        needs = np.asarray(cnt, dtype=np.int64)[(S + np.arange(K)) % bs]
        return int(np.searchsorted(np.cumsum(needs), free, side="right"))

    def wake(self) -> None:
        if self._interruptible:
            run = self._mac
            if bisect_right(run.ends, self.env.now, 0, run.K) + 1 >= run.K:
                run.stop = True  # the step in flight is the run's last: it ends there anyway
                return
            self._interruptible = False
            self.process.interrupt()
        else:
            super().wake()

    def _event_at(self, t: float):
        """An event that fires at exactly ``t`` (``env.timeout(t - now)`` could land an ulp
        away from the sum of the step times that the reference engine accumulates)."""
        env = self.env
        t = float(t)
        ev = env.event()
        ev._ok = True
        ev._value = None
        heapq.heappush(env._queue, (t, NORMAL, next(env._eid), ev))
        return ev

    def _macro(self, n: int, K: int, fold=None):
        """Run up to K decode-only steps of the decode set, as few timeouts (step times are
        computed a chunk at a time, so a run cut short wastes little). An arrival, a P/D
        hand-off, or KV mapped from outside wakes the replica at time x: the steps ended by x
        are settled, the step in flight runs to its end, and the replica decides again.
        Observers (router, P/D hand-off, queue sampler) call ``settle(now)`` first, so that
        counters, KV and records are those of time x.

        ``fold`` = (batch, cost, items): step 0 is that admission step, already applied (its KV
        taken, ``_foldable``); its requests join the decode set now, as of step 1, and get their
        token when step 0 is settled. One timeout then covers the admission step and the decode
        steps after it."""
        env = self.env
        S = self._S
        start = env.now
        run = _Run(S, start, n, self._sum_c, self._cnt, self._new[:])
        self._new.clear()
        if not self._bulk and S + K == self._heap[0][0]:
            # the last step completes a member: committed the ordinary way (_commit_fast), at its
            # end, not in bulk
            run.fin_at = K
        self._mac = run
        # plan up to the step in flight when the next request is known to arrive (else in
        # doubling chunks): a run cut short by an arrival wastes the steps planned past it
        t_stop = self.next_arrival_s() if self.next_arrival_s is not None and run.fin_at < 0 else math.inf
        if fold is None:
            run.pcnt = self._cnt[:]
            t0 = start
        else:
            batch, cost, items = fold
            run.fold = (batch, cost, items, n)
            t0 = start + cost.time_s  # the end of step 0, as env.timeout(cost.time_s) has it
            run.K = run.grown = 1  # its KV is taken
            run.ends.append(t0)
            run.cum.append(0)
            psum = self._sum_c + n
            for r, q in items:  # members as of step 1 (as _absorb after step 0 would take them)
                c = r.num_computed_tokens + q
                self._join(r, S + 1, c, r.num_output_done + 1)
                psum += c
            self._tail.clear()
            run.pcnt = self._cnt[:]
            run.pn, run.psum = self._leave(run, 1, n + len(items), psum)
        chunk = 8
        if t_stop < math.inf and self._decode_step_s > 0:
            chunk = max(2, min(int((t_stop - t0) / self._decode_step_s) + 2, 1024))
        if fold is None:
            self._plan(run, min(K, chunk), start, self.kv.num_empty, t_stop)
            self.kv.num_empty -= run.cum[0]  # the first step's KV (as settle(start) takes it)
            run.grown = 1
        elif t0 > t_stop:
            run.stop = True
        elif run.pn:
            self._plan(run, min(K - 1, chunk), t0, self.kv.num_empty, t_stop)
        while True:
            run.fin = run.K == run.fin_at
            ends = run.ends
            last = ends[run.K - 1]
            self._interruptible = True  # wake() interrupts the wait (cheaper than ev | wake)
            try:
                yield self._event_at(last)
                woken = False
            except Interrupt:
                woken = True
            self._interruptible = False
            if woken and env.now < last:  # settle what has happened, finish the step in flight
                self.settle(env.now)
                j = run.done  # the step in flight
                if j + 1 < run.K:
                    self._truncate(run, j + 1)
                yield self._event_at(ends[j])
                break
            if run.K >= K or not run.pn or run.stop:
                break
            if t_stop < math.inf:
                d = run.last_step_s() if run.K > 1 or fold is None else self._decode_step_s
                chunk = max(2, min(int((t_stop - last) / d) + 2, 1024)) if d > 0 else 8
            else:
                chunk = min(2 * chunk, 1024)
            # every planned step has started (its KV is mapped): the next ones must fit what is
            # free now (blocks mapped from outside since the run began count)
            self.settle(env.now)
            if not self._plan(run, min(K - run.K, chunk), last, self.kv.num_empty, t_stop):
                break
        self.settle(env.now)
        self._mac = None
        if run.K > 1 or fold is None:
            self._decode_step_s = run.last_step_s()
        if run.fin:
            i = run.K - 1
            d = run.dctx(i)
            self._commit_fast(_Row(n, 0, n, d, 0), self._decode_cost(n, d), run.ends[i - 1] if i else run.t0, n, ())

    def _decode_cost(self, n: int, dctx: int) -> _Cost:
        """One decode-only step of the set (as ``step_time`` prices it)."""
        t, f, b, comp = self.cost_model.decode_steps(n, [dctx])
        return _Cost(t[0], f[0], b[0], "compute" if comp[0] else "memory")

    def _truncate(self, run, K: int) -> None:
        """Cut the run to its first ``K`` steps: completions planned later go back to the heap."""
        run.K = K
        run.fin = False
        dep = run.dep
        if dep and dep[-1][0] >= K:
            members, heap, S0 = self._members, self._heap, run.S0
            while dep and dep[-1][0] >= K:
                i, r = dep.pop()
                heapq.heappush(heap, (S0 + i + 1, members[r][0], r))

    def _plan(self, run, k: int, t0: float, free: int, t_stop: float = math.inf) -> int:
        """Append up to ``k`` more steps to ``run`` (their times, FLOPs, bytes, bound, KV tokens,
        sequences, KV growth), starting at ``t0`` (the end of the last planned step), as many as
        the blocks they grow fit in ``free`` (blocks that completions free on the way are not
        counted: the run stops early and the replica plans again), and up to the step in flight
        at ``t_stop`` (then ``run.stop``). In bulk mode the members that complete on the way
        leave the planned steps after their last one (``run.dep``). Returns how many steps were
        added."""
        bs = self.kv.block_size
        S0 = run.S0
        P = i = run.K
        end = P + k
        cnt = run.pcnt
        n, sumc = run.pn, run.psum
        bulk = run.fin_at < 0 and self._bulk
        heap = self._heap
        cum = run.cum
        c_last = cum[-1] if P else 0
        need = 0
        step_times = self.cost_model.decode_step_times
        while i < end and n:
            seg = end
            x = heap[0][0] - S0 if bulk and heap else -1  # members leave after step x - 1
            if 0 <= x < seg:
                seg = x
            r0 = (S0 + i) % bs
            grow = (cnt[r0:] + cnt[:r0]) * (-(-(seg - i) // bs))  # cnt from residue r0 on, cycled
            del grow[seg - i:]
            m = len(grow)
            g = sum(grow)
            if need + g <= free:
                need += g
            else:
                for j, g in enumerate(grow):
                    need += g
                    if need > free:
                        m = j
                        break
                if not m:
                    break
            d0 = sumc + n  # sum of (c + 1) at the first step; n more at each next one
            dur = step_times(n, range(d0, d0 + n * m, n))
            ends = list(itertools.accumulate(dur, initial=t0))  # the reference's now + d, step by step
            if ends[-1] > t_stop:  # keep the steps up to the one in flight at t_stop
                run.stop = True
                cut = bisect_right(ends, t_stop, 1)
                if cut < m:
                    m = cut
                    del ends[m + 1:]
            t0 = ends[-1]
            del ends[0]
            run.ends.extend(ends)
            run.segs.append((i, m, n, d0))
            acc = itertools.accumulate(grow[:m] if m < len(grow) else grow, initial=c_last)
            next(acc)
            cum.extend(acc)
            c_last = cum[-1]
            sumc += n * m
            i += m
            if m < len(grow) and not run.stop:
                break
            if i == x:  # members complete at the end of step x - 1
                n, sumc = self._leave(run, x, n, sumc)
            if run.stop:
                break
        run.K, run.pn, run.psum = i, n, sumc
        return i - P

    def kv_changed(self) -> None:
        """Blocks were mapped on this replica from outside (a P/D hand-off): a run of decode
        steps planned on the old free count must stop after the step in flight, unless the blocks
        its remaining steps grow still fit (then every decision in it is unchanged)."""
        run = self._mac
        if self._interruptible:
            cum, grown = run.cum, run.grown
            rest = cum[run.K - 1] - (cum[grown - 1] if grown else 0)
            if rest <= self.kv.num_free:
                return
            self._interruptible = False
            self.process.interrupt()

    def settle(self, now: float, strict: bool = False) -> None:
        """Bring a run of decode steps up to time ``now``: KV of the steps started by then, and
        the steps ended by then committed, with the completions among them (``strict``:
        started / ended strictly before ``now``, for the end of a run cut off at
        ``workload.duration_s``)."""
        run = self._mac
        if run is None:
            return
        K, done, grown = run.K, run.done, run.grown
        find = bisect_left if strict else bisect_right
        ends, cum = run.ends, run.cum
        # steps started by now: step 0 at t0, step i when step i - 1 ends
        g = ((run.t0 < now) if strict else (run.t0 <= now)) + find(ends, now, 0, K - 1) if K else 0
        if g > grown:
            self.kv.num_empty -= cum[g - 1] - (cum[grown - 1] if grown else 0)
            assert self.kv.num_empty >= 0, "a run of decode steps grew more KV than is free"
            run.grown = grown = g
        e = find(ends, now, 0, K)
        if run.fin and e > K - 1:
            e = K - 1
        if e <= done:
            return
        rec = self.recorder
        last = self._t_last  # the end of the step before ``done``: the gap's other end
        tokens = 0
        lo = done  # the steps [lo, e) are recorded as a block (``Recorder.run_block``)
        adj = 0  # members of step ``lo`` whose gap is recorded on its own
        fold = run.fold if done == 0 else None
        if done == 0 and run.new:  # their first gap is their own; older members' is the step's
            t = ends[0]
            tbt = rec.tbt
            for r in run.new:
                tbt.append(t - r.last_token_s)
            adj = len(run.new)
        if fold is not None:
            # step 0 is an admission step: the members' gap, then the admitted requests' token
            # (as _commit_fast), before any of them completes below
            n0 = fold[3]
            t = ends[0]
            if n0 > adj:
                rec.tbt_steps(t - last, n0 - adj)
            adj = 0
            tokens = n0
            last = t
            lo = 1
            tbt = rec.tbt
            for r, q in fold[2]:
                d = r.num_output_done
                r.num_computed_tokens += q
                self._sample_one(r, d, t, tbt)
                self._sum_c += r.num_computed_tokens
        pieces = []  # (sequences, KV tokens of the first step, steps) over [lo, e)
        segs, sp = run.segs, run.sp
        while sp < len(segs):
            i0, m, n, d0 = segs[sp]
            if i0 >= e:
                break
            a = lo if lo > i0 else i0
            b = i0 + m if i0 + m < e else e
            if b > a:
                pieces.append((n, d0 + n * (a - i0), b - a))
                tokens += n * (b - a)
            if i0 + m > e:
                break
            sp += 1
        run.sp = sp
        # KV in use at each step's end: now's (growth applied up to step g - 1, and any block
        # mapped from outside, e.g. a P/D hand-off, which settles first) less later growth, less
        # what completions freed by then
        kv = self.kv
        base = kv.num_blocks - kv.num_empty - cum[grown - 1]
        dep = run.dep
        dp = run.dp
        used = [base + x for x in cum[done:e]]
        if dp < len(dep) and dep[dp][0] < e:
            members, cnt, bs, S0 = self._members, self._cnt, kv.block_size, run.S0
            sum_c = 0
            freed = [0] * (e - done)  # blocks freed at each step's end
            while dp < len(dep) and dep[dp][0] < e:
                i, r = dep[dp]
                dp += 1
                info = members.pop(r)
                c = self._settle(r, info, S0 + i + 1)
                cnt[(info[1] - info[2]) % bs] -= 1
                sum_c += c
                r.last_token_s = r.finish_s = ends[i]
                freed[i - done] += r.kv_blocks
                kv.num_empty += r.kv_blocks  # kv.free without prefix caching
                r.kv_blocks = 0
                self.outstanding_tokens -= r.prompt_tokens + r.num_output_done
                rec.complete(r)
            used = list(map(sub, used, itertools.accumulate(freed)))
            run.dp = dp
            self._sum_c -= sum_c
        if fold is not None:
            rec.step(self.index, run.t0, fold[1], fold[0], used[0], 0.0)
        if lo < e:
            rec.run_block(self.index, ends[lo - 1] if lo else run.t0, last, ends[lo:e], pieces, adj,
                          used[lo - done:] if lo > done else used)
        self.outstanding_tokens += tokens
        self._sum_c += tokens
        self._S += e - done
        self._t_last = ends[e - 1]
        run.done = e

    def _reference_step(self):
        """One step of ``Replica._run`` on the materialized running list."""
        self._dissolve()
        yield from self._step(self._tail)

    def _commit_fast(self, batch, cost, start: float, n: int, items, extra_s: float = 0.0) -> None:
        now = self.env.now
        rec = self.recorder
        finished = False
        if n:
            S1 = self._S + 1
            self._S = S1
            new = self._new
            old = n - len(new)
            if old:
                rec.tbt_steps(now - self._t_last, old)  # every older member's gap: this step
            tbt = rec.tbt
            for r in new:
                tbt.append(now - r.last_token_s)
            new.clear()
            self._sum_c += n
            self._t_last = now
            heap = self._heap
            if heap[0][0] == S1:
                done = []
                while heap and heap[0][0] == S1:
                    done.append(heapq.heappop(heap)[2])
                members = self._members
                if rec.end_hooks:
                    # a hook may route a new request now: show the counters exactly as the
                    # reference has them at this member's turn (members before it emitted a token)
                    want = set(done)
                    pos = {}
                    for i, r in enumerate(members):
                        if r in want:
                            pos[r] = i
                            if len(pos) == len(want):
                                break
                else:
                    pos = None
                applied = 0  # of the n tokens emitted, how many are in outstanding_tokens yet
                bs = self.kv.block_size
                for r in done:
                    info = members.pop(r)
                    c = self._settle(r, info, S1)
                    self._cnt[(info[1] - info[2]) % bs] -= 1
                    self._sum_c -= c
                    r.last_token_s = now
                    r.finish_s = now
                    self.kv.free(r)
                    upto = pos[r] + 1 if pos is not None else n
                    self.outstanding_tokens += upto - applied - (r.prompt_tokens + r.num_output_done)
                    applied = upto
                    rec.complete(r)
                finished = True
                self.outstanding_tokens += n - applied
            else:
                self.outstanding_tokens += n
        handed = []
        tbt = rec.tbt
        for r, q in items:
            done = r.num_output_done
            ntok = r.prompt_tokens + done
            r.num_computed_tokens += q
            if r.num_computed_tokens != ntok:  # a prompt chunk: no token yet
                continue
            self._sample_one(r, done, now, tbt)
            finished |= self._finish_or_hand_off(r, now, handed)
        tail = self._tail
        if finished:
            if items:
                tail[:] = [r for r in tail if r.status != "completed"]
            if self.after_free is not None:
                self.after_free()
        if handed:
            gone = {id(r) for r in handed}
            tail[:] = [r for r in tail if id(r) not in gone]
            self._hand_off(handed, start)
        rec.step(self.index, start, cost, batch, self.kv.num_used, extra_s)
