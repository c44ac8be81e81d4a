"""One model replica as a SimPy process: decide -> apply -> wait the step's time -> commit.

The policy decides every step (plain data, ``servesim.policies.base``); the replica applies the
decision at the start of the step (preempt or swap out, map prefix-cache hits, swap in, admit,
reserve and allocate KV), waits the step's time, then commits it at the end (advance token
counts, stamp times, free finished requests' KV, hand prefilled requests to the decode pool,
record the step). With async scheduling (the engine profile's), the decision at a step's end
was made when that step started: requests that arrived during the step wait in ``incoming``
until the next decision.

Two mechanisms make it fast without changing any result; ``fast=False`` (the reference engine,
a test oracle) turns both off:

* The **decode set**. With a policy that ``aggregates_decodes``, requests that decode (one token
  a step) are kept as one aggregate at the front of the running list, in admission order, each
  stored as (seq, s0, c0, d0, held): the replica's decode-step counter ``S``
  when it joined and its computed tokens and emitted output then (at counter ``S`` it has
  ``c0 + S - s0`` computed tokens). The replica keeps the sum of their contexts, a heap of the
  counter at which each completes (``s0 + output - d0``) and, per residue mod ``block_size``, how
  many need a new KV block at a step (a request with ``c`` computed tokens needs one exactly when
  ``c % block_size == 0``; one holding blocks reserved up front, or past a sliding window, needs
  none). Under a sliding window a member past it attends ``window`` keys a step whatever its
  context: the sum the policy sees counts ``window - 1`` for it (``_capx`` is what the window
  takes off), and a run's contexts grow by the members within it. A member that crosses the
  window while decoding does so at counters known when it joins (``_xheap``: from one it
  attends the whole window, from a later one it grows no block), which a run's plan meets as it
  meets completions. Their ``Request`` counters
  are brought up to date (settled) only when they leave the set. The policy sees the set as
  ``ReplicaState.decoding`` and schedules it whole; reading ``state.running`` dissolves it (same
  state, that step priced one request at a time), and it re-forms after the step.
* **Runs** of decode-only steps. When the policy says a decision is ``steady`` (until a request
  arrives, every step decodes what runs and nothing else), the next steps differ only by
  contexts growing one token each and members leaving as they complete: they run as one SimPy
  timeout per planned chunk (``_macro``), their times from ``CostModel.decode_step_times`` (bit
  for bit ``step_time``; their FLOPs, bytes and bound are filled into the step columns
  afterwards). Completions inside a run are settled in bulk, unless something reacts to a
  completion at its time (closed-loop clients; on the P/D decode side, a hand-off waiting for
  room): then a run stops at the first one (``end_bulk`` cuts a run planned past completions
  when a hand-off starts waiting). A run is planned up to the step in flight when the replica's next
  request arrives, if the router knows it ahead of time (``next_arrival_s``); whatever else may
  change the next decision interrupts the run after the step in flight: an arrival or hand-off
  off the plan (``wake``), KV mapped from outside (``kv_changed``). Observers that read a
  replica's counters or KV mid-run (routers, the P/D hand-off, the queue sampler, the end of a
  run cut by ``workload.duration_s``) call ``settle(now)`` first (``Cluster.settle``). Virtual
  engines of a pipelined replica take their steps one at a time through the shared stages and
  never plan runs. A decision held only until a completion (``Batch.until_completion``: requests
  wait for room a completion gives back) runs the same way, deaf to arrivals when the policy says
  so, and ends at the first completion (never settled in bulk).

``stats`` counts what took the fast path (for the equivalence tests): steps whose decode set was
scheduled as one aggregate, runs (of them, ``held_runs`` held until a completion), and the steps
inside runs.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import numbers
import sys
from collections import deque
from math import isnan

import numpy as np
from simpy import Interrupt

from servesim.core.batch import Batch, make_batch, windowed
from servesim.core.instant import end_of_instant
from servesim.errors import InputError, PluginError, call_plugin, clip, is_plugin, plugin_name, shown
from servesim.core.kv import BlockAllocator
from servesim.core.runs import Cost, Run, delay_to
from servesim.policies.base import NO_DECODE_SET, DecodeSet, PriorityCount, ReplicaState
from servesim.policies.continuous import ContinuousPolicy
from servesim.policies.static import StaticPolicy


# how the reason of a request rejected while decoding, its sequence outgrowing the KV cache, begins
# (``Replica.outgrow``; after "decode pool: " on a P/D split's decode side)
OUTGREW = "its sequence outgrew the KV cache while decoding"


# how the reason of a request ended when a preemption for recompute finds its sequence over the
# whole-prompt token budget begins (``Replica.recompute_limit``)
OVER_BUDGET = "preempted with a sequence longer than the token budget"

# how the reason of a request ended when a preemption for recompute finds its sequence needing more
# KV blocks than the admission watermark ever leaves free (``Replica.recompute_blocks``)
NEVER_FITS = "preempted with a sequence that can never be admitted again"


def _sequence_counted(total: int, k: int) -> str:
    """What a KV check of a whole sequence of ``total`` tokens (prompt + output) counted: the KV of
    all but its last token plus the ``k`` speculative tokens a step verifies, or, without them,
    the sequence."""
    return (f"prompt + output - 1 + k = {total - 1 + k} tokens (the KV of all but its last token, plus the k={k} "
            "speculative tokens a step verifies)" if k else f"prompt + output = {total} tokens")

class DecisionError(RuntimeError):
    """A step's decision the engine cannot apply (more KV than is free, a preempted request
    that is not running). Raised with ``if``, not ``assert``: ``python -O`` (PYTHONOPTIMIZE)
    drops asserts, and a plug-in's batch over the free KV blocks then ran, exit 0, as if the
    cache held it. A plug-in's is a ``PluginError`` (``_plugin_apply``)."""


class KeyedQueue:
    """A waiting queue ordered by ``key(request)`` (ties: first in, first out), for policies that
    set ``queue_key`` (shortest job first, priorities). The deque operations the engine uses:
    ``append`` (an arrival), ``appendleft`` (a preempted request: ahead of its equals),
    ``popleft``, ``remove``, iteration in order, ``[0]``, ``len``; and ``ranked_before`` for
    admission control. Alongside the sorted entries it keeps their requests' token counts (fixed
    while a request waits), so that the tokens ranked before a key add up in C, not in a Python
    loop over the queue."""

    __slots__ = ("key", "_items", "_tokens", "_seq")

    def __init__(self, key):
        self.key = key
        self._items: list = []  # (key, seq, request id, request), sorted
        self._tokens: list = []  # num_tokens of each entry of _items, in the same order
        self._seq = 0

    def _insert(self, item) -> None:
        i = bisect.bisect_right(self._items, item)
        self._items.insert(i, item)
        self._tokens.insert(i, item[3].num_tokens)

    def append(self, r) -> None:
        self._seq += 1
        self._insert((self.key(r), self._seq, r.request_id, r))

    def appendleft(self, r) -> None:
        self._seq += 1
        self._insert((self.key(r), -self._seq, r.request_id, r))

    def popleft(self):
        del self._tokens[0]
        return self._items.pop(0)[3]

    def remove(self, r) -> None:
        for i, item in enumerate(self._items):
            if item[3] is r:
                del self._items[i]
                del self._tokens[i]
                return
        raise ValueError("request not in the queue")

    def __getitem__(self, i):
        return self._items[i][3]

    def ranked_before(self, key) -> tuple[int, int]:
        """(requests, their tokens) ranked before one with sort key ``key`` would be (its equals
        too)."""
        n = bisect.bisect_right(self._items, (key, math.inf))
        return n, sum(itertools.islice(self._tokens, n))

    def __iter__(self):
        return (item[3] for item in self._items)

    def __len__(self) -> int:
        return len(self._items)


class _PluginQueue(KeyedQueue):
    """A ``KeyedQueue`` ordered by a plug-in's ``queue_key``: a key function that raises, or keys
    that cannot be compared with each other, are a ``PluginError`` naming the policy."""

    __slots__ = ("policy", "_raw")

    def __init__(self, key, policy):
        super().__init__(self._checked_key)  # (``key`` is what the engine calls too: checked there as well)
        self._raw = key
        self.policy = policy

    def _checked_key(self, r):
        return call_plugin("policy", self.policy, "queue_key", self._raw, r)

    def _insert(self, item) -> None:
        try:
            super()._insert(item)
        except TypeError as e:
            raise PluginError(f"policy {plugin_name(self.policy)}: queue_key gave sort keys that cannot be compared "
                              f"({clip(e, 120)}); keys of one comparable type for every request expected") from e


def waiting_queue(policy):
    """The waiting queue a policy orders: FCFS unless it sets ``queue_key`` (a plug-in's checked:
    ``_PluginQueue``)."""
    key = getattr(policy, "queue_key", None)
    if key is None:
        return deque()
    if not is_plugin(policy):
        return KeyedQueue(key)
    if not callable(key):
        raise PluginError(f"policy {plugin_name(policy)}: queue_key is {shown(key)}; a function request -> sort "
                          "key expected (or None: first come, first served)")
    return _PluginQueue(key, policy)


class Replica:
    """``role``: "colocated" (prefill and decode here), "prefill" (hand requests off after their
    first token via ``handoff(req, replica)``) or "decode" (requests arrive with their prompt's KV).
    ``spec``: (k, acceptance_rate, draft_cost_model or None, rng) for speculative decoding.
    ``swap``: (host_blocks, bytes_per_block, bytes_per_s) for swap preemption.
    ``pipeline``: the replica's ``servesim.core.pipeline.Pipeline`` when this is one of its
    virtual engines (PP with overlapping micro-batches): a step's GPU work then holds the stages
    in turn, and its KV copies the host links the engines share, waiting for each to be free;
    None: the step takes its time alone. ``fast``: keep the decode set and plan runs (False: the
    reference engine, every step decided, applied and committed one at a time).
    ``async_scheduling``: the engine schedules each step while the one before it runs (vLLM V1's
    async scheduling, the overlap schedulers of TensorRT-LLM and SGLang): a request that arrives
    while a step runs is not seen by the decision at that step's end (it was made when the step
    started), only by the next one; an engine with nothing scheduled ahead (no work it can see, or
    an empty decision) sees every arrival at once."""

    MAX_RUN = 4096  # steps per run (bounds the arrays)

    def __init__(self, env, index: int, policy, cost_model, kv: BlockAllocator, recorder, max_context_tokens: int,
                 *, fast: bool = True, role: str = "colocated", pool: str = "", handoff=None, spec=None,
                 swap=(0, 0.0, 1.0), pipeline=None, async_scheduling=False, budget=None):
        self.env = env
        self.index = index
        self.policy = policy
        self.cost_model = cost_model
        self.kv = kv
        # blocks a run of decode steps leaves free after each step: 1 where a decoding request
        # needs a free block at its turn (``ContinuousPolicy.decode_needs_free_block``, vLLM v0.2's
        # can_append_slot): a step that could start short of one is decided by the policy
        self._kv_slack = 1 if getattr(policy, "decode_needs_free_block", False) is True else 0
        self.recorder = recorder
        self.max_context_tokens = max_context_tokens
        self.role = role
        self.pool = pool
        self.handoff = handoff
        self.spec = spec
        # speculative decoding: each verified sequence's accepted draft tokens, drawn in order from
        # the replica's own generator (in blocks: the same values as one draw at a time)
        self._accepted = _accepted_draws(spec[3], 1.0 - spec[1], spec[0]) if spec and spec[1] < 1.0 else None
        self.host_blocks, self.swap_block_bytes, self.swap_bytes_per_s = swap
        self.host_free_blocks = self.host_blocks
        # a window on only some layers (Gemma-2): each step's batch carries its windowed twin
        # (``Batch.windowed``) for those layers' attention. Its members' contexts are needed one by
        # one, so such a replica keeps no decode set and plans no runs (the reference engine's steps)
        self.partial_window = cost_model.model.partial_window_tokens if cost_model.model.partial_window_layers else None
        fast = fast and self.partial_window is None
        self.fast = fast
        self._plugin = is_plugin(policy)  # (a plug-in's decisions are checked: _plugin_decision)
        # (max_num_seqs, max_num_batched_tokens) of the pool: a plug-in's step over them is refused
        # (_plugin_budget); static batching's, and a subclass's, prefills a whole batch past the tokens
        self.budget = budget
        self._token_budget = budget is not None and not isinstance(policy, StaticPolicy)
        # whole-prompt admission (continuous batching without chunking, colocated): a request
        # preempted for recompute comes back with prompt + output so far in one prefill, which must
        # fit the token budget; one longer than it then ends, rejected (``_over_budget``), as vLLM
        # v0.2.3 ignores a waiting sequence over min(max_model_len, max_num_batched_tokens)
        # (vllm/core/scheduler.py L66-67, L145-154). None: no such limit (chunked prefill recomputes
        # in chunks; a prefill replica recomputes just the prompt, checked on arrival)
        self.recompute_limit = policy.max_num_batched_tokens if (
            isinstance(policy, ContinuousPolicy) and not policy.chunked and role == "colocated") else None
        # the admission watermark held against a recompute (``watermark_on_recompute``: vLLM V0's
        # and Sarathi-Serve's can_allocate): the most KV blocks a request preempted for recompute may
        # need to be admitted again; one whose sequence needs more then ends, rejected
        # (``_never_fits``), as vLLM V0 ignores a waiting sequence that can never be allocated
        # (BlockSpaceManager.can_allocate: AllocStatus.NEVER, vllm/core/block_manager.py L103-120 and
        # vllm/core/scheduler.py L157-166 at v0.2.3; _schedule_prefills and block_manager_v1.py at
        # v0.4-v0.5; Sarathi-Serve's would wait for it forever). None: no such limit (a recompute may
        # use the watermark's blocks)
        self.recompute_blocks = kv.num_blocks - int(policy.watermark * kv.num_blocks) if (
            isinstance(policy, ContinuousPolicy) and policy.watermark_on_recompute and policy.reserve == "none") \
            else None
        self.async_scheduling = async_scheduling
        self.incoming: deque = deque()  # async scheduling: arrived requests the next decision cannot see yet
        self._prev_step = (-math.inf, -math.inf)  # (start, end) of the last step
        self.aggregate = fast and bool(getattr(policy, "aggregates_decodes", False))
        # sliding-window attention: items' attention is limited to the window (``windowed``). In
        # the decode set a member with ``_att_c`` = window - 1 computed tokens or more attends
        # ``window`` keys a step whatever its context, so it counts ``window - 1`` in the set's
        # attention sum (``_ncap`` of them, ``_capx`` what the window takes off their contexts);
        # with ``_cap_c`` or more it holds its most blocks (``kv.window_blocks``) and grows none.
        # A member that reaches either while decoding crosses it at a known counter
        # (``_xheap``), as it completes at one: the counts change then, in runs too.
        self.window = cost_model.model.sliding_window_tokens
        self._att_c = sys.maxsize if self.window is None else self.window - 1
        self._cap_c = sys.maxsize if self.window is None else (kv.window_blocks - 1) * kv.block_size + 1
        self.running: list = []  # running requests outside the decode set, in admission order
        self.waiting = waiting_queue(policy)
        self.swapped: deque = deque()
        self.landed = waiting_queue(policy)  # P/D decode side: requests holding KV that just arrived
        self.prio = None  # PriorityCount of the running requests (``track_priorities``)
        self.tracer = None  # the decision trace (``servesim.core.decisions``), when asked for
        self.admissions = None  # a bounded deque of recent admission times, when admission control reads them
        self.outstanding_tokens = 0  # prompt + output so far, over unfinished requests here
        self.waiting_blocks = 0  # KV blocks the waiting requests' tokens will need (routers read it)
        self.waiting_tokens = 0  # their tokens (admission control reads it: O(1), not a sum over the queue)
        # routers that read state re-read a replica only when it changed: ``watch`` (the cluster's
        # set of changed positions) gets ``watch_key`` whenever counters, queues or KV move
        self.watch: set | None = None
        self.watch_key = index
        self._blocked_since = None  # when a decision last left the head of the queue out for budget
        self._blocked_ids: set = set()
        self.pipeline = pipeline
        self.after_free = None  # called after KV blocks were freed (P/D: retry pending hand-offs)
        self.handoffs_waiting = ()  # (P/D decode side: the cluster's pending hand-offs; non-empty: see end_bulk)
        self.on_run = None  # called (replica, True/False) when a run of decode steps starts / ends
        # called (replica) when the run's next step end to settle (``next_settle_s``) may have
        # come earlier: the cluster keeps those times in a heap, so that bringing the replicas up
        # to date costs what changed, not the number of replicas (Cluster.settle)
        self.on_due = None
        self.due_s = math.inf  # the cluster's bookkeeping for on_due: a lower bound of next_settle_s
        self.next_arrival_s = None  # () -> when the next request routed here arrives, if known (Cluster)
        # (held_runs: runs with requests waiting, held until a completion: ``Batch.until_completion``)
        self.stats = {"steps": 0, "set_steps": 0, "runs": 0, "run_steps": 0, "held_runs": 0}
        # the decode set
        # request -> (seq, s0, c0, d0, held), in admission order (whether it attends the whole window
        # or still grows blocks at counter S follows from c = c0 + S - s0: ``_att_c``, ``_cap_c``)
        self._members: dict = {}
        self._S = 0  # decode-set steps so far
        self._sum_c = 0  # sum over members of computed tokens at counter _S
        # (sliding window) members past the window: how many, and the sum over them of c - (window - 1),
        # what the window takes off their contexts (the set's attention sum is _sum_c - _capx)
        self._ncap = 0
        self._capx = 0
        self._sum_p = 0  # sum over members of prompt tokens (a padded static batch's attention needs it)
        self._heap: list = []  # (counter at which it completes, seq, request)
        # (sliding window) members' crossings ahead: (counter, seq, 0, 0) from which one attends the
        # whole window, (counter, seq, 1, its residue in _cnt) from which it grows no more blocks
        self._xheap: list = []
        self._natt = 0  # members that will attend the whole window before they complete (not yet)
        self._seq = itertools.count()
        self._new: list = []  # members that joined since the last step (their first gap is their own)
        self._t_last = 0.0  # end of the last step that advanced the set
        self._cnt = [0] * kv.block_size
        self._mac = None  # a run of decode-only steps in flight (see _macro)
        self._interruptible = False
        self._wake_lag = 0  # the lag of the wake that interrupted the run in flight
        self._wake_cut = False  # that wake may end the run at a step's end that is now (``_interrupt``)
        self._lagged = False  # the run was cut to the step after the one in flight (a lagged wake)
        self._decode_step_s = 0.0  # the last decode-only step's duration (to size plans)
        self._wakeup = None
        self._state = ReplicaState(self.running, self.waiting, kv, 0.0, self.swapped, 0, self.landed,
                                   materialize=self.materialize)
        self.process = env.process(self._run())

    def track_priorities(self) -> None:
        """Keep a count of the running requests' priorities (``ReplicaState.running_priorities``):
        for workloads whose classes have more than one."""
        self.prio = self._state.running_priorities = PriorityCount()

    @property
    def num_running(self) -> int:
        return len(self._members) + len(self.running)

    def decode_load(self) -> tuple[int, int]:
        """(running requests, their computed tokens): the decode work every step carries now
        (admission's TTFT prediction reads it, after ``settle``)."""
        c = self._sum_c + sum(r.num_computed_tokens for r in self.running)
        for r in self.admitting():
            c += r.num_computed_tokens
        return self.num_running, c

    def admitting(self) -> list:
        """The requests of an admission step in flight that a run of decode steps took as its
        step 0 (``_macro``'s ``fold``): they have left ``running`` for the decode set already,
        but until that step ends their state (``num_computed_tokens``) is as before it, as the
        reference engine's running list holds them then. Empty otherwise. Observers that read
        ``running`` mid-step (admission's TTFT prediction) read these too."""
        run = self._mac
        if run is None or run.fold is None or run.done:
            return []
        return [r for r, _ in run.fold[2]]

    def materialize(self) -> list:
        """Every running request in one list (reference order): the decode set dissolves into
        the front of ``running`` (same state; it re-forms after the step)."""
        if self._members:
            assert self._mac is None, "the running list is not materialized during a run of decode steps"
            self._dissolve()
        return self.running

    # ---------------------------------------------------------------- arrivals
    def rejection_reason(self, req) -> str | None:
        """Why ``req`` is not served here (None: it is), by its lengths alone: rejected at arrival
        (``arrival_reason``), or, its decode outgrowing the KV cache, ended when it does
        (``outgrow``). ``predictions.predict_rejections`` counts both."""
        reason = self.arrival_reason(req)
        if reason is None:
            reason = self.outgrow(req)[1]
        return reason

    def _kv_blocks_has(self) -> str:
        # (a virtual engine has 1/pp of the replica's blocks: say so, or 'the replica has N'
        # reads as a fraction of what memory gave it)
        return (f"each of the replica's {len(self.pipeline.free_at)} virtual engines (hardware.pp with "
                f"pp_overlap) has {self.kv.num_blocks} of its blocks" if self.pipeline is not None else
                f"the replica has {self.kv.num_blocks} in all")

    @property
    def grows_kv(self) -> bool:
        """Whether a request's KV grows as it decodes here, so that only its prompt is checked
        against the KV cache at arrival (as vLLM, which cannot know the output length, checks it)
        and a sequence that outgrows the cache ends when it does (``outgrow``): continuous
        batching and chunked prefill without a reservation (their subclasses too). Static batching,
        reservations and other plug-ins are checked on the whole sequence at arrival."""
        return (isinstance(self.policy, ContinuousPolicy) and self.policy.reserve == "none"
                and self.role != "prefill")

    def arrival_reason(self, req) -> str | None:
        """Why ``req`` is rejected on arrival (None: it is not): what the engine knows then."""
        total = req.prompt_tokens + req.output_tokens
        if total > self.max_context_tokens:
            return f"prompt + output = {total} tokens exceeds the model's context length {self.max_context_tokens}"
        # The last output token is sampled, not stored: the KV never holds more than total - 1
        # (plus k speculative tokens being verified).
        k = self.spec[0] if self.spec else 0
        if self.role == "prefill" or self.grows_kv:
            # a prefill replica holds the prompt only; where KV grows while decoding, the prompt
            # is what is known to fit or not at arrival (a longer sequence ends when it outgrows it)
            blocks = self.kv.blocks_for(req.prompt_tokens)
            if blocks > self.kv.num_blocks:
                return f"its prompt of {req.prompt_tokens} tokens needs {blocks} KV blocks; {self._kv_blocks_has()}"
            policy = self.policy
            if (blocks == self.kv.num_blocks and isinstance(policy, ContinuousPolicy) and policy.chunked
                    and policy.prefill_needs_free_block and policy.decode_needs_free_block
                    and req.prompt_tokens > policy.max_num_batched_tokens):
                # (vLLM v0.4-v0.5's chunked prefill: a running prompt chunk needs a free block at its
                # turn; one whose prompt takes every block never has one, and was preempted and
                # admitted again forever, a run that never ended)
                return (f"its prompt of {req.prompt_tokens} tokens needs {blocks} KV blocks, every one: "
                        f"{self._kv_blocks_has()}, and it is computed in chunks of "
                        f"policy.max_num_batched_tokens={policy.max_num_batched_tokens}, each of which needs a free "
                        "block at its turn (cost.engine vllm-v0's chunked-prefill rule), so it could never run "
                        "past its first (give the replica more KV memory or a larger budget)")
        else:
            blocks = self.kv.blocks_for(total - 1 + k)
            if blocks > self.kv.num_blocks:
                return f"{_sequence_counted(total, k)} needs {blocks} KV blocks; {self._kv_blocks_has()}"
        # a prefill replica only ever computes the prompt (and, preempted, recomputes just that)
        max_tokens = 1 if self.role == "prefill" else req.output_tokens
        return self.admission_error(req.prompt_tokens, max_tokens)

    def outgrow(self, req) -> tuple[int, str | None]:
        """(the output tokens ``req`` emits here before its KV outgrows the cache, its reason) for
        a request whose sequence the KV cache cannot hold whole (``grows_kv``); (its output length,
        None) otherwise. The step that emits output token j + 1 computes prompt + j + k tokens (k
        speculative), which must fit the replica's blocks; the first token comes from the prefill.
        vLLM learns that only then: V0 preempts the request (its last) and, finding it can never
        be scheduled again, ends it with an error; V1 refuses to start a server whose KV cache
        cannot hold one sequence of max_model_len."""
        out = req.output_tokens
        if not self.grows_kv:
            return out, None
        kv = self.kv
        k = self.spec[0] if self.spec else 0
        seq = req.prompt_tokens + out - 1 + k
        blocks = kv.blocks_for(seq)
        # a chunked recompute (chunked prefill, a P/D decode pool) of a sequence holding every block
        # ends in a one-token chunk, a decode, which under vLLM v0.2's rule needs a free block
        # (``_kv_slack``): preempted again, it recomputed the same chunks forever (a run that never
        # ended); so there one block less holds a decoding sequence
        slack = self._kv_slack if getattr(self.policy, "chunked", False) else 0
        if blocks <= kv.num_blocks - slack:
            return out, None
        room = (kv.num_blocks - slack) * kv.block_size  # (blocks_for caps at a window: then it never outgrows)
        emits = max(1, room - req.prompt_tokens - k + 1)
        rule = (f", and a decoding sequence needs a free block at its turn (cost.engine's vLLM v0.2 rule), which a "
                f"recompute in chunks ends in: {kv.num_blocks - slack} hold one" if slack else "")
        return emits, (f"{OUTGREW}, after {emits} of its {out} output tokens: "
                       f"{_sequence_counted(req.prompt_tokens + out, k)} needs {blocks} KV blocks; "
                       f"{self._kv_blocks_has()}{rule} (the engine cannot know the output length at arrival; give "
                       "the replica more KV memory)")

    def can_outlive_watermark(self, req) -> bool:
        """Whether ``req``, served here, can end rejected at a preemption for recompute because its
        sequence by then could never be admitted again above the watermark (``recompute_blocks``):
        the longest it gets, prompt + output - 1 (or as far as it goes before it outgrows the KV
        cache), needs more blocks than the watermark leaves. Whether it does depends on the load."""
        if self.recompute_blocks is None:
            return False
        return self.kv.blocks_for(req.prompt_tokens + self.outgrow(req)[0] - 1) > self.recompute_blocks

    def admission_error(self, prompt_tokens: int, max_tokens: int) -> str | None:
        """The policy's ``admission_error`` on this replica's KV; a plug-in's is checked (what it
        raises, or a reason that is no string, is a ``PluginError`` naming it)."""
        policy = self.policy
        if not self._plugin:
            return policy.admission_error(prompt_tokens, max_tokens, self.kv)
        why = call_plugin("policy", policy, "admission_error", policy.admission_error, prompt_tokens, max_tokens,
                          self.kv)
        if why is not None and not isinstance(why, str):
            raise PluginError(f"policy {plugin_name(policy)}: admission_error returned {shown(why)}; a reason "
                              "(str) or None expected")
        if why is not None and not why.strip():  # (a rejection whose reason read '' in the summary's top reasons)
            raise PluginError(f"policy {plugin_name(policy)}: admission_error returned {shown(why)}, a blank "
                              "reason; a rejection says why (a non-blank str), None admits")
        return why

    def submit(self, req) -> None:
        req.replica = self.index
        reason = self.arrival_reason(req)
        if reason is not None:
            self.recorder.reject(req, reason)
            return
        if not req.outgrown:  # (a P/D split's cluster caps it for the decode side)
            emits, why = self.outgrow(req)
            if why is not None:
                req.cap_output(emits, why)
        (self.incoming if self.async_scheduling else self.waiting).append(req)
        self.waiting_blocks += self.kv.blocks_for(req.num_tokens)
        self.waiting_tokens += req.num_tokens
        self.outstanding_tokens += req.prompt_tokens
        if self.tracer is not None:
            self.tracer.arrive(self, req)
        if self.watch is not None:
            self.watch.add(self.watch_key)
        # async scheduling: the decision at the end of the step in flight was made without it
        self.wake(1 if self.async_scheduling else 0, req)

    def accept_prefilled(self, req) -> None:
        """A request whose KV (already mapped on this replica's allocator) has just landed."""
        self.landed.append(req)
        self.outstanding_tokens += req.num_tokens
        if self.watch is not None:
            self.watch.add(self.watch_key)
        self.wake(landed=True)

    def _take_from_queue(self, r) -> None:
        """Remove an admitted request from the landed queue (P/D decode side) or the waiting queue."""
        landed, waiting = self.landed, self.waiting
        if landed and landed[0] is r:
            landed.popleft()
            return
        if waiting[0] is r:
            waiting.popleft()
        else:
            waiting.remove(r)  # a policy admitting out of queue order
        self.waiting_blocks -= self.kv.blocks_for(r.num_tokens)
        self.waiting_tokens -= r.num_tokens

    def _release(self, now: float, everything: bool = False) -> None:
        """Async scheduling: move the arrivals the decision at ``now`` sees into the waiting queue:
        those that came by the start of the last step when it ended now (the engine decided then),
        every one when the engine was idle, has nothing it can see to do, or ``everything``."""
        start, end = self._prev_step
        if everything or end != now or not (self._members or self.running or self.waiting or self.swapped
                                            or self.landed):
            self._queue_arrivals(math.inf)
        else:
            self._queue_arrivals(start)

    def _queue_arrivals(self, cutoff: float) -> None:
        """Async scheduling: the arrivals that came by ``cutoff`` join the waiting queue."""
        inc = self.incoming
        while inc and inc[0].arrival_s <= cutoff:
            self.waiting.append(inc.popleft())

    def wake(self, lag: int = 0, arrival=None, landed: bool = False) -> None:
        """Something the next decisions must see happened now (``arrival``: a request arrived;
        ``landed``: a P/D hand-off's KV landed here): during a run of decode steps, the run ends
        after the step in flight and ``lag`` more (an arrival under async scheduling is seen one
        decision later: the step after the one in flight is decided without it)."""
        if self._interruptible:
            run = self._mac
            if run.deaf and not landed:
                # what arrives waits for the run (the policy said it changes nothing); a landed
                # request is another matter: its KV is here, and it is admitted ahead of the queue
                return
            if run.behind is not None and arrival is not None and self.waiting.key(arrival) >= run.behind:
                return  # ranked behind the waiting head (ties: first in, first out): it changes nothing
            now = self.env.now
            j = bisect.bisect_right(run.ends, now, 0, run.K)  # the step in flight
            if not lag and j and run.ends[j - 1] == now:
                # it came as a step ended: the decision at that end, once every request of the
                # instant has arrived, sees it (the step after it has not begun: ``settle``)
                if j < run.K:
                    self._interrupt(0)
                return
            cut = True
            if lag and (run.ends[j - 1] if j else run.t0) == now:
                # it came as that step began: the decision at the step's end sees what came by its
                # start (``_release``), so it is seen there, with no lag
                lag = 0
                cut = False
            if j + 1 + lag >= run.K:
                run.stop = True  # the run ends there anyway
                return
            if self._lagged and lag:
                return  # (cut already to the step after the one in flight)
            self._interrupt(lag, cut)
            return
        ev = self._wakeup
        if ev is not None and not ev.triggered:
            self._wakeup = None
            if arrival is not None:
                # an idle replica decides once every request of this instant has arrived (the
                # end-of-instant queue): not before those sent after this one at the same time
                end_of_instant(self.env).decide(lambda: ev.triggered or ev.succeed())
            else:
                ev.succeed()

    def _sleep(self, until_s):
        """An event that fires on ``wake()`` (or at ``until_s``)."""
        self._wakeup = ev = self.env.event()
        if until_s is not None and self.env.now < until_s < math.inf:  # (inf: never, as None)
            return ev | self.env.timeout(until_s - self.env.now)
        return ev

    # ---------------------------------------------------------------- the loop
    def _run(self):
        env = self.env
        kv = self.kv
        bs = kv.block_size
        state = self._state
        policy = self.policy
        # (the same objects for the whole run: set up before the first step, containers emptied
        # and refilled in place)
        next_batch, step_time = policy.next_batch, self.cost_model.step_time
        members, running, waiting, swapped, landed, incoming = (self._members, self.running, self.waiting,
                                                                 self.swapped, self.landed, self.incoming)
        window, fast = self.window, self.fast and self.pipeline is None
        plugin = self._plugin
        idle_wakes = 0  # (a plug-in's decisions in a row that scheduled nothing and set a timer)
        ended = False  # a step (or a run of them) ended now: the next decision waits for the instant's end
        while True:
            if ended:
                ended = False
                if env.peek() <= env.now:
                    # something else is due at this instant (a client told of a completion, an
                    # arrival, another replica's step): the decision comes once every request of
                    # the instant has arrived (vLLM's engine core adds the requests in its input
                    # queue before it schedules the next step); nothing due: the same at once
                    ev = env.event()
                    end_of_instant(env).decide(ev.succeed)
                    yield ev
            if incoming:
                self._release(env.now)
            if not members and not running and not waiting and not swapped and not landed:
                yield self._sleep(None)
                continue
            n = len(members)
            state._running = running
            state.now_s = start = env.now
            state.host_free_blocks = self.host_free_blocks
            state.decoding = (DecodeSet(n, self._sum_c - self._capx, self._cnt[self._S % bs], self._sum_p,
                                        self._ncap, self._natt, self._sum_c) if n else NO_DECODE_SET)
            if plugin:  # (a plug-in's decision is checked: it raises or returns no Batch -> PluginError)
                batch = self._plugin_decision(state)
                if self.budget is not None:
                    self._plugin_budget(batch)
                if not batch.empty:
                    idle_wakes = 0
            else:
                batch = next_batch(state)
            if window is not None and batch.items:
                batch = windowed(batch, window)
            if batch.budget_blocked is not None or self._blocked_since is not None:
                self._note_blocked(batch.budget_blocked, start)
            if self.tracer is not None:
                self.tracer.decide(self, start, batch)
            n = len(members)  # reading state.running dissolved the set
            if batch.set_seqs and batch.set_seqs != n:
                raise (PluginError if plugin else RuntimeError)(
                    f"policy {plugin_name(policy)} scheduled {batch.set_seqs} of the decode set's {n} requests: "
                    "schedule it whole (decode_set=state.decoding), leave it out of the step, or read state.running")
            if batch.empty and not batch.preempted and incoming:  # nothing scheduled ahead: seen now
                self._release(start, everything=True)
                continue
            if (batch.steady and n and fast and not batch.items and not running
                    # (a run deaf to arrivals skips the decisions of the requests waiting through
                    # it, or arriving: the decision trace records every one, so not when tracing)
                    and ((batch.steady_arrivals and self.tracer is None)
                         or not (waiting or landed or swapped or incoming)
                         or (batch.until_completion and not incoming))
                    # (held until a completion: decisions untraced, as the trace records every
                    # decision of a waiting request; on the P/D decode side a landing ends it)
                    and (not batch.until_completion or (self.role != "prefill" and self.tracer is None))):
                K = self._macro_len(n, kv.num_free - self._kv_slack, self._bulk and not batch.until_completion)
                if K >= 2:
                    yield from self._macro(n, K, shape=batch)
                    ended = True
                    continue
            swap_s = self._apply(batch, start) if not plugin else self._plugin_apply(batch, start)
            if batch.empty:
                if swap_s > 0:
                    if self.pipeline is None:
                        yield env.timeout(swap_s)
                    else:
                        yield from self.pipeline.swap(swap_s)
                    ended = True
                elif not batch.preempted:
                    # Nothing can run now (waiting for KV held by transfers, or for the policy's
                    # timer): sleep until an arrival, a KV release or the timer. A colocated replica
                    # never gets here with work it could do; if it did, the run would end with
                    # requests in flight and simulate() reports the stall.
                    if plugin and batch.wake_at_s is not None:
                        idle_wakes += 1
                        if idle_wakes > self.MAX_IDLE_WAKES:
                            self._idle_plugin(idle_wakes)
                    yield self._sleep(batch.wake_at_s)
                continue
            if self.partial_window is not None:
                batch = batch._replace(windowed=windowed(batch, self.partial_window))
            cost = step_time(batch)
            if (batch.steady and fast and not swap_s and not batch.prefix_hits and batch.set_seqs == n
                    and not incoming and self._foldable(batch.items)):
                yield from self._macro(n, self.MAX_RUN, (batch, cost, batch.items))
                ended = True
                continue
            draft_s = self._draft_time_s(batch) if self.spec else 0.0
            extra = swap_s + draft_s
            if self.pipeline is None:
                yield env.timeout(cost.time_s + extra)
            else:
                # the step's extra time is all but its cost: its own copies and draft, and its waits
                # for busy links and stages
                yield from self._through_stages(batch, cost, draft_s, swap_s)
                extra = env.now - start - cost.time_s
            self._prev_step = (start, env.now)
            self._commit(batch, cost, start, extra)
            if self.aggregate:
                self._absorb()
            ended = True

    # A plug-in policy that decides nothing this many times in a row, each time setting a timer
    # (wake_at_s), while requests wait: a timer policy that never schedules (a run that would
    # never end). A real one waits a few timers before it schedules.
    MAX_IDLE_WAKES = 1_000_000

    def _idle_plugin(self, wakes: int):
        waiting = len(self.waiting) + len(self.landed) + len(self.swapped)
        raise PluginError(f"policy {plugin_name(self.policy)}: decided nothing {wakes:,} times in a row, each time "
                          f"setting wake_at_s, with {waiting} requests waiting (simulated time {self.env.now:.6g} s): "
                          "a policy must schedule waiting work it can fit, not only wake itself again")

    def _plugin_decision(self, state) -> Batch:
        """A plug-in policy's ``next_batch(state)``: what it raises, or a result that is no
        ``Batch``, is a ``PluginError`` naming it (not a traceback from deep in the engine)."""
        policy = self.policy
        batch = call_plugin("policy", policy, "next_batch", policy.next_batch, state)
        if not isinstance(batch, Batch):
            raise PluginError(f"policy {plugin_name(policy)}: next_batch returned {shown(batch)} "
                              f"({type(batch).__name__}), not a servesim.Batch (servesim.make_batch(items) makes one)")
        w = batch.wake_at_s
        if w is not None and (isinstance(w, bool) or not isinstance(w, numbers.Real) or math.isnan(w)):
            raise PluginError(f"policy {plugin_name(policy)}: wake_at_s is {shown(w)}; the simulated time (seconds) "
                              "at which to decide again when nothing else happens first, or None")
        self._plugin_fields(batch, plugin_name(policy))
        return batch

    def _plugin_budget(self, batch: Batch) -> None:
        """A plug-in's step over the pool's ``max_num_seqs`` sequences or ``max_num_batched_tokens``
        tokens (items and the decode set, one token per member) is a ``PluginError`` naming the
        budget, on either engine, before it runs: the KV cache was sized with an activation reserve
        for the budget, and the step would be priced as one the deployment cannot run. (Static
        batching, and a plug-in built on it, prefills a whole batch past the token budget: only its
        sequences are checked.)"""
        seqs_max, tokens_max = self.budget
        items = batch.items
        seqs = len(items) + batch.set_seqs
        where = "policy." if self.role == "colocated" else f"the {self.role} pool's "
        if seqs > seqs_max:
            raise PluginError(f"policy {plugin_name(self.policy)}: schedules {seqs:,} sequences in one step, over "
                              f"{where}max_num_seqs={seqs_max:,}; a step holds at most that many (state.running "
                              "and state.waiting may hold more: the policy picks which run)")
        if not self._token_budget:
            return
        tokens = batch.set_seqs + sum(q for _, q in items if isinstance(q, numbers.Integral))
        if tokens > tokens_max:
            raise PluginError(f"policy {plugin_name(self.policy)}: schedules {tokens:,} tokens in one step, over "
                              f"{where}max_num_batched_tokens={tokens_max:,}"
                              + (" (a decode pool's, at most its max_num_seqs)" if self.role == "decode" else "")
                              + "; a step holds at most "
                              "that many (a prompt over it is computed in chunks over several steps, or rejected "
                              "by admission_error)")

    def _plugin_apply(self, batch: Batch, now: float) -> float:
        """``_apply`` for a plug-in policy's decision: one the engine cannot apply (a request
        that is neither waiting nor running, more KV than is free, a request given no tokens:
        a step of none takes no time, and the run never moved on) is a ``PluginError``."""
        name = plugin_name(self.policy)
        seen = set()
        k = self.spec[0] if self.spec else 0
        # (the running requests outside the decode set: what a step may schedule, with those it
        # admits or swaps in; not those it preempts)
        running = {id(r) for r in self.running}
        for r in batch.admitted:
            if id(r) in running or r in self._members:
                raise PluginError(f"policy {name}: admits request {getattr(r, 'request_id', shown(r))}, which is "
                                  "running already; admitted= lists waiting requests (state.waiting) that start "
                                  "running this step")
            if r not in self.waiting and r not in self.landed:  # (found near the front: admissions are)
                raise PluginError(f"policy {name}: admits request {getattr(r, 'request_id', shown(r))}, which is not "
                                  "waiting on this replica; admitted= lists requests of state.waiting (or, on the "
                                  "decode side of a P/D split, state.landed)")
        entering = {id(r) for r in batch.admitted} | {id(r) for r in batch.swap_in}
        leaving = {id(r) for r in batch.preempted}
        tokens = 0
        for r, q in batch.items:
            rid = getattr(r, "request_id", shown(r))
            if isinstance(q, bool) or not isinstance(q, numbers.Integral) or not q >= 1:
                raise PluginError(f"policy {name}: schedules {shown(q)} tokens for request {rid}; a scheduled request "
                                  "runs a whole number of at least 1 (a waiting request it schedules must also be in "
                                  "make_batch(..., admitted=...), or it stays waiting with its prompt computed)")
            if id(r) in seen:
                raise PluginError(f"policy {name}: schedules request {rid} twice in one step; list each request once "
                                  "with all its tokens")
            seen.add(id(r))
            tokens += q
            if id(r) in leaving:
                raise PluginError(f"policy {name}: schedules request {rid}, which it preempts in the same step")
            if id(r) not in running and id(r) not in entering:
                what = ("a member of the decode set: make_batch(..., decode_set=state.decoding) schedules the set "
                        "whole, and reading state.running lists its members one by one" if r in self._members else
                        "waiting: make_batch(..., admitted=[...]) must list a waiting request it schedules"
                        if r in self.waiting or r in self.landed else "not on this replica")
                raise PluginError(f"policy {name}: schedules request {rid}, which is not running ({what})")
            done = getattr(r, "num_output_done", None)
            if isinstance(done, int) and isinstance(getattr(r, "num_computed_tokens", None), int):
                left = r.prompt_tokens + done - r.num_computed_tokens  # tokens it has not computed yet
                # (decoding: one token a step; with speculative decoding, the k drafts and one more)
                decoding = done > 0 and left == 1
                most = k + 1 if decoding else left
                if q > most:
                    has = (f"{left} tokens left to compute" if not decoding else "one token to decode a step"
                           + (f" (k + 1 = {k + 1} with speculative decoding)" if k else ""))
                    raise PluginError(f"policy {name}: schedules {q} tokens for request {rid}, which has {has}; "
                                      "schedule at most that")
        # (a Batch built by hand, not by make_batch, kept the counts' defaults, 0: its steps were priced
        # as empty ones, taking no GPU time, and the run finished with TPOT 0 and exit 0)
        seqs, tokens = len(batch.items) + batch.set_seqs, tokens + batch.set_seqs
        if batch.num_seqs != seqs or batch.num_tokens != tokens:
            raise PluginError(f"policy {name}: its Batch counts {shown(batch.num_seqs)} sequences and "
                              f"{shown(batch.num_tokens)} tokens while its items (and decode set) hold {seqs} and "
                              f"{tokens}; build it with servesim.make_batch(items, ...), which derives the counts a "
                              "step is priced by")
        self._plugin_counts(batch, name)
        try:
            return self._apply(batch, now)
        except InputError:
            raise
        except (Exception, SystemExit) as e:  # noqa: BLE001
            raise PluginError(f"policy {plugin_name(self.policy)}: its decision could not be applied "
                              f"({type(e).__name__}: {clip(e, 200)}); a batch schedules waiting or running "
                              "requests only, preempts running ones, and fits the free KV blocks") from e

    # a Batch's request fields, as make_batch fills them, and what each holds
    _BATCH_FIELDS = (("items", "(request, tokens) pairs"), ("preempted", "running requests"),
                     ("admitted", "waiting requests"), ("swap_out", "preempted requests"),
                     ("swap_in", "swapped-out requests"), ("prefix_hits", "(admitted request, cached tokens) pairs"),
                     ("reserve", "(request, tokens) pairs"))
    # the counts make_batch derives from a step's items, prefix hits and decode set, which price it
    _BATCH_COUNTS = ("prefill_tokens", "decode_tokens", "num_prefill_seqs", "num_sampled", "num_decode_seqs",
                     "attn_pairs", "context_tokens", "decode_context_tokens", "decode_attn_pairs")

    def _plugin_fields(self, batch: Batch, name: str) -> None:
        """A plug-in's ``Batch`` whose request fields are not what ``make_batch`` builds (a tuple
        of requests, or of pairs), that lists a request twice in one of them, swaps out a request
        it does not preempt, or gives prefix hits or KV reservations the engine cannot apply (a
        hit on a request it does not admit, a cached count that is no whole number from 0 to the
        request's tokens less one; a reservation for a request that is not running) is a
        ``PluginError`` naming it: such fields were applied as given, a hit on a running request
        setting its computed tokens back at every step (a run that never ended), a negative one
        making it compute its prompt and more, a reservation taking KV for a waiting request, a
        swap_out outside preempted ignored, a request admitted twice an IndexError from the queue."""
        for field, what in self._BATCH_FIELDS:
            value = getattr(batch, field)
            if not isinstance(value, (tuple, list)):
                raise PluginError(f"policy {name}: its Batch's {field} is {shown(value)} ({type(value).__name__}); a "
                                  f"tuple of {what} expected (servesim.make_batch(items, ...) builds one)")
            if what.startswith("("):
                for x in value:
                    if not isinstance(x, (tuple, list)) or len(x) != 2:
                        raise PluginError(f"policy {name}: its Batch's {field} holds {shown(x)}; each one a pair "
                                          f"{what[:what.index(')') + 1]} expected")
            else:
                ids = set()
                for r in value:
                    if id(r) in ids:
                        raise PluginError(f"policy {name}: lists request {getattr(r, 'request_id', shown(r))} twice "
                                          f"in its Batch's {field}; list each request once")
                    ids.add(id(r))
        if batch.swap_out:
            preempted = {id(r) for r in batch.preempted}
            for r in batch.swap_out:
                if id(r) not in preempted:
                    raise PluginError(f"policy {name}: swaps out request {getattr(r, 'request_id', shown(r))}, which "
                                      "it does not preempt; swap_out lists requests of preempted whose KV goes to host "
                                      "memory")
        if batch.prefix_hits:
            admitted = {id(r) for r in batch.admitted}
            for r, cached in batch.prefix_hits:
                rid = getattr(r, "request_id", shown(r))
                if id(r) not in admitted:
                    raise PluginError(f"policy {name}: gives request {rid} a prefix hit, but does not admit it in "
                                      "the same step; prefix_hits lists admitted requests (admitted=) whose prompt "
                                      "starts with KV in the cache")
                most = r.num_tokens - 1
                if (isinstance(cached, bool) or not isinstance(cached, numbers.Integral)
                        or not 0 <= cached <= most):
                    raise PluginError(f"policy {name}: gives request {rid} a prefix hit of {shown(cached)} cached "
                                      f"tokens; a whole number from 0 to {most} (its tokens less the one a step must "
                                      "compute) expected")
        if batch.reserve:
            running = {id(r) for r in self.running} - {id(r) for r in batch.preempted}
            running |= {id(r) for r in batch.admitted} | {id(r) for r in batch.swap_in}
            for r, tokens in batch.reserve:
                rid = getattr(r, "request_id", shown(r))
                if id(r) not in running:
                    raise PluginError(f"policy {name}: reserves KV for request {rid}, which is not running (nor "
                                      "admitted or swapped in by the same step); reserve lists running requests")
                if isinstance(tokens, bool) or not isinstance(tokens, numbers.Integral) or tokens < 0:
                    raise PluginError(f"policy {name}: reserves KV for {shown(tokens)} tokens of request {rid}; a "
                                      "whole number of tokens (at least 0) expected")

    def _plugin_counts(self, batch: Batch, name: str) -> None:
        """A plug-in's ``Batch`` whose counts are not those ``make_batch`` derives from its items,
        prefix hits and decode set (the decode set's context as ``state.decoding`` gives it) is a
        ``PluginError`` naming it: the step is priced by them, so a decode set passed as
        ``decode_set=(n, 0)`` ran its attention as if its requests held no KV, and the run finished
        faster than the deployment would, with exit 0. (Padding, static batching's, adds attention
        pairs and context tokens: those may be more.)"""
        if batch.set_seqs and batch.set_seqs != len(self._members):
            return  # (the engine names it: a part of the decode set)
        c_set = self._sum_c - self._capx if batch.set_seqs else 0
        want = make_batch(batch.items, prefix_hits=batch.prefix_hits, decode_set=(batch.set_seqs, c_set))
        if self.window is not None and want.items:
            want = windowed(want, self.window)
        for field in self._BATCH_COUNTS:
            got, expected = getattr(batch, field), getattr(want, field)
            # (padding, static batching's prompts padded to the longest, adds attention, never takes any)
            if got == expected or (field in ("attn_pairs", "context_tokens") and got >= expected):
                continue
            raise PluginError(f"policy {name}: its Batch's {field} is {shown(got)} where its items, prefix hits and "
                              f"decode set give {shown(expected)}; build it with servesim.make_batch(items, ..., "
                              "decode_set=state.decoding), the decode set as state.decoding gives it: the counts "
                              "price the step")

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

    # ---------------------------------------------------------------- apply and commit
    def _apply(self, batch: Batch, now: float) -> float:
        """Apply the decision; return the seconds spent copying KV to/from host memory."""
        running, waiting, kv = self.running, self.waiting, self.kv
        if self.watch is not None:
            self.watch.add(self.watch_key)
        swap_bytes = 0.0
        if batch.preempted:  # (requests outside the decode set: a member is preempted from state.running)
            n = len(running)
            gone = set(map(id, batch.preempted))
            if set(map(id, running[n - len(gone):])) == gone:  # the tail (the newest): the usual victims
                del running[n - len(gone):]
            else:
                running[:] = [r for r in running if id(r) not in gone]
            if not len(running) == n - len(gone) == n - len(batch.preempted):
                raise DecisionError("policy preempted a request that is not running (or one twice, or one of the "
                                    "decode set without reading state.running)")
            to_host = {id(r) for r in batch.swap_out}
            prio = self.prio
            for r in batch.preempted:  # in the order preempted: the last ends at the front of an FCFS queue
                r.preemptions += 1
                if prio is not None:
                    prio.remove(r.priority)
                if id(r) in to_host:
                    r.swapped_blocks = r.kv_blocks
                    self.host_free_blocks -= r.kv_blocks
                    if self.host_free_blocks < 0:
                        raise DecisionError("policy swapped out more than host memory holds")
                    swap_bytes += r.kv_blocks * self.swap_block_bytes
                    self.recorder.swap_out_bytes += r.kv_blocks * self.swap_block_bytes
                    kv.free(r)
                    self.swapped.appendleft(r)
                elif self.recompute_limit is not None and r.num_tokens > self.recompute_limit:
                    self._over_budget(r, now)
                elif self.recompute_blocks is not None and kv.blocks_for(r.num_tokens) > self.recompute_blocks:
                    self._never_fits(r, now)
                else:
                    kv.free(r, recompute=True)
                    self.recorder.recompute_tokens += r.num_computed_tokens
                    r.dropped_tokens = r.num_computed_tokens
                    r.num_computed_tokens = 0
                    waiting.appendleft(r)
                    self.waiting_blocks += kv.blocks_for(r.num_tokens)
                    self.waiting_tokens += r.num_tokens
        # Prefix-cache hits are mapped before any allocation so no eviction can take them.
        for r, cached in batch.prefix_hits:
            r.num_computed_tokens = cached
            if isnan(r.scheduled_s):  # a request's hits count at its first admission (as the summary's)
                r.prefix_hit_tokens = cached
            elif r.dropped_tokens:
                # readmitted after a recompute preemption: the dropped tokens the cache still holds
                # are not computed again, so they are no recompute work (a hit past them is a
                # prefix it never computed, not recompute either)
                self.recorder.recompute_tokens -= min(cached, r.dropped_tokens)
        if batch.prefix_hits:
            if not kv.map_hits(batch.prefix_hits):
                raise DecisionError("prefix hit on blocks that are gone")
            for r, _ in batch.prefix_hits:
                r.dropped_tokens = 0
        for r in batch.swap_in:
            if not self.swapped or self.swapped[0] is not r:
                raise DecisionError("policy must swap in from the front of the swapped queue")
            self.swapped.popleft()
            running.append(r)
            if self.prio is not None:
                self.prio.add(r.priority)
            self.host_free_blocks += r.swapped_blocks
            swap_bytes += r.swapped_blocks * self.swap_block_bytes
            self.recorder.swap_in_bytes += r.swapped_blocks * self.swap_block_bytes
            r.swapped_blocks = 0
        for r in batch.admitted:
            self._take_from_queue(r)
            running.append(r)
            if self.prio is not None:
                self.prio.add(r.priority)
            if self.admissions is not None:
                self.admissions.append(now)
            if isnan(r.scheduled_s):
                r.scheduled_s = now
                self.recorder.prefix_query_tokens += r.prompt_tokens
                self.recorder.prefix_hit_tokens += r.prefix_hit_tokens
        for r, tokens in batch.reserve:
            ok = kv.grow(r, tokens)
            if not ok:
                raise DecisionError("policy reserved more KV than is free")
        if batch.set_seqs:  # the decode set's next tokens (ahead of every item, as in the running list)
            need = self._cnt[self._S % kv.block_size]
            if need:
                if need > kv.num_free:
                    raise DecisionError("policy scheduled more KV than is free (the decode set's next tokens)")
                kv.take(need)
        for r, q in batch.items:
            ok = kv.grow(r, r.num_computed_tokens + q)
            if not ok:
                raise DecisionError("policy scheduled more KV than is free")
        if batch.preempted and self.after_free is not None:
            # blocks the preemptions freed and the step did not take (P/D: pending hand-offs land),
            # only now: the policy planned the step's growth on them
            self.after_free()
        return swap_bytes / self.swap_bytes_per_s if swap_bytes else 0.0

    def _over_budget(self, r, now: float) -> None:
        """End ``r``, preempted for recompute at ``now``, rejected: its recompute (prompt + output
        so far, in one prefill with whole-prompt admission) exceeds the token budget
        (``recompute_limit``)."""
        fix = self.policy._chunked_fix("policy.name")
        self._end_preempted(r, now, (
            f"{OVER_BUDGET}, after {r.num_output_done} of its {r.outgrown or r.output_tokens} output tokens: "
            f"its recompute of prompt + output so far = {r.num_tokens} tokens exceeds policy.max_num_batched_tokens="
            f"{self.recompute_limit} (whole-prompt admission recomputes a preempted request in one prefill within "
            f"the budget; vLLM v0 ends such a request, FINISHED_IGNORED; use {fix} or a larger budget)"))

    def _never_fits(self, r, now: float) -> None:
        """End ``r``, preempted for recompute at ``now``, rejected: its recompute (prompt + output
        so far) needs more KV blocks than the admission watermark ever leaves free
        (``recompute_blocks``)."""
        kv = self.kv
        self._end_preempted(r, now, (
            f"{NEVER_FITS}, after {r.num_output_done} of its {r.outgrown or r.output_tokens} output tokens: "
            f"its recompute of prompt + output so far = {r.num_tokens} tokens needs {kv.blocks_for(r.num_tokens)} "
            f"free KV blocks to be admitted, but admission keeps policy.watermark={self.policy.watermark:g} of the "
            f"{kv.num_blocks} blocks free for a recompute too (vLLM V0's can_allocate), leaving "
            f"{self.recompute_blocks} (vLLM V0 ends such a request, FINISHED_IGNORED; lower policy.watermark or "
            "give the replica more KV memory)"))

    def _end_preempted(self, r, now: float, reason: str) -> None:
        """End ``r``, preempted at ``now`` with no way back, rejected for ``reason``."""
        self.kv.free(r)
        r.finish_s = now
        self.outstanding_tokens -= r.prompt_tokens + r.num_output_done
        if self.tracer is not None:  # (its 'preempted' span: it waits for nothing more)
            self.tracer.ended(r, now)
        self.recorder.reject(r, reason)

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
            if self.prio is not None:
                self.prio.remove(r.priority)
            self.recorder.complete(r)
            return True
        if self.role == "prefill":
            handed.append(r)
            if self.prio is not None:
                self.prio.remove(r.priority)
        return False

    def _commit(self, batch, cost, start: float, extra_s: float = 0.0) -> None:
        now = self.env.now
        rec = self.recorder
        # the step's KV usage is its peak: what it held before the requests it finished free theirs
        kv_peak = self.kv.num_used
        if self.watch is not None:
            self.watch.add(self.watch_key)  # (again below: a completion's hook may route mid-commit)
        self.stats["steps"] += 1
        finished = False
        if batch.set_seqs:
            self.stats["set_steps"] += 1
            finished = self._commit_set(batch.set_seqs, now)
        items_finished = False
        handed = []
        tbt = rec.tbt
        for r, q in batch.items:
            done = r.num_output_done
            n = r.prompt_tokens + done
            if q > 1 and done > 0 and r.num_computed_tokens == n - 1:
                # speculative verify of q = k + 1 tokens: the accepted draft tokens plus one more
                k = self.spec[0]
                accepted = next(self._accepted) if self._accepted is not None else k
                m = min(accepted + 1, r.output_tokens - done)
                r.num_output_done = done + m
                r.num_computed_tokens = r.prompt_tokens + r.num_output_done - 1
                self.kv.shrink(r, r.num_computed_tokens)
                self.outstanding_tokens += m
                # its m tokens stream out together: one gap, as vLLM's benchmark counts ITL (one
                # per streamed chunk), not m - 1 gaps of 0 that would pull every percentile down
                tbt.append(now - r.last_token_s)
                r.last_token_s = now
            else:
                r.num_computed_tokens += q
                if r.num_computed_tokens != n:  # a prompt chunk: no token yet
                    continue
                self._sample_one(r, done, now, tbt)
            items_finished |= self._finish_or_hand_off(r, now, handed)
        if items_finished:
            # (gone: completed, or ended rejected, its sequence outgrowing the KV: ``Request.cap_output``)
            self.running[:] = [r for r in self.running if r.status == "pending"]
        if (finished or items_finished) and self.after_free is not None:
            self.after_free()
        if handed:
            gone = {id(r) for r in handed}
            self.running[:] = [r for r in self.running if id(r) not in gone]
            self._hand_off(handed, start)
        if self.watch is not None:
            self.watch.add(self.watch_key)
        rec.step(self.index, start, cost, batch, kv_peak, extra_s)

    def _commit_set(self, n: int, now: float) -> bool:
        """The decode set's ``n`` members each emitted a token at ``now``: their gaps, the ones
        that complete (in admission order) and the counters; True when one completed."""
        rec = self.recorder
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
        self._capx += self._ncap
        if self._xheap and self._xheap[0][0] == S1:
            self._cross(S1)
        self._t_last = now
        heap = self._heap
        if heap[0][0] != S1:
            self.outstanding_tokens += n
            return False
        done = []
        while heap and heap[0][0] == S1:
            done.append(heapq.heappop(heap)[2])
        members = self._members
        if rec.end_hooks:
            # a hook may route a new request now: show the counters exactly as the reference has
            # them at this member's turn (members before it emitted a token)
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
        for r in done:
            self._sum_c -= self._complete_member(r, S1)
            r.last_token_s = now
            r.finish_s = now
            self.kv.free(r)
            if self.prio is not None:
                self.prio.remove(r.priority)
            upto = pos[r] + 1 if pos is not None else n
            self.outstanding_tokens += upto - applied - (r.prompt_tokens + r.num_output_done)
            applied = upto
            rec.complete(r)
        self.outstanding_tokens += n - applied
        return True

    def _hand_off(self, handed: list, start: float) -> None:
        """Pass the requests whose prompt the step that began at ``start`` finished to the decode
        pool, each with its share (by KV tokens) of the step's time: how long its KV could stream
        while the step ran (``policy.link.overlap``)."""
        window = self.env.now - start
        total = sum(r.num_computed_tokens for r in handed)
        for r in handed:
            self.outstanding_tokens -= r.prompt_tokens + r.num_output_done
            self.handoff(r, self, window * r.num_computed_tokens / total)

    # ---------------------------------------------------------------- the decode set
    def _settle(self, r, info, S) -> int:
        """Bring ``r``'s counters to decode-step counter ``S``; return its computed tokens."""
        _, s0, c0, d0, held = info
        k = S - s0
        c = c0 + k
        r.num_computed_tokens = c
        r.num_output_done = d0 + k
        r.kv_blocks = held or self.kv.blocks_for(c)  # (capped at the window's blocks)
        if k:
            r.last_token_s = self._t_last
        return c

    def _complete_member(self, r, S) -> int:
        """Member ``r`` completes at decode-step counter ``S``: it leaves the set, settled, and the
        set's counts (past the window, block growth, prompts) lose it; returns its computed
        tokens (the caller takes them off ``_sum_c``)."""
        info = self._members.pop(r)
        c = self._settle(r, info, S)
        # (counted among those attending the whole window when it joined so or crossed before S;
        # it left the growth counts if it crossed _cap_c before S: ``_join``'s crossings)
        if c > self._att_c:
            self._ncap -= 1
            self._capx -= c - self.window + 1
        if not info[4] and c <= self._cap_c:
            self._cnt[(info[1] - info[2]) % self.kv.block_size] -= 1
        self._sum_p -= r.prompt_tokens
        return c

    def _cross(self, S: int) -> None:
        """Members cross the sliding window at decode-step counter ``S`` (``_xheap``): from this step
        on they attend the whole window (its excess is 0 now), or they grow no more blocks."""
        xh = self._xheap
        while xh and xh[0][0] == S:
            self._crossed(heapq.heappop(xh))

    def _crossed(self, ev) -> None:
        """Apply one crossing (an ``_xheap`` entry) to the set's counts: the member grows no more
        blocks (its residue leaves ``_cnt``), or it attends the whole window (``_ncap``)."""
        if ev[2]:
            self._cnt[ev[3]] -= 1
        else:
            self._ncap += 1
            self._natt -= 1

    def _dissolve(self) -> None:
        S = self._S
        members = list(self._members.items())
        for r, info in members:
            self._settle(r, info, S)
        self.running[:0] = [r for r, _ in members]
        self._members.clear()
        self._heap.clear()
        self._xheap.clear()
        self._natt = 0
        self._new.clear()
        self._cnt = [0] * self.kv.block_size
        self._sum_c = 0
        self._ncap = self._capx = 0
        self._sum_p = 0

    def _join(self, r, S: int, c: int, d: int, held: int = 0) -> bool:
        """``r`` joins the decode set at counter ``S`` with ``c`` computed tokens and ``d``
        emitted (``_sum_c`` is the caller's); ``held``: KV blocks reserved up front that cover
        its whole sequence, or its most blocks under a sliding window (it grows none; 0: it
        grows a block every ``block_size`` tokens). Returns whether it attends the whole window
        already (the caller adds it to ``_ncap`` and ``_capx`` with ``_sum_c``). Under a sliding window, the
        counters at which it will cross ``_att_c`` and ``_cap_c`` while in the set go on
        ``_xheap``."""
        seq = next(self._seq)
        cap = c >= self._att_c
        self._members[r] = (seq, S, c, d, held)
        res = (S - c) % self.kv.block_size
        if not held:
            self._cnt[res] += 1
        self._sum_p += r.prompt_tokens
        done = S + r.output_tokens - d
        heapq.heappush(self._heap, (done, seq, r))
        if self.window is not None:
            if not cap and S + self._att_c - c < done:
                heapq.heappush(self._xheap, (S + self._att_c - c, seq, 0, 0))
                self._natt += 1
            if not held and S + self._cap_c - c < done:
                heapq.heappush(self._xheap, (S + self._cap_c - c, seq, 1, res))
        return cap

    def _held(self, r, c: int) -> int | None:
        """How ``r`` (``c`` tokens computed) keeps its KV in the decode set: 0 when it maps just
        what they need (it grows a block every ``block_size`` tokens), its blocks when they were
        reserved up front for its whole sequence (static batching, ``policy.reserve``: it grows
        none) or when it holds its most blocks under a sliding window (past ``_cap_c``), None
        when none of these (it stays out)."""
        if c >= self._cap_c:
            return r.kv_blocks if r.kv_blocks == self.kv.window_blocks else None
        blocks = -(-c // self.kv.block_size)
        if r.kv_blocks == blocks:
            return 0
        if r.kv_blocks > blocks and r.kv_blocks >= self.kv.blocks_for(r.prompt_tokens + r.output_tokens - 1):
            return r.kv_blocks
        return None

    def _absorb(self) -> None:
        """Move the decoding requests at the front of ``running`` into the decode set."""
        tail = self.running
        S = self._S
        i = 0
        for r in tail:
            d = r.num_output_done
            c = r.num_computed_tokens
            if not (d > 0 and c == r.prompt_tokens + d - 1 and d < r.output_tokens):
                break
            held = self._held(r, c)
            if held is None:
                break
            if self._join(r, S, c, d, held):
                self._ncap += 1
                self._capx += c - self.window + 1
            self._sum_c += c
            self._new.append(r)
            i += 1
        if i:
            del tail[:i]

    # ---------------------------------------------------------------- runs of decode-only steps
    @property
    def _bulk(self) -> bool:
        """Whether a run of decode steps may go past completions (settled in bulk, late): only
        when nothing reacts to a completion at its time (a closed-loop client's next request;
        on the P/D decode side, a hand-off waiting for the blocks it frees). Otherwise a run ends
        at the first completion, which is committed at its time (``_commit_set``)."""
        return not self.recorder.end_hooks and (self.after_free is None or not self.handoffs_waiting)

    def end_bulk(self) -> None:
        """From now on a completion matters at its time (P/D: a hand-off waits for room on the
        decode side, and the blocks a completion frees may let it in): a run of decode steps
        planned past completions plans no further and, when a completion is planned in it (at the
        end of the step in flight or later), ends with the step in flight. The completions at its
        end are settled then, at their time, and ``after_free`` is called (``_macro``). The
        cluster settles the replica first."""
        run = self._mac
        if run is None or not run.bulk:
            return
        run.bulk = False
        run.stop = True
        j = run.done  # the step in flight
        if j + 1 < run.K and run.dp < len(run.dep):
            self._truncate(run, j + 1)
            if self._interruptible and not self._lagged:  # (waiting for the end of a later step)
                self._interrupt()

    def _foldable(self, items) -> bool:
        """Whether this step (the decode set plus ``items``) can be step 0 of a run of decode
        steps: completions are settled in bulk, nothing else waits, every other running request
        is in it and finishes its prompt (emits a token) without finishing, so that after it
        they have joined the decode set and nothing is left to decide."""
        if not items or not self.aggregate or self.waiting or self.landed or self.swapped or self.role == "prefill" \
                or not self._bulk:
            return False
        tail = self.running
        if len(tail) != len(items):
            return False
        for (r, q), t in zip(items, tail):
            c = r.num_computed_tokens + q
            if r is not t or c != r.prompt_tokens + r.num_output_done or r.num_output_done + 1 >= r.output_tokens \
                    or self._held(r, c) is None:
                return False
        return True

    def _leave(self, run, x: int, n: int, sumc: int, ncap: int = 0, capx: int = 0):
        """Members completing at decode-step counter ``run.S0 + x`` leave the planned steps after
        step x - 1 (``run.dep``); returns the members, their sum of computed tokens, and those
        past the sliding window and their excess (``_ncap``, ``_capx``) after."""
        heap, members, cnt, bs, S0 = self._heap, self._members, run.pcnt, self.kv.block_size, run.S0
        while heap and heap[0][0] == S0 + x:
            r = heapq.heappop(heap)[2]
            _, s0, c0, _, held = members[r]
            c = c0 + S0 + x - s0
            sumc -= c
            n -= 1
            if c > self._att_c:  # (as _complete_member)
                ncap -= 1
                capx -= c - self.window + 1
            if not held and c <= self._cap_c:
                cnt[(s0 - c0) % bs] -= 1
            run.dep.append((x - 1, r))
        return n, sumc, ncap, capx

    def _plan_cross(self, run, S: int) -> int:
        """(sliding window) Members cross it at counter ``S``, the plan's next step (``_join``):
        the plan's growth counts (``run.pcnt``) change now, the replica's when the step before is
        settled (the crossings move to ``run.xdep``); returns how many more attend the whole window.
        A run whose steps the policy shaped from the set's counts (a padded static batch) stops
        there: the policy decides again once a member attends the whole window."""
        xh, cnt = self._xheap, run.pcnt
        att = 0
        while xh and xh[0][0] == S:
            ev = heapq.heappop(xh)
            run.xdep.append(ev)
            if ev[2]:
                cnt[ev[3]] -= 1
            else:
                att += 1
        if att and run.next_steps is not None:
            run.stop = True
        return att

    def _macro_len(self, n: int, free: int, bulk: bool) -> int:
        """How many decode-only steps can run from here with nothing changing: while the KV
        blocks they grow fit in ``free`` free blocks (empty, or cached blocks nobody maps, which
        the run evicts least recently freed first, as the policy's steps would) and, unless
        completions are settled in ``bulk``, up to the first completion (included)."""
        S = self._S
        bs = self.kv.block_size
        if bulk:  # _plan stops where the KV runs out (not counting blocks freed on the way)
            return self.MAX_RUN if self._cnt[S % bs] + self._cnt[(S + 1) % bs] <= free else 1
        K = min(self._heap[0][0] - S, self.MAX_RUN)
        if K < 2:
            return K
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

    def _until(self, t: float):
        """Wait until exactly ``t`` (SimPy generator; one timeout, rarely two: ``delay_to``)."""
        env = self.env
        yield env.timeout(delay_to(env.now, t))
        if env.now < t:
            yield env.timeout(t - env.now)

    def _macro(self, n: int, K: int, fold=None, shape=None):
        """Run up to K decode-only steps of the decode set, as few timeouts (step times are
        computed a chunk at a time, so a run cut short wastes little). An arrival, a P/D
        hand-off, or KV mapped from outside wakes the replica at time x: the steps ended by x
        are settled, the step in flight runs to its end, and the replica decides again.
        Observers (router, P/D hand-off, queue sampler) call ``settle(now)`` first, so that
        counters, KV and records are those of time x.

        ``fold`` = (batch, cost, items): step 0 is that admission step, already applied (its KV
        taken, ``_foldable``); its requests join the decode set now, as of step 1, and get their
        token when step 0 is settled. One timeout then covers the admission step and the decode
        steps after it.

        ``shape``: the decision this run starts from, when its steps are not plain decode steps
        (``Batch.next_steps``: each priced by ``step_time`` and recorded one by one) or arrivals
        change nothing (``Batch.steady_arrivals``: they do not cut the run)."""
        env = self.env
        S = self._S
        start = env.now
        run = Run(S, start, n, self._sum_c, self._cnt, self._new[:], self._ncap, self._capx)
        self._new.clear()
        if shape is not None:
            run.deaf = shape.steady_arrivals and self.tracer is None  # (traced: arrivals are decisions to record)
            if shape.arrivals_behind:
                run.behind = self.waiting.key(self.waiting[0])
            if shape.next_steps is not None:
                run.next_steps, run.priced = shape.next_steps, []
        self.stats["runs"] += 1
        run.bulk = self._bulk
        if shape is not None and shape.until_completion:
            run.bulk = False
            self.stats["held_runs"] += 1
        if not run.bulk and S + K == self._heap[0][0]:
            # the last step completes a member: committed the ordinary way (_commit_set), at its
            # end, not in bulk
            run.fin_at = K
        self._mac = run
        if self.on_run is not None:
            self.on_run(self, True)
        # plan up to the step in flight when the next request is known to arrive (else in
        # doubling chunks): a run cut short by an arrival wastes the steps planned past it
        t_stop = (self.next_arrival_s() if self.next_arrival_s is not None and run.fin_at < 0 and not run.deaf
                  and run.behind is None else math.inf)
        if fold is None:
            run.pcnt = self._cnt[:]
            t0 = start
        else:
            batch, cost, items = fold
            run.fold = (batch, cost, items, n, None)
            t0 = start + cost.time_s  # the end of step 0, as env.timeout(cost.time_s) has it
            run.K = run.grown = 1  # its KV is taken
            run.ends.append(t0)
            run.cum.append(0)
            psum = self._sum_c + n
            ncap = self._ncap
            capx = self._capx + ncap
            for r, q in items:  # members as of step 1 (as _absorb after step 0 would take them)
                c = r.num_computed_tokens + q
                if self._join(r, S + 1, c, r.num_output_done + 1, self._held(r, c)):
                    ncap += 1
                    capx += c - self.window + 1
                psum += c
            self.running.clear()
            if ncap != self._ncap:  # (members past the window join with step 0's settle, as _sum_c)
                run.fold = (batch, cost, items, n, (ncap - self._ncap, capx - self._capx - self._ncap))
            run.pcnt = self._cnt[:]
            run.pn, run.psum, run.pcap, run.pcx = self._leave(run, 1, n + len(items), psum, ncap, capx)
            if self._xheap and self._xheap[0][0] == S + 1:
                run.pcap += self._plan_cross(run, S + 1)
        chunk = 8
        # (the steps to t_stop at the last run's step time, the step in flight, one to spare, and
        # with async scheduling the one after the step in flight)
        margin = 3 if self.async_scheduling else 2
        if t_stop < math.inf and self._decode_step_s > 0:
            chunk = max(2, min(int((t_stop - t0) / self._decode_step_s) + margin, 1024))
        if fold is None:
            self._plan(run, min(K, chunk), start, self.kv.num_free - self._kv_slack, t_stop)
            self.kv.take(run.cum[0])  # the first step's KV (as settle(start) takes it)
            run.grown = 1
            if self.watch is not None:
                self.watch.add(self.watch_key)
        elif t0 > t_stop:
            run.stop = True
            if self.async_scheduling and run.pn and K > 1:
                # the next request arrives during step 0, and the step after it is decided without
                # it: that step is the decode set's, so it is part of the run
                self._plan(run, 1, t0, self.kv.num_free - self._kv_slack)
        elif run.pn:
            self._plan(run, min(K - 1, chunk), t0, self.kv.num_free - self._kv_slack, t_stop)
        while True:
            run.fin = run.K == run.fin_at
            if self.on_due is not None:
                self.on_due(self)
            ends = run.ends
            last = ends[run.K - 1]
            self._interruptible = True  # wake() interrupts the wait (cheaper than ev | wake)
            try:
                yield env.timeout(delay_to(env.now, last))
                if env.now < last:  # (rare: ties-to-even skipped ``last``; see delay_to)
                    yield env.timeout(last - env.now)
                woken = False
            except Interrupt:
                woken = True
            self._interruptible = False
            if woken and env.now < last:  # settle what has happened, finish the step in flight
                self.settle(env.now)
                j = run.done  # the step in flight
                lag = self._wake_lag
                if not lag and j and run.ends[j - 1] == env.now and self._wake_cut:
                    # woken as step j - 1 ended: the run ends there, and the replica decides once
                    # the instant has nothing else left (step j had not begun)
                    self._truncate(run, j)
                elif j + 1 + lag < run.K:
                    self._truncate(run, j + 1 + lag)
                if lag and self.role != "colocated":
                    # the step after the one in flight is decided without what arrived; anything
                    # seen at once (wake with no lag: a P/D hand-off landing, KV freed on the
                    # prefill side) before the one in flight ends still cuts there
                    self._lagged = self._interruptible = True
                    try:
                        yield from self._until(ends[j])
                    except Interrupt:
                        self.settle(env.now)
                        if j + 1 < run.K:
                            self._truncate(run, j + 1)
                        yield from self._until(ends[j])
                    self._lagged = self._interruptible = False
                yield from self._until(ends[run.K - 1])
                break
            if run.K >= K or not run.pn or run.stop:
                break
            if t_stop < math.inf:
                d = run.last_step_s() if run.K > 1 or fold is None else self._decode_step_s
                chunk = max(2, min(int((t_stop - last) / d) + margin, 1024)) if d > 0 else 8
            else:
                chunk = min(2 * chunk, 1024)
            # every planned step has started (its KV is mapped): the next ones must fit what is
            # empty now (blocks mapped from outside since the run began count)
            self.settle(env.now)
            if not self._plan(run, min(K - run.K, chunk), last, self.kv.num_free - self._kv_slack, t_stop):
                break
        settled = run.dp
        self.settle(env.now)
        for ev in run.xdep[run.xp:]:  # crossings planned past the settled steps: the replica's again
            heapq.heappush(self._xheap, ev)
        self._mac = None
        self._prev_step = (run.ends[run.K - 2] if run.K > 1 else run.t0, env.now)
        if (run.deaf or run.behind is not None) and self.incoming and run.K > 1:
            # (async scheduling) the step-by-step engine decided at the end of every step of the
            # run, each time seeing the arrivals by the start of that step (the run never left it
            # idle): they wait in the queue now, before the decision at its end sees what it sees
            self._queue_arrivals(run.ends[run.K - 3] if run.K > 2 else run.t0)
        if self.on_run is not None:
            self.on_run(self, False)
        if run.dp > settled and self.after_free is not None and self.handoffs_waiting:
            # (a run that ended for ``end_bulk``: its last step's completions, now, at their time)
            self.after_free()
        if run.K > 1 or fold is None:
            self._decode_step_s = run.last_step_s()
        if run.fin:
            i = run.K - 1
            d = run.dctx(i)
            if run.priced is None:
                self._commit(_SetBatch(n, d), self._decode_cost(n, d), run.ends[i - 1] if i else run.t0)
            else:
                cost, shaped = run.priced[i]
                self._commit(shaped, cost, run.ends[i - 1] if i else run.t0)

    def _decode_cost(self, n: int, dctx: int) -> Cost:
        """One decode-only step of the set (as ``step_time`` prices it)."""
        t, f, b, comp = self.cost_model.decode_steps(n, [dctx])
        return Cost(t[0], f[0], b[0], "compute" if comp[0] else "memory")

    def _truncate(self, run, K: int) -> None:
        """Cut the run to its first ``K`` steps: completions planned later go back to the heap."""
        run.K = K
        run.fin = False  # (its last step is settled in bulk now: it may be due sooner)
        if self.on_due is not None:
            self.on_due(self)
        if run.priced is not None:
            del run.priced[K:]
        dep = run.dep
        if dep and dep[-1][0] >= K:
            members, heap, S0 = self._members, self._heap, run.S0
            while dep and dep[-1][0] >= K:
                i, r = dep.pop()
                heapq.heappush(heap, (S0 + i + 1, members[r][0], r))

    def _plan(self, run, k: int, t0: float, free: int, t_stop: float = math.inf) -> int:
        """Append up to ``k`` more steps to ``run`` (their times, FLOPs, bytes, bound, KV tokens,
        sequences, KV growth), starting at ``t0`` (the end of the last planned step), as many as
        the blocks they grow fit in ``free`` (blocks that completions free on the way are not
        counted: the run stops early and the replica plans again), and up to the step in flight
        at ``t_stop`` (then ``run.stop``). In bulk mode the members that complete on the way
        leave the planned steps after their last one (``run.dep``). Returns how many steps were
        added."""
        bs = self.kv.block_size
        S0 = run.S0
        P = i = run.K
        end = P + k
        cnt = run.pcnt
        n, sumc, ncap, capx = run.pn, run.psum, run.pcap, run.pcx
        bulk = run.fin_at < 0 and run.bulk
        heap, xh = self._heap, self._xheap
        cum = run.cum
        c_last = cum[-1] if P else 0
        need = 0
        more = False  # (async) one more step, past the end of the piece in flight at t_stop
        step_times = self.cost_model.decode_step_times
        while i < end and n:
            seg = end
            x = heap[0][0] - S0 if bulk and heap else -1  # members leave after step x - 1
            if 0 <= x < seg:
                seg = x
            if xh and xh[0][0] - S0 < seg:
                seg = xh[0][0] - S0
                assert seg > i, "a sliding-window crossing was left behind the plan"
            r0 = (S0 + i) % bs
            grow = (cnt[r0:] + cnt[:r0]) * (-(-(seg - i) // bs))  # cnt from residue r0 on, cycled
            del grow[seg - i:]
            m = len(grow)
            g = sum(grow)
            if need + g <= free:
                need += g
            else:
                for j, g in enumerate(grow):
                    need += g
                    if need > free:
                        m = j
                        break
                if not m:
                    break
            # sum of (c + 1) at the first step (under a sliding window, c - excess for the members
            # past it); g more at each next one (those not past it)
            d0 = sumc - capx + n
            g = n - ncap
            if run.next_steps is None:
                dur = step_times(n, range(d0, d0 + g * m, g) if g else [d0] * m)
            else:  # each step as the policy said it looks (Batch.next_steps), priced as the reference does
                shaped = [run.next_steps(n, d0 + g * j, i + j) for j in range(m)]
                priced = [(self.cost_model.step_time(b), b) for b in shaped]
                dur = [c.time_s for c, _ in priced]
            ends = list(itertools.accumulate(dur, initial=t0))  # the reference's now + d, step by step
            if ends[-1] > t_stop:  # keep the steps up to the one in flight at t_stop (async: one more)
                run.stop = True
                cut = bisect.bisect_right(ends, t_stop, 1) + (1 if self.async_scheduling else 0)
                if cut < m:
                    m = cut
                    del ends[m + 1:]
                elif cut > m and m == len(grow) and end > i + m:
                    # (async) the step in flight is this piece's last (members complete at its
                    # end): the one more is the next piece's first, planned in the next round
                    end = i + m + 1
                    more = True
            if run.priced is not None:
                run.priced.extend(priced[:m])
            t0 = ends[-1]
            del ends[0]
            run.ends.extend(ends)
            run.segs.append((i, m, n, d0, g))
            acc = itertools.accumulate(grow[:m] if m < len(grow) else grow, initial=c_last)
            next(acc)
            cum.extend(acc)
            c_last = cum[-1]
            sumc += n * m
            capx += ncap * m
            i += m
            if xh and xh[0][0] == S0 + i:  # (before any break: the counts after the planned steps)
                ncap += self._plan_cross(run, S0 + i)
            if m < len(grow) and not run.stop:
                break
            if i == x:  # members complete at the end of step x - 1
                n, sumc, ncap, capx = self._leave(run, x, n, sumc, ncap, capx)
            if run.stop and not more:
                break
            more = False
        run.K, run.pn, run.psum, run.pcap, run.pcx = i, n, sumc, ncap, capx
        return i - P

    def _interrupt(self, lag: int = 0, cut: bool = True) -> None:
        """End the wait of the run of decode steps in flight (``_interruptible``): it ends after
        the step in flight and ``lag`` more (``_macro``'s interrupt path); woken at the very end
        of a step, with no lag and ``cut``, at that end (the step after it had not begun)."""
        self._interruptible = False
        self._wake_lag = lag
        self._wake_cut = cut and not lag
        self.process.interrupt()

    def kv_changed(self) -> None:
        """Blocks were mapped on this replica from outside (a P/D hand-off): a run of decode
        steps planned on the old count of free blocks must stop after the step in flight,
        unless the blocks its remaining steps grow still fit (then every decision in it is
        unchanged)."""
        run = self._mac
        if self._interruptible:
            cum, grown = run.cum, run.grown
            rest = cum[run.K - 1] - (cum[grown - 1] if grown else 0)
            if rest <= self.kv.num_free - self._kv_slack:
                return
            self._interrupt()

    def next_settle_s(self) -> float:
        """When ``settle`` next has something to do: the end of the first step of the run not
        settled yet (its KV growth and records move then, and not before), or just after the
        instant a step began at when its KV growth waits for that instant's end; inf when none
        is (no run, every planned step settled, or only the last one left, committed at its end)."""
        run = self._mac
        if run is None:
            return math.inf
        d = run.done
        if run.grown <= d < run.K:
            # settled at the very end of step d - 1: step d's KV growth comes once that instant
            # is over (``settle``), before anything later reads the replica
            return math.nextafter(run.ends[d - 1], math.inf)
        if d < run.K - 1 or (d == run.K - 1 and not run.fin):
            return run.ends[d]
        return math.inf

    def settle(self, now: float, strict: bool = False) -> None:
        """Bring a run of decode steps up to time ``now``: KV of the steps started by then, and
        the steps ended by then committed, with the completions among them (``strict``:
        started / ended strictly before ``now``, for the end of a run cut off at
        ``workload.duration_s``)."""
        run = self._mac
        if run is None:
            return
        K, done, grown = run.K, run.done, run.grown
        find = bisect.bisect_left if strict else bisect.bisect_right
        ends, cum = run.ends, run.cum
        kv = self.kv
        # steps started by now: step 0 at t0, step i when step i - 1 ends; one that would begin
        # at a step end that is now has not: the replica decides it once every request of the
        # instant has arrived (an arrival then may end the run there, ``wake``)
        g = ((run.t0 < now) if strict else (run.t0 <= now)) + bisect.bisect_left(ends, now, 0, K - 1) if K else 0
        evict = False  # the growth needs cached blocks evicted: taken step by step below
        if g > grown:
            need = cum[g - 1] - (cum[grown - 1] if grown else 0)
            if need <= kv.num_empty:  # (empty blocks only: the order of takes and frees is moot)
                kv.num_empty -= need
                run.grown = grown = g
            else:
                evict = True
            if self.watch is not None:
                self.watch.add(self.watch_key)
        e = find(ends, now, 0, K)
        if run.fin and e > K - 1:
            e = K - 1
        if e <= done:
            if evict:  # (no completion between them: evicted in one go, least recently used first)
                kv.take(need)
                run.grown = g
            return
        if self.watch is not None:
            self.watch.add(self.watch_key)
        rec = self.recorder
        last = self._t_last  # the end of the step before ``done``: the gap's other end
        tokens = 0
        captok = 0  # of them, tokens of members past the sliding window (their excess grows as much)
        lo = done  # the steps [lo, e) are recorded as a block (``Recorder.run_block``)
        adj = 0  # members of step ``lo`` whose gap is recorded on its own
        fold = run.fold if done == 0 else None
        if done == 0 and run.new:  # their first gap is their own; older members' is the step's
            t = ends[0]
            tbt = rec.tbt
            for r in run.new:
                tbt.append(t - r.last_token_s)
            adj = len(run.new)
        if fold is not None:
            # step 0 is an admission step: the members' gap, then the admitted requests' token
            # (as _commit), before any of them completes below
            n0 = fold[3]
            t = ends[0]
            if n0 > adj:
                rec.tbt_steps(t - last, n0 - adj)
            adj = 0
            tokens = n0
            captok = self._ncap
            last = t
            lo = 1
            tbt = rec.tbt
            for r, q in fold[2]:
                d = r.num_output_done
                r.num_computed_tokens += q
                self._sample_one(r, d, t, tbt)
                self._sum_c += r.num_computed_tokens
            if fold[4] is not None:
                self._ncap += fold[4][0]
                self._capx += fold[4][1]
        # pieces of [lo, e): sequences, KV tokens of their first step, steps, growth of the KV tokens
        pn, pc0, plen = [], [], []
        pg = None  # (only once a piece grows by fewer than its sequences: a sliding window)
        segs, sp = run.segs, run.sp
        while sp < len(segs):
            i0, m, n, d0, gr = segs[sp]
            if i0 >= e:
                break
            a = lo if lo > i0 else i0
            b = i0 + m if i0 + m < e else e
            if b > a:
                pn.append(n)
                pc0.append(d0 + gr * (a - i0))
                plen.append(b - a)
                tokens += n * (b - a)
                if gr != n:
                    captok += (n - gr) * (b - a)
                    if pg is None:
                        pg = pn[:-1]  # (the pieces before grow by their sequences)
                if pg is not None:
                    pg.append(gr)
            if i0 + m > e:
                break
            sp += 1
        run.sp = sp
        # KV in use at each step's peak: now's (growth applied up to step g - 1, and any block
        # mapped from outside, e.g. a P/D hand-off, which settles first) less later growth, less
        # what completions in earlier steps freed (a step's own completions free theirs after it)
        base = kv.num_used - cum[grown - 1]  # (before this settle's growth, if not taken yet)
        dep = run.dep
        dp = run.dp
        frees = None  # (step, blocks freed at its end)
        if dp < len(dep) and dep[dp][0] < e:
            S0 = run.S0
            sum_c = 0
            frees = []
            while dp < len(dep) and dep[dp][0] < e:
                i, r = dep[dp]
                dp += 1
                if evict and i >= grown:
                    # steps up to i take their blocks before the completions at the end of step i
                    # free theirs, as the reference steps them (evicting what it would evict)
                    kv.take(cum[i] - cum[grown - 1])
                    grown = i + 1
                sum_c += self._complete_member(r, S0 + i + 1)
                r.last_token_s = r.finish_s = ends[i]
                in_use = kv.num_used
                kv.free(r)
                frees.append((i, in_use - kv.num_used))
                if self.prio is not None:
                    self.prio.remove(r.priority)
                self.outstanding_tokens -= r.prompt_tokens + r.num_output_done
                rec.complete(r)
            run.dp = dp
            self._sum_c -= sum_c
        xd = run.xdep
        if run.xp < len(xd) and xd[run.xp][0] <= run.S0 + e:
            xp, last_S = run.xp, run.S0 + e
            while xp < len(xd) and xd[xp][0] <= last_S:
                self._crossed(xd[xp])
                xp += 1
            run.xp = xp
        if evict:
            if g > grown:
                kv.take(cum[g - 1] - cum[grown - 1])
            run.grown = grown = g
        if fold is not None:
            self.stats["steps"] += 1
            self.stats["set_steps"] += 1
            rec.step(self.index, run.t0, fold[1], fold[0], base + cum[0], 0.0)  # (step 0: nothing freed before)
        if lo < e:
            self.stats["run_steps"] += e - lo
            if run.priced is None:
                rec.run_block(self.index, ends[lo - 1] if lo else run.t0, last, ends[lo:e], pn, pc0, plen, adj,
                              cum[lo:e], base, frees and [(i + 1 - lo, b) for i, b in frees if i + 1 < e],
                              pg)
            else:  # steps of their own shape: recorded one by one, as the reference commits them
                used = [base + x for x in cum[done:e]]
                for i, b in frees or ():
                    for j in range(i + 1 - done, e - done):
                        used[j] -= b
                for i in range(lo, e):
                    cost, shaped = run.priced[i]
                    prev = ends[i - 1] if i else run.t0
                    rec.step(self.index, prev, cost, shaped, used[i - done], 0.0)
                    gaps = shaped.set_seqs - (adj if i == lo else 0)
                    if gaps:
                        rec.tbt_steps(ends[i] - (last if i == lo else prev), gaps)
        self.outstanding_tokens += tokens
        self._sum_c += tokens
        self._capx += captok
        self._S += e - done
        self._t_last = ends[e - 1]
        run.done = e


def _accepted_draws(rng, p: float, k: int):
    """Accepted draft tokens of successive verifications: min(Geometric(p) - 1, k), each draw
    from ``rng`` in order (a block of draws gives the values one draw at a time would)."""
    while True:
        for g in rng.geometric(p, size=1024).tolist():
            yield g - 1 if g <= k else k


class _SetBatch:
    """What ``_commit`` reads of the last step of a run (committed at its end): the decode set
    alone, and its row for the recorder."""

    __slots__ = ("set_seqs", "items", "num_seqs", "prefill_tokens", "decode_tokens", "context_tokens",
                 "padding_tokens")

    def __init__(self, n: int, dctx: int):
        self.set_seqs = n
        self.items = ()
        self.num_seqs = self.decode_tokens = n
        self.prefill_tokens = self.padding_tokens = 0
        self.context_tokens = dctx


__all__ = ["Replica", "KeyedQueue", "waiting_queue"]
