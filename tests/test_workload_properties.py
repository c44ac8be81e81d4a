"""Any workload (hypothesis): every request that arrives is accounted for once, per-class counts
add up, closed loop never exceeds its clients, and the same seed gives the same requests."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.simulation import simulate
from tests.conftest import make_scenario

LEN = {"dist": "uniform", "min": 1, "max": 3000}
arrivals = st.sampled_from([
    {"process": "poisson", "rate_rps": 20.0},
    {"process": "gamma", "rate_rps": 20.0, "cv": 4.0},
    {"process": "on_off", "rate_rps": 40.0, "on_s": 0.5, "off_s": 1.0, "durations": "exponential"},
    {"process": "piecewise", "segments": [{"duration_s": 0.5, "rate_rps": 50.0}, {"duration_s": 0.5, "rate_rps": 0.0}]},
    {"process": "sinusoidal", "rate_rps": 20.0, "period_s": 2.0, "amplitude": 1.0},
    {"process": "all_at_once", "time_s": 0.1},
    {"process": "closed_loop", "clients": 3, "think_time_s": 0.05},
])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrival=arrivals, n=st.integers(1, 30), classes=st.booleans(), clip=st.booleans(),
       duration=st.one_of(st.none(), st.floats(0.3, 3.0)), seed=st.integers(0, 3))
def test_workload_invariants(arrival, n, classes, clip, duration, seed):
    kw = {"seed": seed, "workload.arrival": arrival, "workload.num_requests": n, "workload.duration_s": duration,
          "workload.clip_to_context": clip, "workload.prompt_tokens": {"dist": "uniform", "min": 1, "max": 12000}}
    if classes:
        kw.update({"workload.prompt_tokens": None, "workload.output_tokens": None, "workload.classes": [
            {"name": "a", "share": 2, "prompt_tokens": LEN, "output_tokens": {"dist": "fixed", "value": 3}},
            {"name": "b", "share": 1, "prompt_tokens": {"dist": "zipf", "s": 1.1, "max": 9000},
             "output_tokens": LEN, "shared_prefix": {"tokens": 64, "groups": 2}}]})
    sc = make_scenario(**kw)
    res = simulate(sc)
    s, r = res.summary, res.requests
    status = r["status"]
    assert s["num_requests"] == len(status) == s["completed"] + s["rejected"] + s["unfinished"]
    assert len(status) <= n and np.array_equal(r["request_id"], np.arange(len(status)))
    if duration is None:
        assert s["unfinished"] == 0
        if arrival["process"] != "closed_loop":
            assert len(status) == n
    assert np.all(np.diff(r["arrival_s"]) >= 0)
    for key in ("num_requests", "completed", "rejected", "unfinished"):
        assert sum(c[key] for c in s["classes"].values()) == s[key]
    assert set(r["class"]) <= set(s["classes"])
    if clip:
        assert np.all(r["prompt_tokens"] + r["output_tokens"] <= 8192)
        assert not any("context length" in x for x in r["reason"])
    if arrival["process"] == "closed_loop":
        end = np.where(status == "completed", r["finish_s"], np.where(status == "rejected", r["arrival_s"], np.inf))
        events = sorted([(t, 1) for t in r["arrival_s"]] + [(t, -1) for t in end])
        assert max(np.cumsum([d for _, d in events])) <= 3
    again = simulate(sc).requests
    assert np.array_equal(again["prompt_tokens"], r["prompt_tokens"])
    assert np.array_equal(again["arrival_s"], r["arrival_s"])
