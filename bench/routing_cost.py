"""Routing cost per request of every router at 16, 1,000 and 100,000 replicas (issue 16's target:
"routing in O(log replicas) or better for every router").

Each router runs ``simulate()`` on a fixed number of requests (``--requests``, default 2,000;
the bench scenario's lengths, Llama-2-7B on one H100 per replica, ``--rate-per-replica`` req/s
offered to each replica, so every size is equally loaded per replica), and the router's own calls
are timed, plus the cluster's bringing replicas up to date before a routing (``Cluster.settle``
on arrival, for the routers that read every replica's state and do not settle themselves): the
sum of both per request routed is the routing cost. The run's set-up (building the replicas) and
its steps are not counted. Settings per router:

  - ``class_aware``: two request classes (70% ``chat``, 30% ``batch``); ``cluster.class_replicas``
    gives ``batch`` the first quarter of the replicas and ``chat`` the other three quarters;
  - ``prefix_aware``: ``policy.prefix_caching`` with a shared prefix (512 tokens, 4 groups), so
    a group's prefix is soon cached on many replicas;
  - the others: the plain workload.

A column is the mean microseconds per request routed (router call + settling on arrival, then
the router's call alone in brackets); ``x16`` is the cost at the largest size as a multiple of the
cost at 16 replicas (O(log n) would be about log(100000)/log(16) = 4.2x at most; O(n) about
6,000x). The settling is the steps that ended since the last arrival brought up to date (work the
run does anyway, at some arrival or at the end of the run), so it grows with the busy replicas per
arrival, not with the router.

A second table times ``prefix_aware``'s call directly in a case a short run does not reach: one
prefix (``--prefix-blocks`` blocks, default 32) cached on every replica (a system prompt shared by
all requests, in a long run), so every replica is a candidate (a scan of them all cost 0.5 ms at
16 replicas, 14 ms at 1,000, 130 ms at 10,000; its heap of holders reads only the least loaded).

    python bench/routing_cost.py [--requests 2000] [--sizes 16,1000,100000] [--routers a,b]
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed import BASE  # noqa: E402

import servesim.core.cluster as cluster_mod  # noqa: E402
from servesim.core import router as router_mod  # noqa: E402
from servesim.core.kv import BlockAllocator  # noqa: E402
from servesim.core.request import Request  # noqa: E402
from servesim.inputs.scenario import scenario_from_dict  # noqa: E402
from servesim.plugins import names  # noqa: E402
from servesim.simulation import simulate  # noqa: E402

CLASSES = [
    {"name": "chat", "share": 0.7, "prompt_tokens": {"dist": "lognormal", "mean": 400, "sigma": 0.6, "max": 2000},
     "output_tokens": {"dist": "lognormal", "mean": 100, "sigma": 0.6, "max": 400}},
    {"name": "batch", "share": 0.3, "prompt_tokens": {"dist": "lognormal", "mean": 2000, "sigma": 0.5, "max": 5000},
     "output_tokens": {"dist": "lognormal", "mean": 250, "sigma": 0.5, "max": 800}},
]


def scenario(router: str, replicas: int, n: int, rate: float) -> dict:
    d = copy.deepcopy(BASE)
    d["cluster"] = {"replicas": replicas, "router": router}
    d["workload"]["num_requests"] = n
    d["workload"]["arrival"]["rate_rps"] = rate
    if router == "class_aware":
        d["workload"].pop("prompt_tokens")
        d["workload"].pop("output_tokens")
        d["workload"]["classes"] = copy.deepcopy(CLASSES)
        q = max(1, replicas // 4)
        d["cluster"]["class_replicas"] = [{"name": "batch", "replicas": list(range(q))},
                                          {"name": "chat", "replicas": list(range(q, replicas)) or [0]}]
    if router == "prefix_aware":
        d["policy"]["prefix_caching"] = True
        d["workload"]["shared_prefix"] = {"tokens": 512, "fraction": 1.0, "groups": 4}
    return d


class Timer:
    """Times the router's calls and the cluster's settling on arrival while installed."""

    def __init__(self):
        self.route_s = 0.0
        self.settle_s = 0.0
        self.calls = 0

    def install(self):
        timer = self
        make, settle = cluster_mod.make_router, cluster_mod.Cluster.settle

        def timed_make(name, rng):
            router = make(name, rng)
            base = type(router)

            def call(self, replicas, request):
                t0 = time.perf_counter()
                try:
                    return base.__call__(self, replicas, request)
                finally:
                    timer.route_s += time.perf_counter() - t0
                    timer.calls += 1

            router.__class__ = type(base.__name__, (base,), {"__call__": call})
            return router

        def timed_settle(self, strict=False):
            t0 = time.perf_counter()
            try:
                return settle(self, strict)
            finally:
                timer.settle_s += time.perf_counter() - t0

        cluster_mod.make_router, cluster_mod.Cluster.settle = timed_make, timed_settle
        return lambda: (setattr(cluster_mod, "make_router", make), setattr(cluster_mod.Cluster, "settle", settle))


def measure(router: str, replicas: int, n: int, rate_per_replica: float) -> dict:
    sc = scenario_from_dict(scenario(router, replicas, n, rate_per_replica * replicas))
    timer = Timer()
    undo = timer.install()
    try:
        res = simulate(sc)
    finally:
        undo()
    s = res.summary
    accounted = s["completed"] + s["rejected"] + s.get("unfinished", 0)
    return {"us_per_request": 1e6 * (timer.route_s + timer.settle_s) / max(timer.calls, 1),
            "router_us": 1e6 * timer.route_s / max(timer.calls, 1),
            "settle_us": 1e6 * timer.settle_s / max(timer.calls, 1),
            "routed": timer.calls, "completed": s["completed"], "accounted": accounted}


def prefix_worst_case_us(n: int, blocks: int, calls: int = 200) -> float:
    """µs per ``prefix_aware`` call with every one of ``n`` replicas caching the request's prefix."""

    class Held:  # a replica as the router reads it: its allocator and outstanding tokens
        def __init__(self, i):
            self.kv = BlockAllocator(blocks + 8, 16, True)
            self.outstanding_tokens = 1000 + i % 97
            self.num_running, self.waiting, self.incoming, self.swapped, self.landed = 1, (), (), (), ()

    replicas = [Held(i) for i in range(n)]
    router = router_mod.prefix_aware()
    changed: set = set()
    holders: dict = {}
    cluster = SimpleNamespace(_holder_moved=getattr(router, "holder_moved", None))  # (what the cluster tells it)
    for pos, r in enumerate(replicas):
        r.kv.on_prefix = functools.partial(cluster_mod.Cluster._prefix_moved, cluster, holders, pos)
    router.watch(replicas, changed)
    router.holders = holders
    for r in replicas:
        held = Request(0, 0.0, blocks * 16 + 8, 10, prefix_group=0, prefix_tokens=blocks * 16)
        r.kv.grow(held, held.prompt_tokens)
    assert len(holders[0]) == n
    req = Request(1, 0.0, blocks * 16 + 8, 10, prefix_group=0, prefix_tokens=blocks * 16)
    router(replicas, req)  # (the first call takes in the loads of the replicas that changed since watch)
    t0 = time.perf_counter()
    for _ in range(calls):
        router(replicas, req)
    return 1e6 * (time.perf_counter() - t0) / calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--sizes", default="16,1000,100000", help="replica counts, comma-separated")
    ap.add_argument("--routers", default=None, help="routers, comma-separated (default: all packaged ones)")
    ap.add_argument("--rate-per-replica", type=float, default=8.0, help="req/s offered to each replica")
    ap.add_argument("--prefix-blocks", type=int, default=32, help="the prefix's blocks in the worst case table")
    ap.add_argument("--json", default=None, help="write the figures into this file")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    routers = args.routers.split(",") if args.routers else list(names("router"))
    print(f"{args.requests:,} requests, {args.rate_per_replica:g} req/s per replica; routing cost in µs per "
          f"request (router call + settling on arrival)")
    print(f"{'router':26s}" + "".join(f"{n:>19,}" for n in sizes) + f"{'x' + str(sizes[0]):>10s}")
    out: dict = {}
    for router in routers:
        row = out[router] = {}
        for n in sizes:
            row[n] = m = measure(router, n, args.requests, args.rate_per_replica)
            if m["accounted"] != args.requests:
                raise SystemExit(f"{router} on {n} replicas: {m['accounted']} of {args.requests} requests "
                                 "accounted for")
        ratio = row[sizes[-1]]["us_per_request"] / row[sizes[0]]["us_per_request"]
        print(f"{router:26s}" + "".join(f"{row[n]['us_per_request']:9.1f} ({row[n]['router_us']:7.1f})"
                                        for n in sizes) + f"{ratio:9.1f}x", flush=True)
    print(f"\nprefix_aware's call, every replica caching the request's {args.prefix_blocks}-block prefix (µs):")
    worst = out["prefix_aware_worst_case"] = {n: prefix_worst_case_us(n, args.prefix_blocks, 5 if n > 10_000 else 200)
                                              for n in sizes}
    print(f"{'prefix_aware':26s}" + "".join(f"{worst[n]:19.1f}" for n in sizes)
          + f"{worst[sizes[-1]] / worst[sizes[0]]:9.1f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
