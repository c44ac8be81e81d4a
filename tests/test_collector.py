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


@pytest.mark.parametrize("sessions", [False, True])
def test_a_closed_loop_of_many_clients_is_frozen_once_they_are_started(monkeypatch, sessions):
    # Each started client is a SimPy process alive until it ends (its generator, Process and the
    # events it waits on); with 300,000 of them the collector's full passes over them were half of
    # simulate(). From FREEZE_CLIENTS on, they are started with collection paused and frozen with
    # the cluster: every one of them is in the frozen generation during the run, whatever the
    # cluster's size, and the results are the same.
    clients = 60
    kw = {"workload.arrival": {"process": "closed_loop", "clients": clients, "think_time_s": 0.5},
          "workload.num_requests": 90}
    if sessions:
        kw["workload.sessions"] = {"turns": {"dist": "fixed", "value": 2}, "think_time_s": 0.5}
    sc = make_scenario(**kw)
    plain = simulate(sc)
    monkeypatch.setattr(resources, "FREEZE_REPLICAS", 10**9)  # (the clients alone decide)
    monkeypatch.setattr(resources, "FREEZE_CLIENTS", clients, raising=False)
    seen = []
    frozen = simulate(sc, progress=lambda done, total, now: seen.append(gc.get_freeze_count()))
    _same(plain, frozen)
    # each client: at least its generator and its Process, frozen before the first event
    assert seen and min(seen) >= 2 * clients
    assert gc.isenabled() and gc.get_freeze_count() == 0
