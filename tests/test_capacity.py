"""servesim capacity: the rate found meets the SLO in a confirming run, and 10% above it does not."""

import copy
import json

import numpy as np
import pytest
import yaml

from sim.capacity import parse_slo
from sim.cli import main
from sim.scenario import scenario_from_dict
from sim.simulate import simulate
from tests.conftest import BASE

N = 200


def scenario_data():
    data = copy.deepcopy(BASE)
    # a small batch cap gives a sharp knee: above capacity the queue (and TTFT) grows through the run
    data["policy"]["max_num_seqs"] = 4
    data["workload"]["num_requests"] = N
    return data


def p99_ttft_over_all(data, rate):
    """Independent check: simulate at ``rate`` and take p99 TTFT over every request (missing = inf)."""
    d = copy.deepcopy(data)
    d["workload"]["arrival"]["rate_rps"] = rate
    res = simulate(scenario_from_dict(d))
    r = res.requests
    ttft = np.where(r["status"] == "completed", r["first_token_s"] - r["arrival_s"], np.inf)
    return float(np.percentile(np.nan_to_num(ttft, posinf=1e18), 99))


def test_capacity_meets_at_the_answer_and_fails_10_percent_above(tmp_path, capsys):
    data = scenario_data()
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(data))
    out = tmp_path / "cap"
    assert main(["capacity", str(sc), "--slo", "ttft_p99=300ms", "--probe-requests", str(N), "--out", str(out),
                 "--workers", "1", "--quiet", "--per-gpu"]) == 0
    printed = capsys.readouterr().out
    cap = json.loads((out / "capacity.json").read_text())
    rate = cap["capacity_rps"]
    assert rate > 0 and cap["check_above_rps"] == pytest.approx(rate * 1.1, rel=1e-4)
    assert f"capacity {rate:.4g} req/s" in printed and "per GPU" in printed
    # the probes are reported, each with its verdict
    assert len(cap["probes"]) >= 4 and any(not p["meets"] for p in cap["probes"])
    assert p99_ttft_over_all(data, rate) <= 0.3
    assert p99_ttft_over_all(data, cap["check_above_rps"]) > 0.3
    # a rerun reuses every probe
    rows_before = (out / "results.csv").read_text()
    assert main(["capacity", str(sc), "--slo", "ttft_p99=300ms", "--probe-requests", str(N), "--out", str(out),
                 "--workers", "1", "--quiet"]) == 0
    assert (out / "results.csv").read_text() == rows_before


def test_attainment_mode_counts_requests_within_limits(tmp_path):
    data = scenario_data()
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(data))
    out = tmp_path / "cap"
    assert main(["capacity", str(sc), "--slo", "ttft_p99=0.3,tpot_p99=0.05", "--attainment", "0.9",
                 "--probe-requests", str(N), "--out", str(out), "--workers", "2", "--quiet"]) == 0
    cap = json.loads((out / "capacity.json").read_text())
    at = {p["rate_rps"]: p for p in cap["probes"]}
    assert at[cap["capacity_rps"]]["attainment"] >= 0.9 > at[cap["check_above_rps"]]["attainment"]


def test_parse_slo():
    assert parse_slo("ttft_p99=0.5, tpot_p50=20ms") == {("ttft", "p99"): 0.5, ("tpot", "p50"): 0.02}


@pytest.mark.parametrize("slo, needle", [
    ("ttft_p99", "expected METRIC_STAT=SECONDS"),
    ("lat_p99=1", "unknown metric 'lat'"),
    ("ttft_p42=1", "unknown statistic 'p42'"),
    ("ttft_p99=0", "must be > 0"),
])
def test_bad_slo_exits_2(tmp_path, capsys, slo, needle):
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(scenario_data()))
    assert main(["capacity", str(sc), "--slo", slo]) == 2
    assert needle in capsys.readouterr().err


def test_probe_duration_scales_requests_with_rate(tmp_path):
    from sim.sweep import read_results

    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(scenario_data()))
    out = tmp_path / "cap"
    assert main(["capacity", str(sc), "--slo", "ttft_p99=0.3", "--probe-requests", "50", "--probe-duration", "20",
                 "--out", str(out), "--workers", "1", "--quiet"]) == 0
    for row in read_results(out / "results.csv"):
        rate = row["workload.arrival.rate_rps"]
        resolved = yaml.safe_load((out / row["dir"] / "scenario.yaml").read_text())
        assert resolved["workload"]["num_requests"] == max(50, int(np.ceil(rate * 20)))
