"""Arrival processes: empirical rates and CVs against the requested ones, with tolerances from the
sample size (k standard errors, k = 4 unless said), and field validation with paths."""

import json
import math

import numpy as np
import pytest

from servesim.errors import InputError
from servesim.inputs.scenario import Workload, build
from servesim.inputs.workload import generate

FIXED = {"prompt_tokens": {"dist": "fixed", "value": 10}, "output_tokens": {"dist": "fixed", "value": 5}}


def times(arrival, seed=0, **kw):
    data = {"arrival": arrival, **FIXED, **kw}
    return generate(build(Workload, data, "workload"), np.random.default_rng(seed)).arrival_s


def count_within(count, mean, index_of_dispersion=1.0, k=4.0):
    """|count - mean| <= k standard deviations of a count with that variance/mean ratio."""
    return abs(count - mean) <= k * math.sqrt(index_of_dispersion * mean)


def test_gamma_low_cv_rate_and_cv():
    t = times({"process": "gamma", "rate_rps": 50.0, "cv": 0.5}, num_requests=40000)
    g = np.diff(np.concatenate([[0.0], t]))
    n = len(g)
    # mean gap 0.02 s, gap std 0.01 s: standard error of the mean 0.01 / sqrt(n)
    assert g.mean() == pytest.approx(0.02, abs=4 * 0.01 / math.sqrt(n))
    # The sample CV of 40000 gamma(shape 4) gaps has a standard deviation of 0.0019 (measured
    # over 300 seeds): 0.01 is 5 of those.
    assert g.std() / g.mean() == pytest.approx(0.5, abs=0.01)


def test_on_off_fixed_count_is_poisson_with_the_mean_rate():
    # 10 req/s for 2 s, silence for 3 s: mean rate 4 req/s. Over 400 whole cycles (2000 s) the
    # count is exactly Poisson with mean 8000.
    t = times({"process": "on_off", "rate_rps": 10.0, "on_s": 2.0, "off_s": 3.0}, duration_s=2000.0)
    assert count_within(len(t), 8000)
    phase = np.mod(t, 5.0)
    assert np.all(phase < 2.0)  # nothing in the off periods


def test_on_off_exponential_is_bursty_with_the_mean_rate():
    # Interrupted Poisson: lam = 10 when on; on/off periods exponential with means 1 s and 1 s.
    # Mean rate 5 req/s. Count variance / mean -> 1 + 2 lam^2 pi_on pi_off / ((r1 + r2) mean)
    # = 1 + 2 * 100 * 0.25 / (2 * 5) = 6.
    a = {"process": "on_off", "rate_rps": 10.0, "on_s": 1.0, "off_s": 1.0, "durations": "exponential"}
    t = times(a, duration_s=4000.0)
    assert count_within(len(t), 20000, index_of_dispersion=6.0)
    g = np.diff(t)
    # Its gaps are hyperexponential: CV^2 = 1 + 2 lam r1 / (r1 + r2)^2 = 1 + 2*10*1/4 = 6 -> CV 2.45
    assert g.std() / g.mean() == pytest.approx(math.sqrt(6.0), rel=0.1)


def test_piecewise_counts_per_segment_and_silent_segments():
    segs = [{"duration_s": 10.0, "rate_rps": 2.0}, {"duration_s": 5.0, "rate_rps": 0.0},
            {"duration_s": 5.0, "rate_rps": 20.0}]
    t = times({"process": "piecewise", "segments": segs}, duration_s=4000.0)  # 200 cycles of 20 s
    phase = np.mod(t, 20.0)
    assert count_within(np.sum(phase < 10), 200 * 20)
    assert np.sum((phase >= 10) & (phase < 15)) == 0
    assert count_within(np.sum(phase >= 15), 200 * 100)


def test_sinusoidal_mean_rate_and_swing():
    # rate 5 * (1 + 0.8 sin(2 pi t / 100)); over 40 whole periods the count is Poisson(20000).
    a = {"process": "sinusoidal", "rate_rps": 5.0, "period_s": 100.0, "amplitude": 0.8}
    t = times(a, duration_s=4000.0)
    assert count_within(len(t), 20000)
    # First half of each period: mean 5 * 50 * (1 + 2 * 0.8 / pi) per period.
    high = np.sum(np.mod(t, 100.0) < 50.0)
    assert count_within(high, 40 * 5 * 50 * (1 + 1.6 / math.pi))


def test_num_requests_cuts_time_varying_processes():
    t = times({"process": "sinusoidal", "rate_rps": 5.0, "period_s": 60.0}, num_requests=123)
    assert len(t) == 123 and np.all(np.diff(t) >= 0)
    t = times({"process": "on_off", "rate_rps": 5.0, "on_s": 1.0, "off_s": 1.0}, num_requests=50, duration_s=5.0)
    assert len(t) <= 50 and t.max() < 5.0


def test_a_huge_segment_draws_only_the_arrivals_wanted():
    """A segment expecting 5e7 arrivals for 2,000 requests draws those 2,000 (the first order
    statistics of its uniform times), not 5e7 uniform times (~1.2 GB, seconds; 1e9 or more took
    the fuzzer's `validate` 48 s). The times keep the Poisson process's law: the i-th arrival of
    a segment starting at s with rate r is s + Gamma(i) / r."""
    import tracemalloc

    tracemalloc.start()
    t = times({"process": "on_off", "rate_rps": 5e7, "on_s": 1.0, "off_s": 1.0}, num_requests=2000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 50 * 2**20
    assert len(t) == 2000 and np.all(np.diff(t) > 0) and t[0] >= 0.0
    # the 2,000th arrival: Gamma(2000) / 5e7, mean 4e-5 s, sd 2.2%
    assert abs(t[-1] / 4e-5 - 1) < 0.1
    # a piecewise schedule: a quiet segment drawn whole, then a huge one cut to what is wanted
    segs = [{"duration_s": 1.0, "rate_rps": 10.0}, {"duration_s": 1.0, "rate_rps": 1e8}]
    for seed in range(5):
        t = times({"process": "piecewise", "segments": segs}, seed=seed, num_requests=500)
        quiet = int(np.sum(t < 1.0))
        assert len(t) == 500 and np.all(np.diff(t) >= 0) and count_within(quiet, 10)
        assert t[-1] - 1.0 == pytest.approx((500 - quiet) / 1e8, rel=0.3)


def test_expected_requests_follow_the_schedule_from_its_start():
    """A run shorter than a cycle expects the rates of the segments it spans (the schedule starts
    with its first segment at 0), not the cycle's mean, so the memory check refuses a run of 2.5e8
    requests before drawing them (it drew them first: a minute, then the refusal)."""
    from servesim.inputs.workload import expected_requests

    def expected(arrival, duration_s):
        return expected_requests(build(Workload, {"arrival": arrival, **FIXED, "duration_s": duration_s}, "workload"))

    on_off = {"process": "on_off", "rate_rps": 1000.0, "on_s": 1.0, "off_s": 1e6}
    assert expected(on_off, 0.5) == pytest.approx(500.0)
    assert expected(on_off, 2.0) == pytest.approx(1000.0)  # the whole on period, then silence
    assert expected(on_off, 2 * (1e6 + 1) + 0.5) == pytest.approx(2500.0)  # two cycles, half an on period
    segs = [{"duration_s": 10.0, "rate_rps": 0.0}, {"duration_s": 10.0, "rate_rps": 4.0}]
    assert expected({"process": "piecewise", "segments": segs}, 15.0) == pytest.approx(20.0)
    assert expected({"process": "poisson", "rate_rps": 3.0}, 10.0) == pytest.approx(30.0)
    sin = {"process": "sinusoidal", "rate_rps": 5.0, "period_s": 100.0, "amplitude": 0.8}
    assert expected(sin, 50.0) == pytest.approx(5 * 50 * (1 + 1.6 / math.pi))
    assert expected(sin, 4000.0) == pytest.approx(20000.0)


def test_a_huge_short_run_is_refused_before_its_arrivals_are_drawn(monkeypatch):
    import servesim.inputs.workload as workload_module
    from servesim.simulation import plan
    from tests.conftest import make_scenario

    def never(*a, **k):
        raise AssertionError("arrivals drawn")

    monkeypatch.setattr(workload_module, "arrival_times", never)
    sc = make_scenario(**{"workload.num_requests": None, "workload.duration_s": 1.0,
                          "workload.arrival": {"process": "on_off", "rate_rps": 5e8, "on_s": 0.5, "off_s": 1e9}})
    with pytest.raises(InputError, match="memory"):
        plan(sc, None)


def test_all_at_once():
    t = times({"process": "all_at_once", "time_s": 3.0}, num_requests=7)
    assert t.tolist() == [3.0] * 7


def test_new_processes_are_deterministic():
    for a in ({"process": "sinusoidal", "rate_rps": 5.0, "period_s": 60.0},
              {"process": "on_off", "rate_rps": 10.0, "on_s": 1.0, "off_s": 2.0, "durations": "exponential"},
              {"process": "piecewise", "segments": [{"duration_s": 1.0, "rate_rps": 3.0}]}):
        assert np.array_equal(times(a, seed=3, num_requests=500), times(a, seed=3, num_requests=500))
        assert not np.array_equal(times(a, seed=3, num_requests=500), times(a, seed=4, num_requests=500))


@pytest.mark.parametrize("arrival, message", [
    ({"process": "gamma", "rate_rps": 1.0, "cv": -1}, "workload.arrival.cv must be >= 0.001 and <= 1000, got -1"),
    ({"process": "sinusoidal", "rate_rps": 1.0, "period_s": 10, "amplitude": 2},
     "workload.arrival.amplitude must be >= 0 and <= 1, got 2"),
    ({"process": "on_off", "rate_rps": 1.0, "on_s": 0, "off_s": 1}, "workload.arrival.on_s must be > 0"),
    ({"process": "on_off", "rate_rps": 1.0, "on_s": 1, "off_s": 1, "durations": "weibull"},
     "workload.arrival.durations: 'weibull' is not valid"),
    ({"process": "piecewise", "segments": []}, "workload.arrival.segments must list at least one"),
    ({"process": "piecewise", "segments": [{"duration_s": 1, "rate_rps": 0}]},
     "at least one segment needs rate_rps > 0"),
    ({"process": "piecewise", "segments": [{"duration_s": -1, "rate_rps": 1}]},
     r"workload.arrival.segments\[0\].duration_s must be > 0 and <= 1e\+09, got -1"),
    ({"process": "piecewise", "segments": {"duration_s": 1}}, "workload.arrival.segments must be a list"),
    ({"process": "closed_loop", "clients": 0}, "workload.arrival.clients must be > 0 and <= 1000000, got 0"),
    ({"process": "closed_loop", "clients": 2, "think_time_s": -1}, "workload.arrival.think_time_s must be >= 0"),
    ({"process": "poison", "rate_rps": 1}, "did you mean 'poisson'"),
])
def test_arrival_fields_are_checked_with_their_path(arrival, message):
    with pytest.raises(InputError, match=message):
        build(Workload, {"arrival": arrival, "num_requests": 10, **FIXED}, "workload")


def test_all_at_once_needs_num_requests():
    with pytest.raises(InputError, match="workload.num_requests is needed with arrival process all_at_once"):
        build(Workload, {"arrival": {"process": "all_at_once"}, "duration_s": 10, **FIXED}, "workload")


def test_a_missing_field_is_named_with_what_it_means():
    # "workload.arrival.cv is missing: expected a number" did not say what cv is; a field's short
    # doc (the reference's) now follows
    from servesim.errors import InputError
    from servesim.inputs.scenario import scenario_from_dict
    from tests.conftest import BASE

    data = json.loads(json.dumps(BASE))
    data["workload"]["arrival"] = {"process": "gamma", "rate_rps": 2.0}
    with pytest.raises(InputError, match=r"^workload\.arrival\.cv is missing: expected a number, the gaps' "
                                         r"coefficient of variation \(1: Poisson; below 1e-3 use fixed\)$"):
        scenario_from_dict(data)
