"""Shortest prompt first: continuous batching that admits the shortest waiting prompt first.

Use it from a scenario (run servesim from this folder, or put it on PYTHONPATH):

    policy:
      name: shortest_prompt_first:ShortestPromptFirst
      max_num_batched_tokens: 8192

Everything but the queue order is vLLM-style continuous batching (``ContinuousPolicy``): every
running request gets its next tokens, the newest is preempted when KV runs out, then waiting
requests are admitted while the token budget, ``max_num_seqs`` and free KV blocks allow. It keeps
the fast path: decoding requests are scheduled as one aggregate (``aggregates_decodes``) and
steady stretches of decode steps are fast-forwarded (``Batch.steady``).
"""

from dataclasses import dataclass

from servesim import ContinuousPolicy


@dataclass(frozen=True)
class ShortestPromptFirst(ContinuousPolicy):
    """FCFS replaced by shortest prompt first (ties: arrival order). Long prompts can starve
    while short ones keep arriving: a real deployment would age them (the packaged
    policy.queue: {order: sjf, aging_s: ...} does)."""

    @staticmethod
    def queue_key(request) -> int:
        # only what a scheduler knows: the prompt (not the output length, which it cannot see)
        return request.prompt_tokens
