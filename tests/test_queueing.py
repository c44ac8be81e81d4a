"""Checks against queueing theory: M/D/1 (Pollaczek-Khinchine) and Little's law."""

import numpy as np
import pytest

from servesim.core.batch import synthetic_batch
from servesim.simulation import prepare, simulate
from tests.conftest import SYNC, make_scenario

PROMPT, OUTPUT = 100, 4


def md1_scenario(rate_rps, n, seed=0):
    """A synchronous server (no async scheduling's lag, no API server): M/D/1 exactly."""
    return make_scenario(**SYNC, **{
        "seed": seed,
        "policy.max_num_seqs": 1,
        "workload.num_requests": n,
        "workload.arrival": {"process": "poisson", "rate_rps": rate_rps},
        "workload.prompt_tokens": {"dist": "fixed", "value": PROMPT},
        "workload.output_tokens": {"dist": "fixed", "value": OUTPUT},
    })


def service_time_s(cm):
    """One request alone: its prefill step, then OUTPUT - 1 decode steps at growing context."""
    s = cm.step_time(synthetic_batch(prefill=[(PROMPT, 0)])).time_s
    for k in range(OUTPUT - 1):
        s += cm.step_time(synthetic_batch(decode_contexts=[PROMPT + k])).time_s
    return s


def test_md1_mean_queueing_delay_matches_pollaczek_khinchine():
    cm = prepare(md1_scenario(1.0, 10)).cost_model
    S = service_time_s(cm)
    rho = 0.5
    res = simulate(md1_scenario(rho / S, 30_000, seed=1))
    r = res.requests
    # deterministic service: every request's E2E is its queueing delay plus exactly S
    assert np.allclose(r["finish_s"] - r["scheduled_s"], S, rtol=1e-9)
    wq = float(np.mean(r["scheduled_s"] - r["arrival_s"]))
    pk = rho * S / (2 * (1 - rho))  # Pollaczek-Khinchine for deterministic service
    assert wq == pytest.approx(pk, rel=0.06), (wq, pk)


def test_littles_law_on_a_batched_run():
    sc = make_scenario(**{"workload.num_requests": 2000, "cluster.replicas": 2,
                          "workload.arrival": {"process": "poisson", "rate_rps": 20.0}})
    dt = 0.01
    res = simulate(sc, sample_every_s=dt)
    r = res.requests
    samples = np.array(res.queue_samples)
    # the engine's side: finish_s is the client's, the API server's time (api_s) after the engine
    # let the request go, when no queue holds it
    engine_finish = r["finish_s"] - r["api_s"]
    horizon = engine_finish.max()
    # time-average requests in system, observed by an independent sampler of the queues
    L = (samples[:, 2] + samples[:, 3]).sum() * dt / horizon
    lam = len(r["arrival_s"]) / horizon
    W = float(np.mean(engine_finish - r["arrival_s"]))
    assert L == pytest.approx(lam * W, rel=0.03)
