"""A step's schedule as plain data, and the aggregate counts the cost model derives from it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Batch:
    """What one step runs: ``items`` maps each scheduled request to its tokens this step.

    ``preempted`` are requests whose KV the replica frees before the step (recompute: they go
    back to the front of the waiting queue). ``admitted`` are the waiting requests (from the front
    of the queue, in order) that join the running set with this step.

    The counts below are fixed when the batch is built (from each request's
    ``num_computed_tokens`` at that moment) and are all the cost model needs:
    ``num_tokens`` tokens go through the linear layers; attention of a request with ``c`` tokens
    of KV already computed and ``q`` new tokens does ``q*c + q*(q+1)/2`` query-key products (causal)
    and touches ``c + q`` tokens of KV; ``num_sampled`` sequences reach the LM head.
    """

    items: tuple = ()  # ((Request, tokens), ...)
    preempted: tuple = ()
    admitted: tuple = ()
    num_seqs: int = 0
    num_tokens: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    num_prefill_seqs: int = 0
    attn_pairs: float = 0.0  # sum of q*c + q*(q+1)/2
    context_tokens: int = 0  # sum of c + q (KV tokens touched by attention)
    num_sampled: int = 0
    padding_tokens: int = 0
    decode_context_tokens: int = 0  # the part of context_tokens that decoding sequences touch

    @property
    def empty(self) -> bool:
        return not self.items


def make_batch(items, preempted=(), admitted=()) -> Batch:
    """Build a ``Batch`` from ``(request, tokens)`` pairs, deriving the aggregate counts."""
    num_tokens = prefill = decode = nprefill = ctx = sampled = dctx = 0
    pairs = 0
    for req, q in items:
        c = req.num_computed_tokens
        num_tokens += q
        pairs += q * c + q * (q + 1) // 2
        ctx += c + q
        if c + q >= req.num_tokens:
            sampled += 1
        if q == 1 and req.num_output_done > 0 and c == req.num_tokens - 1:
            decode += 1
            dctx += c + 1
        else:
            prefill += q
            nprefill += 1
    return Batch(tuple(items), tuple(preempted), tuple(admitted), len(items), num_tokens, prefill, decode,
                 nprefill, float(pairs), ctx, sampled, 0, dctx)


def synthetic_batch(prefill=(), decode_contexts=()) -> Batch:
    """A batch without requests, for the cost CLI and tests.

    ``prefill``: (new_tokens, tokens_already_computed) per prefill sequence; ``decode_contexts``:
    KV tokens before the step for each decoding sequence.
    """
    prefill = list(prefill)
    decode_contexts = list(decode_contexts)
    pairs = sum(q * c + q * (q + 1) // 2 for q, c in prefill) + sum(c + 1 for c in decode_contexts)
    ctx = sum(q + c for q, c in prefill) + sum(c + 1 for c in decode_contexts)
    p_tokens = sum(q for q, _ in prefill)
    n = len(prefill) + len(decode_contexts)
    dctx = sum(c + 1 for c in decode_contexts)
    return Batch((), (), (), n, p_tokens + len(decode_contexts), p_tokens, len(decode_contexts),
                 len(prefill), float(pairs), ctx, n, 0, dctx)
