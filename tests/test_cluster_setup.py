"""Building a cluster does per-replica work only where it must: the packaged continuous batching
policy (a frozen dataclass keeping no state between steps) is made once per pool and shared by its
replicas; a policy that may keep state (static batching, a plug-in) is made for each replica."""

import simpy

from servesim.core.cluster import Cluster
from servesim.outputs.recorder import Recorder
from servesim.simulation import PoolSetup, plan
from tests.conftest import make_scenario


def _built(monkeypatch, **kw):
    made = []
    real = PoolSetup.make_policy

    def counted(self):
        made.append(self.name)
        return real(self)

    sc = make_scenario(**kw)
    setup, _specs, _fit = plan(sc, None)
    monkeypatch.setattr(PoolSetup, "make_policy", counted)
    cluster = Cluster(simpy.Environment(), setup, Recorder(), sc.seed)
    return cluster, made


def test_the_packaged_continuous_policy_is_made_once_per_pool(monkeypatch):
    cluster, made = _built(monkeypatch, **{"cluster.replicas": 40, "policy.name": "chunked_prefill"})
    assert made == ["colocated"]
    assert len({id(r.policy) for r in cluster.replicas}) == 1 and cluster.replicas[0].policy.chunked
    # a P/D split: each pool its own (the decode pool's recomputes in chunks, the prefill pool's names its budget)
    cluster, made = _built(monkeypatch, **{"policy.name": "pd_split", "policy.prefill": {"replicas": 3},
                                           "policy.decode": {"replicas": 5}})
    assert sorted(made) == ["decode", "prefill"]
    pools = {r.pool: r.policy for r in cluster.replicas}
    assert all(r.policy is pools[r.pool] for r in cluster.replicas) and pools["prefill"] is not pools["decode"]


def test_a_policy_that_may_keep_state_is_made_per_replica(monkeypatch):
    cluster, made = _built(monkeypatch, **{"cluster.replicas": 6, "policy.name": "static"})
    assert len(made) == 6 and len({id(r.policy) for r in cluster.replicas}) == 6
