"""One model replica as a SimPy process: decide -> cost -> timeout -> commit.

The policy decides (plain data); the replica applies the decision at the start of the step
(preempt or swap out, reference prefix-cache hits, swap in, admit, reserve and allocate KV),
waits the step's time, then commits it at the end (advance token counts, stamp times, free
finished requests' KV, hand prefilled requests to the decode pool, record the step).
"""

from __future__ import annotations

from collections import deque
from math import isnan

from servesim.policies.base import ReplicaState
from servesim.core.batch import Batch
from servesim.core.kv import BlockAllocator


def take_from(landed: deque, waiting: deque, r) -> None:
    """Remove an admitted request from the front of the landed queue (P/D decode side) or, else,
    of the waiting queue: policies admit each queue in order."""
    if landed and landed[0] is r:
        landed.popleft()
    else:
        assert waiting[0] is r, "policy must admit from the front of the landed or waiting queue"
        waiting.popleft()


class Replica:
    """``role``: "colocated" (prefill and decode here), "prefill" (hand requests off after their
    first token via ``handoff(req, replica)``) or "decode" (requests arrive with their prompt's KV).
    ``spec``: (k, acceptance_rate, draft_cost_model or None, rng) for speculative decoding.
    ``swap``: (host_blocks, bytes_per_block, bytes_per_s) for swap preemption.
    ``pipeline``: the replica's ``sim.pipeline.Pipeline`` when this is one of its virtual engines
    (PP with overlapping micro-batches): a step's GPU work then holds the stages in turn, and its KV
    copies the host links the engines share, waiting for each to be free; None: the step takes its
    time alone."""

    def __init__(self, env, index: int, policy, cost_model, kv: BlockAllocator, recorder, max_context_tokens: int,
                 *, role: str = "colocated", pool: str = "", handoff=None, spec=None, swap=(0, 0.0, 1.0),
                 pipeline=None):
        self.env = env
        self.index = index
        self.policy = policy
        self.cost_model = cost_model
        self.kv = kv
        self.recorder = recorder
        self.max_context_tokens = max_context_tokens
        self.role = role
        self.pool = pool
        self.handoff = handoff
        self.spec = spec
        self.host_blocks, self.swap_block_bytes, self.swap_bytes_per_s = swap
        self.host_free_blocks = self.host_blocks
        self.running: list = []
        self.waiting: deque = deque()
        self.swapped: deque = deque()
        self.landed: deque = deque()  # P/D decode side: requests holding KV that just arrived
        self.outstanding_tokens = 0  # prompt + output so far, over unfinished requests here
        self._blocked_since = None  # when a decision last left the head of the queue out for budget
        self._blocked_ids: set = set()
        self.pipeline = pipeline
        self.after_free = None  # called after KV blocks were freed (P/D: retry pending hand-offs)
        self._wakeup = None
        self.process = env.process(self._run())

    @property
    def num_running(self) -> int:
        return len(self.running)

    # ---------------------------------------------------------------- arrivals
    def rejection_reason(self, req) -> str | None:
        total = req.prompt_tokens + req.output_tokens
        if total > self.max_context_tokens:
            return f"prompt + output = {total} tokens exceeds the model's context length {self.max_context_tokens}"
        # The last output token is sampled, not stored: the KV never holds more than total - 1
        # (plus k speculative tokens being verified).
        k = self.spec[0] if self.spec else 0
        # a prefill replica holds the prompt only; others the whole sequence
        blocks = self.kv.blocks_for(req.prompt_tokens if self.role == "prefill" else total - 1 + k)
        if blocks > self.kv.num_blocks:
            return (f"prompt + output = {total} tokens needs {blocks} KV blocks; the replica has "
                    f"{self.kv.num_blocks} in all")
        # a prefill replica only ever computes the prompt (and, preempted, recomputes just that)
        max_tokens = 1 if self.role == "prefill" else req.output_tokens
        return self.policy.admission_error(req.prompt_tokens, max_tokens, self.kv)

    def submit(self, req) -> None:
        req.replica = self.index
        reason = self.rejection_reason(req)
        if reason is not None:
            self.recorder.reject(req, reason)
            return
        self.waiting.append(req)
        self.outstanding_tokens += req.prompt_tokens
        self.wake()

    def accept_prefilled(self, req) -> None:
        """A request whose KV (already mapped on this replica's allocator) has just landed."""
        self.landed.append(req)
        self.outstanding_tokens += req.num_tokens
        self.wake()

    def wake(self) -> None:
        ev = self._wakeup
        if ev is not None and not ev.triggered:
            self._wakeup = None
            ev.succeed()

    # ---------------------------------------------------------------- the loop
    def _run(self):
        while True:
            if not self.running and not self.waiting and not self.swapped and not self.landed:
                yield self._sleep(None)
                continue
            yield from self._step(self.running)

    def _step(self, running: list):
        """One step on ``running``: decide, apply, wait the step's time, commit."""
        env = self.env
        state = ReplicaState(running, self.waiting, self.kv, env.now, self.swapped, self.host_free_blocks,
                             self.landed)
        batch = self.policy.next_batch(state)
        self._note_blocked(batch.budget_blocked, env.now)
        start = env.now
        swap_s = self._apply(batch, start)
        if batch.empty:
            if swap_s > 0:
                if self.pipeline is None:
                    yield env.timeout(swap_s)
                else:
                    yield from self.pipeline.swap(swap_s)
            elif not batch.preempted:
                # Nothing can run now (waiting for KV held by transfers, or for the policy's
                # timer): sleep until an arrival, a KV release or the timer. A colocated replica
                # never gets here with work it could do; if it did, the run would end with
                # requests in flight and simulate() reports the stall.
                yield self._sleep(batch.wake_at_s)
            return
        cost = self.cost_model.step_time(batch)
        draft_s = self._draft_time_s(batch) if self.spec else 0.0
        extra = swap_s + draft_s
        if self.pipeline is None:
            yield env.timeout(cost.time_s + extra)
        else:
            # the step's extra time is all but its cost: its own copies and draft, and its waits
            # for busy links and stages
            yield from self._through_stages(batch, cost, draft_s, swap_s)
            extra = env.now - start - cost.time_s
        self._commit(batch, cost, start, extra)

    def _through_stages(self, batch: Batch, cost, draft_s: float = 0.0, swap_s: float = 0.0):
        """A virtual engine's step (SimPy generator): the scheduler's overhead and the draft, then
        the KV copies on the host links the engines share, then each pipeline stage in turn, each
        once it is free."""
        yield self.env.timeout(cost.overhead_s + draft_s)
        if swap_s > 0:
            yield from self.pipeline.swap(swap_s)
        yield from self.pipeline.traverse(self.cost_model.stage_times(cost, batch))

    def _note_blocked(self, req, now: float) -> None:
        """Head-of-line accounting: the time from a decision that left the head of the queue out
        only for the token budget (its prompt fits it alone, not next to the running decodes) to
        the next decision, and the requests that waited so (``Recorder.budget_blocked_*``)."""
        if self._blocked_since is not None:
            self.recorder.budget_blocked_s += now - self._blocked_since
        self._blocked_since = now if req is not None else None
        if req is not None and req.request_id not in self._blocked_ids:
            self._blocked_ids.add(req.request_id)
            self.recorder.budget_blocked_requests += 1

    def _sleep(self, until_s):
        """An event that fires on ``wake()`` (or at ``until_s``)."""
        self._wakeup = ev = self.env.event()
        if until_s is not None and until_s > self.env.now:
            return ev | self.env.timeout(until_s - self.env.now)
        return ev

    def _apply(self, batch: Batch, now: float) -> float:
        """Apply the decision; return the seconds spent copying KV to/from host memory."""
        running, waiting, kv = self.running, self.waiting, self.kv
        swap_bytes = 0.0
        if batch.preempted:
            n = len(batch.preempted)
            assert set(map(id, running[len(running) - n:])) == set(map(id, batch.preempted)), \
                "policy must preempt from the tail of the running list"
            del running[len(running) - n:]
            to_host = {id(r) for r in batch.swap_out}
            for r in batch.preempted:  # newest first, so the oldest ends at the front
                r.preemptions += 1
                if id(r) in to_host:
                    r.swapped_blocks = r.kv_blocks
                    self.host_free_blocks -= r.kv_blocks
                    assert self.host_free_blocks >= 0, "policy swapped out more than host memory holds"
                    swap_bytes += r.kv_blocks * self.swap_block_bytes
                    self.recorder.swap_out_bytes += r.kv_blocks * self.swap_block_bytes
                    kv.free(r)
                    self.swapped.appendleft(r)
                else:
                    kv.free(r)
                    r.num_computed_tokens = 0
                    waiting.appendleft(r)
            if self.after_free is not None:
                self.after_free()
        # Prefix-cache hits are mapped before any allocation so no eviction can take them.
        for r, cached in batch.prefix_hits:
            r.num_computed_tokens = cached
            if isnan(r.scheduled_s):  # a request's hits count at its first admission (as the summary's)
                r.prefix_hit_tokens = cached
            ok = kv.grow(r, cached)
            assert ok, "prefix hit on blocks that are gone"
        for r in batch.swap_in:
            assert self.swapped[0] is r, "policy must swap in from the front of the swapped queue"
            self.swapped.popleft()
            running.append(r)
            self.host_free_blocks += r.swapped_blocks
            swap_bytes += r.swapped_blocks * self.swap_block_bytes
            self.recorder.swap_in_bytes += r.swapped_blocks * self.swap_block_bytes
            r.swapped_blocks = 0
        for r in batch.admitted:
            take_from(self.landed, waiting, r)
            running.append(r)
            if isnan(r.scheduled_s):
                r.scheduled_s = now
                self.recorder.prefix_query_tokens += r.prompt_tokens
                self.recorder.prefix_hit_tokens += r.prefix_hit_tokens
        for r, tokens in batch.reserve:
            ok = kv.grow(r, tokens)
            assert ok, "policy reserved more KV than is free"
        for r, q in batch.items:
            ok = kv.grow(r, r.num_computed_tokens + q)
            assert ok, "policy scheduled more KV than is free"
        return swap_bytes / self.swap_bytes_per_s if swap_bytes else 0.0

    def _draft_time_s(self, batch: Batch) -> float:
        """Speculative decoding: the draft proposes k tokens per decoding sequence (k draft decode
        steps) and also runs over this step's prefill tokens to build its KV."""
        k, _, draft, _ = self.spec
        if draft is None or (not batch.num_decode_seqs and not batch.prefill_tokens):
            return 0.0
        n = batch.num_decode_seqs
        t = 0.0
        if n:
            # one draft decode step per proposed token, at the sequences' current context
            ctx = batch.decode_context_tokens - batch.decode_tokens + n  # sum of c + 1
            step = Batch(num_seqs=n, num_tokens=n, decode_tokens=n, num_decode_seqs=n, num_sampled=n,
                         attn_pairs=float(ctx), context_tokens=ctx, decode_context_tokens=ctx,
                         decode_attn_pairs=float(ctx))
            t += k * draft.step_time(step).time_s
        if batch.prefill_tokens:
            pre = Batch(num_seqs=batch.num_prefill_seqs, num_tokens=batch.prefill_tokens,
                        prefill_tokens=batch.prefill_tokens, num_prefill_seqs=batch.num_prefill_seqs,
                        attn_pairs=batch.attn_pairs - batch.decode_attn_pairs,
                        context_tokens=batch.context_tokens - batch.decode_context_tokens, num_sampled=0)
            t += draft.step_time(pre).time_s
        return t

    def _sample_one(self, r, done: int, now: float, tbt) -> None:
        """``r``'s step computed its whole sequence: it emits its next token (its first when
        ``done`` is 0) at ``now``."""
        r.num_output_done = done + 1
        self.outstanding_tokens += 1
        if done == 0:
            r.first_token_s = now
        else:
            tbt.append(now - r.last_token_s)
        r.last_token_s = now

    def _finish_or_hand_off(self, r, now: float, handed: list) -> bool:
        """After ``r`` emitted tokens: complete it (True) when it has all of them; on a prefill
        replica, queue it in ``handed`` for the decode pool instead."""
        if r.num_output_done == r.output_tokens:
            r.finish_s = now
            self.kv.free(r)
            self.outstanding_tokens -= r.prompt_tokens + r.num_output_done
            self.recorder.complete(r)
            return True
        if self.role == "prefill":
            handed.append(r)
        return False

    def _commit(self, batch: Batch, cost, start: float, extra_s: float = 0.0) -> None:
        now = self.env.now
        rec = self.recorder
        finished = False
        handed = []
        tbt = rec.tbt
        for r, q in batch.items:
            done = r.num_output_done
            n = r.prompt_tokens + done
            if q > 1 and done > 0 and r.num_computed_tokens == n - 1:
                # speculative verify of q = k + 1 tokens: the accepted draft tokens plus one more
                k, a, _, rng = self.spec
                accepted = min(int(rng.geometric(1.0 - a)) - 1, k) if a < 1.0 else k
                m = min(accepted + 1, r.output_tokens - done)
                r.num_output_done = done + m
                r.num_computed_tokens = r.prompt_tokens + r.num_output_done - 1
                self.kv.shrink(r, r.num_computed_tokens)
                self.outstanding_tokens += m
                tbt.append(now - r.last_token_s)
                for _ in range(m - 1):
                    tbt.append(0.0)
                r.last_token_s = now
            else:
                r.num_computed_tokens += q
                if r.num_computed_tokens != n:  # a prompt chunk: no token yet
                    continue
                self._sample_one(r, done, now, tbt)
            finished |= self._finish_or_hand_off(r, now, handed)
        if finished:
            self.running[:] = [r for r in self.running if r.status != "completed"]
            if self.after_free is not None:
                self.after_free()
        if handed:
            gone = {id(r) for r in handed}
            self.running[:] = [r for r in self.running if id(r) not in gone]
            self._hand_off(handed, start)
        rec.step(self.index, start, cost, batch, self.kv.num_used, extra_s)

    def _hand_off(self, handed: list, start: float) -> None:
        """Pass the requests whose prompt the step that began at ``start`` finished to the decode
        pool, each with its share (by KV tokens) of the step's time: how long its KV could stream
        while the step ran (``policy.link.overlap``)."""
        window = self.env.now - start
        total = sum(r.num_computed_tokens for r in handed)
        for r in handed:
            self.outstanding_tokens -= r.prompt_tokens + r.num_output_done
            self.handoff(r, self, window * r.num_computed_tokens / total)
