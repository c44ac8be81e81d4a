"""Routers: callables ``router(replicas, request) -> index`` choosing the replica for a request.

A router sees only what a real load balancer could: the replicas' queues and counters, and the
request's prompt length. ``ROUTERS`` maps a name to a factory (each run gets a fresh router).
"""

from __future__ import annotations

import itertools


def round_robin():
    counter = itertools.count()

    def route(replicas, request) -> int:
        return next(counter) % len(replicas)

    return route


def least_outstanding_tokens():
    """The replica with the fewest tokens in flight (prompt + output so far of its unfinished
    requests); ties go to the lowest index."""

    def route(replicas, request) -> int:
        best, best_load = 0, None
        for i, r in enumerate(replicas):
            load = r.outstanding_tokens
            if best_load is None or load < best_load:
                best, best_load = i, load
        return best

    return route


ROUTERS = {"round_robin": round_robin, "least_outstanding_tokens": least_outstanding_tokens}
