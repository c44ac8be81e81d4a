"""What a policy ranks requests by: the waiting queue's order and the preemption victim.

**Orders** (``policy.queue.order``; the key a ``KeyedQueue`` sorts by, ties first in first out):

* ``fcfs``: arrival order (no key: a plain deque).
* ``priority``: (class priority, arrival time), lower first: vLLM's priority policy.
* ``sjf``: shortest prompt first.
* ``sjf_predicted``: shortest predicted remaining output first (``Request.predicted_output_tokens``,
  set by the cluster's predictor, less the tokens already emitted: a preempted request ranks by
  what it has left).
* ``edf``: earliest deadline first, the deadline being arrival + the class's TTFT SLO (requests
  without one rank last, in arrival order).

**Aging** (``policy.queue.aging_s``) protects ``priority`` and SJF from starvation: a request's
rank improves as it waits, by one priority level per ``aging_s`` seconds (``priority``), or as if
its length halved every ``aging_s`` seconds (SJF: the key is then log2 of the length). Such an
effective key at time t is ``base - (t - arrival) / aging_s``: the ``t / aging_s`` part is the
same for every waiting request, so the order between them never changes with time and the
static key ``base + arrival / aging_s`` sorts them exactly as the time-varying one would at any
instant. A sorted queue can hold it (no re-sorting at decision time), and a request inserted
later (an arrival, a preempted request) lands where the time-varying order puts it. ``fcfs`` and
``edf`` need none: their keys already grow with arrival time.

**Victims** (``policy.preemption_victim``): when the KV cache cannot hold the next tokens of the
running requests, ``newest`` (vLLM's FCFS: the last admitted), ``lowest_priority`` (vLLM's
priority policy: the largest (priority, arrival time)) or ``largest_kv`` (the request holding
the most KV blocks; ties: the newest). ``auto``: ``lowest_priority`` under the priority order,
else ``newest``.
"""

from __future__ import annotations

import math

ORDERS = ("fcfs", "priority", "sjf", "sjf_predicted", "edf")
VICTIMS = ("auto", "newest", "lowest_priority", "largest_kv")

# why a request waited at a decision (the decision trace, ``servesim.core.decisions``)
WAIT_REASONS = {
    "arrived": "arrived while a step ran: it waits for the next decision",
    "budget": "its tokens did not fit what was left of max_num_batched_tokens",
    "kv": "its KV blocks did not fit the free blocks",
    "watermark": "its KV blocks fit the free blocks but not above the admission watermark",
    "max_num_seqs": "max_num_seqs requests were running",
    "head_of_line": "it would have fit, but a request ahead of it in the queue did not (and it waits behind it)",
    "priority": "it would have fit, but a request of higher priority ahead of it did not",
    "swapped_first": "swapped-out (or, P/D, landed) requests come back first, and one did not fit",
    "preemption_step": "the step preempted a running request: nothing is admitted in such a step",
    "preempted": "preempted: it waits out the step that preempted it",
    "policy": "the policy held it back without saying why (e.g. static batching forming a batch)",
    "admission": "rejected by admission control (the reason column says which rule)",
}


class QueueKey:
    """``key(request)`` for one order (see the module docstring); a class, not a closure, so
    that policies stay plain, comparable data."""

    __slots__ = ("order", "aging_s")

    def __init__(self, order: str, aging_s: float | None = None):
        self.order = order
        self.aging_s = aging_s

    def __call__(self, r):
        order, aging = self.order, self.aging_s
        if order == "priority":
            return (r.priority, r.arrival_s) if aging is None else r.priority + r.arrival_s / aging
        if order == "edf":
            return r.deadline_s
        size = r.prompt_tokens if order == "sjf" else max(r.predicted_output_tokens - r.num_output_done, 1)
        return size if aging is None else math.log2(size) + r.arrival_s / aging

    def __eq__(self, other):
        return isinstance(other, QueueKey) and (self.order, self.aging_s) == (other.order, other.aging_s)

    def __hash__(self):
        return hash((self.order, self.aging_s))

    def __repr__(self):
        return f"QueueKey({self.order!r}, aging_s={self.aging_s})"


def queue_key(order: str, aging_s: float | None = None):
    """The waiting queue's sort key for ``order`` (None for FCFS: a plain deque)."""
    if order not in ORDERS:
        raise ValueError(f"unknown queue order {order!r}; valid: {', '.join(ORDERS)}")
    return None if order == "fcfs" else QueueKey(order, aging_s)


def _lowest_priority(cands):
    return max(cands, key=lambda r: (r.priority, r.arrival_s))


def _largest_kv(cands):
    return max(reversed(cands), key=lambda r: r.kv_blocks)  # reversed: ties go to the newest


def victim_picker(victim: str, order: str = "fcfs"):
    """``pick(candidates) -> request`` (candidates: running requests, oldest admission first) for
    a ``policy.preemption_victim``; None for ``newest`` (the tail of the running list)."""
    if victim == "auto":
        victim = "lowest_priority" if order == "priority" else "newest"
    if victim == "newest":
        return None
    if victim == "lowest_priority":
        return _lowest_priority
    if victim == "largest_kv":
        return _largest_kv
    raise ValueError(f"unknown preemption victim {victim!r}; valid: {', '.join(VICTIMS)}")
