"""Routers: callables ``router(replicas, request) -> index`` choosing the replica for a request.

A router sees only what a real load balancer could: the replicas' queues, counters and prefix
caches, and the request's prompt (length, prefix group). ``ROUTERS`` maps a name to a factory
``factory(rng) -> router`` (each run gets a fresh router; ``rng`` is the run's numpy Generator
for routing).
"""

from __future__ import annotations

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


def _argmin(replicas, load) -> int:
    """Index of the smallest load; ties go to the lowest index."""
    best, best_load = 0, None
    for i, r in enumerate(replicas):
        x = load(r)
        if best_load is None or x < best_load:
            best, best_load = i, x
    return best


def least_outstanding_tokens(rng=None):
    """The replica with the fewest tokens in flight (prompt + output so far of its unfinished
    requests)."""
    return lambda replicas, request: _argmin(replicas, lambda r: r.outstanding_tokens)


def _kv_load(r) -> float:
    # blocks in use plus what its waiting requests will need: a replica with a long queue is busy
    return (r.kv.num_used + sum(r.kv.blocks_for(q.num_tokens) for q in r.waiting)) / r.kv.num_blocks


def least_kv_usage(rng=None):
    """The replica whose KV cache (in use plus queued prompts) is least full."""
    return lambda replicas, request: _argmin(replicas, _kv_load)


def prefix_aware(rng=None):
    """Prefer replicas whose prefix cache holds the request's prefix (most cached blocks), then the
    least outstanding tokens; requests without a prefix go to the least outstanding tokens."""

    def route(replicas, request) -> int:
        if request.prefix_group >= 0:
            cached = [r.kv.cached_prefix_blocks(request)[0] for r in replicas]
            best = max(cached)
            if best > 0:
                holders = [i for i, c in enumerate(cached) if c == best]
                return min(holders, key=lambda i: (replicas[i].outstanding_tokens, i))
        return _argmin(replicas, lambda r: r.outstanding_tokens)

    return route


ROUTERS = {
    "round_robin": round_robin,
    "random": random,
    "least_outstanding_tokens": least_outstanding_tokens,
    "least_kv_usage": least_kv_usage,
    "prefix_aware": prefix_aware,
}


def make_router(name: str, rng):
    """A fresh router for one run: ``name`` from ``ROUTERS`` (or a plug-in, ``servesim.plugins``)."""
    from servesim.plugins import resolve

    return resolve("router", name)(rng)
