"""Continuous (iteration-level) batching with paged KV, as vLLM does without chunked prefill.

Each step: every running request decodes one token (oldest first); if KV runs out, the newest
running request is preempted (recompute: its KV is freed and it re-queues at the front of the
waiting queue). If nobody was preempted, waiting requests are admitted FCFS with their whole
prompt (plus any output already emitted, after a preemption) while ``max_num_seqs``,
``max_num_batched_tokens`` and free KV blocks allow.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.base import ReplicaState
from sim.batch import Batch, make_batch


@dataclass(frozen=True)
class ContinuousPolicy:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192

    def admission_error(self, prompt_tokens: int, max_tokens: int) -> str | None:
        # After a preemption the request is recomputed in one prefill of prompt + emitted output
        # (at most max_tokens - 1), which must fit the per-step token budget.
        worst = prompt_tokens + max_tokens - 1
        if worst > self.max_num_batched_tokens:
            return (f"prompt + output - 1 = {worst} tokens exceeds policy.max_num_batched_tokens="
                    f"{self.max_num_batched_tokens} (a whole-prompt prefill, or its recompute, could never be scheduled)")
        return None

    def next_batch(self, state: ReplicaState) -> Batch:
        kv = state.kv
        bs = kv.block_size
        free = kv.num_free
        budget = self.max_num_batched_tokens
        running = state.running
        items = []
        preempted = []
        end = len(running)  # running[end:] have been preempted this step
        i = 0
        while i < end:
            r = running[i]
            q = r.num_tokens - r.num_computed_tokens
            if q > budget:  # token budget spent: this one waits for the next step
                i += 1
                continue
            need = -(-(r.num_computed_tokens + q) // bs) - r.kv_blocks
            while need > free:
                if end - 1 > i:  # preempt the newest running request and retry
                    end -= 1
                    victim = running[end]
                    preempted.append(victim)
                    free += victim.kv_blocks
                else:  # nobody newer left: preempt this one
                    preempted.append(r)
                    end = i
                    break
            else:
                free -= need if need > 0 else 0
                budget -= q
                items.append((r, q))
            i += 1

        admitted = []
        if not preempted:
            n_seqs = len(running)
            for r in state.waiting:
                if n_seqs >= self.max_num_seqs:
                    break
                q = r.num_tokens - r.num_computed_tokens
                if q > budget:
                    break
                need = -(-q // bs)
                if need > free:
                    break
                free -= need
                budget -= q
                n_seqs += 1
                items.append((r, q))
                admitted.append(r)
        return make_batch(items, preempted, admitted)
