"""The run-level figures that a cut-off, a closed loop's last think time or a step's own frees
must not distort (README, "Metric definitions"): a step's KV usage is its peak (before the
requests it finishes free their blocks), and ``sim_time_s`` is the run's window, which rates
are per."""

import numpy as np
import pytest

from servesim.simulation import simulate
from tests.conftest import make_scenario, specs


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_step_that_finishes_its_requests_records_the_blocks_it_held(engine):
    # one request of 4000 prompt tokens (250 blocks of 16) and 3 output tokens: every step holds
    # ~250 blocks, the last one too (its request frees them only once it is over)
    sc = make_scenario(**{"engine": engine})
    res = simulate(sc, specs=specs([(0.0, 4000, 3)]))
    kv = res.steps["kv_blocks_used"]
    assert len(kv) == 3 and kv.min() >= 250
    assert res.summary["utilization"]["kv_usage_max"] > 0
    assert res.kv_blocks_in_use == [0]  # and they were all freed after it


def test_kv_peaks_of_a_batch_are_the_same_in_both_engines():
    rows = [(0.01 * i, 300 + 37 * i, 1 + (i * 7) % 40) for i in range(40)]
    got = {e: simulate(make_scenario(**{"engine": e}), specs=specs(rows)).steps["kv_blocks_used"]
           for e in ("fast", "reference")}
    assert np.array_equal(got["fast"], got["reference"])
    assert got["fast"][-1] > 0  # the last step finished the last request: it held its blocks


def test_with_duration_and_num_requests_a_run_that_ends_early_is_not_diluted():
    # 20 requests at 50 req/s finish within seconds: the window is their span, not the hour
    sc = make_scenario(**{"workload.num_requests": 20, "workload.duration_s": 3600.0,
                          "workload.arrival.rate_rps": 50.0})
    s = simulate(sc).summary
    assert s["completed"] == 20 and s["sim_time_s"] < 60
    assert s["throughput_rps"] == pytest.approx(20 / s["sim_time_s"])


def test_with_only_a_duration_the_window_is_the_duration():
    sc = make_scenario(**{"workload.num_requests": None, "workload.duration_s": 5.0})
    s = simulate(sc).summary
    assert s["sim_time_s"] == 5.0


def test_a_run_cut_off_with_requests_in_flight_is_its_duration():
    # arrivals until the cut-off (2,000 at 1,000 req/s): the last ones are in flight at 2 s
    sc = make_scenario(**{"workload.num_requests": 2000, "workload.duration_s": 2.0,
                          "workload.arrival.rate_rps": 1000.0})
    s = simulate(sc).summary
    assert s["unfinished"] > 0 and s["sim_time_s"] == 2.0


def test_a_closed_loop_ends_with_its_last_request_not_after_the_last_think_time():
    sc = make_scenario(**{"workload.arrival": {"process": "closed_loop", "clients": 2, "think_time_s": 5.0,
                                               "think": "fixed"}, "workload.num_requests": 10})
    res = simulate(sc)
    last_finish = float(np.nanmax(res.requests["finish_s"]))
    assert res.summary["sim_time_s"] == pytest.approx(last_finish)
    assert res.summary["throughput_rps"] == pytest.approx(10 / last_finish)


def test_the_window_is_the_last_step_or_response_without_a_duration():
    res = simulate(make_scenario())
    st = res.steps
    last_step = float((st["start_s"] + st["duration_s"]).max())
    # (a response reaches the client the API server's time after the engine's last step)
    last_response = float(np.nanmax(res.requests["finish_s"]))
    assert last_response > last_step
    assert res.summary["sim_time_s"] == max(last_step, last_response)


def test_a_trace_or_closed_loop_that_runs_out_before_the_duration_is_not_diluted(tmp_path):
    # 4 rows over 3 s with duration_s 600: the window was 600 s (0.007 req/s), as if arrivals had
    # gone on; a closed loop that used the rows up idled to duration_s the same way
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,200,20\n1.5,300,30\n3.0,400,40\n")
    for arrival in (None, {"process": "closed_loop", "clients": 2}):
        sc = make_scenario(**{"workload.arrival": arrival, "workload.num_requests": None,
                              "workload.prompt_tokens": None, "workload.output_tokens": None,
                              "workload.duration_s": 600.0, "workload.trace": {"path": str(trace)}})
        res = simulate(sc)
        s = res.summary
        last = float(np.nanmax(res.requests["finish_s"]))
        assert s["completed"] == 4 and s["sim_time_s"] == pytest.approx(last) and last < 10, arrival
        assert s["throughput_rps"] == pytest.approx(4 / last)
    # the rows going on past the cut-off: the window is duration_s, as before
    sc = make_scenario(**{"workload.arrival": None, "workload.num_requests": None, "workload.prompt_tokens": None,
                          "workload.output_tokens": None, "workload.duration_s": 2.0,
                          "workload.trace": {"path": str(trace)}})
    assert simulate(sc).summary["sim_time_s"] == 2.0
