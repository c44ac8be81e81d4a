"""A step's schedule as plain data, and the aggregate counts the cost model derives from it."""

from __future__ import annotations

from typing import NamedTuple


class Batch(NamedTuple):
    """What one step runs: ``items`` maps each scheduled request to its tokens this step.

    Decisions the replica applies before the step, in this order:
    ``preempted`` (newest first; taken from the tail of the running list): their KV is freed
    (recompute: back to the front of the waiting queue) or, for those also in ``swap_out``, copied
    to host memory (to the swapped queue); ``swap_in``: swapped requests copied back and running
    again; ``admitted``: requests from the front of the waiting queue (in order) that join the
    running set, with ``prefix_hits`` (request, cached tokens) for those whose prompt starts with
    KV already in the prefix cache; ``reserve`` (request, tokens): KV reserved up front (static
    batching). ``wake_at_s``: with an empty batch, when the policy wants to be asked again even if
    nothing arrives (static batching's timeout; ``inf`` is never, as None).

    The counts below are fixed when the batch is built (from each request's
    ``num_computed_tokens`` at that moment, or its prefix hit) and are all the cost model needs:
    ``num_tokens`` tokens go through the linear layers (plus ``padding_tokens``); attention of a
    request with ``c`` tokens of KV and ``q`` new tokens does ``q*c + q*(q+1)/2`` query-key products
    (causal) and touches ``c + q`` tokens of KV; ``num_sampled`` sequences reach the LM head.
    A request is decoding when its KV holds everything but its last emitted token; its ``q`` is 1,
    or ``k + 1`` when speculative tokens are verified.

    A NamedTuple (immutable; built once per step, so cheap to build matters).
    """

    items: tuple = ()  # ((Request, tokens), ...)
    preempted: tuple = ()
    admitted: tuple = ()
    num_seqs: int = 0
    num_tokens: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    num_prefill_seqs: int = 0
    attn_pairs: float = 0.0  # sum of q*c + q*(q+1)/2 (padding included)
    context_tokens: int = 0  # sum of c + q (KV tokens touched by attention, padding included)
    num_sampled: int = 0
    padding_tokens: int = 0
    num_decode_seqs: int = 0
    decode_context_tokens: int = 0  # the part of context_tokens that decoding sequences touch: sum of c + q
    decode_attn_pairs: float = 0.0  # the part of attn_pairs of decoding sequences
    swap_out: tuple = ()
    swap_in: tuple = ()
    prefix_hits: tuple = ()  # ((Request, cached_tokens), ...)
    reserve: tuple = ()  # ((Request, tokens), ...)
    wake_at_s: float | None = None
    # the waiting request at the head of the queue whose whole prompt fits the token budget on its
    # own but not next to this step's other tokens (non-chunked continuous batching), if any
    budget_blocked: object = None
    set_seqs: int = 0  # members of the engine's decode set scheduled as one aggregate (not in items)
    # the policy's word: after this step, until a request arrives, every step decodes one token of
    # every running request and nothing else (``servesim.policies.base``)
    steady: bool = False
    # why admission stopped, if something was left waiting: (reason, request or None, tokens,
    # free KV blocks and sequence slots left then); reasons in ``servesim.policies.queues.WAIT_REASONS``.
    # Read by the decision trace (``servesim.core.decisions``) only.
    stop: tuple | None = None
    steady_arrivals: bool = False  # with ``steady``: arrivals do not change it either (static batching)
    # with ``steady``, when the later steps are not plain decode steps (static batching's padded
    # slots): ``next_steps(n, dctx, i)`` is step ``i`` from this one (0: this one) as a batch
    # without requests, for ``n`` sequences touching ``dctx`` KV tokens in all (sum of c + 1);
    # None: plain decode steps of the running requests
    next_steps: object = None
    # with ``steady``: the decision holds only until a running request completes (requests wait
    # for room that decode steps only take and a completion gives back): a run of such steps ends
    # at the first completion (``servesim.policies.base``)
    until_completion: bool = False
    # with ``until_completion``: an arrival ranked behind the head of the waiting queue changes
    # nothing either (admission stops at the head; a keyed queue may rank an arrival ahead of it)
    arrivals_behind: bool = False
    # a model with a window on only some layers (``ModelSpec.partial_window_tokens``): this batch
    # as those layers attend (``windowed``), priced for them while this one is for the others;
    # set by the engine before pricing, None otherwise
    windowed: object = None

    @property
    def empty(self) -> bool:
        return not self.items and not self.set_seqs


def make_batch(items, preempted=(), admitted=(), *, prefix_hits=(), swap_out=(), swap_in=(), reserve=(),
               padding=(0, 0, 0), wake_at_s=None, decode_set=(0, 0), budget_blocked=None, steady=False,
               steady_arrivals=False, until_completion=False, arrivals_behind=False,
               stop=None) -> Batch:
    """Build a ``Batch`` from ``(request, tokens)`` pairs, deriving the aggregate counts.

    ``prefix_hits``: (request, cached_tokens) for admitted requests whose first tokens are cached:
    their attention starts at that context. ``padding``: (tokens, attention pairs, context tokens)
    of padded slots (static batching), charged like real tokens. ``decode_set``: (n, sum of c)
    of ``n`` more decoding sequences (one token each, ``c`` KV tokens before the step) that are
    not listed in ``items`` (the engine's decode set, ``ReplicaState.decoding``, whose first two
    fields are these); they count in every total. ``steady``, ``steady_arrivals``,
    ``until_completion``, ``arrivals_behind``: see ``Batch``.
    """
    hit = {id(r): c for r, c in prefix_hits} if prefix_hits else None
    n_set, c_set = decode_set[0], decode_set[1]
    # each set member: q = 1, pairs = c + 1, KV touched = c + 1, sampled
    num_tokens = decode = ndec = sampled = n_set
    ctx = dctx = dpairs = pairs = c_set + n_set
    prefill = nprefill = 0
    for req, q in items:
        c = req.num_computed_tokens
        if hit is not None and id(req) in hit:
            c = hit[id(req)]
        n = req.prompt_tokens + req.num_output_done
        num_tokens += q
        p = q * c + q * (q + 1) // 2
        pairs += p
        ctx += c + q
        if c + q >= n:
            sampled += 1
        if req.num_output_done > 0 and c == n - 1:
            decode += q
            ndec += 1
            dctx += c + q
            dpairs += p
        else:
            prefill += q
            nprefill += 1
    pad_tokens, pad_pairs, pad_ctx = padding
    return Batch(tuple(items), tuple(preempted), tuple(admitted), len(items) + n_set, num_tokens, prefill, decode,
                 nprefill, float(pairs + pad_pairs), ctx + pad_ctx, sampled, pad_tokens, ndec, dctx, float(dpairs),
                 tuple(swap_out), tuple(swap_in), tuple(prefix_hits), tuple(reserve), wake_at_s, budget_blocked,
                 n_set, steady, stop, steady_arrivals, None, until_completion, arrivals_behind)


def attention_span(c: int, q: int, window: int | None = None) -> tuple[int, int]:
    """(query-key pairs, KV tokens touched) of ``q`` new tokens attending after ``c`` computed
    ones, causal: the token at position p attends to the keys at p - window + 1 .. p (all of them
    without a ``window``), so pairs = sum over j = c+1 .. c+q of min(j, window), and the keys
    touched run from max(0, c - window + 1) to c + q - 1."""
    end = c + q
    if window is None or end <= window:
        return q * c + q * (q + 1) // 2, end
    if c >= window:
        pairs = q * window
    else:
        pairs = (window * (window + 1) - c * (c + 1)) // 2 + (end - window) * window
    return pairs, min(end, window + q - 1)


def windowed(batch: Batch, window: int) -> Batch:
    """``batch`` with its requests' attention limited to a sliding ``window`` of tokens
    (``ModelSpec.sliding_window_tokens``): the pairs and KV tokens of every item whose context
    reaches past the window are replaced by ``attention_span``'s. Decode-set members (not in
    ``items``) are left as they are: the set's aggregate is windowed already (its
    ``context_tokens`` count ``window - 1`` for a member past the window). Static batching's
    padding is charged without the window."""
    dpairs = dctx = pairs = ctx = 0
    hit = {id(r): c for r, c in batch.prefix_hits} if batch.prefix_hits else None
    for req, q in batch.items:
        c = req.num_computed_tokens
        if hit is not None and id(req) in hit:
            c = hit[id(req)]
        if c + q <= window:
            continue
        p, k = attention_span(c, q, window)
        p, k = q * c + q * (q + 1) // 2 - p, c + q - k  # what the window saves
        pairs += p
        ctx += k
        if req.num_output_done > 0 and c == req.prompt_tokens + req.num_output_done - 1:
            dpairs += p
            dctx += k
    if not pairs and not ctx:
        return batch
    return batch._replace(attn_pairs=float(int(batch.attn_pairs) - pairs), context_tokens=batch.context_tokens - ctx,
                          decode_attn_pairs=float(int(batch.decode_attn_pairs) - dpairs),
                          decode_context_tokens=batch.decode_context_tokens - dctx)


def model_batch(model, prefill=(), decode_contexts=(), spec_tokens: int = 0, *,
                decode_set: tuple[int, int] = (0, 0)) -> Batch:
    """``synthetic_batch`` as ``model`` (a ``ModelSpec``) attends, the rule the engine prices its
    steps by: within its sliding window on every layer (``ModelSpec.sliding_window_tokens``), or,
    with a window on only some layers (``partial_window_tokens``, Gemma-2), carrying the windowed
    twin (``Batch.windowed``) the cost model prices those layers' attention with (the engine's
    ``windowed`` of each step). Every estimate that prices a step without requests (``servesim
    cost``, ``plan``'s bounds and floors, ``validate``'s, the gateway's TTFT prediction, the
    lessons) builds it here, so none prices a window as full attention."""
    batch = synthetic_batch(prefill, decode_contexts, spec_tokens, model.sliding_window_tokens, decode_set=decode_set)
    if model.partial_window_layers:
        batch = batch._replace(windowed=synthetic_batch(prefill, decode_contexts, spec_tokens,
                                                        model.partial_window_tokens, decode_set=decode_set))
    return batch


def synthetic_batch(prefill=(), decode_contexts=(), spec_tokens: int = 0, window: int | None = None, *,
                    decode_set: tuple[int, int] = (0, 0)) -> Batch:
    """A batch without requests, for the cost CLI and tests.

    ``prefill``: (new_tokens, tokens_already_computed) per prefill sequence; ``decode_contexts``:
    KV tokens before the step for each decoding sequence (each verifies ``spec_tokens + 1``);
    ``decode_set``: (n, c): n more decoding sequences with c KV tokens each (the same as n
    times c in ``decode_contexts``, in O(1)); ``window``: the model's sliding attention window,
    if any (``attention_span``).
    """
    prefill = list(prefill)
    dc = list(decode_contexts)
    q = spec_tokens + 1
    dec = [attention_span(c, q, window) for c in dc]
    pre = [attention_span(c, p, window) for p, c in prefill]
    dpairs = sum(x for x, _ in dec)
    dctx = sum(k for _, k in dec)
    n_set = decode_set[0]
    if n_set:
        x, k = attention_span(decode_set[1], q, window)
        dpairs += n_set * x
        dctx += n_set * k
    ndec = len(dc) + n_set
    pairs = sum(x for x, _ in pre) + dpairs
    ctx = sum(k for _, k in pre) + dctx
    p_tokens = sum(p for p, _ in prefill)
    n = len(prefill) + ndec
    return Batch((), (), (), n, p_tokens + q * ndec, p_tokens, q * ndec, len(prefill), float(pairs), ctx, n,
                 0, ndec, dctx, float(dpairs))
