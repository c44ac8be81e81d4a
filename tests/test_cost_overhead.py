"""Per-step CPU overhead calibrated from Vidur's ``cpu_overheads.csv``: synthetic profiles in its
column format, generated from known per-TP figures, are fitted back; the fit reaches the scenario's
steps unless the scenario sets its own figures; bad files are input errors naming file and column.
(The shared data has no ``cpu_overheads.csv``, so only synthetic profiles exercise this.)"""

import csv
import json

import numpy as np
import pytest
import yaml

from servesim.cli.main import main
from servesim.cost.calibration import load_calibration
from servesim.cost.fitting import fit_overhead
from servesim.cost.profiles import find_profiles, read_cpu_overheads
from servesim.cost.efficiency import OverheadFit
from servesim.cost.validation import validate
from servesim.errors import InputError
from servesim.inputs.specs import GPUS
from tests.test_cost_calibration import set_cell

# the truth: (step_s, per_seq_s) per TP size; TP > 1 pays the workers' RPC on every step
TRUTH = {1: (2.0e-3, 9.0e-5), 2: (5.0e-3, 1.1e-4), 4: (5.5e-3, 1.3e-4)}
# how a step's time splits over the parts Vidur measures (the fit sees only their sum)
SHARES = {"SCHEDULE": 0.1, "PREPARE_INPUTS_E2E": 0.2, "SAMPLER_E2E": 0.25, "PROCESS_MODEL_OUTPUTS": 0.35,
          "RAY_COMM_TIME": 0.1}


def write_cpu_csv(path, truth=TRUTH, models=("meta-llama/Llama-2-7b-hf", "codellama/CodeLlama-34b-Instruct-hf"),
                  batches=(8, 16, 24, 32, 40, 48, 56, 64), noise=None):
    """Vidur's cpu_overheads.csv (upper-case columns, an unnamed index, means and medians in ms)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = list(SHARES)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([""] + [f"{p}_MEAN" for p in parts] + [f"{p}_MEDIAN" for p in parts]
                   + ["model_name", "batch_size", "tensor_parallel_degree", "total_time", "num_steps"])
        i = 0
        for m in models:
            for tp, (step, per) in truth.items():
                for b in batches:
                    ms = (step + per * b) * 1e3 * (1 + (noise.normal(0, 0.03) if noise is not None else 0))
                    med = [ms * SHARES[p] for p in parts]
                    w.writerow([i] + [v * 1.3 for v in med] + med + [m, b, tp, 1.0, 255])
                    i += 1


@pytest.fixture
def profiles_with_cpu(tmp_path):
    from tests.test_cost_calibration import write_mlp_csv

    root = tmp_path / "profiling"
    write_mlp_csv(root / "compute/a100/org/small/mlp.csv", (32, 32, 2560, 10240, False), (1,))
    write_cpu_csv(root / "a100/cpu_overheads.csv")  # Vidur's first layout: <device>/cpu_overheads.csv
    return root


def test_reader_sums_the_parts_and_the_fit_recovers_each_tp(profiles_with_cpu):
    prof = find_profiles(profiles_with_cpu, "a100-80g")
    assert len(prof.cpu) == 1
    c = prof.cpu[0]
    assert len(c.y) == 2 * 3 * 8
    i = int(np.flatnonzero((c.tp == 2) & (c.batch == 16))[0])
    assert c.y[i] == pytest.approx(5.0e-3 + 1.1e-4 * 16, rel=1e-9)  # medians (not means), seconds
    fit = fit_overhead(prof.cpu)
    assert fit.tp == (1, 2, 4)
    for tp, (step, per) in TRUTH.items():
        s, p = fit.at(tp)
        assert s == pytest.approx(step, rel=1e-3) and p == pytest.approx(per, rel=1e-3)


def test_noisy_measurements_still_fit_within_a_few_percent(tmp_path):
    path = tmp_path / "cpu_overheads.csv"
    write_cpu_csv(path, noise=np.random.default_rng(1))
    fit = fit_overhead([read_cpu_overheads(path)])
    for tp, (step, per) in TRUTH.items():
        s, p = fit.at(tp)
        assert s == pytest.approx(step, rel=0.1) and p == pytest.approx(per, rel=0.1)


def test_huge_measurements_still_fit_inside_the_bounds(tmp_path):
    """Found by fuzzing: one step measured at 1e11 ms put the fit's starting point outside its
    bounds (a scipy traceback); the bounds now come from the data. Past 1e6 ms (1,000 s) a cell
    is refused as no step's time (a later fuzzer's 1e300 ran to overflowing clocks); the largest
    time read still fits."""
    path = tmp_path / "cpu_overheads.csv"
    write_cpu_csv(path)
    set_cell(path, 2, 7, "999999")  # SCHEDULE_MEDIAN of the first row
    fit = fit_overhead([read_cpu_overheads(path)])
    assert all(np.isfinite(fit.step_s)) and all(np.isfinite(fit.per_seq_s))
    set_cell(path, 2, 7, "99999999999")
    with pytest.raises(InputError, match=r"line 2: column '\w+_median': '99999999999' ms is more than 1e\+06 ms"):
        read_cpu_overheads(path)


def test_nearest_measured_tp_size():
    fit = OverheadFit((1, 2, 4), (1.0, 2.0, 4.0), (0.1, 0.2, 0.4))
    assert fit.at(1) == (1.0, 0.1) and fit.at(8) == (4.0, 0.4) and fit.at(3) == (4.0, 0.4)
    assert OverheadFit((1,), (1.0,), (0.0,)).at(8) == (1.0, 0.0)


def test_calibrate_writes_the_fit_and_validate_cost_reports_it(profiles_with_cpu, tmp_path, capsys):
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--profiles", str(profiles_with_cpu), "--gpu", "a100-80g", "--out", str(out)]) == 0
    text = out.read_text()
    assert "per-step CPU overhead: " in text and "cpu_overheads.csv" in text
    body = yaml.safe_load(text)
    assert body["overhead"]["tp"] == [1, 2, 4]
    eff = load_calibration(out)
    assert eff.overhead.at(2)[0] == pytest.approx(5.0e-3, rel=1e-3)
    assert "per-step CPU overhead from 1 cpu_overheads profile" in eff.source
    capsys.readouterr()
    assert main(["validate-cost", "--profiles", str(profiles_with_cpu), "--gpu", "a100-80g", "--calibration",
                 str(out), "--out", str(tmp_path / "v")]) == 0
    printed = capsys.readouterr().out
    assert "| overhead | meta-llama/Llama-2-7b-hf | 2 | 8 |" in printed
    rows = json.loads((tmp_path / "v/validate-cost-a100-80g.json").read_text())["rows"]
    over = next(r for r in rows if r["family"] == "overhead" and r["model"] == "all")
    assert over["points"] == 48 and over["worst"] < 1e-3
    # the v0 figures (2 ms + 10 us per sequence) miss these measurements by far
    v0 = validate(find_profiles(profiles_with_cpu, "a100-80g"), GPUS["a100-80g"], load_calibration(out).__class__())
    assert next(r for r in v0["rows"] if r["family"] == "overhead" and r["model"] == "all")["mape"] > 0.3


def test_the_fit_reaches_the_scenario_unless_it_sets_its_own(profiles_with_cpu, tmp_path, scenario_factory):
    from servesim.simulation import prepare, simulate

    cal = tmp_path / "cal.yaml"
    assert main(["calibrate", "--profiles", str(profiles_with_cpu), "--gpu", "a100-80g", "--out", str(cal)]) == 0
    kw = {"hardware.gpu": "a100-80g", "hardware.tp": 2, "cost.calibration": str(cal), "workload.num_requests": 5}
    cm = prepare(scenario_factory(**kw)).cost_model
    assert cm.step_overhead_s == pytest.approx(5.0e-3, rel=1e-3)
    assert cm.per_seq_overhead_s == pytest.approx(1.1e-4, rel=1e-3)
    res = simulate(scenario_factory(**kw))
    assert res.summary["cost"]["colocated"]["overhead"]["source"] == "calibration"
    assert res.summary["cost"]["colocated"]["overhead"]["step_s"] == cm.step_overhead_s
    # each step pays it: the recorded durations are the cost model's step times
    st = res.steps
    assert (np.asarray(st["duration_s"]) > cm.step_overhead_s).all()
    mixed = prepare(scenario_factory(**kw, **{"cost.step_overhead_s": 0.001})).cost_model
    assert mixed.step_overhead_s == 0.001 and mixed.per_seq_overhead_s == cm.per_seq_overhead_s
    res = simulate(scenario_factory(**kw, **{"cost.step_overhead_s": 0.001}))
    assert res.summary["cost"]["colocated"]["overhead"]["source"] == "scenario (step), calibration (per sequence)"
    # without a fit: the engine profile's figures
    from servesim.cost.engines import PROFILES

    pool = prepare(scenario_factory(**{"hardware.gpu": "a100-80g"})).pools[0]
    v1 = PROFILES["vllm-v1"]
    assert (pool.cost_model.step_overhead_s, pool.cost_model.per_seq_overhead_s) == (v1.step_s, v1.per_seq_s)
    assert pool.engine.overhead_source == "engine vllm-v1"


def test_cost_cli_uses_the_calibrated_overhead(profiles_with_cpu, tmp_path, capsys):
    cal = tmp_path / "cal.yaml"
    assert main(["calibrate", "--profiles", str(profiles_with_cpu), "--gpu", "a100-80g", "--out", str(cal)]) == 0
    capsys.readouterr()
    # vLLM V0's synchronous loop shows all of it (vLLM V1 hides it under the GPU step)
    args = ["cost", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "a100-80g", "--tp", "2", "--decode-batch", "10",
            "--context", "100", "--json", "--calibration", str(cal), "--engine", "vllm-v0"]
    assert main(args) == 0
    ops = json.loads(capsys.readouterr().out)["ops"]
    assert ops["overhead"]["time_s"] == pytest.approx(5.0e-3 + 10 * 1.1e-4, rel=1e-3)


def test_bad_cpu_overheads_and_overhead_entries_are_input_errors(tmp_path):
    path = tmp_path / "compute/a100/cpu_overheads.csv"
    write_cpu_csv(path)
    text = path.read_text().replace("SAMPLER_E2E_MEDIAN", "SAMPLER_MEDIAN").replace("SAMPLER_E2E_MEAN", "SAMPLER_MEAN")
    path.write_text(text)
    with pytest.raises(InputError, match=r"cpu_overheads\.csv: missing column 'sampler_e2e_median'"):
        read_cpu_overheads(path)
    write_cpu_csv(path)
    set_cell(path, 3, -4, "eight")  # batch_size
    with pytest.raises(InputError, match=r"cpu_overheads\.csv: line 3: column 'batch_size'"):
        read_cpu_overheads(path)
    cal = tmp_path / "c.yaml"
    for body, msg in (("overhead: {tp: [1], step_s: [0.002]}\n", "needs exactly the keys"),
                      ("overhead: {tp: [1, 2], step_s: [0.002], per_seq_s: [0.0]}\n", "one length"),
                      ("overhead: {tp: [0], step_s: [0.002], per_seq_s: [0.0]}\n", r"overhead\.tp\[0\] must be >= 1"),
                      ("overhead: {tp: [1], step_s: [-1], per_seq_s: [0.0]}\n", r"overhead\.step_s\[0\] must be >= 0")):
        cal.write_text(body)
        with pytest.raises(InputError, match=msg):
            load_calibration(cal)
    assert main(["cost", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "a100-80g", "--prefill", "8",
                 "--calibration", str(cal)]) == 2
