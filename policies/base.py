"""The policy contract: decide what one step runs, as plain data. Nothing else.

A policy never touches SimPy, never allocates KV and never reads a request's true output
length (``Request.output_tokens``): only what a real scheduler knows (prompt, tokens emitted so
far, tokens computed, KV blocks held, free blocks). The replica commits the decision.

Two optional declarations let the engine go fast without knowing which policy it runs:

* ``Policy.aggregates_decodes`` (attribute, default False): the policy reads
  ``state.decoding`` (the decoding requests as one aggregate) and schedules them with
  ``make_batch(..., decode_set=state.decoding)``, or leaves the whole set out of a step (they
  wait it out, as vLLM V0's prompt-only steps make them). The engine then keeps decoding requests
  aggregated between steps, so a step costs O(1) in their number. A policy that reads
  ``state.running`` instead always sees every running request (the aggregate is dissolved
  first): correct, one step at a time.
* ``Batch.steady`` (per decision): "after this step, until a new request arrives, I would
  schedule exactly one decode token for every running request and nothing else" (with
  ``Batch.steady_arrivals``, arrivals do not change that either: static batching runs its batch
  to the end whatever arrives). The engine may
  then fast-forward runs of such steps in one event (their prices are the cost model's, step by
  step), stopping early when a request arrives, when the KV cache would run short or when a
  completion matters to someone (closed-loop clients, P/D hand-offs). With
  ``Batch.until_completion`` the decision holds only until a running request completes
  (requests wait for room that decode steps only take and a completion gives back, e.g. KV
  blocks or sequence slots at the head of the queue): the run ends at the first completion; with
  ``Batch.arrivals_behind``, an arrival ranked behind the head of the queue changes nothing either.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple, Protocol

from servesim.core.batch import Batch


class DecodeSet(NamedTuple):
    """The replica's decoding requests kept as one aggregate (oldest admission first, ahead of
    every other running request): ``num_seqs`` of them, ``context_tokens`` KV tokens computed in
    all (sum of c; under a sliding attention window of W tokens, sum of min(c, W - 1): what the
    next decode step attends, less one key each), ``blocks_needed`` new KV blocks their next
    decode token takes, ``prompt_tokens`` their prompts' tokens in all, ``past_window`` how many
    of them attend the whole sliding window (their context reached W - 1 tokens: min(c, W - 1) no
    longer grows; 0 without a window), ``crossing_window`` how many of the others will reach it
    before they complete (0 when every other one attends within the window to the end), and
    ``computed_tokens`` their computed tokens in all (sum of c, the window or not). A run of
    steps the policy shaped itself (``Batch.next_steps``) ends when one reaches the window."""

    num_seqs: int = 0
    context_tokens: int = 0
    blocks_needed: int = 0
    prompt_tokens: int = 0
    past_window: int = 0
    crossing_window: int = 0
    computed_tokens: int = 0


NO_DECODE_SET = DecodeSet()


class ReplicaState:
    """A read-only view of one replica for its policy (the containers are the replica's own; a
    policy must not mutate them).

    ``running``: every request holding KV, oldest admission first (reading it dissolves the
    engine's decode set: see ``decoding``). ``tail``: the running requests outside the decode set
    (all of them when there is none). ``decoding``: the decode set (``DecodeSet``), ahead of the
    tail in admission order. ``waiting``: the queue of requests to admit, in the policy's order
    (``Policy.queue_key``; FCFS by default; preempted requests go back ahead of their equals).
    ``kv``: the block allocator (read ``num_free``, ``block_size``, ``num_blocks``, ``caching``,
    ``cached_prefix_blocks(req)``). ``swapped``: requests whose KV sits in host memory (FCFS);
    ``host_free_blocks``: host room for more; ``landed``: (P/D decode side) requests whose prompt
    KV arrived and is mapped here, in the waiting queue's order. ``running_priorities``: the
    replica's count of running requests per priority (``PriorityCount``), or None; read it
    through ``lowest_running_priority``.
    """

    __slots__ = ("_running", "waiting", "kv", "now_s", "swapped", "host_free_blocks", "landed", "decoding",
                 "_materialize", "running_priorities")

    def __init__(self, running: list, waiting=None, kv=None, now_s: float = 0.0, swapped=(),
                 host_free_blocks: int = 0, landed=(), decoding: DecodeSet = NO_DECODE_SET, materialize=None,
                 running_priorities=None):
        self._running = running
        self.waiting = deque() if waiting is None else waiting
        self.kv = kv
        self.now_s = now_s
        self.swapped = swapped
        self.host_free_blocks = host_free_blocks
        self.landed = landed
        self.decoding = decoding
        self._materialize = materialize
        self.running_priorities = running_priorities

    @property
    def running(self) -> list:
        if self.decoding.num_seqs:
            self._running = self._materialize()
            self.decoding = NO_DECODE_SET
        return self._running

    @property
    def tail(self) -> list:
        return self._running

    @property
    def lowest_running_priority(self):
        """The largest ``priority`` value among the running requests (decode set included), read
        without dissolving it; None when none runs. Without a ``running_priorities`` count
        (workloads whose classes share one priority) it is read from the running list."""
        if self.running_priorities is not None:
            return self.running_priorities.lowest()
        running = self.running
        return max(r.priority for r in running) if running else None


class PriorityCount:
    """How many running requests hold each ``priority`` value (kept by the replica when its
    workload's classes have more than one), so that a policy can tell whether a lower-priority
    request runs without reading the running list."""

    __slots__ = ("counts",)

    def __init__(self):
        self.counts: dict = {}

    def add(self, p) -> None:
        self.counts[p] = self.counts.get(p, 0) + 1

    def remove(self, p) -> None:
        n = self.counts[p] - 1
        if n:
            self.counts[p] = n
        else:
            del self.counts[p]

    def lowest(self):
        """The largest priority value running (the lowest priority), or None."""
        return max(self.counts) if self.counts else None


class Policy(Protocol):
    """What the engine asks of a policy (``servesim.policies.POLICIES`` lists the packaged ones;
    ``module:Class`` in ``policy.name`` loads another). Optional attributes: ``aggregates_decodes``
    (see the module docstring) and ``queue_key`` (a function ``request -> sort key`` ordering the
    waiting queue, e.g. prompt length for shortest-job-first; absent or None: FCFS)."""

    def next_batch(self, state: ReplicaState) -> Batch:
        """The next step's batch; an empty batch means "nothing can run until something changes"."""

    def admission_error(self, prompt_tokens: int, max_tokens: int, kv=None) -> str | None:
        """Why a request with this prompt and output limit could never be scheduled, or None.
        ``kv`` (the replica's allocator: ``block_size``, ``num_blocks``, ``blocks_for``), when
        given, lets the policy also refuse a request whose admission could never find its blocks
        free (e.g. under a watermark); the replica has already checked that the whole sequence
        fits its blocks."""
