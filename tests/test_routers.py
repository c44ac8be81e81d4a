"""Routers that pick the least loaded replica keep the loads in a heap refreshed from the replicas
that changed: at every routing the heap's choice must be what a scan of every replica picks."""

import dataclasses

import numpy as np
import pytest

from servesim.core import router as R
from servesim.simulation import simulate
from tests.conftest import make_scenario, specs
from tests.test_engine_equivalence import CASES, SMALL, run_both

CHECKED = []


@pytest.fixture
def checked_routing(monkeypatch):
    """Every LeastLoaded routing also scans all replicas and must agree (and PrefixAware's
    holders must name every replica caching the prefix)."""
    heap_argmin = R.LeastLoaded.argmin

    def argmin(self, replicas):
        got = heap_argmin(self, replicas)
        want = min(range(len(replicas)), key=lambda i: (self.load(replicas[i]), i))
        assert got == want, (got, want)
        CHECKED.append(got)
        return got

    monkeypatch.setattr(R.LeastLoaded, "argmin", argmin)
    call = R.PrefixAware.__call__

    def prefix_call(self, replicas, request):
        if self.holders is not None and request.prefix_group >= 0:
            have = {i for i, r in enumerate(replicas) if r.kv.cached_prefix_blocks(request)[0] > 0}
            assert have <= set(self.holders.get(request.prefix_group, ())), have
        return call(self, replicas, request)

    monkeypatch.setattr(R.PrefixAware, "__call__", prefix_call)
    CHECKED.clear()
    yield CHECKED


@pytest.mark.parametrize("case", ["replicas_lot", "replicas_kv", "duration_routers", "closed_loop", "pp_engines"])
def test_heap_routing_picks_what_a_scan_picks(case, checked_routing):
    kw = {k: v for k, v in {**SMALL, **CASES[case]}.items() if v is not None}
    if case.startswith("duration"):
        kw.pop("workload.num_requests", None)
    run_both(make_scenario(**kw))
    assert len(checked_routing) > 50


def test_prefix_aware_routing_with_evictions(checked_routing):
    sc = make_scenario(**{**SMALL, "policy.prefix_caching": True, "cluster.replicas": 3,
                          "cluster.router": "prefix_aware", "memory.num_gpu_blocks": 300})
    rng = np.random.default_rng(7)
    n = 300
    rows = sorted(zip(np.cumsum(rng.exponential(0.03, n)).tolist(), rng.integers(100, 900, n).tolist(),
                      rng.integers(1, 100, n).tolist()))
    sp = dataclasses.replace(specs(rows), prefix_group=rng.integers(0, 12, n).astype(np.int64),
                             prefix_tokens=np.full(n, 96, dtype=np.int64))
    fast, ref = run_both(sc, sp)
    assert fast.summary["kv"]["prefix_cache_hit_tokens"] > 0
    assert len(set(fast.requests["replica"].tolist())) == 3


def test_least_kv_usage_counts_queued_prompts():
    # all at once, nothing runs yet: each queued 160-token prompt adds 10 blocks to its replica's
    # load, so the requests alternate (ties go to the lowest index)
    sc = make_scenario(**{"cluster.replicas": 2, "cluster.router": "least_kv_usage",
                          "workload.arrival": {"process": "all_at_once"}, "workload.num_requests": 20,
                          "workload.prompt_tokens": {"dist": "fixed", "value": 160}})
    res = simulate(sc)
    assert res.requests["replica"].tolist() == [0, 1] * 10


def test_routing_settles_only_replicas_whose_steps_ended(monkeypatch):
    """Before a state-reading router decides, the cluster brings up to date only the replicas
    whose steps ended since their last settle (a heap of due times), not every replica in a run:
    settles stay fewer than the steps simulated on 64 busy replicas (a scan of every replica in a
    run at each arrival settled ~4x more: 128k for 44k steps), and the choices equal the
    reference engine's (run_both)."""
    from servesim.core.replica import Replica

    calls = []
    settle = Replica.settle

    def counted(self, now, strict=False):
        calls.append(self.index)
        return settle(self, now, strict)

    monkeypatch.setattr(Replica, "settle", counted)
    sc = make_scenario(**{**SMALL, "cluster.replicas": 64, "cluster.router": "least_outstanding_tokens",
                          "workload.num_requests": 2000, "workload.arrival": {"process": "poisson", "rate_rps": 600.0}})
    fast = simulate(sc)
    steps = fast.summary["phases"]["steps"]
    assert sum(p.get("run_steps", 0) for p in fast.engine_stats.values()) > steps / 2  # mostly in runs
    assert len(calls) < steps
    monkeypatch.setattr(Replica, "settle", settle)
    run_both(dataclasses.replace(sc, workload=dataclasses.replace(sc.workload, num_requests=400)))


def test_a_router_that_routes_as_least_outstanding_tokens_says_so(tmp_path, capsys):
    """``prefix_aware`` without ``policy.prefix_caching`` never finds a cached prefix, and
    ``class_aware`` without ``cluster.class_replicas`` lets every class use every replica: both
    route exactly as ``least_outstanding_tokens`` (the same requests.csv), and the run and
    ``validate`` say so (``no_effect``) instead of passing for the router asked for."""
    import yaml

    from servesim.cli.main import main
    from tests.conftest import two_classes

    def run(**kw):
        res = simulate(make_scenario(**{"cluster.replicas": 3, "workload.num_requests": 60,
                                        "workload.arrival": {"process": "poisson", "rate_rps": 30.0}, **kw}))
        return res, [w["message"] for w in res.summary["warnings"] if w["code"] == "no_effect"]

    sessions = {"workload.sessions": {"turns": {"dist": "uniform", "min": 2, "max": 5}, "think_time_s": 0.2}}
    for kw, router in ((sessions, "prefix_aware"), (two_classes(), "class_aware")):
        lot, none = run(**kw, **{"cluster.router": "least_outstanding_tokens"})
        res, (msg,) = run(**kw, **{"cluster.router": router})
        assert none == []
        assert msg.startswith(f"cluster.router={router} routes as least_outstanding_tokens without ")
        for k in lot.requests:
            assert np.array_equal(lot.requests[k], res.requests[k], equal_nan=lot.requests[k].dtype.kind == "f"), k
    # given what they read, they route otherwise, and say nothing
    cached, msgs = run(**sessions, **{"cluster.router": "prefix_aware", "policy.prefix_caching": True})
    assert msgs == [] and cached.summary["kv"]["prefix_cache_hit_tokens"] > 0
    _, msgs = run(**two_classes(), **{"cluster.router": "class_aware",
                                      "cluster.class_replicas": [{"name": "batch", "replicas": [2]}]})
    assert msgs == []
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"model": "meta-llama/Llama-2-7b-hf", "hardware": {"gpu": "h100-sxm"},
                                 "workload": {"num_requests": 20, "preset": "azure_conv"},
                                 "cluster": {"replicas": 2, "router": "prefix_aware"}}))
    assert main(["validate", str(p)]) == 0
    assert "warning: cluster.router=prefix_aware routes as least_outstanding_tokens without policy.prefix_caching" \
        in capsys.readouterr().out


def test_prefix_aware_gives_up_a_shared_prefix_for_balance():
    """One system prompt shared by every request: once a replica caches it, every request finds
    it there. Preferring the cache whatever the load sent all of them to that replica, the others
    idle (found by running 1,500 such requests at 40 req/s on 4 replicas: all on replica 0, TTFT
    p50 9.8 s against 39 ms round robin). Past SGLang's balance thresholds (64 requests and 1.5x
    the least loaded replica's in flight) the request goes to the least loaded replica, which then
    caches the prompt too; the cache still serves most of the prompt tokens."""
    kw = {"cluster.replicas": 4, "cluster.router": "prefix_aware", "policy.prefix_caching": True,
          "policy.name": "chunked_prefill", "policy.max_num_batched_tokens": 2048, "workload.num_requests": 500,
          "workload.arrival": {"process": "poisson", "rate_rps": 60.0},
          "workload.prompt_tokens": {"dist": "lognormal", "mean": 600, "sigma": 0.8, "max": 4000},
          "workload.output_tokens": {"dist": "uniform", "min": 32, "max": 512},
          "workload.shared_prefix": {"tokens": 1024, "groups": 1}}
    res = simulate(make_scenario(**kw))
    served = np.bincount(res.requests["replica"], minlength=4)
    assert (served > 0).sum() >= 2 and served.max() < 0.75 * served.sum(), served
    s = res.summary
    assert s["kv"]["prefix_cache_hit_tokens"] > 0.5 * res.requests["prompt_tokens"].sum()
    # (a prefix each replica holds: the least outstanding tokens among them, all replicas used)
    lot = simulate(make_scenario(**{**kw, "cluster.router": "least_outstanding_tokens"})).summary
    assert s["ttft_s"]["p50"] < 3 * lot["ttft_s"]["p50"]


def test_class_replicas_that_leave_a_replica_to_no_class_say_so():
    """Every class listed in ``cluster.class_replicas`` and replica 1 in none of the lists: it
    serves nothing (no request, no step) while its GPU is paid for; the run says so. With a class
    left unlisted (it may use every replica) nothing is said."""
    from tests.conftest import two_classes

    def run(lists):
        res = simulate(make_scenario(**{**two_classes(), "cluster.replicas": 3, "cluster.router": "class_aware",
                                        "workload.num_requests": 60, "cluster.class_replicas": lists}))
        return res, [w["message"] for w in res.summary["warnings"] if w["code"] == "no_effect"]

    res, (msg,) = run([{"name": "chat", "replicas": [0]}, {"name": "batch", "replicas": [2, 0]}])
    assert msg.startswith("cluster.class_replicas lists every request class and none of replica position 1 of "
                          "the 3 routed: that replica serves nothing (its GPUs are counted")
    assert 1 not in set(res.requests["replica"].tolist()) and 1 not in set(res.steps["replica"].tolist())
    assert run([{"name": "batch", "replicas": [2]}])[1] == []
    assert run([{"name": "chat", "replicas": [0, 1]}, {"name": "batch", "replicas": [2]}])[1] == []


# ---------------------------------------------------------------- class_aware in O(log replicas)
def scan_class_aware(allowed, replicas, request) -> int:
    """The test oracle: the straightforward ``class_aware`` (before its heaps), scanning every
    replica the request's class may use for the fewest outstanding tokens, ties to the lowest
    position."""
    cands = allowed[request.cls] if allowed is not None else None
    if cands is None:
        cands = range(len(replicas))
    best, best_load = -1, None
    for i in cands:
        load = replicas[i].outstanding_tokens
        if best_load is None or load < best_load:
            best, best_load = i, load
    return best


class _Counted:
    """A replica's outstanding tokens, counting how often a router reads them."""

    reads = 0

    def __init__(self, load):
        self.load = load

    @property
    def outstanding_tokens(self):
        _Counted.reads += 1
        return self.load


def _class_aware_over(allowed, replicas):
    ca = R.ClassAware()
    ca.allowed = allowed
    changed: set = set()
    if hasattr(ca, "watch"):  # (the cluster watches the replicas for a router that has it)
        ca.watch(replicas, changed)
    return ca, changed


@pytest.mark.parametrize("seed", range(40))
def test_class_aware_heaps_pick_what_a_scan_picks(seed):
    """Random replica lists per class (overlapping, repeated, a class unlisted), random loads with
    many ties, random changes between routings (the cluster marks a replica changed when its
    counters move): every routing picks what the scan of the class's replicas picks."""
    from types import SimpleNamespace

    rnd = np.random.default_rng(seed)
    n = int(rnd.integers(1, 40))
    classes = int(rnd.integers(1, 5))
    allowed = []
    for _ in range(classes):
        if rnd.random() < 0.3:
            allowed.append(None)  # unlisted: every replica
        elif allowed and rnd.random() < 0.2:
            allowed.append(allowed[-1])  # the same list as another class
        else:
            allowed.append(sorted(set(rnd.integers(0, n, int(rnd.integers(1, n + 1))).tolist())))
    if rnd.random() < 0.2:
        allowed = None  # not configured: every class uses every replica
    replicas = [_Counted(int(rnd.integers(0, 5)) * 100) for _ in range(n)]
    ca, changed = _class_aware_over(allowed, replicas)
    for _ in range(300):
        for i in rnd.integers(0, n, int(rnd.integers(0, 4))).tolist():
            replicas[i].load = max(0, replicas[i].load + int(rnd.integers(-2, 3)) * 100)
            changed.add(i)
        req = SimpleNamespace(cls=int(rnd.integers(0, classes)))
        want = scan_class_aware(allowed, replicas, req)
        assert ca(replicas, req) == want
        replicas[want].load += int(rnd.integers(0, 3)) * 100  # the routed request adds to its load
        changed.add(want)
    # (stale entries do not pile up in the heap of a class that is seldom routed)
    assert all(len(h) <= 4 * s + 64 for h, s in zip(ca._heaps, ca._size))


def test_class_aware_reads_only_the_changed_replicas():
    """A routing re-reads the replicas that changed since the last one, not every replica its
    class may use: 5,000 replicas, 200 routings, each changing one replica, read ~2 loads per
    routing after the heaps are built (the scan read 5,000 or 3,750 per routing)."""
    from types import SimpleNamespace

    n = 5000
    replicas = [_Counted(i % 7) for i in range(n)]
    allowed = [None, list(range(n // 4, n))]
    ca, changed = _class_aware_over(allowed, replicas)
    reads = 0
    for k in range(200):
        req = SimpleNamespace(cls=k % 2)
        before = _Counted.reads
        i = ca(replicas, req)
        reads += _Counted.reads - before
        assert i == scan_class_aware(allowed, replicas, req)
        replicas[i].load += 10
        changed.add(i)
    assert reads <= 2 * 200


@pytest.fixture
def checked_class_aware(monkeypatch):
    """Every ClassAware routing in a run also scans its class's replicas and must agree."""
    call = R.ClassAware.__call__
    seen = []

    def checked(self, replicas, request):
        got = call(self, replicas, request)
        assert got == scan_class_aware(self.allowed, replicas, request)
        seen.append(got)
        return got

    monkeypatch.setattr(R.ClassAware, "__call__", checked)
    return seen


@pytest.mark.parametrize("lists", [[{"name": "batch", "replicas": [2]}],
                                   [{"name": "chat", "replicas": [0, 1]}, {"name": "batch", "replicas": [1, 2]}]])
def test_class_aware_in_a_run_picks_what_a_scan_picks(lists, checked_class_aware):
    """In runs on both engines (the fast one settles the due replicas before each routing, as
    for the other least-loaded routers): the heaps' choice is the scan's at every routing."""
    from tests.conftest import two_classes

    kw = {**SMALL, **two_classes(0.6), "cluster.replicas": 3, "cluster.router": "class_aware",
          "cluster.class_replicas": lists, "workload.num_requests": 120,
          "workload.arrival": {"process": "poisson", "rate_rps": 40.0}}
    run_both(make_scenario(**{k: v for k, v in kw.items() if v is not None or k.startswith("workload.")}))
    assert len(checked_class_aware) >= 200


# ---------------------------------------------------------------- prefix_aware over many holders
def scan_prefix_aware(holders, replicas, request) -> int:
    """The test oracle: the straightforward ``prefix_aware`` (before its heaps of holders), reading
    every holder's cache: the most cached blocks, then the fewest outstanding tokens, unless out
    of balance with the least loaded replica."""
    least = min(range(len(replicas)), key=lambda i: (replicas[i].outstanding_tokens, i))
    if request.prefix_group >= 0:
        cands = range(len(replicas)) if holders is None else sorted(holders.get(request.prefix_group, ()))
        best, best_at = 0, []
        for i in cands:
            c = replicas[i].kv.cached_prefix_blocks(request)[0]
            if c > best:
                best, best_at = c, [i]
            elif c == best and c:
                best_at.append(i)
        if best > 0:
            at = min(best_at, key=lambda i: (replicas[i].outstanding_tokens, i))
            if at == least:
                return at
            held, low = R._in_flight(replicas[at]), R._in_flight(replicas[least])
            if not (held - low > R.BALANCE_ABS and held > R.BALANCE_REL * low):
                return at
    return least


@pytest.fixture
def checked_prefix_aware(monkeypatch):
    """Every PrefixAware routing in a run must pick what the oracle's scan picks; counts the
    routings, and those a heap of holders decided (no scan of the holders)."""
    call, whole = R.PrefixAware.__call__, R.PrefixAware._whole
    seen = {"routings": 0, "by_heap": 0}

    def checked(self, replicas, request):
        got = call(self, replicas, request)
        assert got == scan_prefix_aware(self.holders, replicas, request)
        seen["routings"] += 1
        return got

    def counted(self, *a):
        at = whole(self, *a)
        seen["by_heap"] += at >= 0
        return at

    monkeypatch.setattr(R.PrefixAware, "__call__", checked)
    monkeypatch.setattr(R.PrefixAware, "_whole", counted)
    return seen


@pytest.mark.parametrize("blocks, groups, pp", [(None, 1, 1), (900, 3, 1), (500, 2, 1), (None, 2, 2)])
def test_prefix_aware_with_many_holders_picks_what_a_scan_picks(blocks, groups, pp, checked_prefix_aware,
                                                                monkeypatch):
    """Shared prompts cached on several of 12 replicas (from ``PrefixAware.BIG`` holders on, here
    2 so that a fast test reaches it, the holders are read in load order from a heap): at every
    routing of runs on both engines, the choice is the scan's, with the KV ample or tight (cached
    prefixes evicted, holders leaving and joining again) and with pipeline virtual engines; many
    routings are decided by the heap."""
    monkeypatch.setattr(R.PrefixAware, "BIG", 2)
    kw = {**SMALL, "cluster.replicas": 12, "cluster.router": "prefix_aware", "policy.prefix_caching": True,
          "memory.num_gpu_blocks": blocks, "hardware.pp": pp, "workload.num_requests": 400,
          "workload.arrival": {"process": "poisson", "rate_rps": 150.0},
          "workload.shared_prefix": {"tokens": 512, "fraction": 0.9, "groups": groups}}
    fast, _ = run_both(make_scenario(**{k: v for k, v in kw.items() if v is not None}), expect_fast_path=False)
    assert checked_prefix_aware["routings"] == 800
    assert checked_prefix_aware["by_heap"] > 0.05 * 800, checked_prefix_aware
    assert len(set(fast.requests["replica"].tolist())) >= 8


def test_prefix_aware_reads_few_caches_when_every_replica_holds_the_prefix(monkeypatch):
    """One prefix cached on each of 400 replicas (a system prompt in a long run): a routing reads
    the caches of the least loaded holders until one holds the whole prefix, not all 400 (the
    scan read 400 a routing); the choice is the oracle's. (Holders caching only part of the
    prefix and less loaded than the choice are read each time: the heap orders by load alone.)"""
    import functools
    from types import SimpleNamespace

    from servesim.core.cluster import Cluster
    from servesim.core.kv import BlockAllocator
    from servesim.core.request import Request

    class Held:
        def __init__(self, i):
            self.kv = BlockAllocator(40, 16, True)
            self.outstanding_tokens = 1000 + (i * 37) % 101
            self.num_running, self.waiting, self.incoming, self.swapped, self.landed = 1, (), (), (), ()

    n = 400
    replicas = [Held(i) for i in range(n)]
    router, changed, holders = R.prefix_aware(), set(), {}
    cluster = SimpleNamespace(_holder_moved=getattr(router, "holder_moved", None))
    for pos, r in enumerate(replicas):
        r.kv.on_prefix = functools.partial(Cluster._prefix_moved, cluster, holders, pos)
    router.watch(replicas, changed)
    router.holders = holders
    for i, r in enumerate(replicas):  # every replica caches the prefix; some only its first blocks
        whole = i % 3 != 0
        r.kv.grow(Request(i, 0.0, 520, 10, prefix_group=0, prefix_tokens=512 if whole else 64), 520)
    reads = []
    count = BlockAllocator.cached_prefix_blocks

    def counted(self, req, *a):
        reads.append(1)
        return count(self, req, *a)

    monkeypatch.setattr(BlockAllocator, "cached_prefix_blocks", counted)
    rng = np.random.default_rng(3)
    total = 0
    for k in range(100):
        req = Request(1000 + k, 0.0, 600, 10, prefix_group=0, prefix_tokens=512)
        before = len(reads)
        got = router(replicas, req)
        used = len(reads) - before
        assert got == scan_prefix_aware(holders, replicas, req)
        # it read the chosen holder's cache, and those of the holders less loaded than it, which
        # cache only part of the prefix (a third of the replicas here): never all of them
        lighter = sum(1 for i in range(0, n, 3)
                      if (replicas[i].outstanding_tokens, i) < (replicas[got].outstanding_tokens, got))
        assert used <= 1 + lighter, (used, lighter)
        total += used
        for i in rng.integers(0, n, 3).tolist() + [got]:
            replicas[i].outstanding_tokens += int(rng.integers(-50, 200))
            changed.add(i)
    assert total < 100 * n / 10


@pytest.mark.parametrize("router", ["least_kv_usage", "least_outstanding_tokens", "power_of_two", "prefix_aware"])
def test_load_routers_with_virtual_engines_of_no_kv_blocks(router):
    """memory.num_gpu_blocks split over more pp virtual engines than it has blocks leaves each
    none: every request is rejected with that reason, whatever the router (least_kv_usage divided
    by the replica's 0 blocks: a ZeroDivisionError before the first request)."""
    sc = make_scenario(**{"hardware.pp": 3, "memory.num_gpu_blocks": 2, "cluster.replicas": 2,
                          "cluster.router": router, "workload.num_requests": 5})
    res = simulate(sc)
    s = res.summary
    assert s["rejected"] == s["num_requests"] == 5 and s["completed"] == s["unfinished"] == 0
    assert all("virtual engines" in r and "0 of its blocks" in r for r in res.requests["reason"])
