"""The garbage collector around a run with a large cluster (``resources.CollectorPause``): paused
while the cluster is built, what exists then frozen for the run, both undone after; the caller's
own settings stand; results never change."""

import gc

import numpy as np
import pytest

from servesim import resources
from servesim.simulation import simulate
from tests.conftest import make_scenario

CLUSTER = {"cluster.replicas": 8, "cluster.router": "least_kv_usage", "workload.num_requests": 120,
           "workload.arrival.rate_rps": 40.0}


def _equal(x, y) -> bool:
    x, y = np.asarray(x), np.asarray(y)
    return np.array_equal(x, y, equal_nan=x.dtype.kind == "f")


def _same(a, b):
    for k in a.requests:
        assert _equal(a.requests[k], b.requests[k]), k
    for k in a.steps:
        assert _equal(a.steps[k], b.steps[k]), k
    sa, sb = dict(a.summary), dict(b.summary)
    sa.pop("wall_time_s"), sb.pop("wall_time_s")
    assert sa == sb


def test_a_frozen_setup_gives_the_same_results_and_leaves_the_collector_as_it_was(monkeypatch):
    sc = make_scenario(**CLUSTER)
    plain = simulate(sc)  # 8 replicas: below FREEZE_REPLICAS, nothing done
    seen = []
    monkeypatch.setattr(resources, "FREEZE_REPLICAS", 2)
    frozen = simulate(sc, progress=lambda done, total, now: seen.append((gc.isenabled(), gc.get_freeze_count())))
    _same(plain, frozen)
    # during the run: collecting, with the cluster's objects frozen; after it: as before
    assert seen and all(enabled and count > 0 for enabled, count in seen)
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_the_callers_collector_settings_stand(monkeypatch):
    monkeypatch.setattr(resources, "FREEZE_REPLICAS", 2)
    sc = make_scenario(**CLUSTER)
    gc.disable()
    try:
        simulate(sc)
        assert not gc.isenabled()
    finally:
        gc.enable()
    keep = [object() for _ in range(3)]
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        simulate(sc)
        assert gc.get_freeze_count() > before // 2  # not unfrozen by the run (some frozen objects die)
    finally:
        gc.unfreeze()
    del keep


def test_a_failure_while_building_restores_the_collector(monkeypatch):
    monkeypatch.setattr(resources, "FREEZE_REPLICAS", 2)

    def boom(*_a, **_k):
        assert not gc.isenabled()  # paused while the cluster is built
        raise RuntimeError("boom")

    monkeypatch.setattr("servesim.simulation.Cluster", boom)
    with pytest.raises(RuntimeError, match="boom"):
        simulate(make_scenario(**CLUSTER))
    assert gc.isenabled() and gc.get_freeze_count() == 0
