"""Static (request-level) batching, as FasterTransformer or Hugging Face ``generate`` serve.

A batch forms when ``max_num_seqs`` requests wait, or ``batch_timeout_s`` after the oldest
waiting request arrived. It takes up to ``max_num_seqs`` requests FCFS while their KV fits,
reserving for each slot the padded prompt (the batch's longest) plus ``max_output_tokens`` (or up
to the model's context length) up front. It prefills every slot padded to the longest prompt,
then decodes every slot each step until the last request finishes: finished slots keep running
as padding. Nothing joins until the whole batch is done, and nothing is preempted.
"""

from __future__ import annotations

from servesim.policies.base import ReplicaState
from servesim.core.batch import Batch, make_batch


class StaticPolicy:
    """Holds its current batch's shape (slots, padded prompt) between steps: one instance per
    replica."""

    def __init__(self, max_num_seqs: int, batch_timeout_s: float, max_output_tokens: int | None,
                 max_context_tokens: int):
        self.max_num_seqs = max_num_seqs
        self.batch_timeout_s = batch_timeout_s
        self.max_output_tokens = max_output_tokens
        self.max_context_tokens = max_context_tokens
        self._slots = 0
        self._padded_prompt = 0

    @classmethod
    def from_config(cls, cfg, model):
        return cls(cfg.max_num_seqs, cfg.batch_timeout_s, cfg.max_output_tokens, model.max_context_tokens)

    def admission_error(self, prompt_tokens: int, max_tokens: int, kv=None) -> str | None:
        if self.max_output_tokens is not None and max_tokens > self.max_output_tokens:
            return (f"output of {max_tokens} tokens exceeds policy.max_output_tokens={self.max_output_tokens} "
                    f"(the KV reserved per slot)")
        return None

    def _padded_decode(self, dec) -> Batch:
        """A decode step of the batch in flight from the decode set alone: the same counts as
        the running list gives below (every live slot attends over its own tokens and the padding
        of its prompt to P; an idle slot over P + k, padding all), and how the next steps will
        look. The padding is P + k less each live slot's tokens (dctx, their sum of c + 1), unless
        a slot's attention is cut by a sliding window: then it is n x P less their prompts, which
        holds until one of them completes, so the decision holds until then
        (``Batch.until_completion``)."""
        slots, P, n0 = self._slots, self._padded_prompt, dec.num_seqs
        k0 = (dec.computed_tokens - dec.prompt_tokens) // n0 + 1  # decode steps so far, this one included
        windowed = bool(dec.past_window or dec.crossing_window)
        prompt_pad = n0 * P - dec.prompt_tokens  # (the live slots' prompt padding, while they are live)

        def step(n: int, dctx: int, i: int) -> Batch:
            k, idle = k0 + i, slots - n
            pad = (prompt_pad if windowed else n * (P + k) - dctx) + idle * (P + k)
            return Batch(num_seqs=n, num_tokens=n, decode_tokens=n, num_decode_seqs=n, num_sampled=n,
                         attn_pairs=float(dctx + pad), context_tokens=dctx + pad, decode_context_tokens=dctx,
                         decode_attn_pairs=float(dctx), padding_tokens=idle, set_seqs=n)

        return step(n0, dec.context_tokens + n0, 0)._replace(
            steady=True, steady_arrivals=True, next_steps=step, until_completion=windowed)

    def _slot_tokens(self, padded_prompt: int) -> int:
        out = self.max_output_tokens if self.max_output_tokens is not None else self.max_context_tokens - padded_prompt
        return padded_prompt + max(out, 1)

    # the batch in flight decodes as the engine's decode set (one aggregate: O(1) a step), and
    # its steps repeat, whatever arrives, until its last request finishes (``Batch.steady_arrivals``)
    aggregates_decodes = True

    def next_batch(self, state: ReplicaState) -> Batch:
        dec = state.decoding
        if dec.num_seqs and not state.tail:
            return self._padded_decode(dec)
        running = state.running
        if running:  # the batch in flight: every live slot decodes, finished slots are padding
            # (its slots were prefilled in one step and each decode step since took one token of
            # each: k, the decode steps so far with this one, is any live slot's c - prompt + 1)
            P, k = self._padded_prompt, running[0].num_computed_tokens - running[0].prompt_tokens + 1
            idle = self._slots - len(running)
            # attention runs over the padded length: P + k - 1 tokens of KV before this step's
            # token, P + k with it (a live slot's c + 1 with its prompt padded to P; a finished
            # slot's the same: it kept stepping as padding)
            pad_ctx = sum(P - r.prompt_tokens for r in running) + idle * (P + k)
            return make_batch([(r, 1) for r in running], padding=(idle, pad_ctx, pad_ctx))

        waiting = state.waiting
        if not waiting:
            return make_batch(())
        deadline = waiting[0].arrival_s + self.batch_timeout_s
        if len(waiting) < self.max_num_seqs and state.now_s < deadline:
            return make_batch((), wake_at_s=deadline)
        kv = state.kv
        chosen, P = [], 0
        for r in waiting:
            if len(chosen) == self.max_num_seqs:
                break
            p = max(P, r.prompt_tokens)
            if (len(chosen) + 1) * kv.blocks_for(self._slot_tokens(p)) > kv.num_free:
                break
            chosen.append(r)
            P = p
        if not chosen:  # one request alone: reserve what the replica has
            chosen, P = [waiting[0]], waiting[0].prompt_tokens
        slot = min(self._slot_tokens(P), kv.num_free * kv.block_size)
        self._slots, self._padded_prompt = len(chosen), P
        n = len(chosen)
        pad_tokens = n * P - sum(r.prompt_tokens for r in chosen)
        pad_pairs = n * P * (P + 1) // 2 - sum(r.prompt_tokens * (r.prompt_tokens + 1) // 2 for r in chosen)
        return make_batch([(r, r.prompt_tokens) for r in chosen], admitted=chosen,
                          reserve=[(r, slot) for r in chosen], padding=(pad_tokens, pad_pairs, pad_tokens))
