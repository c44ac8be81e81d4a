"""servesim validate-run: vLLM serving benchmark results (files in the format the benchmark
writes, tests/data) replayed through a scenario and compared."""

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from servesim.cli.main import main
from servesim.errors import InputError
from servesim.inputs.scenario import load_scenario
from servesim.inputs.vllm_result import read_vllm_result
from servesim.simulation import simulate

DATA = Path(__file__).parent / "data"
DETAILED = DATA / "vllm_bench_serve_detailed.json"  # vllm bench serve --save-result --save-detailed
CONCURRENCY = DATA / "benchmark_serving_concurrency4.json"  # benchmark_serving.py, rate inf, max concurrency 4


def test_a_detailed_result_is_replayed_at_its_send_times(tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["validate-run", str(DETAILED), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "replayed 23 requests" in printed and "(1 failed there)" in printed
    # the GPUs as every other title and line gives them ("1 x h100-sxm"; it read "h100-sxm x 1")
    assert "meta-llama/Meta-Llama-3-8B on 1 x h100-sxm, " in printed
    assert "meta-llama/Meta-Llama-3-8B on 1 x h100-sxm, " in (out / "report.md").read_text().splitlines()[0]
    for f in ("report.md", "validation.json", "qq.png", "cdf.png", "scenario.yaml", "replay.csv", "run/summary.json"):
        assert (out / f).exists(), f
    v = json.loads((out / "validation.json").read_text())
    assert v["requests"] == {"in_file": 24, "failed": 1, "replayed": 23, "simulated_completed": 23,
                             "simulated_rejected": 0, "failed_requests": [
                                 "request 5: Bad Request: This model's maximum context length is 8192 tokens"]}
    assert (v["model"], v["gpu"], v["gpus"], v["policy"]) == ("meta-llama/Meta-Llama-3-8B", "h100-sxm", 1,
                                                              "chunked_prefill (vllm_v1_serve)")
    assert v["rate"].startswith("the recorded send times")
    raw = json.loads(DETAILED.read_text())
    ok = [i for i, e in enumerate(raw["errors"]) if not e]
    with open(out / "replay.csv") as fh:
        rows = list(csv.DictReader(fh))
    t0 = min(raw["start_times"][i] for i in ok)
    assert [float(r["arrival_s"]) for r in rows] == pytest.approx([raw["start_times"][i] - t0 for i in ok])
    assert [int(r["prompt_tokens"]) for r in rows] == [raw["input_lens"][i] for i in ok]
    ttft = v["metrics"]["ttft"]
    assert ttft["n_measured"] == ttft["n_simulated"] == 23
    meas = [raw["ttfts"][i] for i in ok]
    assert ttft["p50"]["measured_s"] == pytest.approx(float(np.percentile(meas, 50)))
    assert ttft["p50"]["error"] == pytest.approx(ttft["p50"]["simulated_s"] / ttft["p50"]["measured_s"] - 1)
    assert v["metrics"]["itl"]["n_measured"] == sum(len(raw["itls"][i]) for i in ok)
    report = (out / "report.md").read_text()
    assert "| p99 |" in report and "![qq.png](qq.png)" in report and "## Throughput" in report
    # the replay is a plain scenario: running it again gives the same requests
    again = simulate(load_scenario(out / "scenario.yaml"))
    assert again.summary["completed"] == 23


def test_a_scenario_of_the_deployment_alone_is_taken(tmp_path, capsys):
    """The benchmark's requests replace the scenario's workload, so a file that names only the
    deployment (no workload section) replays them: it was 'workload is missing'. Its other errors
    still name the file and field."""
    dep = tmp_path / "deployment.yaml"
    dep.write_text("name: dep\nmodel: meta-llama/Meta-Llama-3-8B\nhardware: {gpu: h100-sxm}\n"
                   "policy: {name: chunked_prefill, max_num_batched_tokens: 2048}\n")
    out = tmp_path / "v"
    assert main(["validate-run", str(DETAILED), str(dep), "--out", str(out), "--quiet"]) == 0
    v = json.loads((out / "validation.json").read_text())
    assert v["requests"]["replayed"] == v["requests"]["simulated_completed"] == 23 and v["policy"] == "chunked_prefill"
    assert yaml.safe_load((out / "scenario.yaml").read_text())["workload"]["trace"]["path"].endswith("replay.csv")
    # the scenario after the options, as the usage line allows (argparse left it over: exit 2)
    assert main(["validate-run", str(DETAILED), "--quiet", "--out", str(tmp_path / "after"), str(dep)]) == 0
    assert (tmp_path / "after" / "validation.json").read_bytes() == (out / "validation.json").read_bytes()
    capsys.readouterr()
    dep.write_text("name: dep\nmodel: meta-llama/Meta-Llama-3-8B\nhardware: {gpu: h100-sxm, tp: 0}\n")
    assert main(["validate-run", str(DETAILED), str(dep), "--out", str(tmp_path / "w"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "deployment.yaml: hardware.tp" in err and "workload" not in err


def test_an_old_result_with_max_concurrency_replays_as_closed_loop_clients(tmp_path):
    out = tmp_path / "v"
    assert main(["validate-run", str(CONCURRENCY), "--out", str(out), "--quiet"]) == 0
    sc = yaml.safe_load((out / "scenario.yaml").read_text())
    assert sc["workload"]["arrival"]["process"] == "closed_loop" and sc["workload"]["arrival"]["clients"] == 4
    with open(out / "run" / "requests.csv") as fh:
        rows = list(csv.DictReader(fh))
    events = sorted([(float(r["arrival_s"]), 1) for r in rows] + [(float(r["finish_s"]), -1) for r in rows])
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert peak == 4
    # E2E comes from TTFT + the gaps when the file has no latencies
    v = json.loads((out / "validation.json").read_text())
    raw = json.loads(CONCURRENCY.read_text())
    e2e = [t + sum(g) for t, g in zip(raw["ttfts"], raw["itls"])]
    assert v["metrics"]["e2e"]["mean"]["measured_s"] == pytest.approx(float(np.mean(e2e)))


def result_from_run(results, rate="inf", with_start=True) -> dict:
    """A servesim run written as vLLM's benchmark would have recorded it."""
    r = results.requests
    order = np.argsort(r["request_id"])
    ttft = (r["first_token_s"] - r["arrival_s"])[order]
    e2e = (r["finish_s"] - r["arrival_s"])[order]
    out = r["output_tokens"][order]
    itls = [[float((e - t) / (o - 1))] * int(o - 1) if o > 1 else [] for t, e, o in zip(ttft, e2e, out)]
    d = {"backend": "vllm", "model_id": results.scenario.model, "request_rate": rate, "burstiness": 1.0,
         "max_concurrency": None, "duration": results.summary["sim_time_s"],
         "input_lens": r["prompt_tokens"][order].tolist(), "output_lens": out.tolist(),
         "ttfts": ttft.tolist(), "itls": itls, "latencies": e2e.tolist(), "errors": [""] * len(order),
         "output_throughput": results.summary["output_tokens_per_s"]}
    if with_start:
        d["start_times"] = (r["arrival_s"][order] + 5000.0).tolist()
    return d


def test_replaying_a_servesim_run_reproduces_it(tmp_path):
    sc_path = tmp_path / "s.yaml"
    sc_path.write_text("""
model: meta-llama/Meta-Llama-3-8B
hardware: {gpu: h100-sxm}
policy: {preset: vllm_v1_serve}
workload:
  num_requests: 80
  arrival: {process: poisson, rate_rps: 6.0}
  prompt_tokens: {dist: uniform, min: 100, max: 2000}
  output_tokens: {dist: uniform, min: 2, max: 300}
""")
    base = simulate(load_scenario(sc_path))
    res = tmp_path / "r.json"
    res.write_text(json.dumps(result_from_run(base)))
    assert main(["validate-run", str(res), str(sc_path), "--out", str(tmp_path / "v"), "--quiet"]) == 0
    v = json.loads((tmp_path / "v" / "validation.json").read_text())
    for k in ("ttft", "tpot", "e2e"):
        for stat in ("mean", "p10", "p50", "p99"):
            assert abs(v["metrics"][k][stat]["error"]) < 1e-6, (k, stat)
    assert v["paired_median_abs_error"]["ttft"] < 1e-6 and v["paired_median_abs_error"]["e2e"] < 1e-6


@pytest.mark.parametrize("rate, burst, mc, want", [
    (4.0, 1.0, None, {"process": "poisson", "rate_rps": 4.0}),
    (4.0, 0.5, None, {"process": "gamma", "rate_rps": 4.0, "cv": math.sqrt(2)}),
    (4.0, "inf", None, {"process": "fixed", "rate_rps": 4.0}),
    ("inf", 1.0, None, {"process": "all_at_once"}),
])
def test_without_send_times_the_stated_rate_is_replayed(tmp_path, rate, burst, mc, want):
    raw = json.loads(DETAILED.read_text())
    for k in ("start_times", "latencies", "queue_times"):
        raw.pop(k)
    raw.update(request_rate=rate, burstiness=burst, max_concurrency=mc)
    p = tmp_path / "r.json"
    p.write_text(json.dumps(raw))
    assert main(["validate-run", str(p), "--out", str(tmp_path / "v"), "--quiet"]) == 0
    arrival = yaml.safe_load((tmp_path / "v" / "scenario.yaml").read_text())["workload"]["arrival"]
    assert arrival["process"] == want["process"]
    for k, v in want.items():
        if k != "process":
            assert arrival[k] == pytest.approx(v), k


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.pop("input_lens"), "no per-request input_lens.*--save-detailed"),
    (lambda d: d["ttfts"].pop(), "ttfts has 23 values but input_lens has 24"),
    (lambda d: d["output_lens"].__setitem__(2, 1.5), r"output_lens\[2\] must be a whole number"),
    (lambda d: d["ttfts"].__setitem__(0, "fast"), r"ttfts\[0\] must be a finite number"),
    (lambda d: d.update(request_rate=-1), r"request_rate must be a number in \[1e-06, 1e\+09\]"),
    (lambda d: d.update(input_lens=[1e12] + d["input_lens"][1:]), r"input_lens\[0\] must be at most 2147483647"),
    # found by an adversarial pass: a TTFT of 1e300 s overflowed the Q-Q plot's axes (a traceback);
    # a prompt of 0 tokens was reported as line 4 of the replay file servesim writes
    (lambda d: d["ttfts"].__setitem__(0, 1e300), r"ttfts\[0\] must be at most 1e\+12 s"),
    (lambda d: d["input_lens"].__setitem__(2, 0), r"input_lens\[2\] must be at least 1 token, got 0"),
    # JSON integers have no bound: one beyond a float's range made math.isfinite / float() raise
    (lambda d: d["input_lens"].__setitem__(1, 10**400), r"input_lens\[1\] must be a finite number >= 0"),
    (lambda d: d.update(burstiness=10**400), r"burstiness must be a positive number"),
])
def test_malformed_results_are_input_errors(tmp_path, edit, match):
    raw = json.loads(DETAILED.read_text())
    edit(raw)
    p = tmp_path / "r.json"
    p.write_text(json.dumps(raw))
    with pytest.raises(InputError, match=match):
        read_vllm_result(str(p))


def test_a_broken_file_exits_2_naming_the_line(tmp_path, capsys):
    p = tmp_path / "r.json"
    p.write_text('{\n "input_lens": [1, 2,\n}')
    assert main(["validate-run", str(p), "--out", str(tmp_path / "v")]) == 2
    assert "r.json line 3 column 1: malformed JSON" in capsys.readouterr().err


# ---------------------------------------------------------------- a table of measured requests (CSV)
def _table_from_run(res, path, unit="ms", failed=(), names=("arrival_ms", "input_tokens", "output_tokens_recorded",
                                                             "max_tokens", "ttft_ms", "e2e_ms", "has_error")):
    """A run's requests as a per-request table in the layout of ../shared/data/vllm-h100 (times in
    ``unit`` after the first send; ``failed``: rows marked as errors, their latencies blank)."""
    r = res.requests
    k = {"ms": 1e3, "s": 1.0}[unit]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(names)
        for i in np.argsort(r["request_id"]):
            bad = int(r["request_id"][i]) in failed
            ttft = "" if bad else repr(float(r["first_token_s"][i] - r["arrival_s"][i]) * k)
            e2e = "" if bad else repr(float(r["finish_s"][i] - r["arrival_s"][i]) * k)
            w.writerow([repr(float(r["arrival_s"][i]) * k), r["prompt_tokens"][i], r["output_tokens"][i] - 1,
                        r["output_tokens"][i], ttft, e2e, 1 if bad else 0])


def test_a_table_of_measured_requests_replays_like_a_result(tmp_path, capsys):
    """A CSV of per-request measurements (send time, lengths, TTFT, E2E; here a servesim run
    written in the vllm-h100 data's layout) is replayed at its send times and compared: the run
    reproduces itself. Columns are found by name (max_tokens, not the re-tokenized count; units
    from the names' suffixes); failed rows are left out; there are no ITL samples in a table."""
    sc_path = tmp_path / "s.yaml"
    sc_path.write_text("model: meta-llama/Meta-Llama-3-8B\nhardware: {gpu: h100-sxm}\npolicy: {preset: vllm_v1_serve}\n"
                       "workload: {num_requests: 60, arrival: {process: poisson, rate_rps: 6.0}, prompt_tokens: "
                       "{dist: uniform, min: 100, max: 2000}, output_tokens: {dist: uniform, min: 2, max: 300}}\n")
    base = simulate(load_scenario(sc_path))
    table = tmp_path / "measured.csv"
    _table_from_run(base, table)
    assert main(["validate-run", str(table), str(sc_path), "--out", str(tmp_path / "v"), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "columns: sent = arrival_ms (ms), prompt = input_tokens, output = max_tokens, ttft = ttft_ms (ms)" in printed
    v = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert v["source"] == "table" and v["requests"]["replayed"] == 60
    for k in ("ttft", "tpot", "e2e"):
        for stat in ("mean", "p50", "p99"):
            assert abs(v["metrics"][k][stat]["error"]) < 1e-6, (k, stat)
    assert v["metrics"]["itl"]["n_measured"] == 0 and "no ITL samples" in (tmp_path / "v" / "report.md").read_text()
    # seconds, other names (--columns), failed rows left out
    other = tmp_path / "other.csv"
    _table_from_run(base, other, unit="s", failed={3, 7},
                    names=("t", "p", "o_seen", "o", "first", "total", "err"))
    assert main(["validate-run", str(other), str(sc_path), "--out", str(tmp_path / "w"), "--quiet", "--columns",
                 "sent=t,prompt=p,output=o,ttft=first,e2e=total,error=err", "--time-unit", "s"]) == 0
    w = json.loads((tmp_path / "w" / "validation.json").read_text())
    assert w["requests"]["failed"] == 2 and w["requests"]["replayed"] == 58
    assert w["columns"]["ttft"] == "first (s)"
    # a time column without a unit in its name is read as seconds, and the report says how to change that
    assert main(["validate-run", str(other), str(sc_path), "--out", str(tmp_path / "x"), "--quiet", "--columns",
                 "sent=t,prompt=p,output=o,ttft=first,e2e=total,error=err"]) == 0
    x = json.loads((tmp_path / "x" / "validation.json").read_text())
    assert x["columns"]["ttft"] == "first (s: no unit in its name; --time-unit sets one)"


def test_a_tables_columns_are_found_in_any_case(tmp_path):
    """Column names in another case (a spreadsheet's ``TTFT_ms``) are the same columns, their
    units read from the name as written."""
    p = tmp_path / "t.csv"
    p.write_text("Arrival_MS,Input_Tokens,Max_Tokens,TTFT_ms,E2E_MS\n0,10,5,20,90\n500,12,4,25,80\n")
    assert main(["validate-run", str(p), "--out", str(tmp_path / "v"), "--quiet"]) == 0
    v = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert v["requests"]["replayed"] == 2 and v["columns"]["ttft"].startswith("TTFT_ms")
    assert v["metrics"]["ttft"]["mean"]["measured_s"] == pytest.approx(0.0225)  # (ms, as the name says)


def test_a_table_or_result_named_otherwise_is_read_by_its_content(tmp_path):
    # a table saved as .txt was read as JSON: 'line 1 column 1: malformed JSON: Expecting value'
    p = tmp_path / "t.txt"
    p.write_text("sent_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n0,10,5,0.02,0.09\n0.5,12,4,0.025,0.08\n")
    assert main(["validate-run", str(p), "--out", str(tmp_path / "v"), "--quiet"]) == 0
    assert json.loads((tmp_path / "v" / "validation.json").read_text())["requests"]["replayed"] == 2
    r = tmp_path / "r.log"
    r.write_text(DETAILED.read_text())
    assert main(["validate-run", str(r), "--out", str(tmp_path / "w"), "--quiet"]) == 0
    assert json.loads((tmp_path / "w" / "validation.json").read_text())["requests"]["replayed"] == 23


def test_a_tables_error_cells_that_say_no_error_are_successes(tmp_path):
    # 'nan' (a pandas NaN written by Python's csv), 'NONE', 'No': each request was counted as failed
    p = tmp_path / "t.csv"
    p.write_text("sent_s,prompt_tokens,output_tokens,ttft_s,e2e_s,error\n0,10,5,0.02,0.09,nan\n"
                 "0.5,12,4,0.025,0.08,NONE\n1,12,4,0.025,0.08,No\n1.5,12,4,0.025,0.08,null\n"
                 "2,12,4,0.025,0.08,timeout\n")
    assert main(["validate-run", str(p), "--out", str(tmp_path / "v"), "--quiet"]) == 0
    v = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert v["requests"]["failed"] == 1 and v["requests"]["replayed"] == 4


def test_a_tables_nanosecond_columns_are_read_as_nanoseconds(tmp_path):
    """``ttft_ns`` was read as seconds (a TTFT of 2e7 s, the report's columns saying 'no unit in its
    name'), and --time-unit took no ns: a table logged in nanoseconds could not be replayed."""
    p = tmp_path / "t.csv"
    p.write_text("sent_ns,prompt_tokens,output_tokens,ttft_ns,e2e_ns\n0,10,5,20000000,90000000\n"
                 "500000000,12,4,25000000,80000000\n")
    assert main(["validate-run", str(p), "--out", str(tmp_path / "v"), "--quiet", "--columns",
                 "sent=sent_ns,ttft=ttft_ns,e2e=e2e_ns"]) == 0
    v = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert v["columns"]["ttft"] == "ttft_ns (ns)"
    assert v["metrics"]["ttft"]["mean"]["measured_s"] == pytest.approx(0.0225)
    q = tmp_path / "q.csv"
    q.write_text(p.read_text().replace("_ns", ""))
    assert main(["validate-run", str(q), "--out", str(tmp_path / "w"), "--quiet", "--columns",
                 "sent=sent,ttft=ttft,e2e=e2e", "--time-unit", "ns"]) == 0
    w = json.loads((tmp_path / "w" / "validation.json").read_text())
    assert w["metrics"]["e2e"]["mean"]["measured_s"] == pytest.approx(0.085)


@pytest.mark.parametrize("header, row, args, match", [
    ("arrival_ms,input_tokens,max_tokens,ttft_ms", "0,10,5,20", [],
     r"no column for the e2e \(looked for e2e_s, e2e_ms, latency_s.*--columns e2e=COLUMN\); the header has: "),
    ("arrival_ms,input_tokens,max_tokens,ttft_ms,e2e_ms", "0,10,five,20,90", [],
     r"t\.csv line 2: max_tokens must be a positive integer, got 'five'"),
    ("arrival_ms,input_tokens,max_tokens,ttft_ms,e2e_ms", "0,10,5,20,9", [],
     r"line 2: e2e_ms \('9'\) is shorter than ttft_ms \('20'\)"),
    ("arrival_ms,input_tokens,max_tokens,ttft_ms,e2e_ms", "0,10,5,-1,9", [],
     r"line 2: ttft_ms must be a duration >= 0"),
    ("a,b,c,d,e", "0,10,5,20,90", ["--columns", "sent=a,prompt=b,output=c,ttft=d,e2e=x"],
     r"line 1: no column 'x' \(--columns e2e=x\)"),
    ("a,b,c,d,e", "0,10,5,20,90", ["--columns", "snet=a"], r"--columns: unknown role 'snet'.*did you mean 'sent'"),
    ("a,b,c,d,e", "0,10,5,20,90", ["--columns", "sent"], r"--columns: 'sent' is not ROLE=COLUMN"),
    ("a,b,c,d,e", "0,10,5,20,90", ["--columns", "sent=a,sent=b"], r"--columns: sent is named twice \(a and b\)"),
    # (one column read as both the send time and the prompt length was taken)
    ("a,b,c,d,e", "0,10,5,20,90", ["--columns", "sent=b,prompt=b"],
     r"--columns: column 'b' is given to both sent and prompt; one role per column"),
])
def test_a_bad_table_is_an_input_error_naming_the_column_or_line(tmp_path, capsys, header, row, args, match):
    p = tmp_path / "t.csv"
    p.write_text(f"{header}\n{row}\n")
    assert main(["validate-run", str(p), "--out", str(tmp_path / "v"), "--quiet", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and __import__("re").search(match, err), err
    assert not (tmp_path / "v").exists()  # (the output folder it made was left behind, empty)


def test_a_bad_input_leaves_an_output_folder_that_was_there_as_it_was(tmp_path, capsys):
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "mine.txt").write_text("keep")
    (tmp_path / "t.csv").write_text("arrival_ms,input_tokens,max_tokens,ttft_ms,e2e_ms\n0,10,five,20,90\n")
    assert main(["validate-run", str(tmp_path / "t.csv"), "--out", str(tmp_path / "v"), "--quiet"]) == 2
    assert [p.name for p in (tmp_path / "v").iterdir()] == ["mine.txt"]


def test_a_table_that_is_no_utf8_text_is_an_input_error(tmp_path, capsys):
    p = tmp_path / "t.csv"
    p.write_text("arrival_ms,input_tokens,max_tokens,ttft_ms,e2e_ms\n0,10,5,20,90\n", encoding="utf-16")
    assert main(["validate-run", str(p), "--out", str(tmp_path / "v"), "--quiet"]) == 2
    assert "t.csv: a UTF-16 (little-endian) text file (it begins with the byte-order mark 0xfffe)" in (
        capsys.readouterr().err)


def test_table_options_with_a_vllm_result_are_refused(tmp_path, capsys):
    assert main(["validate-run", str(DETAILED), "--out", str(tmp_path / "v"), "--time-unit", "ms"]) == 2
    assert "--time-unit: it reads a table of requests (a .csv file)" in capsys.readouterr().err


def test_a_scenario_given_first_says_the_order(tmp_path, capsys):
    # the scenario first and the result second was read as a malformed JSON result ("line 1
    # column 1: malformed JSON: Expecting value"), which did not say what was wrong
    scenario = Path(__file__).resolve().parents[1] / "scenarios" / "default.yaml"
    assert main(["validate-run", str(scenario), str(DETAILED), "--out", str(tmp_path / "v"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "default.yaml is a YAML file, not a measurement: validate-run takes the measured requests first" in err
    assert not (tmp_path / "v").exists()


@pytest.mark.skipif(not (Path(__file__).resolve().parents[2] / "shared" / "data" / "vllm-h100").is_dir(),
                    reason="needs ../shared/data/vllm-h100 (measured vLLM runs, not shipped)")
def test_the_measured_vllm_h100_tables_read_as_they_are():
    from servesim.inputs.request_log import read_request_log

    data = Path(__file__).resolve().parents[2] / "shared" / "data" / "vllm-h100"
    res = read_request_log(str(data / "llama-2-7b-tp1-roleplay.csv"))
    assert len(res) == 7200 and res.ok.all() and res.columns["output"] == "max_tokens"
    assert 1150 < res.sent_s[-1] < 1250 and 0.01 < np.mean(res.ttft_s) < 0.1  # 20 minutes; TTFT in tens of ms


def test_a_table_that_names_prompts_replays_their_prefix_cache_hits(tmp_path, capsys):
    """With a prompt_id column, requests that sent the same prompt name the same KV blocks in the
    replay (a trace with block hash ids, replay.jsonl): a scenario with prefix caching hits them.
    Without it the replay computes every prompt whole."""
    sc_path = tmp_path / "s.yaml"
    sc_path.write_text("model: meta-llama/Llama-2-7b-hf\nhardware: {gpu: h100-sxm}\n"
                       "policy: {name: chunked_prefill, prefix_caching: true}\n"
                       "workload: {num_requests: 1, preset: azure_conv}\n")
    rows = ["sent_s,prompt_tokens,output_tokens,ttft_s,e2e_s,prompt_id"]
    rows += [f"{i * 0.5},{1000 + 37 * (i % 4)},20,0.05,0.3,q{i % 4}" for i in range(40)]
    table = tmp_path / "t.csv"
    table.write_text("\n".join(rows) + "\n")
    assert main(["validate-run", str(table), str(sc_path), "--out", str(tmp_path / "v"), "--quiet"]) == 0
    assert "4 distinct prompts" in capsys.readouterr().out
    v = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert v["replay"] == "replay.jsonl" and (tmp_path / "v" / "replay.jsonl").exists()
    assert v["prefix_cache_hit_rate"] > 0.8  # 36 of 40 prompts seen before, their full blocks cached
    assert "names each request's prompt" in (tmp_path / "v" / "report.md").read_text()
    table.write_text("\n".join(r.rsplit(",", 1)[0] for r in rows) + "\n")
    assert main(["validate-run", str(table), str(sc_path), "--out", str(tmp_path / "w"), "--quiet"]) == 0
    w = json.loads((tmp_path / "w" / "validation.json").read_text())
    assert w["replay"] == "replay.csv" and w["prefix_cache_hit_rate"] == 0.0
    assert w["metrics"]["ttft"]["mean"]["simulated_s"] > v["metrics"]["ttft"]["mean"]["simulated_s"]
    # a prompt past the model's context names its blocks up to the context only (two billion tokens
    # would be 134 million ids); the run then clips it as any other
    table.write_text(rows[0] + "\n0,2000000000,5,0.1,0.2,q\n1,100,5,0.1,0.2,q\n")
    assert main(["validate-run", str(table), str(sc_path), "--out", str(tmp_path / "x"), "--quiet"]) == 0
    first = json.loads((tmp_path / "x" / "replay.jsonl").read_text().splitlines()[0])
    assert first["input_length"] == 2_000_000_000 and len(first["hash_ids"]) == 4096 // 16
    # ... and says so: a request the benchmark served but the model could not hold means the scenario's
    # model is not the one measured (stdout, report.md, validation.json)
    out = capsys.readouterr().out
    assert "warning: 1 of 2 replayed requests need more than meta-llama/Llama-2-7b-hf's context of 4,096" in out
    assert "**Warning:** 1 of 2 replayed" in (tmp_path / "x" / "report.md").read_text()
    assert "clipped to it" in json.loads((tmp_path / "x" / "validation.json").read_text())["warnings"][0]
    assert json.loads((tmp_path / "w" / "validation.json").read_text())["warnings"] == []


@pytest.mark.skipif(not (Path(__file__).resolve().parents[2] / "shared" / "data" / "vllm-h100").is_dir(),
                    reason="needs ../shared/data/vllm-h100 (measured vLLM runs, not shipped)")
def test_a_measured_vllm_h100_table_with_its_prompts_replays_as_reproduce_does(tmp_path):
    """The codegen run as a table, with the prompt each request sent (as ``servesim reproduce
    vllm-h100`` works it out) and the run's vLLM settings: validate-run lands where reproduce
    does (mean TTFT within 10%, TPOT and E2E within 5% of the measurement)."""
    from servesim.studies import measured_vllm as mv

    data = Path(__file__).resolve().parents[2] / "shared" / "data" / "vllm-h100"
    src = data / "llama-2-7b-tp1-codegen.csv"
    ids = mv.prompt_ids(mv.load("codegen", data)["input_tokens"].astype(np.int64))
    lines = src.read_text().splitlines()
    table = tmp_path / "codegen.csv"
    table.write_text("\n".join([lines[0] + ",prompt_id"] + [f"{x},p{k}" for x, k in zip(lines[1:], ids)]) + "\n")
    sets = ["model=meta-llama/Llama-2-7b-hf", "hardware.dtype=fp16", "memory.num_gpu_blocks=7462",
            "policy.name=chunked_prefill", "policy.max_num_seqs=128", "policy.max_num_batched_tokens=2048",
            "policy.prefix_caching=true"]
    assert main(["validate-run", str(table), "--out", str(tmp_path / "v"), "--quiet",
                 *[a for s in sets for a in ("--set", s)]]) == 0
    v = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert abs(v["metrics"]["ttft"]["mean"]["error"]) < 0.10
    assert abs(v["metrics"]["tpot"]["mean"]["error"]) < 0.05 and abs(v["metrics"]["e2e"]["mean"]["error"]) < 0.05


def test_a_measured_table_with_a_column_twice_is_refused(tmp_path, capsys):
    table = tmp_path / "t.csv"
    table.write_text("sent_s,prompt_tokens,prompt_tokens,output_tokens,ttft_s,e2e_s\n0,100,5,10,0.1,0.5\n")
    assert main(["validate-run", str(table), "--out", str(tmp_path / "v"), "--quiet"]) == 2
    assert "t.csv line 1: column 'prompt_tokens' appears 2 times" in capsys.readouterr().err


def test_a_gzipped_result_or_table_says_it_is_compressed(tmp_path, capsys):
    import gzip

    table = "sent_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n0,1,1,0.1,0.2\n"
    for name, text in (("r.json", '{"input_lens": [1]}'), ("t.csv", table)):
        p = tmp_path / (name + ".gz")
        p.write_bytes(gzip.compress(text.encode()))
        assert main(["validate-run", str(p), "--out", str(tmp_path / "v"), "--quiet"]) == 2
        assert f"{name}.gz: a gzip-compressed file, not text: decompress it first" in capsys.readouterr().err


def test_validate_run_does_not_write_over_a_run_folder(tmp_path, capsys):
    """validate-run writes scenario.yaml and report.md into its --out: given a run's folder, the
    run's scenario.yaml no longer matched the digest in its summary.json and the run read as
    damaged ('its run folder is damaged (truncated or edited)'). It is refused, exit 2."""
    run_dir = tmp_path / "run"
    assert main(["run", "--out", str(run_dir), "--quiet", "--set", "workload.num_requests=3"]) == 0
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    capsys.readouterr()
    assert main(["validate-run", str(DETAILED), "--out", str(run_dir), "--quiet"]) == 2
    assert f"--out {run_dir}: holds a servesim run or study" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before


def test_requests_the_simulation_rejected_are_named_and_left_out_of_both_sides(tmp_path, capsys):
    """A scenario that rejects requests the benchmark served (here a KV cache too small for the
    long ones) compared the measured distribution of every request with the simulated one of the
    short ones it kept: TTFT 'within 1%' over two different sets of requests, and stdout said nothing
    of it. Both sides now hold the same requests (those the simulation completed), and a warning
    (stdout, report.md, validation.json) counts the rejected ones and quotes their reasons."""
    rows = ["sent_s,prompt_tokens,output_tokens,ttft_s,e2e_s"]
    # request i: prompt 100 + 40 i tokens; measured TTFT i ms + 10 ms (the long ones slower)
    rows += [f"{i * 0.5},{100 + 40 * i},20,{0.010 + 0.001 * i},{0.2 + 0.01 * i}" for i in range(12)]
    table = tmp_path / "t.csv"
    table.write_text("\n".join(rows) + "\n")
    # 20 blocks of 16 tokens: prompt + output up to 320 tokens fit (requests 0-5); the rest's prompts
    # do not (340 tokens and up), so they are rejected on arrival
    assert main(["validate-run", str(table), "--out", str(tmp_path / "v"), "--quiet",
                 "--set", "memory.num_gpu_blocks=20"]) == 0
    out = capsys.readouterr().out
    v = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert v["requests"]["simulated_completed"] == 6 and v["requests"]["simulated_rejected"] == 6
    ttft = v["metrics"]["ttft"]
    assert ttft["n_measured"] == ttft["n_simulated"] == 6
    assert ttft["mean"]["measured_s"] == pytest.approx(np.mean([0.010 + 0.001 * i for i in range(6)]))
    e2e = [0.2 + 0.01 * i for i in range(6)]
    assert v["metrics"]["e2e"]["p99"]["measured_s"] == pytest.approx(np.percentile(e2e, 99))
    warn = next(w for w in v["warnings"] if "rejected by the simulation" in w)
    assert warn.startswith("6 of 12 replayed requests were rejected by the simulation")
    assert "its prompt of 340 tokens needs 22 KV blocks; the replica has 20 in all" in warn
    assert "run/requests.csv" in warn
    assert "warning: 6 of 12 replayed requests were rejected by the simulation" in out
    assert "**Warning:** 6 of 12 replayed requests were rejected" in (tmp_path / "v" / "report.md").read_text()


def test_the_calibration_that_priced_the_replay_is_stated(tmp_path, capsys):
    """Which engine profile and kernel calibration priced the simulation was in run/summary.json
    alone: stdout, report.md, validation.json and the figures' titles did not say it, so a report
    could not be read without knowing the defaults of the day. They name them now."""
    assert main(["validate-run", str(DETAILED), "--out", str(tmp_path / "v"), "--quiet"]) == 0
    out = capsys.readouterr().out
    v = json.loads((tmp_path / "v" / "validation.json").read_text())
    cal = v["calibration"]
    assert cal["engine"] == "vllm-v1" and cal["setting"] == "auto"
    assert cal["pools"]["colocated"]["overhead"]["source"] == "engine vllm-v1"
    assert "calibration: engine profile vllm-v1" in out and "cost.calibration auto" in out
    report = (tmp_path / "v" / "report.md").read_text()
    assert "- calibration: engine profile vllm-v1" in report
    assert main(["validate-run", str(DETAILED), "--out", str(tmp_path / "w"), "--quiet",
                 "--set", "cost.engine=vllm-v0", "--set", "cost.calibration=none"]) == 0
    w = json.loads((tmp_path / "w" / "validation.json").read_text())
    assert (w["calibration"]["engine"], w["calibration"]["setting"]) == ("vllm-v0", "none")
    assert "calibration: engine profile vllm-v0" in capsys.readouterr().out


def test_a_replay_without_an_api_server_does_not_claim_client_side_times(tmp_path):
    """report.md said 'Both sides are the client's ... servesim adds its engine profile's API-server
    time' with cost.api_server false too, where the simulated TTFT and E2E are the engine's alone:
    a gap that is the front end read as the model's error. It says which it is."""
    assert main(["validate-run", str(DETAILED), "--out", str(tmp_path / "v"), "--quiet"]) == 0
    assert "Both sides are the client's" in (tmp_path / "v" / "report.md").read_text()
    assert main(["validate-run", str(DETAILED), "--out", str(tmp_path / "w"), "--quiet",
                 "--set", "cost.api_server=false"]) == 0
    report = (tmp_path / "w" / "report.md").read_text()
    assert "Both sides are the client's" not in report and "servesim adds" not in report
    assert "the simulated TTFT and E2E are the engine's alone (no API server" in report


def test_the_requests_that_failed_in_the_measurement_are_named(tmp_path, capsys):
    """'1 failed there (left out)' did not say which request or why: a vLLM result's error text and
    a table's line were dropped. report.md and validation.json name them (a vLLM result: the
    request's index and its error; a table: the line and its error cell)."""
    assert main(["validate-run", str(DETAILED), "--out", str(tmp_path / "v"), "--quiet"]) == 0
    v = json.loads((tmp_path / "v" / "validation.json").read_text())
    named = ["request 5: Bad Request: This model's maximum context length is 8192 tokens"]
    assert v["requests"]["failed_requests"] == named
    assert f"1 failed there (left out: {named[0]})" in (tmp_path / "v" / "report.md").read_text()
    assert f"failed there (left out): {named[0]}\n" in capsys.readouterr().out
    table = tmp_path / "t.csv"
    table.write_text("sent_s,prompt_tokens,output_tokens,ttft_s,e2e_s,error\n0,10,5,0.02,0.09,\n"
                     "0.5,12,4,,,timeout\n1,12,4,0.02,0.08,0\n")
    assert main(["validate-run", str(table), "--out", str(tmp_path / "w"), "--quiet"]) == 0
    w = json.loads((tmp_path / "w" / "validation.json").read_text())
    assert w["requests"]["failed_requests"] == ["line 3: error = timeout"]
    assert "1 failed there (left out: line 3: error = timeout)" in (tmp_path / "w" / "report.md").read_text()


def test_per_request_errors_need_the_requests_sent_when_they_were(tmp_path):
    """Without recorded send times the replay draws its arrivals from the stated rate, so request i
    reaches the simulated server at another time than it reached vLLM: its 'per request (the same
    request in both)' error mixed two different queues. It is given only where the arrivals are the
    benchmark's (recorded send times, or all at once) and report.md says why it is not otherwise."""
    raw = json.loads(DETAILED.read_text())
    for k in ("start_times", "latencies", "queue_times"):
        raw.pop(k)
    for rate, paired in ((4.0, False), ("inf", True)):
        raw.update(request_rate=rate)
        p = tmp_path / f"r{rate}.json"
        p.write_text(json.dumps(raw))
        out = tmp_path / f"v{rate}"
        assert main(["validate-run", str(p), "--out", str(out), "--quiet"]) == 0
        v = json.loads((out / "validation.json").read_text())
        report = (out / "report.md").read_text()
        if paired:
            assert v["paired_median_abs_error"]["ttft"] is not None and "per request (the same request" in report
        else:
            assert v["paired_median_abs_error"] == {"ttft": None, "e2e": None}
            assert "per request: not compared (the arrivals are drawn from the stated rate" in report


def _table(tmp_path, header, rows):
    p = tmp_path / "t.csv"
    p.write_text(header + "\n" + "\n".join(rows) + "\n")
    return p


MS_ROWS = [f"{k * 0.5},{100 + k},{50 + k},{80 + k},{1500 + 30 * k}" for k in range(8)]  # ttft/e2e in ms


def test_unitless_latencies_that_only_make_sense_as_milliseconds_are_refused_naming_them(tmp_path, capsys):
    """A table's ttft and e2e columns with no unit in their names are read as seconds: millisecond
    values were replayed against TTFTs of 80 s and 30 s per output token, a comparison 1000x off with
    no word but 'no unit in its name' in the report. Now refused, naming the columns and how to say
    the unit; --time-unit s (seconds stated) still reads them as seconds."""
    p = _table(tmp_path, "timestamp,prompt_tokens,output_tokens,ttft,e2e", MS_ROWS)
    assert main(["validate-run", str(p), "--out", str(tmp_path / "v"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "ttft, e2e" in err and "no unit in" in err and "ttft_ms" in err and "--time-unit" in err, err
    assert "per output token" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "v").exists()
    assert main(["validate-run", str(p), "--out", str(tmp_path / "w"), "--quiet", "--time-unit", "s"]) == 0


def test_unitless_latencies_in_seconds_are_read_as_before(tmp_path):
    rows = [f"{k * 0.5},{100 + k},{50 + k},{0.08 + k / 1e3},{1.5 + 0.03 * k}" for k in range(8)]
    p = _table(tmp_path, "timestamp,prompt_tokens,output_tokens,ttft,e2e", rows)
    assert main(["validate-run", str(p), "--out", str(tmp_path / "v"), "--quiet"]) == 0
    v = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert v["metrics"]["ttft"]["mean"]["measured_s"] == pytest.approx(0.0835)


def test_a_unitless_ttft_beside_a_millisecond_e2e_says_the_unit_is_the_cause(tmp_path, capsys):
    p = _table(tmp_path, "sent_s,prompt_tokens,output_tokens,ttft,e2e_ms", ["0,10,5,80,900"])
    assert main(["validate-run", str(p), "--out", str(tmp_path / "v"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "shorter than ttft" in err and "ttft has no unit in its name" in err, err


def test_a_table_row_with_no_first_token_or_no_output_is_failed_as_in_a_vllm_result(tmp_path):
    """A vLLM result marks a request of TTFT 0 (or no output) failed; a table's row of TTFT 0 was
    replayed as a success (and one of 0 output tokens refused the whole table)."""
    from servesim.inputs.request_log import read_request_log

    p = _table(tmp_path, "sent_s,prompt_tokens,output_tokens,ttft_s,e2e_s",
               ["0,10,5,0.02,0.09", "0.5,12,4,0,0", "1,12,0,0.03,0.03", "1.5,12,4,0.025,0.08"])
    res = read_request_log(str(p))
    assert res.ok.tolist() == [True, False, False, True]
    assert res.failures == ("line 3: no first token (TTFT 0)", "line 4: no output (output_tokens = 0)")


def test_an_earlier_runs_replay_file_of_the_other_kind_is_removed(tmp_path):
    """A table with prompt_id replays through replay.jsonl, one without through replay.csv: validating
    both into one --out left the first run's file beside the second's report, which names only its own."""
    rows = [f"{i * 0.5},{100 + i},20,0.05,0.3,q{i % 2}" for i in range(6)]
    with_ids = _table(tmp_path, "sent_s,prompt_tokens,output_tokens,ttft_s,e2e_s,prompt_id", rows)
    out = tmp_path / "v"
    assert main(["validate-run", str(with_ids), "--out", str(out), "--quiet"]) == 0
    assert (out / "replay.jsonl").is_file() and not (out / "replay.csv").exists()
    plain = tmp_path / "p.csv"
    plain.write_text("sent_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n"
                     + "\n".join(r.rsplit(",", 1)[0] for r in rows) + "\n")
    assert main(["validate-run", str(plain), "--out", str(out), "--quiet"]) == 0
    assert (out / "replay.csv").is_file() and not (out / "replay.jsonl").exists()
    assert main(["validate-run", str(with_ids), "--out", str(out), "--quiet"]) == 0
    assert (out / "replay.jsonl").is_file() and not (out / "replay.csv").exists()


def _flood(tmp_path, n, rate, prompt, output):
    rng = np.random.default_rng(0)
    sent = np.cumsum(rng.exponential(1 / rate, n))
    return _table(tmp_path, "sent_s,prompt_tokens,output_tokens,ttft_s,e2e_s",
                  [f"{t:.4f},{prompt(k)},{output(k)},0.1,1.0" for k, t in enumerate(sent)])


def test_a_replay_the_simulated_deployment_falls_behind_is_said_so_worded_by_the_keep_up_rule(tmp_path, capsys):
    # a benchmark at 20 req/s replayed on a deployment that serves 8 at a time: the simulated
    # queue grows through the replay (TTFT errors of +10,000%) and validate-run said nothing of it
    table = _flood(tmp_path, 300, 20.0, lambda k: 1000, lambda k: 100)
    out = tmp_path / "v"
    assert main(["validate-run", str(table), "--out", str(out), "--quiet", "--set", "policy.max_num_seqs=8"]) == 0
    text = capsys.readouterr().out
    keep = json.loads((out / "run" / "summary.json").read_text())["workload"]["keep_up"]
    assert keep["ratio"] + keep["warmup"] < 0.9  # (the rule's own verdict: long enough to tell)
    said = f"the simulated deployment fell behind the benchmark's rate: over the second half of the benchmark's " \
           f"arrivals the simulated requests left at {keep['ratio']:.0%}"
    assert "warning: " + said in text
    assert said in (out / "report.md").read_text()
    assert any(w.startswith(said) for w in json.loads((out / "validation.json").read_text())["warnings"])
    assert "lower the rate" not in text and "too short to tell" not in text


def test_a_replay_too_short_to_tell_whether_it_keeps_up_says_only_that(tmp_path, capsys):
    # 300 requests arriving over 5 s, each served in longer than the second half of them lasts:
    # the rule's too_short (ratio + warm-up shortfall >= 0.9), so no verdict of a growing queue
    table = _flood(tmp_path, 300, 60.0, lambda k: 500 + 7 * k, lambda k: 200 + 2 * k)
    out = tmp_path / "v"
    assert main(["validate-run", str(table), "--out", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    keep = json.loads((out / "run" / "summary.json").read_text())["workload"]["keep_up"]
    assert keep["ratio"] < 0.9 <= keep["ratio"] + keep["warmup"]
    assert "the replay is too short to tell whether the simulated deployment keeps up" in text
    assert "fell behind" not in text


def test_a_result_of_another_model_is_said_on_the_terminal(tmp_path, capsys):
    """A 70B benchmark replayed on the default scenario (Llama-3-8B) printed its errors with no word
    of the other model: only report.md noted it. The terminal says it too. A catalog alias (the
    Instruct variant, priced as its base) is the same model: report.md noted it as another."""
    from servesim.studies.validate_run import other_model

    raw = json.loads(CONCURRENCY.read_text())
    raw["model_id"] = "meta-llama/Llama-2-70b-hf"
    res = tmp_path / "r.json"
    res.write_text(json.dumps(raw))
    out = tmp_path / "v"
    assert main(["validate-run", str(res), "--out", str(out), "--quiet"]) == 0
    assert ("note: the benchmark ran meta-llama/Llama-2-70b-hf (its model_id), the scenario simulates "
            "meta-llama/Meta-Llama-3-8B: check the scenario's model") in capsys.readouterr().out
    assert "**Note:** the benchmark ran `meta-llama/Llama-2-70b-hf`" in (out / "report.md").read_text()
    model = "meta-llama/Meta-Llama-3-8B"
    for mid, other in [("meta-llama/Meta-Llama-3-8B-Instruct", False), (model, False), (None, False), ("", False),
                       ("/models/Meta-Llama-3-8B/", False), ("mistralai/Mixtral-8x7B-v0.1", True)]:
        assert other_model({"result_model_id": mid, "model": model}) == other, mid


def test_a_request_with_more_itls_than_output_tokens_minus_one_is_warned_of(tmp_path, capsys):
    """n output tokens have at most n - 1 gaps: a request whose itls list is longer was replayed
    without a word, its extra gaps counted as ITL samples. The warning names the request's index
    in the file and both counts; a file whose lists agree has none."""
    raw = json.loads(DETAILED.read_text())
    ok = [i for i, e in enumerate(raw["errors"]) if not e and raw["output_lens"][i] > 1]
    i, j = ok[3], ok[7]
    for k, extra in ((i, 2), (j, 5)):
        raw["itls"][k] = raw["itls"][k] + [0.001] * (raw["output_lens"][k] - 1 - len(raw["itls"][k]) + extra)
    res = tmp_path / "r.json"
    res.write_text(json.dumps(raw))
    assert main(["validate-run", str(res), "--out", str(tmp_path / "v"), "--quiet"]) == 0
    n = raw["output_lens"][i]
    said = (f"warning: 2 of 23 replayed requests have more itls entries than output tokens minus one: request {i} "
            f"has {n + 1} (itls[{i}]) but {n} output tokens (output_lens[{i}]), which have at most {n - 1} gaps")
    assert said in capsys.readouterr().out
    warned = json.loads((tmp_path / "v" / "validation.json").read_text())["warnings"]
    assert any(w.startswith(said[len("warning: "):]) for w in warned)
    assert main(["validate-run", str(DETAILED), "--out", str(tmp_path / "w"), "--quiet"]) == 0
    assert "itls entries" not in capsys.readouterr().out
