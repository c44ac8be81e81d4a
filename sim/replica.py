"""One model replica as a SimPy process: decide -> cost -> timeout -> commit.

The policy decides (plain data); the replica applies the decision at the start of the step
(preempt, admit, allocate KV), waits the step's time, then commits it at the end (advance token
counts, stamp times, free finished requests' KV, record the step).
"""

from __future__ import annotations

from collections import deque
from math import isnan

from policies.base import ReplicaState
from sim.kv_cache import BlockAllocator


class Replica:
    def __init__(self, env, index: int, policy, cost_model, kv: BlockAllocator, recorder, max_context_tokens: int):
        self.env = env
        self.index = index
        self.policy = policy
        self.cost_model = cost_model
        self.kv = kv
        self.recorder = recorder
        self.max_context_tokens = max_context_tokens
        self.running: list = []
        self.waiting: deque = deque()
        self.state = ReplicaState(self.running, self.waiting, kv)
        self.outstanding_tokens = 0  # prompt + output so far, over unfinished requests here
        self._wakeup = None
        self.process = env.process(self._run())

    # ---------------------------------------------------------------- arrivals
    def rejection_reason(self, req) -> str | None:
        total = req.prompt_tokens + req.output_tokens
        if total > self.max_context_tokens:
            return f"prompt + output = {total} tokens exceeds the model's context length {self.max_context_tokens}"
        # The last output token is sampled, not stored: the KV never holds more than total - 1.
        blocks = self.kv.blocks_for(total - 1)
        if blocks > self.kv.num_blocks:
            return (f"prompt + output = {total} tokens needs {blocks} KV blocks; the replica has "
                    f"{self.kv.num_blocks} in all")
        return self.policy.admission_error(req.prompt_tokens, req.output_tokens)

    def submit(self, req) -> None:
        req.replica = self.index
        reason = self.rejection_reason(req)
        if reason is not None:
            self.recorder.reject(req, reason)
            return
        self.waiting.append(req)
        self.outstanding_tokens += req.prompt_tokens
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()

    # ---------------------------------------------------------------- the loop
    def _run(self):
        env = self.env
        while True:
            if not self.running and not self.waiting:
                self._wakeup = env.event()
                yield self._wakeup
                self._wakeup = None
            self.state = self.state.__class__(self.running, self.waiting, self.kv, env.now)
            batch = self.policy.next_batch(self.state)
            start = env.now
            self._apply(batch, start)
            if batch.empty:
                if batch.preempted:
                    continue
                raise RuntimeError(f"replica {self.index}: policy scheduled nothing with "
                                   f"{len(self.running)} running and {len(self.waiting)} waiting")
            cost = self.cost_model.step_time(batch)
            yield env.timeout(cost.time_s)
            self._commit(batch, cost, start)

    def _apply(self, batch, now: float) -> None:
        running, waiting, kv = self.running, self.waiting, self.kv
        if batch.preempted:
            n = len(batch.preempted)
            assert set(map(id, running[len(running) - n:])) == set(map(id, batch.preempted)), \
                "policy must preempt from the tail of the running list"
            del running[len(running) - n:]
            for r in batch.preempted:  # newest first, so the oldest ends at the front
                kv.free(r)
                r.num_computed_tokens = 0
                r.preemptions += 1
                waiting.appendleft(r)
        for r in batch.admitted:
            assert waiting[0] is r, "policy must admit from the front of the waiting queue"
            waiting.popleft()
            running.append(r)
            if isnan(r.scheduled_s):
                r.scheduled_s = now
        for r, q in batch.items:
            ok = kv.grow(r, r.num_computed_tokens + q)
            assert ok, "policy scheduled more KV than is free"

    def _commit(self, batch, cost, start: float) -> None:
        now = self.env.now
        rec = self.recorder
        finished = 0
        for r, q in batch.items:
            r.num_computed_tokens += q
            if r.num_computed_tokens == r.prompt_tokens + r.num_output_done:  # a token is sampled
                r.num_output_done += 1
                self.outstanding_tokens += 1
                if r.num_output_done == 1:
                    r.first_token_s = now
                else:
                    rec.tbt.append(now - r.last_token_s)
                r.last_token_s = now
                if r.num_output_done == r.output_tokens:
                    r.finish_s = now
                    self.kv.free(r)
                    self.outstanding_tokens -= r.prompt_tokens + r.num_output_done
                    rec.complete(r)
                    finished += 1
        if finished:
            self.running[:] = [r for r in self.running if r.status != "completed"]
        rec.step(self.index, start, cost, batch, self.kv.num_used)
