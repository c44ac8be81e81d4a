"""Invariants that must hold for any workload and policy (hypothesis)."""

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.predictions import predict_rejections
from servesim.simulation import simulate
from tests.conftest import make_scenario, policy_mix_kw, specs

request_rows = st.lists(
    st.tuples(st.floats(0, 5, allow_nan=False), st.integers(1, 1500), st.integers(1, 200)),
    min_size=1, max_size=25,
)


CHECKED = {"runs": 0}  # scenarios whose invariants were checked (printed by the long run)
DRAWS = dict(rows=request_rows, max_num_seqs=st.integers(1, 16), budget=st.integers(256, 4096),
             blocks=st.one_of(st.none(), st.integers(8, 400)), replicas=st.integers(1, 3),
             duration=st.one_of(st.none(), st.floats(0.2, 5)),
             router=st.sampled_from(["round_robin", "random", "least_outstanding_tokens", "least_kv_usage",
                                     "prefix_aware"]),
             policy=st.sampled_from(["continuous", "chunked_prefill", "static", "pd_split"]),
             preemption=st.sampled_from(["recompute", "swap"]), prefix_caching=st.booleans(),
             spec=st.one_of(st.none(), st.integers(1, 4)), prefix=st.sampled_from([0, 20, 100]),
             pp=st.sampled_from([1, 1, 2]), watermark=st.sampled_from([0.01, 0.0, 0.1]))


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(**DRAWS)
def test_invariants(rows, max_num_seqs, budget, blocks, replicas, duration, router, policy, preemption,
                    prefix_caching, spec, prefix, pp, watermark):
    check_invariants(rows, max_num_seqs, budget, blocks, replicas, duration, router, policy, preemption,
                     prefix_caching, spec, prefix, pp, watermark)


@pytest.mark.parametrize("example", [
    # a sequence that outgrows a virtual engine's 4 blocks (pp 2 of 8) is rejected while decoding,
    # after 0.29 s in the system: Little's law counted only completed requests' time
    dict(rows=[(0.0, 1, 45)], blocks=8, policy="continuous", prefix=20),
    # a P/D split with pipelined replicas: its prefill pool's virtual engines had no arrival_reason
    dict(rows=[(0.0, 1, 1)], blocks=None, policy="pd_split", prefix=0),
])
def test_invariants_on_what_the_long_search_found(example):
    """Examples test_invariants_long found (each failed before its fix), kept in the default run."""
    check_invariants(max_num_seqs=1, budget=256, replicas=1, duration=None, router="round_robin",
                     preemption="recompute", prefix_caching=False, spec=None, pp=2, watermark=0.01, **example)


@pytest.mark.slow
def test_invariants_long():
    """The same invariants on 2,000 random scenarios (pytest -m slow); prints how many ran."""
    CHECKED["runs"] = 0
    settings(max_examples=2000, deadline=None, database=None, suppress_health_check=list(HealthCheck))(
        given(**DRAWS)(check_invariants))()
    print(f"\ninvariants checked on {CHECKED['runs']} random scenarios, no violation")
    assert CHECKED["runs"] >= 1600  # (examples whose rows all arrive after the cut-off are skipped)


def check_invariants(rows, max_num_seqs, budget, blocks, replicas, duration, router, policy, preemption,
                     prefix_caching, spec, prefix, pp, watermark):
    rows = sorted(rows)
    kw = policy_mix_kw(policy, max_num_seqs, budget, preemption, prefix_caching, blocks, router, duration,
                       replicas, spec)
    kw["hardware.pp"] = pp  # pp 2: each replica runs two virtual engines (pipelined micro-batches)
    kw["policy.watermark"] = watermark  # admission keeps this share free: what it keeps out is rejected
    if policy == "pd_split":
        replicas += 1  # the prefill replica
    replicas *= pp
    sc = make_scenario(**kw)
    if prefix:  # a few requests share a prefix group
        rows = [(t, p + prefix, o) for t, p, o in rows]
    if duration is not None:
        rows = [r for r in rows if r[0] < duration]
        if not rows:
            return
    CHECKED["runs"] += 1
    sp = specs(rows)
    if prefix:
        n = len(rows)
        sp = dataclasses.replace(sp, prefix_group=np.arange(n, dtype=np.int64) % 2,
                                 prefix_tokens=np.full(n, prefix, dtype=np.int64))
    # Little's law is checked with an independent sampler of the queues where every request in
    # the system is in one (not with swapped-out or P/D requests in transfer)
    little = policy != "pd_split" and preemption == "recompute" and duration is None
    dt = 0.002
    res = simulate(sc, specs=sp, sample_every_s=dt if little else None)
    r = res.requests
    status = r["status"]
    s = res.summary

    # requests conserved: the summary's counts are the rows', and add up
    assert s["num_requests"] == len(rows) == s["completed"] + s["rejected"] + s["unfinished"]
    assert s["completed"] == int((status == "completed").sum()) and s["rejected"] == int((status == "rejected").sum())
    assert s["unfinished"] == int((status == "unfinished").sum())
    # what validate predicts without running (predict_rejections: the rules depend on a request's
    # lengths and the deployment only) is the run's count, and the reasons are the run's
    pred = predict_rejections(sc, specs=sp)
    if duration is None:
        assert pred["rejected"] == s["rejected"], (pred, list(r["reason"][status == "rejected"]))
    else:  # (a cut-off may end the run before a sequence outgrows the KV cache: it is unfinished then)
        late = pred["while_decoding"]
        assert pred["rejected"] - late <= s["rejected"] <= pred["rejected"], (pred, s["rejected"])
    # the window holds everything that happened, and rates are per it
    st0 = res.steps
    if len(st0["start_s"]):
        assert (st0["start_s"] + st0["duration_s"]).max() <= s["sim_time_s"] * (1 + 1e-12)
    assert np.nanmax(r["finish_s"], initial=0.0) <= s["sim_time_s"]
    if s["sim_time_s"] > 0:
        assert s["throughput_rps"] == s["completed"] / s["sim_time_s"]
    # each replica's (virtual engine's) steps follow one another
    for rep in np.unique(st0["replica"]):
        sel = st0["replica"] == rep
        start, end = st0["start_s"][sel], st0["start_s"][sel] + st0["duration_s"][sel]
        assert np.all(start[1:] >= end[:-1] - 1e-9 * np.maximum(1.0, end[:-1]))
    # Little's law, L = lambda W, exactly up to the sampler's resolution: the time integral of the
    # requests in the system equals the sum of their times in it, within dt per arrival and end
    if little and len(res.queue_samples):
        q = np.array(res.queue_samples)
        area = float((q[:, 2] + q[:, 3]).sum()) * dt
        # (completed requests, and those rejected while decoding when their sequence outgrew the KV
        # cache: in the system until then; those rejected on arrival never entered it, finish_s NaN)
        done = (status == "completed") | ((status == "rejected") & ~np.isnan(r["finish_s"]))
        # (the engine's time: finish_s is the client's, the API server's api_s after the engine's end)
        in_system = float((r["finish_s"][done] - r["api_s"][done] - r["arrival_s"][done]).sum())
        assert abs(area - in_system) <= 2 * len(rows) * dt + 1e-9, (area, in_system)

    # every arrival is accounted for, exactly once
    assert len(status) == len(rows)
    assert set(status) <= {"completed", "rejected", "unfinished"}
    if duration is None:
        assert "unfinished" not in set(status)
        assert res.kv_blocks_in_use == [0] * replicas  # all KV returned
    assert all(reason for reason, s in zip(r["reason"], status) if s == "rejected")
    # the per-request prefix hits add up to the summary's (first admissions only, in both)
    assert int(r["prefix_hit_tokens"].sum()) == res.summary["kv"]["prefix_cache_hit_tokens"]

    # timestamps ordered: arrival <= scheduled <= first token <= finish
    done = status == "completed"
    assert np.all(r["arrival_s"][done] <= r["scheduled_s"][done])
    assert np.all(r["scheduled_s"][done] < r["first_token_s"][done])
    assert np.all(r["first_token_s"][done] <= r["finish_s"][done])
    if duration is not None:
        assert np.all(r["finish_s"][done] <= duration)

    # output tokens conserved: completed requests decoded all their tokens
    st_ = res.steps
    if blocks is not None:
        assert st_["kv_blocks_used"].max(initial=0) <= blocks

    # no step beats its roofline floor
    cm_peak = 989e12  # h100-sxm, tp=1
    bw = 3350e9
    floor = np.maximum(st_["flops"] / cm_peak, st_["bytes"] / bw)
    assert np.all(st_["duration_s"] >= floor)

    # batch limits respected (static batching has no token budget)
    assert np.all(st_["num_seqs"] <= max_num_seqs)
    if policy != "static":
        assert np.all(st_["prefill_tokens"] + st_["decode_tokens"] <= budget)
