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
member's gap is the step's duration) in O(1) plus O(1) per joining or completing request. Any
other step (KV would run out -> preemption; requests in the swapped queue) dissolves the set into
the running list and runs the reference step (``Replica``'s ``policy.next_batch`` -> ``_apply``
-> ``_commit``); the set re-forms after it. Speculative decoding and prefix caching, and the
static policy, use ``Replica`` itself (see ``make_replica``).

When only the decode set runs (nothing waiting, nothing prefilling), the steps up to the next
completion are identical but for contexts growing by one token each: they run as one SimPy
timeout per planned chunk (``_macro``), their times from ``CostModel.decode_steps`` (bit for bit
``step_time``). Whatever may change the next decision interrupts the run after the step in
flight: an arrival or hand-off (``wake``), KV mapped from outside (``kv_changed``). Observers
that read a replica's counters or KV mid-run (routers, the P/D hand-off, the end of a run cut by
``workload.duration_s``) call ``settle(now)`` first (``Cluster.settle``).
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_left, bisect_right
from math import isnan
from typing import NamedTuple

import numpy as np
from simpy.events import NORMAL
from simpy.exceptions import Interrupt

from policies.base import ReplicaState
from policies.continuous import ContinuousPolicy
from sim.batch import make_batch
from sim.replica import Replica, take_from


class _Row(NamedTuple):  # what Recorder.step reads of a batch
    num_seqs: int
    prefill_tokens: int
    decode_tokens: int
    context_tokens: int
    padding_tokens: int


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
            seq = next(self._seq)
            self._members[r] = (seq, S, c, d)
            self._cnt[(S - c) % bs] += 1
            self._sum_c += c
            heapq.heappush(self._heap, (S + r.output_tokens - d, seq, r))
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
            free = kv.num_free
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
            if n and not items and not tail and not self.waiting and not self.landed:
                K = self._macro_len(n, free + need_d)
                if K >= 2:
                    yield from self._macro(n, K)
                    continue
            _, admitted, hits = pol.admit(state, n + len(tail), free, budget, items)
            if not items and not n:
                yield self._sleep(None)
                continue
            # apply
            start = env.now
            if need_d:
                kv._take(need_d)
            waiting = self.waiting
            rec = self.recorder
            for r, cached in hits:  # P/D decode side: admitted holding their KV (as Replica._apply)
                r.num_computed_tokens = cached
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
            yield env.timeout(cost.time_s)
            self._commit_fast(batch, cost, start, n, items)
            self._absorb()

    # ---------------------------------------------------------------- runs of decode-only steps
    MAX_RUN = 4096  # steps per run (bounds the arrays)

    def _macro_len(self, n: int, free: int) -> int:
        """How many decode-only steps can run from here with nothing changing: up to the first
        completion (included) and while the KV blocks they grow fit."""
        S = self._S
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

    def _macro(self, n: int, K: int):
        """Run up to K decode-only steps of the decode set, as few timeouts (step times are
        computed a chunk at a time, so a run cut short wastes little). An arrival, a P/D
        hand-off, or KV mapped from outside wakes the replica at time x: the steps ended by x
        are settled, the step in flight runs to its end, and the replica decides again.
        Observers (router, P/D hand-off) call ``settle(now)`` first, so that counters, KV and
        records are those of time x."""
        env = self.env
        S = self._S
        # the last step completes a member: it is committed the ordinary way (_commit_fast), at
        # its end, not in bulk; members that joined since the last step have their own first gap
        fin_at = K if S + K == self._heap[0][0] else -1
        new = self._new[:]
        self._new.clear()
        start = env.now
        self._mac = m = [0, 0, 0, [], [], [], [], [], [], [], [], n, False, new]
        self._plan(m, S, n, min(K, 8), start)
        self.settle(start)  # the first step's KV
        chunk = 8
        while True:
            m[12] = m[0] == fin_at
            ends = m[4]
            last = ends[-1]
            self._interruptible = True  # wake() interrupts the wait (cheaper than ev | wake)
            try:
                yield self._event_at(last)
                woken = False
            except Interrupt:
                woken = True
            self._interruptible = False
            if woken and env.now < last:  # settle what has happened, finish the step in flight
                self.settle(env.now)
                j = m[1]  # the step in flight
                if j + 1 < m[0]:
                    m[0] = j + 1
                    m[12] = False
                yield self._event_at(ends[j])
                break
            if m[0] >= K:
                break
            chunk = min(2 * chunk, 1024)
            # every planned step has started (its KV is mapped): the next ones must fit what is
            # free now (blocks mapped from outside since the run began count)
            self.settle(env.now)
            if not self._plan(m, S, n, min(K - m[0], chunk), last, self.kv.num_free):
                break
        self.settle(env.now)
        self._mac = None
        if m[12]:
            i = m[0] - 1
            self._commit_fast(_Row(n, 0, n, m[9][i], 0),
                              _Cost(m[5][i], m[6][i], m[7][i], "compute" if m[8][i] else "memory"), m[3][i], n, ())

    def _plan(self, m, S: int, n: int, k: int, t0: float, free: int | None = None) -> int:
        """Append up to ``k`` more steps to the run ``m`` (their times, FLOPs, bytes, bound,
        context, KV growth), starting at ``t0`` (the end of the last planned step); with
        ``free``, only as many as the blocks they grow fit. Returns how many."""
        K0 = m[0]
        bs = self.kv.block_size
        cnt = self._cnt
        if free is not None:
            need = 0
            for i in range(k):
                need += cnt[(S + K0 + i) % bs]
                if need > free:
                    k = i
                    break
            if not k:
                return 0
        base = self._sum_c + n + n * (K0 - m[1])  # _sum_c is at step m[1] (settled so far)
        dctx = [base + n * i for i in range(k)]  # sum of (c + 1) at each step
        dur, flops, nbytes, comp = self.cost_model.decode_steps(n, dctx)
        if not isinstance(dur, list):
            dur, flops, nbytes, comp = dur.tolist(), flops.tolist(), nbytes.tolist(), comp.tolist()
        ends = list(itertools.accumulate(dur, initial=t0))  # the reference's now + d, step by step
        m[3].extend(ends[:-1])
        del ends[0]
        m[4].extend(ends)
        m[5].extend(dur)
        m[6].extend(flops)
        m[7].extend(nbytes)
        m[8].extend(comp)
        m[9].extend(dctx)
        c0 = m[10][-1] if K0 else 0
        m[10].extend(itertools.accumulate((cnt[(S + K0 + i) % bs] for i in range(k)), initial=c0))
        del m[10][K0]  # accumulate's initial value
        m[0] = K0 + k
        return k

    def kv_changed(self) -> None:
        """Blocks were mapped on this replica from outside (a P/D hand-off): a run of decode
        steps planned on the old free count must stop after the step in flight, unless the blocks
        its remaining steps grow still fit (then every decision in it is unchanged)."""
        m = self._mac
        if self._interruptible:
            cum, grown = m[10], m[2]
            rest = cum[m[0] - 1] - (cum[grown - 1] if grown else 0)
            if rest <= self.kv.num_free:
                return
            self._interruptible = False
            self.process.interrupt()

    def settle(self, now: float, strict: bool = False) -> None:
        """Bring a run of decode steps up to time ``now``: KV of the steps started by then, and
        the steps ended by then committed (``strict``: started / ended strictly before ``now``,
        for the end of a run cut off at ``workload.duration_s``)."""
        m = self._mac
        if m is None:
            return
        K, done, grown, starts, ends, dur, flops, nbytes, comp, dctx, cum, n, fin, new = m
        find = bisect_left if strict else bisect_right
        g = min(find(starts, now), K)
        if g > grown:
            k = cum[g - 1] - (cum[grown - 1] if grown else 0)
            if k:
                self.kv._take(k)
            m[2] = grown = g
        e = min(find(ends, now), K - 1 if fin else K)
        if e > done:
            rec = self.recorder
            # KV in use at each step's end: now's (growth applied up to step g - 1, and any block
            # mapped from outside, e.g. a P/D hand-off, which settles first) less later growth
            top = self.kv.num_used - cum[grown - 1]
            used = [top + x for x in cum[done:e]]
            rec.steps_block(self.index, starts[done:e], dur[done:e], n, n, dctx[done:e], flops[done:e],
                            nbytes[done:e], comp[done:e], used)
            last = self._t_last
            gaps = []
            first = done
            if done == 0 and new:  # their first gap is their own; older members' is the step's
                t = ends[0]
                if n > len(new):
                    rec.tbt_steps(t - last, n - len(new))
                for r in new:
                    rec.tbt.append(t - r.last_token_s)
                last = t
                first = 1
            for t in ends[first:e]:
                gaps.append(t - last)  # the reference's now - last_token_s
                last = t
            rec.tbt_block(gaps, n)
            k = e - done
            self.outstanding_tokens += n * k
            self._sum_c += n * k
            self._S += k
            self._t_last = last
            m[1] = e

    def _reference_step(self):
        """One step of ``Replica._run`` on the materialized running list."""
        self._dissolve()
        yield from self._step(self._tail)

    def _commit_fast(self, batch, cost, start: float, n: int, items) -> None:
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
            for r in handed:
                self.outstanding_tokens -= r.prompt_tokens + r.num_output_done
                self.handoff(r, self)
        rec.step(self.index, start, cost, batch, self.kv.num_used, 0.0)
