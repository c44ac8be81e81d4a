"""Pipeline parallelism with overlapping micro-batches (vLLM's virtual engines).

A replica with ``pp`` stages runs ``pp`` virtual engines: independent schedulers, each with its
own queues and ``1/pp`` of the replica's KV blocks (vLLM V0 splits ``num_gpu_blocks`` so), whose
steps go through the stages one after another. Each stage (its ``tp`` GPUs) works on one
micro-batch at a time, first come first served, so while one engine's step is on stage 2 another's
can be on stage 1: with ``pp`` engines busy the stages overlap and the replica's throughput
approaches ``pp`` times one step at a time; unequal steps leave bubbles (a stage waits for the
one before it). A new request goes to the replica's engine with the fewest unfinished requests,
as vLLM does. The engines' KV swaps to and from the host share the replica's PCIe links.
"""

from __future__ import annotations

from collections import deque

import simpy


class Pipeline:
    """The ``stages`` stages of one replica, shared by its virtual engines."""

    def __init__(self, env, stages: int):
        self.env = env
        self.free_at = [0.0] * stages  # when each stage is through with the work reserved on it
        self._done_s = [0.0] * stages  # work each stage has finished (for its busy fraction)
        self._reserved = [deque() for _ in range(stages)]  # (start, end, seconds) of work not over yet
        # the replica's host links (PCIe): the engines' KV swaps share them, one copy at a time
        self.host_link = simpy.Resource(env, capacity=1)

    def swap(self, seconds: float):
        """A SimPy generator: copy KV blocks to or from the host for ``seconds`` (the copy's time
        at the replica's whole swap bandwidth), after waiting for other engines' copies."""
        with self.host_link.request() as req:
            yield req
            yield self.env.timeout(seconds)

    def traverse(self, times):
        """A SimPy generator: hold stage ``k`` for ``times[k]`` seconds, in order, each after
        waiting for the stage to be free (first come, first served).

        Every step goes through the stages in the same order and each stage serves in arrival
        order, so a step behind another at stage 1 stays behind it at every stage (a tandem FIFO
        queue): the whole traversal is known when the step enters, and is reserved then and
        waited out with one timeout (the same times as holding each stage in turn, at a third of
        the events)."""
        now = t = self.env.now
        free_at = self.free_at
        for k, d in enumerate(times):
            start = t if t > free_at[k] else free_at[k]
            t = start + d
            free_at[k] = t
            held = self._reserved[k]
            while held and held[0][1] <= now:  # work over by now counts as done (its own seconds,
                self._done_s[k] += held.popleft()[2]  # as summed before: end - start rounds)
            held.append((start, t, d))
        yield self.env.timeout(t - now)

    @property
    def busy_s(self) -> list:
        """Seconds each stage has worked so far (reserved work counts up to now only)."""
        now = self.env.now
        return [done + sum(d if b <= now else now - a for a, b, d in held if a < now)
                for done, held in zip(self._done_s, self._reserved)]


class VirtualEngines:
    """One replica's virtual engines seen as one replica by the router: ``submit`` hands a request
    to the engine with the fewest unfinished requests (ties: the lowest index); the counters and
    the KV view a router reads are the engines' totals."""

    def __init__(self, engines: list):
        self.engines = engines
        self.kv = _KvView([e.kv for e in engines])

    @staticmethod
    def _unfinished(e) -> int:
        # num_running: a fast engine counts its decode set without materializing it
        return e.num_running + len(e.waiting) + len(e.incoming) + len(e.swapped) + len(e.landed)

    def submit(self, req) -> None:
        min(self.engines, key=self._unfinished).submit(req)

    def rejection_reason(self, req) -> str | None:
        """Why ``req`` would be rejected on arrival (the engines are alike: the first one's rules)."""
        return self.engines[0].rejection_reason(req)

    def arrival_reason(self, req) -> str | None:
        """Why ``req`` is rejected on arrival, by the first engine's rules (``Replica.arrival_reason``;
        a P/D split's prefill pool with ``hardware.pp`` asks it of its entry replica)."""
        return self.engines[0].arrival_reason(req)

    @property
    def recompute_limit(self) -> int | None:
        """The first engine's ``Replica.recompute_limit`` (the engines are alike)."""
        return self.engines[0].recompute_limit

    def can_outlive_watermark(self, req) -> bool:
        """``Replica.can_outlive_watermark`` in the engine ``req`` would run in (the engines are alike)."""
        return self.engines[0].can_outlive_watermark(req)

    def outgrow(self, req) -> tuple[int, str | None]:
        """``Replica.outgrow`` in the engine ``req`` would run in (each holds its own share of the KV)."""
        return self.engines[0].outgrow(req)

    @property
    def outstanding_tokens(self) -> int:
        return sum(e.outstanding_tokens for e in self.engines)

    @property
    def waiting(self) -> list:
        return [r for e in self.engines for r in (*e.waiting, *e.incoming)]

    @property
    def waiting_blocks(self) -> int:
        return sum(e.waiting_blocks for e in self.engines)

    @property
    def waiting_tokens(self) -> int:
        return sum(e.waiting_tokens for e in self.engines)


class _KvView:
    """The engines' KV allocators added up (what ``least_kv_usage`` and ``prefix_aware`` read)."""

    def __init__(self, kvs: list):
        self.kvs = kvs
        self.block_size = kvs[0].block_size

    @property
    def num_used(self) -> int:
        return sum(k.num_used for k in self.kvs)

    @property
    def num_blocks(self) -> int:
        return sum(k.num_blocks for k in self.kvs)

    def blocks_for(self, tokens: int) -> int:
        return self.kvs[0].blocks_for(tokens)

    def prefix_blocks(self, request) -> int:
        return self.kvs[0].prefix_blocks(request)

    def cached_prefix_blocks(self, request):
        return max((k.cached_prefix_blocks(request) for k in self.kvs), key=lambda c: c[0])
