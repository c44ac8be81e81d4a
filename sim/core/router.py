"""Routers: callables ``router(replicas, request) -> index`` choosing the replica for a request.

A router sees only what a real load balancer could: the replicas' queues, counters and prefix
caches, and the request's prompt (length, prefix group). ``ROUTERS`` maps a name to a factory
``factory(rng) -> router`` (each run gets a fresh router; ``rng`` is the run's numpy Generator
for routing); ``servesim.plugins`` adds installed plug-ins and ``module:Class`` names.

A router says what it reads with ``reads_state`` (False: its choice depends on nothing of the
replicas, so the engine need not bring replicas in a run of decode steps up to date before
asking it). A router with a ``settle`` attribute brings up to date only the replicas it reads
(the cluster sets it to ``settle(position)``), instead of the cluster settling every replica
before each routing; one with ``configure(scenario)`` reads its settings from the scenario
(``class_aware``: ``cluster.class_replicas``).

One that picks the least loaded replica keeps the loads in a heap (``LeastLoaded``; ``ClassAware``
one per distinct replica list of its classes): the cluster marks a replica *changed* whenever its
counters, queue or KV move, and a routing re-reads only the changed replicas, so it costs
O(changed x log replicas), not O(replicas).
"""

from __future__ import annotations

import heapq
import math


class _RoundRobin:
    """Replica ``k mod n`` for the k-th request routed. Its choices do not depend on the replicas'
    state, so it can say ahead of time which request a replica gets next (``routings_until``:
    the fast engine plans its runs of decode steps up to that request's arrival)."""

    reads_state = False

    def __init__(self):
        self.count = 0

    def __call__(self, replicas, request) -> int:
        i = self.count % len(replicas)
        self.count += 1
        return i

    def routings_until(self, index: int, n: int) -> int:
        """How many requests are routed before replica ``index`` (of ``n``) gets the next one."""
        return (index - self.count) % n


def round_robin(rng=None):
    return _RoundRobin()


class _Random:
    """A replica drawn uniformly at random."""

    reads_state = False

    def __init__(self, rng):
        self.rng = rng

    def __call__(self, replicas, request) -> int:
        return int(self.rng.integers(len(replicas)))


def random(rng):
    return _Random(rng)


class LeastLoaded:
    """The replica with the smallest ``load(replica)`` (ties: the lowest index).

    ``changed``: the set of replica positions whose load may have moved since the last routing,
    filled by the cluster (``Cluster`` hands it over with ``watch``); ``None`` until then, when
    every call scans all replicas. Loads sit in a heap of (load, index, version); a routing
    pushes the changed replicas' current loads and drops stale entries from the top."""

    reads_state = True

    def __init__(self, load):
        self.load = load
        self.changed: set | None = None
        self._heap: list = []
        self._version: list = []

    def watch(self, replicas, changed: set) -> None:
        """Start keeping the heap for ``replicas`` (positions in ``changed`` move)."""
        self.changed = changed
        self._version = [0] * len(replicas)
        self._heap = [(self.load(r), i, 0) for i, r in enumerate(replicas)]
        heapq.heapify(self._heap)
        changed.clear()

    def _refresh(self, replicas) -> None:
        heap, version, load = self._heap, self._version, self.load
        for i in self.changed:
            v = version[i] + 1
            version[i] = v
            heapq.heappush(heap, (load(replicas[i]), i, v))
        self.changed.clear()
        while heap[0][2] != version[heap[0][1]]:
            heapq.heappop(heap)
        if len(heap) > 4 * len(version) + 64:  # mostly stale entries: rebuild
            self._heap = [e for e in heap if e[2] == version[e[1]]]
            heapq.heapify(self._heap)

    def argmin(self, replicas) -> int:
        if self.changed is None:
            load = self.load
            return min(range(len(replicas)), key=lambda i: (load(replicas[i]), i))
        self._refresh(replicas)
        return self._heap[0][1]

    def __call__(self, replicas, request) -> int:
        return self.argmin(replicas)


def _outstanding(r) -> int:
    return r.outstanding_tokens


def least_outstanding_tokens(rng=None):
    """The replica with the fewest tokens in flight (prompt + output so far of its unfinished
    requests)."""
    return LeastLoaded(_outstanding)


def _kv_load(r) -> float:
    # blocks in use plus what its waiting requests will need: a replica with a long queue is busy;
    # one with no blocks at all (memory.num_gpu_blocks split over more pp virtual engines than it
    # has blocks) is full: it rejects what it is sent
    blocks = r.kv.num_blocks
    return (r.kv.num_used + r.waiting_blocks) / blocks if blocks else math.inf


def least_kv_usage(rng=None):
    """The replica whose KV cache (in use plus queued prompts) is least full."""
    return LeastLoaded(_kv_load)


def _in_flight(grp) -> int:
    """Requests a replica (or a replica's virtual engines) holds: running, waiting, swapped out."""
    return sum(e.num_running + len(e.waiting) + len(e.incoming) + len(e.swapped) + len(e.landed)
               for e in getattr(grp, "engines", (grp,)))


BALANCE_ABS = 64  # requests: SGLang's cache-aware router's --balance-abs-threshold default
BALANCE_REL = 1.5  # ... and its --balance-rel-threshold


class PrefixAware(LeastLoaded):
    """Prefer replicas whose prefix cache holds the request's prefix (most cached blocks), then the
    least outstanding tokens; requests without a prefix, or none cached, go to the least
    outstanding tokens. As SGLang's cache-aware router, the cache is given up for load when the
    replica holding it is out of balance: more than ``BALANCE_ABS`` requests and ``BALANCE_REL``
    times as many in flight as the least loaded replica (by outstanding tokens) holds, the
    request goes to that one, which then caches the prefix too. (Without it every request sharing
    one system prompt went to the first replica that cached it, the others idle.)
    ``holders`` (group -> positions of replicas caching its first block, kept by the cluster from
    the allocators) limits the search to replicas that can hold the prefix; None: all of them.

    A prefix held by ``BIG`` replicas or more (a system prompt shared by every request, cached
    everywhere in a long run) also has a heap of its holders by (outstanding tokens, position),
    kept as ``LeastLoaded``'s (the cluster tells ``holder_moved`` who joins or leaves): holders
    are read in that order, and the first caching the whole prefix is the choice the scan of all
    of them makes (no holder caches more, and none of those caching it all is less loaded). Only
    when no holder caches the whole prefix are they all read."""

    BIG = 8

    def __init__(self):
        super().__init__(_outstanding)
        self.holders: dict | None = None
        self._big: dict = {}  # group -> heap of (outstanding tokens, position, version) of its holders
        self._big_of: dict = {}  # position -> the big groups it holds
        self._replicas = None

    def watch(self, replicas, changed: set) -> None:
        super().watch(replicas, changed)
        self._replicas = replicas

    def holder_moved(self, group, pos: int, joined: bool) -> None:
        """Replica ``pos`` began (``joined``) or ceased to cache ``group``'s first block."""
        if self.changed is None:
            return
        heap = self._big.get(group)
        if not joined:
            if heap is not None:
                self._big_of[pos].discard(group)
            return
        if heap is not None:
            self._big_of.setdefault(pos, set()).add(group)
            self.changed.add(pos)  # (the next routing pushes its load into the group's heap)
        elif len(self.holders[group]) >= self.BIG:
            version, replicas = self._version, self._replicas
            heap = self._big[group] = [(replicas[i].outstanding_tokens, i, version[i]) for i in self.holders[group]]
            heapq.heapify(heap)  # (a replica whose load moved since is in ``changed``: re-pushed then)
            for i in self.holders[group]:
                self._big_of.setdefault(i, set()).add(group)

    def _refresh(self, replicas) -> None:
        if not self._big:
            return super()._refresh(replicas)
        big, big_of, version, load, holders = self._big, self._big_of, self._version, self.load, self.holders
        push = heapq.heappush
        grown = set()
        for i in self.changed:  # (LeastLoaded's refresh below takes them into the heap of all)
            groups = big_of.get(i)
            if groups:
                entry = (load(replicas[i]), i, version[i] + 1)
                for g in groups:
                    push(big[g], entry)
                    grown.add(g)
        super()._refresh(replicas)
        for g in grown:
            heap = big[g]
            if len(heap) > 4 * len(holders[g]) + 64:  # mostly stale entries: rebuild
                heap[:] = [e for e in heap if e[2] == version[e[1]] and e[1] in holders[g]]
                heapq.heapify(heap)

    def _whole(self, replicas, request, heap, hs) -> int:
        """The least loaded holder caching the request's whole prefix (-1: none does)."""
        pb = replicas[next(iter(hs))].kv.prefix_blocks(request)
        if pb == 0:
            return -1
        version, pop = self._version, heapq.heappop
        taken, found = [], -1
        while heap:
            e = heap[0]
            if e[2] != version[e[1]] or e[1] not in hs:
                pop(heap)  # stale, or no longer a holder (one that joins again is pushed again)
                continue
            taken.append(pop(heap))
            if replicas[e[1]].kv.cached_prefix_blocks(request)[0] == pb:
                found = e[1]
                break
        for e in taken:
            heapq.heappush(heap, e)
        return found

    def __call__(self, replicas, request) -> int:
        least = self.argmin(replicas)
        if request.prefix_group >= 0:
            at = -1
            if self.holders is None:
                cands = range(len(replicas))
            else:
                cands = self.holders.get(request.prefix_group, ())
                heap = self._big.get(request.prefix_group)
                if heap is not None and cands:
                    at = self._whole(replicas, request, heap, cands)
            if at < 0:
                best, best_at = 0, []
                for i in cands:
                    c = replicas[i].kv.cached_prefix_blocks(request)[0]
                    if c > best:
                        best, best_at = c, [i]
                    elif c == best and c:
                        best_at.append(i)
                if best > 0:
                    at = min(best_at, key=lambda i: (replicas[i].outstanding_tokens, i))
            if at >= 0:
                if at == least:
                    return at
                held, low = _in_flight(replicas[at]), _in_flight(replicas[least])
                if not (held - low > BALANCE_ABS and held > BALANCE_REL * low):
                    return at
        return least


def prefix_aware(rng=None):
    return PrefixAware()


class PowerOfTwo:
    """Power of two choices (Mitzenmacher): two distinct replicas drawn at random, the one with
    fewer outstanding tokens taken (ties: the first drawn). O(1) a routing: it reads, and brings
    up to date (``settle``, set by the cluster), only the two replicas it drew."""

    reads_state = True

    def __init__(self, rng):
        self.rng = rng
        self.settle = None  # settle(position): bring that replica up to date before reading it

    def __call__(self, replicas, request) -> int:
        n = len(replicas)
        if n == 1:
            return 0
        i = int(self.rng.integers(n))
        j = int(self.rng.integers(n - 1))
        j += j >= i
        if self.settle is not None:
            self.settle(i)
            self.settle(j)
        return j if replicas[j].outstanding_tokens < replicas[i].outstanding_tokens else i


def power_of_two(rng):
    return PowerOfTwo(rng)


class ClassAware:
    """Routes each request class to its own replicas (``cluster.class_replicas``, e.g. batch
    traffic kept off the replicas serving tight-SLO chat); among them (every replica for a class
    not listed), the one with the fewest outstanding tokens (ties: the lowest position).

    As ``LeastLoaded``, but with one heap of (outstanding tokens, position, version) per distinct
    replica list (classes listing the same replicas share one; classes not listed share the heap
    of all replicas): a routing pushes the changed replicas' loads into the heaps of the lists
    holding them and drops stale entries from its class's top, O(changed x classes x log
    replicas), not O(its replicas) (before, every routing scanned all of a class's replicas).
    ``changed`` is ``None`` until the cluster calls ``watch``: then a call scans."""

    reads_state = True

    def __init__(self):
        self.allowed: list | None = None  # per class index: positions, or None for all
        self.changed: set | None = None
        self._heaps: list = []  # per distinct replica list, its heap
        self._heap_of: list = []  # per class index, its heap's number (-1: the scan, no watch yet)
        self._member: list = []  # per position, the numbers of the heaps holding it
        self._size: list = []  # per heap, how many positions it holds
        self._version: list = []

    def configure(self, scenario) -> None:
        names = [c.name for c in scenario.workload.classes or ()] or ["default"]
        table = {c.name: sorted(set(c.replicas)) for c in scenario.cluster.class_replicas or ()}
        self.allowed = [table.get(n) for n in names]

    def watch(self, replicas, changed: set) -> None:
        """Start keeping the heaps for ``replicas`` (positions in ``changed`` move)."""
        n = len(replicas)
        self.changed = changed
        self._version = [0] * n
        lists: dict = {}  # replica list -> its heap's number
        classes = self.allowed if self.allowed is not None else [None]
        self._heap_of = [lists.setdefault(None if a is None else tuple(a), len(lists)) for a in classes]
        self._member = [[] for _ in range(n)]
        self._heaps, self._size = [], []
        for members, h in lists.items():
            positions = range(n) if members is None else members
            heap = [(replicas[i].outstanding_tokens, i, 0) for i in positions]
            heapq.heapify(heap)
            self._heaps.append(heap)
            self._size.append(len(heap))
            for i in positions:
                self._member[i].append(h)
        changed.clear()

    def _scan(self, replicas, request) -> int:
        cands = self.allowed[request.cls] if self.allowed is not None else None
        if cands is None:
            cands = range(len(replicas))
        return min(cands, key=lambda i: (replicas[i].outstanding_tokens, i))

    def __call__(self, replicas, request) -> int:
        changed = self.changed
        if changed is None:
            return self._scan(replicas, request)
        heaps, version, member = self._heaps, self._version, self._member
        push = heapq.heappush
        for i in changed:
            v = version[i] + 1
            version[i] = v
            entry = (replicas[i].outstanding_tokens, i, v)
            for h in member[i]:
                push(heaps[h], entry)
        if changed:
            changed.clear()
            for h, heap in enumerate(heaps):  # (a class seldom routed: its heap grows all the same)
                if len(heap) > 4 * self._size[h] + 64:  # mostly stale entries: rebuild
                    heaps[h] = [e for e in heap if e[2] == version[e[1]]]
                    heapq.heapify(heaps[h])
        heap = heaps[self._heap_of[request.cls if self.allowed is not None else 0]]
        while heap[0][2] != version[heap[0][1]]:
            heapq.heappop(heap)
        return heap[0][1]


def class_aware(rng=None):
    return ClassAware()


ROUTERS = {
    "round_robin": round_robin,
    "random": random,
    "least_outstanding_tokens": least_outstanding_tokens,
    "least_kv_usage": least_kv_usage,
    "prefix_aware": prefix_aware,
    "power_of_two": power_of_two,
    "class_aware": class_aware,
}


def make_router(name: str, rng):
    """A fresh router for one run: ``name`` from ``ROUTERS`` (or a plug-in, ``servesim.plugins``)."""
    from servesim.plugins import construct

    return construct("router", name, "cluster.router", rng)
