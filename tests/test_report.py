"""servesim report (figures + report.md with generated sentences) and the Chrome/Perfetto trace."""

import copy
import csv
import json
import math
import re

import numpy as np
import pytest
import yaml

from servesim.cli.main import main
from servesim.inputs.scenario import scenario_from_dict
from servesim.simulation import simulate
from servesim.studies.points import make_points
from servesim.studies.sweep import execute
from servesim.outputs.rundir import read_results
from servesim.outputs.trace_export import chrome_trace
from servesim.inputs.overrides import with_values
from tests.conftest import BASE, make_scenario

FIGS = ("latency_vs_load", "goodput_vs_load", "throughput_latency", "latency_cdfs", "ttft_breakdown", "timeline",
        "roofline")


@pytest.fixture(scope="module")
def compare_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("cmp")
    base = copy.deepcopy(BASE)
    base["workload"]["num_requests"] = 40
    base["slo"] = {"ttft_s": 0.3, "tpot_s": 0.05}
    variants = [({"label": lbl, "workload.arrival.rate_rps": r},
                 {"policy.max_num_seqs": seqs, "workload.arrival.rate_rps": r})
                for lbl, seqs in (("continuous", 64), ("small", 2)) for r in (2, 8)]
    points = make_points(base, variants)
    execute(points, out, "local", 1, progress=False)
    (out / "sweep.json").write_text(json.dumps({"kind": "compare", "scenario": "test"}))
    return out, points


def test_report_on_a_comparison(compare_dir, capsys):
    out, points = compare_dir
    assert main(["report", str(out)]) == 0
    md = (out / "report.md").read_text()
    for name in FIGS:
        assert f"(figures/{name}.png)" in md
        assert (out / "figures" / f"{name}.png").stat().st_size > 0
        assert (out / "figures" / f"{name}.svg").stat().st_size > 0
    # the table has one row per point, and the sentences carry the numbers
    assert md.count("| ok |") == 4
    small8 = next(p for p in points if p.values == {"label": "small", "workload.arrival.rate_rps": 8})
    cont8 = next(p for p in points if p.values == {"label": "continuous", "workload.arrival.rate_rps": 8})
    assert small8.row["ttft_p99_s"] > cont8.row["ttft_p99_s"]
    assert f"from {small8.row['ttft_p99_s'] * 1e3:.0f} ms" in md or "continuous has the lowest p99 TTFT" in md
    assert "at 8 req/s" in md  # per-run figures drawn at the highest common rate
    assert re.search(r"p99 TTFT stays within the 300 ms SLO for continuous", md)
    # one sentence per figure: the paragraph after each image is non-empty and has a number in it
    paras = md.split("![")[1:]
    assert len(paras) == len(FIGS)
    for p in paras:
        sentence = p.split("\n\n")[1]
        assert re.search(r"\d", sentence), sentence


def test_report_on_a_run_folder(tmp_path):
    out = tmp_path / "run"
    simulate(make_scenario()).write(out)
    assert main(["report", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "latency_cdfs.png" in md and "roofline.png" in md and "latency_vs_load" not in md


@pytest.mark.parametrize("kw, shape", [
    ({}, ""),
    ({"hardware.tp": 2}, "TP2"),
    ({"cluster.replicas": 2}, "2 replicas x TP1"),
    ({"cluster.replicas": 2, "hardware.tp": 2, "hardware.pp": 2}, "2 replicas x TP2 PP2"),
    ({"policy.name": "pd_split", "policy.prefill": {"tp": 2}, "policy.decode": {"replicas": 2}},
     "P/D: 1 x TP2 prefill + 2 x TP1 decode"),
    ({"policy.name": "pd_split", "policy.prefill": {"tp": 2}, "policy.decode": {"replicas": 2, "gpu": "a100-80g"}},
     "P/D: 1 x h100-sxm TP2 prefill + 2 x a100-80g TP1 decode"),
])
def test_titles_say_how_the_gpus_are_split(tmp_path, capsys, kw, shape):
    """TP2 on one replica and two replicas of TP1 were both "on 2 x h100-sxm"; a P/D split whose
    decode pool ran on A100s was "on 4 x h100-sxm", and validate said "on 1 x 1 h100-sxm" of any
    P/D split (its first pool's replicas) with one pool's KV."""
    from servesim.outputs.rundir import deployment_shape

    sc = make_scenario(**kw)
    assert deployment_shape(sc.to_dict()) == shape
    out = tmp_path / "run"
    res = simulate(make_scenario(**kw, **{"workload.num_requests": 20}))
    res.write(out)
    assert main(["report", str(out)]) == 0
    line = (out / "report.md").read_text().splitlines()[2]
    gpus = res.summary["economics"]["gpus"]
    where = f"on {gpus} GPUs" if "a100" in shape else f"on {gpus} x h100-sxm"
    assert where + (f" ({shape})" if shape else "") + ", policy" in line
    capsys.readouterr()
    assert main(["validate", str(out / "scenario.yaml")]) == 0
    said = capsys.readouterr().out.splitlines()[0]
    assert where + (f" ({shape})" if shape else "") + ", policy" in said
    assert said.count("blocks = ") == (2 if "P/D" in shape else 1)


def test_titles_name_every_model_and_gpu_a_sweep_ran(tmp_path, capsys):
    """A sweep over model and hardware.gpu titled every figure and report.md's first line with the
    scenario's own ("Llama-2-7b-hf on 1 x h100-sxm each") over runs of another model on A100s too."""
    base = copy.deepcopy(BASE)
    base["model"] = "meta-llama/Llama-2-7b-hf"
    base["workload"]["num_requests"] = 20
    grid = [({"model": m, "hardware.gpu": g}, {"model": m, "hardware.gpu": g})
            for m, g in (("meta-llama/Llama-2-7b-hf", "h100-sxm"), ("meta-llama/Llama-2-13b-hf", "a100-80g"))]
    out = tmp_path / "sw"
    execute(make_points(base, grid), out, "local", 1, progress=False)
    (out / "sweep.json").write_text(json.dumps({"kind": "sweep", "scenario": "s.yaml"}))
    assert main(["report", str(out), "--quiet"]) == 0
    md = (out / "report.md").read_text()
    titles = [line for line in md.splitlines() if line.startswith("![")]
    assert titles and "(Llama-2-7b-hf, Llama-2-13b-hf on h100-sxm, a100-80g)" in md.splitlines()[2]
    for t in titles:
        assert "Llama-2-7b-hf, Llama-2-13b-hf on 1 GPU each (h100-sxm, a100-80g)" in t, t


def test_a_run_folder_over_seeds_reports_its_figures_with_their_intervals(tmp_path, capsys):
    """`servesim run --seeds 3` then `servesim report`: the verdict gave the first seed's goodput
    ("Goodput 7.09 req/s") as the run's, with no interval and no word of the other seeds, where
    the printed summary and summary.json give the mean and 95% interval over them."""
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump({**BASE, "workload": {**BASE["workload"], "num_requests": 20}}))
    out = tmp_path / "r"
    assert main(["run", str(sc), "--seeds", "3", "--quiet", "--out", str(out), "--workers", "1"]) == 0
    assert main(["report", str(out), "--quiet"]) == 0
    f = json.loads((out / "summary.json").read_text())["seeds"]["figures"]
    verdict = (out / "report.md").read_text().split("## Verdict", 1)[1].split("##", 1)[0]
    assert "Over 3 seeds (0..2; mean and 95% Student-t interval): goodput " in verdict
    assert f"{f['ttft_s.p99']['mean'] * 1e3:.0f}"[:1] in verdict.split("p99 TTFT ", 1)[1][:1]
    assert "the figures after this are seed 0's" in verdict
    # one seed: as before
    one = tmp_path / "one"
    assert main(["run", str(sc), "--quiet", "--out", str(one)]) == 0
    assert main(["report", str(one), "--quiet"]) == 0
    assert "Over " not in (one / "report.md").read_text()


def test_report_bad_folder_exits_2(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "neither summary.json" in capsys.readouterr().err
    # a capacity search stopped before its answer (interrupted, or a probe refused) keeps its
    # probes so far in results-seed<k>.csv: say so, not 'neither summary.json nor results.csv'
    (tmp_path / "results-seed0.csv").write_text("index,status\n")
    assert main(["report", str(tmp_path)]) == 2
    assert "holds a capacity search that stopped before its answer (results-seed0.csv" in capsys.readouterr().err


def test_report_on_a_results_csv_with_only_its_header_names_the_file(tmp_path, capsys):
    """A sweep's results.csv cut to its header (sweep.json lists its points) was reported as
    '0 points, 0 ran' with exit 0: it is an error naming the file, the points listed and the fix."""
    (tmp_path / "sweep.json").write_text(json.dumps({"kind": "sweep", "scenario": "s.yaml", "points": 2}))
    (tmp_path / "results.csv").write_text("point,workload.arrival.rate_rps,status,error,hash,dir\n")
    assert main(["report", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'results.csv'} has its header but no row while {tmp_path / 'sweep.json'} lists 2 " in err
    assert "run the same servesim sweep command again" in err and "Traceback" not in err
    assert not (tmp_path / "report.md").exists()


@pytest.mark.parametrize("marker,report,command", [("lessons.json", "lessons.md", "lessons"),
                                                    ("reproduce.json", "reproduce.md", "reproduce"),
                                                    ("validation.json", "report.md", "validate-run")])
def test_report_on_a_folder_with_its_own_report_names_it(tmp_path, capsys, marker, report, command):
    """The folder of lessons, reproduce or validate-run was told it had 'neither summary.json (a
    run) nor results.csv': it says which command wrote it and where its report already is."""
    (tmp_path / marker).write_text("{}")
    assert main(["report", str(tmp_path)]) == 2
    assert (f"{tmp_path} holds the output of servesim {command}, which has its report already: "
            f"{tmp_path / report}") in capsys.readouterr().err


def test_report_on_a_study_stopped_before_its_results_says_so(tmp_path, capsys, monkeypatch):
    """A sweep over seeds keeps its runs in seeds.csv and writes results.csv at its end: stopped
    before (Ctrl-C, a kill), its folder has sweep.json, seeds.csv and runs/. The report said it had
    'neither summary.json (a run) nor results.csv (a sweep, capacity or compare folder)'; it says
    the sweep stopped and that the same command resumes it."""
    from tests.conftest import interrupt_run_point

    interrupt_run_point(monkeypatch, 3)
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump({**copy.deepcopy(BASE), "workload": {**BASE["workload"], "num_requests": 10}}))
    out = tmp_path / "sw"
    assert main(["sweep", str(sc), "--grid", "workload.arrival.rate_rps=2,4", "--seeds", "2", "--out", str(out),
                 "--workers", "1", "--quiet"]) == 130
    assert not (out / "results.csv").exists() and (out / "seeds.csv").is_file()
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    assert (f"{out} holds a sweep that stopped before its results.csv (seeds.csv has its runs so far); run the same "
            "servesim sweep command again to resume it") in capsys.readouterr().err


def test_report_on_an_interrupted_comparison_says_what_is_left_to_run(tmp_path, capsys, monkeypatch):
    """A comparison stopped part-way keeps results.csv with its unrun rows pending (empty error):
    the report said of each 'did not run (None)' and 'did not run: None'. It says the study stopped
    before them and that the same command runs them."""
    from tests.conftest import interrupt_run_point

    interrupt_run_point(monkeypatch, 2)
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump({**copy.deepcopy(BASE), "workload": {**BASE["workload"], "num_requests": 10}}))
    out = tmp_path / "cmp"
    assert main(["compare", str(sc), "--policies", "continuous,static", "--out", str(out), "--workers", "1",
                 "--quiet"]) == 130
    assert [r["status"] for r in read_results(out / "results.csv")] == ["ok", "pending"]
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "None" not in md
    assert "- static: did not run (the study stopped before it; the same command runs it)" in md
    assert "- static did not run: the study stopped before it; the same command runs it" in md


@pytest.mark.parametrize("name,body,message", [
    ("summary.json", "{bad", "malformed JSON"),
    ("summary.json", "[]", "must be a JSON object"),
    ("summary.json", '{"scenario": "x", "num_requests": 3}', "no completed"),
    # the files summary.json lists, with their size and digest (a run folder is checked whole)
    ("requests.csv", "", "damaged"),
    ("requests.csv", "a,b\n1,2\n", "damaged"),
    ("steps.csv", None, "missing"),
    ("scenario.yaml", "{", "damaged"),
])
def test_report_on_a_damaged_run_folder_names_the_file(tmp_path, capsys, name, body, message):
    """Found by fuzzing: a run folder whose files are damaged or not servesim's is an input error
    naming the file (exit 2), not a traceback."""
    out = tmp_path / "run"
    simulate(make_scenario(**{"workload.num_requests": 10})).write(out)
    if body is None:
        (out / name).unlink()
    else:
        (out / name).write_text(body)
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert name in err and message in err and "Traceback" not in err


@pytest.mark.parametrize("edit,message", [
    (lambda s: s.pop("files"), "summary.json: no 'files'"),
    # (the rows, bytes and digest edited to match a cut requests.csv: its rows still are not num_requests)
    (lambda s: s["files"]["requests.csv"].update(rows=7), "files.requests.csv.rows is 7 where its num_requests is 20"),
])
def test_a_summary_edited_to_vouch_for_cut_tables_is_not_trusted(tmp_path, capsys, edit, message):
    """A summary.json without 'files' passed unchecked (taken for a folder written before runs listed
    their files): with requests.csv cut to 7 of its 20 rows, the report said 'all 20 requests within
    the SLO' over figures of 7, exit 0, and a sweep's resume kept the point."""
    out = tmp_path / "run"
    simulate(make_scenario(**{"workload.num_requests": 20})).write(out)
    lines = (out / "requests.csv").read_text().splitlines(keepends=True)
    (out / "requests.csv").write_text("".join(lines[:8]))
    summary = json.loads((out / "summary.json").read_text())
    edit(summary)
    if "files" in summary:  # (the size and digest of the cut file, as a careful edit would write them)
        from servesim.outputs.writer import file_digest

        summary["files"]["requests.csv"].update(bytes=(out / "requests.csv").stat().st_size,
                                                sha256=file_digest(out / "requests.csv"))
    (out / "summary.json").write_text(json.dumps(summary))
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and "run it again" in err and "Traceback" not in err
    assert not (out / "report.md").exists()


def test_a_report_killed_while_written_leaves_the_last_one_whole(tmp_path, monkeypatch):
    """report.md was written in place: a kill mid-write left it cut (its heading and half its
    figures), read as a whole report until the next study removed it. It is written whole or not
    at all; the earlier one stays."""
    from pathlib import Path

    from servesim.plots.report import build_report

    out = tmp_path / "run"
    simulate(make_scenario(**{"workload.num_requests": 10})).write(out)
    before = build_report(out).read_text()
    real = Path.write_text

    def killed(self, text, *a, **k):  # half the report reaches the disk, then the process is stopped
        if "report.md" in self.name:
            real(self, text[: len(text) // 2], *a, **k)
            raise KeyboardInterrupt
        return real(self, text, *a, **k)

    monkeypatch.setattr(Path, "write_text", killed)
    with pytest.raises(KeyboardInterrupt):
        build_report(out)
    monkeypatch.undo()
    assert (out / "report.md").read_text() == before
    assert sorted(f.name for f in out.iterdir() if "report" in f.name) == ["report.md"]


def test_a_run_summary_with_null_figures_still_reports(tmp_path, capsys):
    """Figures read_summary allows to be null (goodput_rps, as a NaN is written) are shown as '-'
    (found by fuzzing: the verdict formatted None and stopped with a TypeError)."""
    out = tmp_path / "run"
    simulate(make_scenario(**{"workload.num_requests": 10})).write(out)
    summary = json.loads((out / "summary.json").read_text())
    summary["goodput_rps"] = summary["slo_attainment"] = None
    (out / "summary.json").write_text(json.dumps(summary))
    assert main(["report", str(out), "--quiet"]) == 0
    assert "Goodput - req/s; has no SLO attainment." in (out / "report.md").read_text()


@pytest.mark.parametrize("key,value,message", [
    ("completed", "x", "completed is 'x', where servesim writes a count"),
    ("preemptions", -1, "a count (an integer >= 0)"), ("rejected", True, "a count"),
    ("throughput_rps", "fast", "a number (or null)"), ("ttft_s", [1, 2], "where servesim writes a mapping;"),
    ("scenario", 7, "a name"),
    # (fuzzing: a sweep's report read a run's utilization = null as a mapping, a TypeError)
    ("utilization", None, "utilization is null, where servesim writes a mapping;"),
    ("phases", None, "phases is null, where servesim writes a mapping;"),
    # (fuzzing: a statistic missing from a latency mapping was a KeyError in a sweep's report)
    ("ttft_s", {}, "ttft_s.mean is missing, where servesim writes a number (or null)"),
    ("tpot_s", {"mean": 1.0, "p50": "x", "p90": 1.0, "p99": 1.0}, "tpot_s.p50 is 'x'"),
    ("utilization", {"mfu": 0.1}, "utilization.mean_batch_size is missing"),
    # sections beyond those every summary has (one was read as a mapping and stopped the report)
    ("workload", "x", "workload is 'x', where servesim writes a mapping"), ("classes", [1], "a mapping"),
    ("warnings", {"a": 1}, "where servesim writes a list"),
    # one level down (tracebacks found by editing every field of a summary, two levels deep)
    ("kv_capacity", {"colocated": "x"}, "kv_capacity.colocated is 'x', where servesim writes a mapping"),
    ("cost", {"colocated": -1}, "cost.colocated is -1"), ("pools", {"colocated": [1]}, "pools.colocated is [1]"),
    ("workload", {"offered_rps": "x"}, "workload.offered_rps is 'x', where servesim writes a rate"),
    ("workload", {"keep_up": 3}, "workload.keep_up is 3"),
    ("profile", {"diagnosis": "x"}, "profile.diagnosis is 'x', where servesim writes a mapping (or null)"),
    ("warnings", [1], "warnings[0] is 1, where servesim writes a mapping with its message"),
    # (three levels deep; null where servesim always writes a mapping or a number)
    ("ttft_s", None, "ttft_s is null, where servesim writes a mapping;"),
    ("sim_time_s", None, "sim_time_s is null, where servesim writes a number of seconds"),
    ("kv_capacity", {"colocated": {"replicas": "x"}}, "kv_capacity.colocated.replicas is 'x', where servesim writes a "
     "count"),
    ("pools", {"colocated": {"mfu": [1]}}, "pools.colocated.mfu is [1], where servesim writes a number (or null)"),
    # (request classes and fairness, found by editing a multi-class run's summary four levels deep)
    ("classes", {"chat": None}, "classes.chat is null, where servesim writes a mapping (one class's figures)"),
    ("classes", {"chat": {"num_requests": None}}, "classes.chat.num_requests is null, where servesim writes a count"),
    ("classes", {"chat": {"slo_attainment": None}}, "classes.chat.slo_attainment is null, where servesim writes a "
     "number"),
    ("classes", {"chat": {"ttft_s": None}}, "classes.chat.ttft_s is null, where servesim writes a mapping"),
    ("classes", {"chat": {"ttft_s": {"p99": "x"}}}, "classes.chat.ttft_s.p99 is 'x'"),
    ("classes", {"chat": {"slo": {"ttft_s": "1s"}}}, "classes.chat.slo.ttft_s is '1s', where servesim writes a limit"),
    ("fairness", {"jain": {"classes": {"slo_attainment": "x"}}}, "fairness.jain.classes.slo_attainment is 'x'"),
    ("fairness", {"tenants": {"app": [1]}}, "fairness.tenants.app is [1]"),
    ("fairness", {"jain": "x"}, "fairness.jain is 'x', where servesim writes a mapping (or null)"),
    # (values of the right type that no run has: the report stated them, "0 requests" of a run of 10,
    # -100% of requests within the SLO, NaN figures servesim never writes)
    ("num_requests", 0, "completed + rejected + unfinished is 10 requests, where servesim writes num_requests (0)"),
    ("completed", 3, "completed + rejected + unfinished is 3 requests, where servesim writes num_requests (10)"),
    ("slo_attainment", -1, "slo_attainment is -1, where servesim writes a share between 0 and 1 (or null)"),
    ("slo_attainment", 1.5, "slo_attainment is 1.5, where servesim writes a share between 0 and 1"),
    ("goodput_rps", -2.0, "goodput_rps is -2.0, where servesim writes a rate >= 0 (or null)"),
    ("throughput_rps", math.nan, "throughput_rps is nan, where servesim writes a number (or null)"),
    ("ttft_s", {"mean": 1.0, "p50": math.inf, "p90": 1.0, "p99": 1.0}, "ttft_s.p50 is inf"),
])
def test_an_edited_summary_is_named_not_shown(tmp_path, capsys, key, value, message):
    """A summary.json edited to hold a string where a count belongs was shown as it was (the
    report's table read completed = x, exit 0): its keys' types are checked when it is read."""
    out = tmp_path / "run"
    simulate(make_scenario(**{"workload.num_requests": 10})).write(out)
    summary = json.loads((out / "summary.json").read_text())
    summary[key] = value
    (out / "summary.json").write_text(json.dumps(summary))
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert "summary.json" in err and message in err and "Traceback" not in err


def test_report_on_a_damaged_sweep_folder_names_the_file(tmp_path, capsys):
    out = tmp_path / "sw"
    base = copy.deepcopy(BASE)
    base["workload"]["num_requests"] = 10
    execute(make_points(base, [({"label": "a"}, {}), ({"label": "b"}, {"seed": 1})]), out, "local", 1, progress=False)
    (out / "results.csv").write_text("a\n1\n")
    assert main(["report", str(out)]) == 2
    assert "results.csv: missing column(s) point, status, hash, dir" in capsys.readouterr().err


@pytest.mark.parametrize("column, value, says", [
    ("goodput_rps", "abc", "line 2: column goodput_rps is 'abc', where servesim writes a number (or an empty cell)"),
    ("ttft_p99_s", "True", "line 2: column ttft_p99_s is 'True', where servesim writes a number"),
    ("slo_attainment", "x", "line 2: column slo_attainment is 'x', where servesim writes a number"),
    ("workload.arrival.rate_rps", "", "line 2: column workload.arrival.rate_rps is empty, where servesim writes a "
                                      "number where the run is ok;"),
    ("dir", "-1", "line 2: column dir is -1, where servesim writes text"),
])
def test_an_edited_results_csv_cell_is_named(tmp_path, capsys, column, value, says):
    """A cell of results.csv holding text where servesim writes a figure (or a number where it
    writes the run's folder) reached the report's arithmetic: a TypeError or ValueError traceback
    (found by editing each column of a sweep's, comparison's and capacity search's results.csv)."""
    out = tmp_path / "sw"
    base = copy.deepcopy(BASE)
    base["workload"]["num_requests"] = 10
    rate = "workload.arrival.rate_rps"
    execute(make_points(base, [({rate: r}, {rate: r}) for r in (2.0, 4.0)]), out, "local", 1, progress=False)
    rows = list(csv.reader((out / "results.csv").open(newline="")))
    rows[1][rows[0].index(column)] = value
    with (out / "results.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    assert main(["report", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "results.csv " + says in err and "damaged (edited)" in err and "Traceback" not in err, err


@pytest.mark.parametrize("field, value, want", [
    ("seeds", "x", "a count of seeds"), ("seeds", 0, "a count of seeds"), ("kind", "sweeps", "one of sweep, compare"),
    ("notes", "see me", "a list of texts"), ("slo", 1.0, "the SLO as --slo gives it"),
    ("scenario", ["a"], "the scenario's name or path")])
def test_report_on_an_edited_sweep_json_names_the_field(tmp_path, capsys, field, value, want):
    """An edited sweep.json is named field by field (seeds: "x" was a ValueError traceback; found by
    a fuzzer corrupting output folders)."""
    out = tmp_path / "sw"
    base = copy.deepcopy(BASE)
    base["workload"]["num_requests"] = 10
    execute(make_points(base, [({"label": "a"}, {}), ({"label": "b"}, {"seed": 1})]), out, "local", 1, progress=False)
    (out / "sweep.json").write_text(json.dumps({"kind": "compare", "scenario": "test", field: value}))
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"sweep.json: {field} is " in err and want in err and "damaged" in err and "Traceback" not in err
    # as servesim writes it (a capacity search without fixed seeds writes null), it is read
    (out / "sweep.json").write_text(json.dumps({"kind": "compare", "scenario": "test", "seeds": None, "notes": []}))
    assert main(["report", str(out), "--quiet"]) == 0
    # a null scenario (its reader takes it) headed the report "A compare of `None`"
    (out / "sweep.json").write_text(json.dumps({"kind": "compare", "scenario": None, "notes": []}))
    assert main(["report", str(out), "--quiet"]) == 0
    head = (out / "report.md").read_text().splitlines()[2]
    assert head.startswith("A compare of a scenario sweep.json does not name (") and "None" not in head


def test_a_sweep_point_that_failed_on_a_rate_that_is_no_number_is_reported(tmp_path, capsys):
    """--grid rate_rps=1,abc: the bad point is a row with status=error (the sweep goes on), and the
    report puts it after the numeric rates, by its text, instead of stopping with a TypeError
    while sorting rates (found by fuzzing sweep grids). An integer beyond a float's range reads as
    inf, as 1e400 does (sorting it once stopped with an OverflowError)."""
    path = tmp_path / "s.yaml"
    base = copy.deepcopy(BASE)
    base["workload"]["num_requests"] = 10
    path.write_text(yaml.safe_dump(base))
    out = tmp_path / "sw"
    huge = "1" + "0" * 400
    assert main(["sweep", str(path), "--grid", f"workload.arrival.rate_rps=abc,2,{huge},1", "--out", str(out),
                 "--workers", "1", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert (text.index("At 1 req/s") < text.index("At 2 req/s") < text.index("At inf req/s")
            < text.index("At rate 'abc'"))
    assert "rate_rps=abc did not run: workload.arrival.rate_rps must be a number" in text


def test_a_results_row_cut_short_is_named_by_its_line(tmp_path, capsys):
    """A results.csv row with fewer (or more) cells than its header: exit 2 naming the file and
    line (a cut row once reached int(None) in read_results and stopped with a TypeError)."""
    out = tmp_path / "sw"
    base = copy.deepcopy(BASE)
    base["workload"]["num_requests"] = 10
    execute(make_points(base, [({"label": "a"}, {}), ({"label": "b"}, {"seed": 1})]), out, "local", 1, progress=False)
    lines = (out / "results.csv").read_text().splitlines()
    for bad, cells in ((lines[2].rsplit(",", 3)[0], len(lines[0].split(",")) - 3), (lines[2] + ",9", None)):
        (out / "results.csv").write_text("\n".join(lines[:2] + [bad]) + "\n")
        assert main(["report", str(out)]) == 2
        err = capsys.readouterr().err
        n = len(lines[0].split(","))
        assert f"results.csv: line 3 has {cells if cells is not None else n + 1} cells, the header {n}" in err, err


def test_a_run_folder_removed_since_is_said_and_its_twin_drawn(tmp_path, monkeypatch):
    """Two configurations with exactly the same results are drawn once, under the first; when the
    first's run folder has lost its summary.json, the second is drawn (the report once had no
    group left to draw and stopped in matplotlib) and the caveats say which run is missing."""
    drawn = _captured_figures(monkeypatch)
    out = tmp_path / "cmp"
    base = copy.deepcopy(BASE)
    base["workload"]["num_requests"] = 20
    execute(make_points(base, [({"label": "a"}, {}), ({"label": "b"}, {"policy.watermark": 0.011})]), out, "local",
            1, progress=False)
    (out / "sweep.json").write_text(json.dumps({"kind": "compare", "scenario": "test"}))
    rows = read_results(out / "results.csv")
    assert rows[0]["goodput_rps"] == rows[1]["goodput_rps"]  # (the twins: identical results)
    (out / rows[0]["dir"] / "summary.json").unlink()
    assert main(["report", str(out), "--quiet"]) == 0
    md = (out / "report.md").read_text()
    assert f"a: {rows[0]['dir']} has no summary.json, so that run is left out of the per-run figures" in md
    assert "timeline" in drawn


def test_a_damaged_summary_in_a_study_folder_is_named(tmp_path, capsys):
    """The service-per-class section read each run's summary.json with a bare json.loads: a damaged
    one stopped the report with a JSONDecodeError; it is read as every summary is (file named)."""
    out = tmp_path / "sw"
    base = copy.deepcopy(BASE)
    base["workload"]["num_requests"] = 10
    rate = "workload.arrival.rate_rps"
    execute(make_points(base, [({rate: r}, {rate: r}) for r in (2.0, 8.0)]), out, "local", 1, progress=False)
    rows = read_results(out / "results.csv")
    f = out / rows[0]["dir"] / "summary.json"  # (not the run whose figures are drawn: the highest rate's)
    f.write_text(f.read_text()[:-40])
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{f} line" in err and "malformed JSON" in err and "Traceback" not in err, err


def expected_events(res, replicas):
    r = res.requests
    n = 3 * replicas + len(res.steps["start_s"])
    for st, sch, first, fin, xfer in zip(r["status"], r["scheduled_s"], r["first_token_s"], r["finish_s"],
                                         r["kv_transfer_s"]):
        if st == "rejected":
            n += 1
            continue
        # queued from arrival (to the end of the run if never scheduled), prefill once scheduled,
        # kv_transfer once handed off (P/D), decode once the first token is out (unless the only one)
        landed = first + (0 if np.isnan(xfer) else xfer)
        phases = (1 + (not np.isnan(sch)) + (not np.isnan(xfer))
                  + (not np.isnan(first) and (np.isnan(fin) or fin > landed)))
        n += 2 * (1 + phases)
    return n


def test_chrome_trace_parses_with_the_expected_events(tmp_path):
    sc = make_scenario(**{"cluster.replicas": 2, "workload.num_requests": 30})
    trace_file = tmp_path / "t.json"
    argv_yaml = tmp_path / "s.yaml"
    argv_yaml.write_text(yaml.safe_dump(sc.to_dict()))
    assert main(["run", str(argv_yaml), "--out", str(tmp_path / "o"), "--quiet",
                 "--trace-events", str(trace_file)]) == 0
    trace = json.loads(trace_file.read_text())
    ev = trace["traceEvents"]
    res = simulate(sc)
    assert len(ev) == expected_events(res, 2)
    # all requests completed with > 1 output token or 1: 3 metadata x 2 replicas + steps + 2 x (1 + phases)
    steps = [e for e in ev if e["ph"] == "X"]
    assert len(steps) == len(res.steps["start_s"])
    assert {e["name"] for e in steps} <= {"prefill", "decode", "mixed"}
    assert {e["pid"] for e in steps} == {1, 2}
    s0 = steps[0]
    assert s0["ts"] == pytest.approx(res.steps["start_s"][0] * 1e6) and s0["args"]["bound"] in ("compute", "memory")
    # async begin/end pairs balance per request and phase; ends never precede begins
    opened = {}
    for e in ev:
        if e["ph"] in ("b", "e"):
            key = (e["id"], e["name"])
            if e["ph"] == "b":
                opened[key] = e["ts"]
            else:
                assert e["ts"] >= opened.pop(key)
    assert not opened
    names = {e["name"] for e in ev if e["ph"] == "b"}
    assert {"queued", "prefill", "decode", "request 0"} <= names


def test_trace_of_rejected_and_unfinished_requests():
    d = copy.deepcopy(BASE)
    d["workload"] = {"duration_s": 3.0, "arrival": {"process": "poisson", "rate_rps": 20.0},
                     "prompt_tokens": {"dist": "uniform", "min": 16, "max": 512},
                     "output_tokens": {"dist": "fixed", "value": 400}}
    d["memory"] = {"num_gpu_blocks": 30}  # 480 tokens of KV: long requests are rejected
    res = simulate(scenario_from_dict(d))
    st = res.requests["status"]
    assert (st == "rejected").any() and (st == "unfinished").any()
    trace = chrome_trace(res.requests, res.steps, res.summary["sim_time_s"], 1)
    assert len(trace["traceEvents"]) == expected_events(res, 1)
    inst = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    assert len(inst) == (st == "rejected").sum() and all(e["args"]["reason"] for e in inst)
    ends = [e["ts"] for e in trace["traceEvents"] if e["ph"] == "e"]
    assert max(ends) <= res.summary["sim_time_s"] * 1e6 + 1e-3


def pd_results():
    d = copy.deepcopy(BASE)
    d["workload"]["num_requests"] = 30
    d["policy"] = {"name": "pd_split", "prefill": {"replicas": 1}, "decode": {"replicas": 2}}
    return simulate(scenario_from_dict(d))


def test_pd_split_trace_timeline_and_gpus():
    from servesim.outputs.rundir import RunData
    from servesim.studies.points import num_gpus

    res = pd_results()
    r = res.requests
    assert np.isfinite(r["kv_transfer_s"]).any()
    trace = chrome_trace(res.requests, res.steps, res.summary["sim_time_s"])
    ev = trace["traceEvents"]
    assert len(ev) == expected_events(res, 3)  # 1 prefill + 2 decode replicas
    assert sum(e["ph"] == "b" and e["name"] == "kv_transfer" for e in ev) == np.isfinite(r["kv_transfer_s"]).sum()
    assert {e["args"]["decode_replica"] for e in ev
            if e["ph"] == "b" and e.get("args", {}).get("decode_replica")} <= {1, 2}
    rd = RunData.from_results(res)
    assert [p[:3] for p in rd.pools()] == [("prefill", 0, 1), ("decode", 1, 2)]
    dec = rd.timeline_data(1)
    assert dec["pool"] == "decode" and dec["running"].max() > 0 and dec["waiting"].max() == 0
    assert np.nanmax(dec["kv_usage"]) <= 1
    pre = rd.timeline_data(0)
    # on the prefill replica a request runs only until its KV has left, not until it finishes
    handed = r["decode_replica"] >= 0
    # the engine's times: the client-side ones less the API server's
    first, finish = r["first_token_s"] - rd.api_request_s(), r["finish_s"] - r["api_s"]
    assert rd.api_request_s() > 0
    leaves = np.where(handed, first + np.nan_to_num(r["kv_transfer_s"]), finish)
    t = pre["queue_t"][:, None]
    expected = ((r["scheduled_s"] <= t) & (leaves > t)).sum(axis=1)
    assert (pre["running"] == expected).all()
    assert ((r["scheduled_s"] <= t) & (finish > t)).sum() > expected.sum()
    bd = rd.ttft_breakdown()
    assert bd["transfer"] > 0
    assert num_gpus(res.scenario.to_dict()) == 3


def _captured_figures(monkeypatch):
    """Record each saved figure's title, caption, legend entries and panel count."""
    import servesim.plots.figures as F

    seen = {}
    real = F.save

    def save(fig, stem):
        texts = [t.get_text() for t in fig.texts]
        legends = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
        seen[str(stem).rsplit("/", 1)[-1]] = {"title": fig._suptitle.get_text() if fig._suptitle else "",
                                               "texts": texts, "legends": legends, "axes": len(fig.axes),
                                               "size": tuple(fig.get_size_inches())}
        return real(fig, stem)

    monkeypatch.setattr(F, "save", save)
    return seen



def test_a_run_where_no_request_completed_reports_that_without_warnings(tmp_path, monkeypatch):
    """Every request rejected: the figures say there is nothing to show (they drew bare axes with an
    empty legend, matplotlib warning on stderr, and a "TTFT 0.0 ms" bar; the caption had no figure)."""
    import warnings

    import servesim.plots.figures as F

    seen = _captured_figures(monkeypatch)
    drawn = []
    real_cdfs, real_bd = F.latency_cdfs, F.ttft_breakdown
    monkeypatch.setattr(F, "latency_cdfs", lambda *a, **k: drawn.append(real_cdfs(*a, **k)) or drawn[-1])
    monkeypatch.setattr(F, "ttft_breakdown", lambda *a, **k: drawn.append(real_bd(*a, **k)) or drawn[-1])
    out = tmp_path / "run"
    res = simulate(make_scenario(**{"workload.prompt_tokens": {"dist": "fixed", "value": 9000},
                                    "workload.clip_to_context": False, "workload.num_requests": 5}))
    assert res.summary["completed"] == 0 and res.summary["rejected"] == 5
    res.write(out)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["report", str(out), "--quiet"]) == 0
    assert "Mean TTFT: " in (md := (out / "report.md").read_text()) and "no request completed." in md
    assert ": no steps ran." in md and "left of the ridge" not in md  # (it said 0% left of the ridge)
    texts = [t.get_text() for ax in drawn for t in ax.texts]
    assert "no TTFT sample\n(no request completed)" in texts
    assert "no request\ncompleted" in texts and not any(t.startswith("TTFT ") for t in texts)
    assert any("none of the 5 requests completed" in t for t in seen["ttft_breakdown"]["texts"])

def test_compare_report_judges_by_the_slo_and_shows_every_caveat(tmp_path, monkeypatch, capsys):
    """The issue's case, smaller: static fails the SLO, chunked_prefill with the scenario's 8192-token
    budget equals continuous, pd_split on a 2-replica scenario runs as a split of the same GPUs."""
    data = copy.deepcopy(BASE)
    data.update(cluster={"replicas": 2}, slo={"ttft_s": 1.0, "tpot_s": 0.05})
    data["workload"].update(num_requests=300, arrival={"process": "poisson", "rate_rps": 16.0},
                            prompt_tokens={"dist": "lognormal", "mean": 1024, "sigma": 0.8, "max": 6144},
                            output_tokens={"dist": "uniform", "min": 32, "max": 512})
    sc = tmp_path / "chat.yaml"
    sc.write_text(yaml.safe_dump(data))
    seen = _captured_figures(monkeypatch)
    out = tmp_path / "cmp"
    assert main(["compare", str(sc), "--policies", "continuous,chunked_prefill,static,pd_split", "--out", str(out),
                 "--workers", "1"]) == 0
    err = capsys.readouterr().err
    assert "report:" not in err  # (progress is drawn on a terminal only: tests/test_cli.py)
    md = (out / "report.md").read_text()
    rows = {r["label"]: r for r in read_results(out / "results.csv")}
    assert all(r["status"] == "ok" for r in rows.values())
    assert rows["static"]["slo_attainment"] < 0.9 <= rows["continuous"]["slo_attainment"]
    verdict = md.split("## Verdict")[1].split("## Caveats")[0]
    assert "static (2 GPUs): goodput" in verdict and "**fails the SLO" in verdict
    assert verdict.index("continuous") < verdict.index("static")  # ranked by goodput
    assert "chunked_prefill: identical to continuous" in verdict
    # ... said right below the configuration it repeats, not above the ranking
    lines = verdict.split("\n")
    twin = next(i for i, line in enumerate(lines) if re.match(r"\d+\. \**continuous\** \(2 GPUs\): goodput", line))
    assert lines[twin + 1] == "- chunked_prefill: identical to continuous", lines
    caveats = md.split("## Caveats")[1].split("## Summary")[0]
    assert "chunked_prefill gave exactly the same results as continuous" in caveats
    assert "policy.max_num_batched_tokens=8192" in caveats and "runs as a P/D split of the same GPUs" in caveats
    # no sentence credits static with a lower latency without saying it fails the SLO
    for sentence in re.split(r"(?<=\.) ", md.split("## Figures")[1]):
        if re.search(r"static (cuts|has the lowest)", sentence):
            assert "fails the SLO" in sentence, sentence
    # every figure stands alone: model, GPU and rate in the title, GPU counts in the legends,
    # the caveats in the caption, identical configurations drawn once
    for name in ("latency_cdfs", "ttft_breakdown", "timeline", "roofline"):
        f = seen[name]
        assert "Meta-Llama-3-8B" in f["title"] and "h100-sxm" in f["title"] and "16 req/s" in f["title"]
        assert any("chunked_prefill gave exactly the same results" in t for t in f["texts"]), name
    assert "continuous = chunked_prefill (2 GPUs)" in seen["latency_cdfs"]["legends"]
    # static fails the SLO (by TTFT), and its TPOT and ITL CDFs may lie left of the others: its
    # entry says it fails, not only in the verdict above the figures
    cdf_entries = [t.replace("\n", " ") for t in seen["latency_cdfs"]["legends"]]
    assert "static (2 GPUs), fails the SLO" in cdf_entries and "static (2 GPUs)" not in cdf_entries
    assert not any(e.startswith("continuous") and "fails" in e for e in cdf_entries)
    assert seen["timeline"]["axes"] == 4 * 4  # continuous, static, pd_split's prefill and decode pools


def test_a_five_point_sweep_draws_all_five(tmp_path, monkeypatch):
    seen = _captured_figures(monkeypatch)
    base = copy.deepcopy(BASE)
    base["workload"]["num_requests"] = 15
    points = make_points(base, [({"policy.max_num_seqs": n}, {"policy.max_num_seqs": n}) for n in (1, 2, 4, 8, 16)])
    execute(points, tmp_path, "local", 1, progress=False)
    (tmp_path / "sweep.json").write_text(json.dumps({"kind": "sweep", "scenario": "test"}))
    assert main(["report", str(tmp_path), "--quiet"]) == 0
    assert seen["timeline"]["axes"] == 4 * 5 and seen["roofline"]["axes"] == 5
    # side by side in rows of at most 4 (here 3 and 2): one row of eight timelines was 44 inches wide
    assert seen["timeline"]["size"][0] <= 24 and seen["roofline"]["size"][0] <= 24
    md = (tmp_path / "report.md").read_text()
    assert md.count("max_num_seqs=") >= 5 and "not drawn" not in md


def test_run_report_has_the_diagnosis_and_warnings(tmp_path, monkeypatch):
    seen = _captured_figures(monkeypatch)
    out = tmp_path / "run"
    simulate(make_scenario(**{"policy.max_num_batched_tokens": 256, "slo": {"ttft_s": 1.0}})).write(out)
    assert main(["report", str(out), "--quiet"]) == 0
    md = (out / "report.md").read_text()
    assert "Diagnosis: SLO missed by" in md and "## Caveats" in md and "were rejected" in md
    assert "policy continuous" in seen["latency_cdfs"]["title"]
    assert any("were rejected" in t for t in seen["ttft_breakdown"]["texts"])


def test_a_configuration_that_fails_at_every_rate_leaves_the_report_whole(tmp_path, capsys, monkeypatch):
    """A variant that cannot run at any rate (TP 3 does not divide the heads): the comparison refuses
    it before running (exit 2); one whose points all fail as they run (here: the setup check left to
    the runs, as it was) has its error in results.csv, and the report shows the others (it once
    raised StopIteration)."""
    import servesim.studies.compare as compare_mod

    data = copy.deepcopy(BASE)
    data["workload"].update(num_requests=40)
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(data))
    out = tmp_path / "cmp"
    argv = ["compare", str(sc), "--policies", "continuous", "--variant", "tp3", "hardware.tp=3",
            "--rates", "2,4", "--out", str(out), "--workers", "1", "--quiet"]
    assert main(argv) == 2 and "configuration 'tp3' (--policies/--variant) is invalid" in capsys.readouterr().err
    monkeypatch.setattr(compare_mod, "_setup_error", lambda data: "")
    assert main(argv) == 0
    rows = read_results(out / "results.csv")
    assert {r["status"] for r in rows if r["label"] == "tp3"} == {"error"}
    assert "continuous" in (out / "report.md").read_text()


def test_the_streamed_trace_file_is_the_trace_dict_written_whole(tmp_path, monkeypatch):
    """write_trace streams the events (a large run's trace was held whole as Python objects: 1.9 GB
    for 100,000 requests); its file is byte for byte json.dump of chrome_trace, across its blocks and
    with a rejected request last (whose event is emitted after the loop)."""
    import json

    from servesim.outputs import trace_export

    sc = make_scenario(**{"workload.num_requests": 60, "workload.prompt_tokens": {"dist": "uniform", "min": 100,
                                                                                   "max": 9000},
                          "workload.clip_to_context": False})
    res = simulate(sc, decision_trace=True)
    assert (res.requests["status"] == "rejected").any() and len(res.steps["start_s"]) > 100
    monkeypatch.setattr(trace_export._rows, "__defaults__", (7,))  # blocks of 7 rows
    whole = trace_export.chrome_trace(res.requests, res.steps, res.summary["sim_time_s"], decisions=res.decisions)
    expected = json.dumps(whole, separators=(",", ":"))
    for last_rejected in (False, True):
        if last_rejected:  # (the last request rejected: its event comes after the loop)
            res.requests["status"][-1] = "rejected"
            res.requests["reason"][-1] = "test"
            whole = trace_export.chrome_trace(res.requests, res.steps, res.summary["sim_time_s"],
                                              decisions=res.decisions)
            expected = json.dumps(whole, separators=(",", ":"))
            assert whole["traceEvents"][-1]["name"] == f"rejected {res.requests['request_id'][-1]}"
        path = trace_export.write_trace(res, tmp_path / "t.json")
        assert path.read_text() == expected


def test_goodput_vs_load_counts_arrivals_within_the_slo(compare_dir):
    # the summaries' goodput_rps counts completions within the SLO over the whole run, the drain
    # after the last arrival included (a few requests' run reads below its arrival rate at full
    # attainment); the figure and its sentence use arrival rate x attainment, which does not
    from servesim.plots.report import _with_arrived_goodput

    out, points = compare_dir
    assert main(["report", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "Goodput here is the arrival rate x the share of requests within the SLO" in md
    rows = [p.row for p in points]
    full = [r for r in rows if r["slo_attainment"] == 1.0]
    assert full and all(r["goodput_rps"] < r["offered_rps"] for r in full)  # the drain
    for r in rows:
        g = _with_arrived_goodput({**r, "status": "ok"})["goodput_arrived_rps"]
        assert g == pytest.approx(r["offered_rps"] * r["slo_attainment"])
    best = max(rows, key=lambda r: r["offered_rps"] * r["slo_attainment"])
    assert f"{best['offered_rps'] * best['slo_attainment']:.3g}" in md or \
        f"{best['offered_rps'] * best['slo_attainment']:.2f}" in md


def test_a_studys_caveats_carry_the_warnings_its_runs_raised(tmp_path, capsys):
    """A comparison whose runs preempt (a KV cache too small): the warning each run's summary.json
    holds reaches compare's notes and the report's caveats, once per code, naming the
    configurations; with several seeds every seed's run is read (the averaged row names one)."""
    data = copy.deepcopy(BASE)
    data["memory"] = {"num_gpu_blocks": 100}
    data["workload"].update(num_requests=120, arrival={"process": "poisson", "rate_rps": 100.0},
                            prompt_tokens={"dist": "uniform", "min": 256, "max": 1024},
                            output_tokens={"dist": "uniform", "min": 32, "max": 128})
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(data))
    out = tmp_path / "cmp"
    assert main(["compare", str(sc), "--policies", "continuous,chunked_prefill", "--out", str(out), "--workers", "1",
                 "--quiet"]) == 0
    notes = [x for x in capsys.readouterr().out.splitlines() if "preemptions over 120 requests" in x]
    # how many runs warned and which, before the one run's figures the message quotes (the names
    # were followed by the first run's "N preemptions", as if every named run had had N)
    assert len(notes) == 1 and notes[0].startswith("note: 2 runs warn of preemptions")
    assert "(continuous, chunked_prefill" in notes[0]
    caveats = (out / "report.md").read_text().split("## Caveats")[1].split("## Summary")[0]
    assert "- 2 runs warn of preemptions" in caveats and "(continuous, chunked_prefill" in caveats
    assert "the running requests outgrew the KV cache" in caveats
    # several seeds: the runs of every seed are read (seeds.csv), not only the one results.csv names
    out2 = tmp_path / "cmp2"
    assert main(["compare", str(sc), "--policies", "continuous", "--variant", "more-kv", "memory.num_gpu_blocks=5000",
                 "--seeds", "2", "--out", str(out2), "--workers", "1", "--quiet", "--no-report"]) == 0
    notes = [x for x in capsys.readouterr().out.splitlines() if "preemptions over 120 requests" in x]
    assert len(notes) == 1 and notes[0].startswith("note: 2 runs warn of preemptions")
    assert "(continuous (seeds " in notes[0]


def test_report_on_a_file_or_nothing_says_what_to_give(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: x\n")
    assert main(["report", str(scenario)]) == 2
    assert "s.yaml' is a file, not a folder; give the --out folder of servesim run, sweep" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "nope' does not exist; give the --out folder" in capsys.readouterr().err


def test_a_run_that_fell_behind_does_not_meet_the_slo():
    """A run whose backlog grew was credited "meets the SLO (100.0%)" in the verdict and drawn as
    meeting it, while only a caveat said it did not keep up; its attainment only falls the longer
    the load lasts. One too short to tell (keep_up_warmup covers the shortfall) is not judged so."""
    from servesim.outputs.verdicts import fell_behind, meets_slo, slo_phrase

    ok = {"slo_attainment": 1.0, "keep_up": 0.98, "keep_up_warmup": 0.01}
    behind = {"slo_attainment": 1.0, "keep_up": 0.44, "keep_up_warmup": 0.02}
    short = {"slo_attainment": 1.0, "keep_up": 0.85, "keep_up_warmup": 0.1}
    assert meets_slo(ok) and not fell_behind(ok) and not fell_behind(short) and meets_slo(short)
    assert fell_behind(behind) and meets_slo(behind) is False
    assert slo_phrase(behind).startswith("fails the SLO at this load (100.0% of requests within it over this run")
    # a run's own summary.json holds it under workload.keep_up
    summary = {"slo_attainment": 0.95, "workload": {"keep_up": {"ratio": 0.5, "warmup": 0.0}}}
    assert fell_behind(summary) and meets_slo(summary) is False
    assert meets_slo({"slo_attainment": 0.95, "workload": {"keep_up": None}})  # closed loop: no keep-up figure


def test_the_verdict_and_load_sentence_do_not_credit_a_load_that_fell_behind(tmp_path):
    sc = tmp_path / "s.yaml"
    data = copy.deepcopy(BASE)
    data["policy"]["max_num_seqs"] = 4  # a sharp knee: above it the queue grows through the run
    data["workload"]["num_requests"] = 300
    data["slo"] = {"ttft_s": 1000.0, "tpot_s": 10.0}  # limits no latency here reaches
    sc.write_text(yaml.safe_dump(data))
    out = tmp_path / "sw"
    assert main(["sweep", str(sc), "--grid", "workload.arrival.rate_rps=1,200", "--out", str(out), "--quiet",
                 "--workers", "1"]) == 0
    rows = {r["workload.arrival.rate_rps"]: r for r in read_results(out / "results.csv")}
    assert rows[200]["slo_attainment"] == 1.0 and rows[200]["keep_up"] < 0.9  # within the limits, yet behind
    assert main(["report", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "fails the SLO at this load (100.0% of requests within it over this run" in md
    assert "(it fell behind at 200 req/s: the backlog grew)" in md
    # (a sweep of the rate alone: its one series is named by the scenario file; it was "all")
    assert "1. **s.yaml** (1 GPU): goodput" in md and "**all**" not in md


def test_goodputs_equal_to_the_digits_shown_share_a_rank(tmp_path):
    """At a light load both configurations serve the same requests within the SLO; their goodputs
    differ in the fourth digit only by when the last ones finish (10.34498 vs 10.34359 req/s), and
    one seed's verdict named a winner ("1. **chunked-512** 10.3; 2. continuous 10.3")."""
    sc = tmp_path / "s.yaml"
    data = copy.deepcopy(BASE)
    data["workload"]["num_requests"] = 200
    data["workload"]["prompt_tokens"] = {"dist": "uniform", "min": 600, "max": 2000}  # (512-token chunks cut them)
    sc.write_text(yaml.safe_dump(data))
    out = tmp_path / "c"
    assert main(["compare", str(sc), "--variant", "continuous", "policy.name=continuous", "--variant", "chunked-512",
                 "policy.name=chunked_prefill", "policy.max_num_batched_tokens=512", "--variant", "one-seq",
                 "policy.max_num_seqs=1", "--out", str(out), "--quiet", "--workers", "1"]) == 0
    rows = {r["label"]: r for r in read_results(out / "results.csv")}
    assert rows["continuous"]["goodput_rps"] != rows["chunked-512"]["goodput_rps"]  # (not identical runs)
    md = (out / "report.md").read_text()
    lines = [x for x in md.splitlines() if re.match(r"\d\. ", x)]
    assert {x.split(" (")[0] for x in lines[:2]} == {"1. **continuous**", "1. **chunked-512**"}
    assert all(x.endswith("(tied)") for x in lines[:2])
    assert lines[2].startswith("3. one-seq") and not lines[2].endswith("(tied)")


def test_arrived_goodput_interval_carries_the_arrival_rates_spread():
    """Goodput at a load = arrival rate x attainment; over seeds both vary. The interval was the
    rate x the attainment's alone: 100% within the SLO on every seed gave "22.1 +- 0 req/s" while
    the seeds drew 21.3 and 22.9 req/s of arrivals (offered_rps_ci95 10.3)."""
    from servesim.plots.report import _with_arrived_goodput

    r = {"status": "ok", "offered_rps": 22.06, "slo_attainment": 1.0, "slo_attainment_ci95": 0.0,
         "offered_rps_ci95": 10.3}
    out = _with_arrived_goodput(r)
    assert out["goodput_arrived_rps"] == pytest.approx(22.06)
    assert out["goodput_arrived_rps_ci95"] == pytest.approx(10.3)
    both = _with_arrived_goodput({**r, "slo_attainment": 0.9, "slo_attainment_ci95": 0.05})
    assert both["goodput_arrived_rps_ci95"] == pytest.approx(((22.06 * 0.05) ** 2 + (0.9 * 10.3) ** 2) ** 0.5)
    assert "goodput_arrived_rps_ci95" not in _with_arrived_goodput({"status": "ok", "offered_rps": 5.0,
                                                                     "slo_attainment": 1.0})  # one seed


def test_arrived_goodput_over_seeds_is_the_mean_of_each_seeds_own(tmp_path, monkeypatch):
    """Over seeds the goodput figure drew mean(arrival rate) x mean(attainment): seeds that drew 10
    and 20 req/s of arrivals, with every request and half of them within the SLO, serve 10 req/s
    each, drawn at 15 x 0.75 = 11.25. Each seed's own rate x its own attainment, then their mean and
    t-interval (still at most the mean arrivals, where the bars are cut)."""
    from servesim.outputs.intervals import t_interval
    from servesim.plots.report import _with_arrived_goodput

    r = {"status": "ok", "offered_rps": 15.0, "slo_attainment": 0.75, "slo_attainment_ci95": 3.2,
         "offered_rps_ci95": 64.0}
    seeds = [{"status": "ok", "seed": 0, "offered_rps": 10.0, "slo_attainment": 1.0},
             {"status": "ok", "seed": 1, "offered_rps": 20.0, "slo_attainment": 0.5}]
    out = _with_arrived_goodput(r, seeds)
    assert out["goodput_arrived_rps"] == pytest.approx(10.0) and out["goodput_arrived_rps_ci95"] == 0.0
    # through the report: a sweep on three seeds of few requests (their arrival rates differ)
    import servesim.plots.figures as F

    drawn = {}
    real = F.goodput_vs_load
    monkeypatch.setattr(F, "goodput_vs_load", lambda data, *a, **k: drawn.update(data) or real(data, *a, **k))
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(with_values(BASE, {"workload.num_requests": 12, "slo": {"ttft_s": 0.025}})))
    out_dir = tmp_path / "sw"
    assert main(["sweep", str(sc), "--grid", "workload.arrival.rate_rps=30", "--seeds", "3", "--out", str(out_dir),
                 "--workers", "1", "--quiet", "--outputs", "summary"]) == 0
    assert main(["report", str(out_dir), "--quiet"]) == 0
    rows = [q for q in read_results(out_dir / "seeds.csv") if q["status"] == "ok"]
    assert len({q["offered_rps"] for q in rows}) == 3
    want = t_interval([q["offered_rps"] * q["slo_attainment"] for q in rows])
    [mean] = [q for q in read_results(out_dir / "results.csv") if q["status"] == "ok"]
    assert abs(mean["offered_rps"] * mean["slo_attainment"] - want.mean) > 0.05 * want.mean  # (the seeds differ)
    [d] = drawn.values()
    assert d["goodput"] == [pytest.approx(want.mean)] and d["goodput_ci"] == [pytest.approx(want.half)]


def test_a_sessions_sweep_labels_its_load_axis_in_sessions_per_second(tmp_path, monkeypatch):
    """With workload.sessions the rate starts sessions, each of several requests: the goodput
    figure's x axis read "offered load: workload.arrival.rate_rps (req/s)" (and latency's "offered
    load (req/s)", the titles "2 req/s"), read as requests. They say sessions/s."""
    import servesim.plots.figures as F

    axes = {}
    real = F.save

    def save(fig, stem):
        axes[str(stem).rsplit("/", 1)[-1]] = ([ax.get_xlabel() for ax in fig.axes], [ax.get_title() for ax in fig.axes],
                                              fig._suptitle.get_text() if fig._suptitle else "")
        return real(fig, stem)

    monkeypatch.setattr(F, "save", save)
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(with_values(BASE, {"workload.num_requests": 12, "workload.sessions": {
        "turns": {"dist": "uniform", "min": 2, "max": 3}, "think_time_s": 0.5}})))
    out = tmp_path / "sw"
    assert main(["sweep", str(sc), "--grid", "workload.arrival.rate_rps=1,2", "--out", str(out), "--workers", "1",
                 "--quiet"]) == 0
    assert main(["report", str(out), "--quiet"]) == 0
    for name in ("goodput_vs_load", "latency_vs_load"):
        labels = axes[name][0]
        assert labels and all("sessions started per second (sessions/s)" in x and "req/s" not in x for x in labels)
    assert "(labels: sessions/s)" in axes["throughput_latency"][1][0]
    assert "2 sessions/s" in axes["latency_cdfs"][2] and "2 req/s" not in axes["latency_cdfs"][2]
    # report.md's text says the same loads in sessions/s ('At 2 req/s:', 'Per-run figures below at 2
    # req/s', the latency-vs-load sentence, the peak goodput's load); goodput stays req/s (it counts requests)
    text = (out / "report.md").read_text()
    assert "At 1 sessions/s:" in text and "At 2 sessions/s:" in text and "Per-run figures below at 2 sessions/s" in text
    assert not re.search(r"\b[12] req/s", text), re.findall(r".{60}\b[12] req/s.{20}", text)
    assert re.search(r"goodput [\d.]+ req/s", text)


def test_a_sessions_capacity_report_says_its_capacity_in_sessions_per_second(tmp_path, monkeypatch):
    """capacity of a sessions workload searches sessions started per second (it says so), and its
    report's figure drew the capacity in sessions/s, but report.md's sentence read "**Capacity: 21.45
    req/s**", "the check at 23.59 req/s fails", as requests. Latency vs load drew the probes over
    the search's limit (its dotted line) filled, as meeting, beside "hollow: fails the SLO": it judged
    them by the scenario's SLO (none here), where goodput vs load takes the search's verdict."""
    import servesim.plots.figures as F

    drawn = {}
    real = F.latency_vs_load

    def latency_vs_load(data, ax, metric, slo_s, *a, **k):
        drawn[metric] = (copy.deepcopy(data), slo_s)
        return real(data, ax, metric, slo_s, *a, **k)

    monkeypatch.setattr(F, "latency_vs_load", latency_vs_load)
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(with_values(BASE, {"workload.num_requests": 12, "workload.sessions": {
        "turns": {"dist": "uniform", "min": 2, "max": 3}, "think_time_s": 0.5}})))
    out = tmp_path / "cap"
    assert main(["capacity", str(sc), "--slo", "ttft_p99=40ms", "--seeds", "1", "--probe-requests", "30", "--keep-up",
                 "0", "--tol", "0.05", "--max-probes", "12", "--out", str(out), "--workers", "1", "--quiet"]) == 0
    cap = json.loads((out / "capacity.json").read_text())
    assert main(["report", str(out), "--quiet"]) == 0
    md = (out / "report.md").read_text()
    head = next(line for line in md.splitlines() if line.startswith("**"))
    assert "sessions/s" in head and "req/s" not in head, head
    assert f"**Capacity: {cap['capacity_rps']:.4g} sessions/s**" in head and "the check at " in head, head
    (series, limit), rows = drawn["ttft"], list(csv.DictReader((out / "results.csv").open()))
    assert limit == pytest.approx(0.04) and len(series) == 1
    d = next(iter(series.values()))
    over = [ok for p99, ok in zip(d["p99"], d["ok"]) if p99 > limit]
    assert over and not any(over), d  # (every probe over the limit failed the search)
    assert sorted(d["ok"]) == sorted(r["meets"] == "True" for r in rows if r["status"] == "ok")


def test_a_replica_where_nothing_waited_says_so(tmp_path):
    """The timeline caption read "up to 0 requests waiting (at 0 s)"."""
    out = tmp_path / "run"
    simulate(make_scenario(**{"workload.num_requests": 5, "workload.arrival": {"process": "fixed", "rate_rps": 0.1}})
             ).write(out)
    assert main(["report", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "no request waiting" in md and "up to 0 requests" not in md


def test_report_on_a_plan_folder_a_sweep_ran_into_reports_the_sweep(tmp_path, capsys, monkeypatch):
    """A study run into a plan's --out replaces its results.csv and sweep.json but leaves plan.json:
    the report went by plan.json and showed the old plan (or called the folder damaged), not what
    the folder holds now; it goes by the kind in sweep.json."""
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump({**copy.deepcopy(BASE), "workload": {**BASE["workload"], "num_requests": 10}}))
    out = tmp_path / "plan-out"
    out.mkdir()
    (out / "plan.json").write_text(json.dumps({"kind": "plan", "candidates": [], "rate_rps": 1, "slo": "x"}))
    assert main(["sweep", str(sc), "--grid", "workload.arrival.rate_rps=2,4", "--out", str(out), "--workers", "1",
                 "--quiet"]) == 0
    built = []
    monkeypatch.setattr("servesim.plots.report.build_report", lambda path, progress=True: built.append(path) or path)
    assert main(["report", str(out), "--quiet"]) == 0
    assert built == [out]  # (the study report, not the plan's)


@pytest.mark.parametrize("prefill", [{"tp": 2}, {"gpu": "a100-80g"}])
def test_a_pd_split_whose_pools_differ_draws_each_pool_on_its_roofline(tmp_path, prefill):
    """A P/D split with the prefill pool on another GPU (or TP) drew only the prefill pool's steps
    on the roofline, saying nothing of the decode pool's (where TPOT is made): each pool is now
    a panel of its own, under its own hardware's roofline."""
    from servesim.inputs.specs import get_gpu
    from servesim.outputs.rundir import RunData

    out = tmp_path / "run"
    kw = {"policy.name": "pd_split", "policy.prefill": prefill, "policy.decode": {"replicas": 1},
          "workload.num_requests": 20}
    simulate(make_scenario(**kw)).write(out)
    r = RunData.from_dir(out)
    assert r.roofline_pools() == ["prefill", "decode"]
    pre, dec = r.roofline_data("prefill"), r.roofline_data("decode")
    assert len(pre["flops"]) + len(dec["flops"]) == len(r.steps["flops"])  # (every step, once)
    assert set(dec["kind"]) == {"decode"} and "decode" not in set(pre["kind"])
    gpu = get_gpu(prefill.get("gpu", "h100-sxm"))
    assert pre["peak_flops"] == gpu.peak_flops * prefill.get("tp", 1)
    assert dec["peak_flops"] == get_gpu("h100-sxm").peak_flops
    assert main(["report", str(out)]) == 0
    md = (out / "report.md").read_text()
    roof = md[md.index("![Roofline"):]
    assert "prefill pool:" in roof and "decode pool:" in roof
    same = tmp_path / "same"
    simulate(make_scenario(**{**kw, "policy.prefill": {}})).write(same)
    assert RunData.from_dir(same).roofline_pools() == [None]  # (one hardware: one roofline, as before)


def _two_gpu_counts_study(out):
    """A compare folder's results.csv and sweep.json (no run folders): at 26 req/s one GPU fell
    behind (93.5% within the SLO over its short run, keep_up 0.6), two GPUs meet the SLO; the one
    GPU has more goodput per GPU. Three seeds: each figure has its 95% half-width."""
    cols = ["point", "label", RATE, "status", "error", "goodput_rps", "slo_attainment", "offered_rps", "keep_up",
            "keep_up_warmup", "throughput_rps", "window_output_tokens_per_s", "ttft_p50_s", "ttft_p99_s",
            "tpot_p50_s", "tpot_p99_s", "num_gpus", "seeds", "hash", "dir"]
    rows = [[0, "one-gpu", 26, "ok", "", 16.3, 0.935, 26.0, 0.6, 0.01, 17.4, 4866.0, 0.14, 0.51, 0.028, 0.0613, 1, 3,
             "", ""],
            [1, "two-gpus", 26, "ok", "", 21.0, 1.0, 26.0, 1.0, 0.0, 21.0, 5183.0, 0.067, 0.37, 0.009, 0.0101, 2, 3,
             "", ""]]
    ci = {"goodput_rps": [3.3, 5.0], "slo_attainment": [0.23, 0.0], "offered_rps": [7.0, 7.0],
          "window_output_tokens_per_s": [1500.0, 1600.0], "tpot_p99_s": [0.07, 0.0014]}
    out.mkdir()
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols + [c + "_ci95" for c in ci])
        for i, r in enumerate(rows):
            w.writerow(r + [v[i] for v in ci.values()])
    (out / "sweep.json").write_text(json.dumps({"kind": "compare", "scenario": "s.yaml",
                                                "labels": ["one-gpu", "two-gpus"], "rates": [26.0], "seeds": 3}))
    return out


RATE = "workload.arrival.rate_rps"


def test_a_configuration_that_fails_the_slo_ranks_below_one_that_meets_it(tmp_path):
    """Ranked by goodput per GPU, one GPU that fell behind (16.3 req/s per GPU) came first, above two
    GPUs that meet the SLO (10.5 per GPU), and no configuration was named the winner: the verdict
    judges by the SLO first. The console table ranks the same way."""
    from servesim.outputs.verdicts import ranked, with_per_gpu

    out = _two_gpu_counts_study(tmp_path / "c")
    rows = read_results(out / "results.csv")
    assert [r["label"] for r in ranked(with_per_gpu(rows))] == ["two-gpus", "one-gpu"]
    assert main(["report", str(out), "--quiet"]) == 0
    verdict = (out / "report.md").read_text().split("## Verdict")[1].split("## Caveats")[0]
    assert "1. **two-gpus** (2 GPUs)" in verdict and "2. one-gpu (1 GPU)" in verdict


def test_one_seeds_goodputs_equal_to_the_digits_printed_tie_in_the_order_given():
    """compare on one seed ranked b (6.5988 req/s) above a (6.5953), both printed 6.6 with the same
    SLO attainment: the order fell to digits the table does not show. Equal to the digits printed,
    they keep the order given and ``tied`` names them (compare prints it under the table); a
    difference the table shows still ranks, and over seeds the means rank as before."""
    from servesim.outputs.verdicts import ranked, tied

    def row(label, goodput, attainment=1.0, **kw):
        return {"label": label, RATE: 8.0, "status": "ok", "goodput_rps": goodput, "slo_attainment": attainment,
                "keep_up": 1.0, "num_gpus": 2, **kw}

    rows = [row("a", 6.5953), row("b", 6.5988), row("c", 6.575, 0.9967)]
    assert [r["label"] for r in ranked(rows)] == ["a", "b", "c"]
    assert [[r["label"] for r in g] for g in tied(rows)] == [["a", "b"]]
    assert [r["label"] for r in ranked(rows[::-1])] == ["b", "a", "c"]  # (the order given)
    # a goodput the table shows apart ranks; so does an attainment printed apart (0.998 vs 0.997)
    assert [r["label"] for r in ranked([row("a", 6.59), row("b", 6.61)])] == ["b", "a"]
    assert [r["label"] for r in ranked([row("a", 6.6, 0.9966), row("b", 6.6, 0.9978)])] == ["b", "a"]
    assert tied([row("a", 6.59), row("b", 6.61)]) == []
    # over seeds the intervals and paired differences say it: ranked by the means, no tie named
    seeded = [row("a", 6.5953, seeds=3), row("b", 6.5988, seeds=3)]
    assert [r["label"] for r in ranked(seeded)] == ["b", "a"] and tied(seeded) == []


def test_peak_goodput_is_at_a_load_that_meets_the_slo(tmp_path):
    """The goodput figure's sentence gave each configuration's peak over every load, so one that fell
    behind was credited "24 +- 9 req/s ... 24 +- 9 per GPU" first-in-line with no word that it fails
    the SLO there."""
    out = _two_gpu_counts_study(tmp_path / "c")
    assert main(["report", str(out), "--quiet"]) == 0
    md = (out / "report.md").read_text()
    sentence = next(x for x in md.splitlines() if x.startswith("Peak goodput"))
    assert sentence.index("two-gpus") < sentence.index("one-gpu")
    assert "per GPU of 1; it fails the SLO at every load tried" in sentence


def test_throughput_sentence_prints_the_digits_its_interval_supports(tmp_path):
    """With seeds, "one-gpu delivers 4866 output tok/s at p99 TPOT 61.3 ms" was printed for
    4866 +- 1500 tok/s and 61 +- 70 ms; the latency's interval, which reaches below 0, prints as its
    mean and its ends cut at 0 (not "60 +- 70 ms")."""
    out = _two_gpu_counts_study(tmp_path / "c")
    assert main(["report", str(out), "--quiet"]) == 0
    md = (out / "report.md").read_text()
    sentence = next(x for x in md.splitlines() if x.startswith("At the highest load each ran"))
    assert "one-gpu delivers 4900 \u00b1 1500 output tok/s" in sentence and "p99 TPOT 60 (0 to " in sentence
    assert "60 \u00b1 70 ms" not in sentence
    assert "4866" not in sentence and "61.3" not in sentence


def test_slo_attainment_reads_100_percent_only_when_every_request_met_it():
    """One request of 3000 outside the SLO printed "SLO attainment 100.0%" (run's summary, class
    lines) and "100.00% of requests within it" (0.99997 in the report's verdict); 1 of 3000 within
    it read "0.0%"."""
    from servesim.cli.main import format_summary
    from servesim.outputs.verdicts import attainment_pct, slo_phrase

    assert attainment_pct(1.0) == "100.0%" and attainment_pct(0.0) == "0.0%"
    assert attainment_pct(2999 / 3000) == "99.97%" and attainment_pct(0.99997) == "99.997%"
    assert attainment_pct(1 / 3000) == "0.03%" and attainment_pct(0.935) == "93.5%"
    assert "(99.997% of requests within it)" in slo_phrase({"slo_attainment": 0.99997})
    s = simulate(make_scenario(**{"workload.num_requests": 5})).summary
    assert "SLO attainment 99.97%" in format_summary({**s, "slo_attainment": 2999 / 3000})


def test_the_verdict_gives_a_mean_attainment_its_interval():
    """With seeds the verdict printed the mean attainment to a tenth of a percent, "93.5% of
    requests within it", for 93 +- 23% over the seeds."""
    from servesim.outputs.verdicts import slo_phrase

    behind = {"slo_attainment": 0.935, "slo_attainment_ci95": 0.23, "keep_up": 0.6, "keep_up_warmup": 0.01,
              "seeds": 3}
    # (an interval that reaches past 100% is cut there, and printed by its ends: f33ce7d)
    assert slo_phrase(behind).startswith("fails the SLO at this load (94 (70 to 100)% of requests within it")
    assert slo_phrase({"slo_attainment": 0.108, "slo_attainment_ci95": 0.017, "seeds": 3}) == \
        "fails the SLO (10.8 \u00b1 1.7% of requests within it)"
    # every seed at 100%: nothing to round away
    assert slo_phrase({"slo_attainment": 1.0, "slo_attainment_ci95": 0.0, "seeds": 3}) == \
        "meets the SLO (100.0% of requests within it)"


def test_roofline_sentence_does_not_call_the_time_weighted_flops_a_median():
    """"decode steps reach a median 14 FLOP/B and 71 TFLOP/s": 71 was all FLOPs over all seconds,
    while the median decode step ran at 34 TFLOP/s."""
    from servesim.plots.report import _roofline_sentence

    rd = {"flops": np.array([1e12, 1e12, 1e14]), "bytes": np.array([1e11, 1e11, 1e12]),
          "duration_s": np.array([0.1, 0.1, 0.2]), "kind": ["decode"] * 3, "peak_flops": 1e15, "mem_bw": 3e12}
    text = _roofline_sentence("a", rd)
    # median step: 10 TFLOP/s; over their time: 102e12 / 0.4 s = 255 TFLOP/s
    assert "decode steps reach a median 10 FLOP/B and, over their time, 255 TFLOP/s" in text


def test_load_sentence_up_to_means_every_load_up_to_it():
    """p99 TTFT within the SLO at 8 and 24 req/s but not at 16 (noise near the knee) read "stays
    within the 1000 ms SLO for a up to 24 req/s", claiming 16 too."""
    from servesim.plots.report import _load_sentence

    text = _load_sentence("ttft", {"a": {"rate": [8, 16, 24], "p99": [0.2, 1.2, 0.9]}}, 1.0)
    assert "a up to 8 req/s (also within at 24 req/s)" in text and "up to 24" not in text
    assert "a only at 16 req/s, 24 req/s" in _load_sentence(
        "ttft", {"a": {"rate": [8, 16, 24], "p99": [1.2, 0.5, 0.9]}}, 1.0)
    assert "a at every load tried (up to 24 req/s)" in _load_sentence(
        "ttft", {"a": {"rate": [8, 16, 24], "p99": [0.2, 0.5, 0.9]}}, 1.0)
    assert "a up to 16 req/s." in _load_sentence("ttft", {"a": {"rate": [8, 16, 24], "p99": [0.2, 0.5, 1.9]}}, 1.0)


def test_load_sentence_says_when_a_load_has_no_sample():
    """Every request rejected: "p99 TTFT stays within the 1 ms SLO for a at none of the loads" read
    as latencies over the limit; there were none. A load without a sample is named as such."""
    from servesim.plots.report import _load_sentence

    text = _load_sentence("ttft", {"a": {"rate": [4, 8], "p99": [None, None]}}, 0.001)
    assert "a at none of the loads (no TTFT sample at any of them: no request completed with one)" in text
    text = _load_sentence("tpot", {"a": {"rate": [4, 8], "p99": [0.02, None]}}, 0.05)
    assert "a up to 4 req/s (no TPOT sample at 8 req/s)" in text
    assert "sample" not in _load_sentence("ttft", {"a": {"rate": [4, 8], "p99": [0.2, 0.3]}}, 1.0)


def test_report_on_a_run_with_a_gpu_file_needs_no_file(tmp_path, monkeypatch):
    """A run on a GPU YAML named by a relative path (and a P/D pool's own GPU file) reports from
    any folder and after the file is gone or changed: the roofline takes the figures the run was
    priced with, which the run folder records, not the file's path read again."""
    from servesim.outputs.rundir import RunData

    g = tmp_path / "gpus"
    g.mkdir()
    (g / "slow.yaml").write_text("name: slow\nbase: h100-sxm\npeak_flops: 500e12\nmem_bw_bytes_per_s: 2e12\n")
    monkeypatch.chdir(g)
    out = tmp_path / "run"
    kw = {"hardware.gpu": "slow.yaml", "hardware.dtype": "fp8", "workload.num_requests": 10}
    simulate(make_scenario(**kw)).write(out)
    pd = tmp_path / "pd"
    simulate(make_scenario(**{"policy.name": "pd_split", "policy.decode": {"gpu": "slow.yaml"},
                              "workload.num_requests": 10})).write(pd)
    (g / "slow.yaml").write_text("name: slow\nbase: h100-sxm\n")  # (changed after the runs)
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(out)]) == 0
    rd = RunData.from_dir(out).roofline_data()
    assert rd["peak_flops"] == 1979e12 and rd["mem_bw"] == 2e12 and rd["hardware"] == "slow"  # (fp8: its FP8 peak)
    (g / "slow.yaml").unlink()
    run = RunData.from_dir(pd)
    assert run.roofline_data("decode")["peak_flops"] == 500e12 and run.roofline_data("prefill")["peak_flops"] == 989e12


def test_a_compare_whose_runs_had_no_request_says_so_in_its_titles(tmp_path, capsys):
    """duration_s=1 at 0.01 req/s: no request arrives. The figures' titles named the scenario's rate
    ("0.01 req/s") as the load the runs served; nothing was offered to them."""
    data = copy.deepcopy(BASE)
    data["workload"].pop("num_requests")
    data["workload"]["duration_s"] = 1.0
    data["workload"]["arrival"]["rate_rps"] = 0.01
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(data))
    out = tmp_path / "cmp"
    assert main(["compare", str(sc), "--policies", "continuous,chunked_prefill", "--out", str(out), "--workers", "1",
                 "--quiet"]) == 0
    capsys.readouterr()
    assert all(r["num_requests"] == 0 for r in read_results(out / "results.csv"))
    titles = re.findall(r"^!\[(.*)\]", (out / "report.md").read_text(), re.M)
    assert titles and all("0.01 req/s (none arrived)" in t for t in titles)


def test_a_closed_loop_runs_figures_state_its_load(tmp_path):
    """A figure states its load: an open-loop run's titles name its rate, but a closed loop has
    none, and its titles named the model, GPUs, policy and SLO with no load at all. They name its
    clients."""
    import re

    closed = {"process": "closed_loop", "clients": 6, "think_time_s": 0.2}
    out = tmp_path / "run"
    simulate(make_scenario(**{"workload.num_requests": 30, "workload.arrival": closed})).write(out)
    assert main(["report", str(out)]) == 0
    titles = re.findall(r"!\[([^]]*)\]", (out / "report.md").read_text())
    assert titles and all("closed loop of 6 clients" in t for t in titles if "timeline" in t.lower())
    assert any("closed loop of 6 clients" in t for t in titles)


def test_a_sessions_capacity_sentence_says_its_rates_in_sessions_per_second(tmp_path):
    """A capacity search's answer of a sessions workload read '**Capacity: 1.75 req/s**' beside its
    figure's sessions/s (a sweep's text: test_a_sessions_sweep_labels_its_load_axis_in_sessions_per_second)."""
    from servesim.plots.report import _capacity_lines

    cap = tmp_path / "cap"
    cap.mkdir()
    (cap / "capacity.json").write_text(json.dumps({
        "capacity_rps": 1.75, "capacity_rps_per_gpu": 1.75, "num_gpus": 1, "slo": "ttft_p99=2", "keep_up": 0.9,
        "check_above_rps": 1.925}))
    [line, _] = _capacity_lines(cap, "sessions/s")
    assert "**Capacity: 1.75 sessions/s** (1.75 sessions/s per GPU" in line and "req/s" not in line, line
    assert "req/s" in _capacity_lines(cap)[0]  # (a workload of single requests: as before)


def test_a_sessions_comparison_names_its_runs_at_sessions_per_second(tmp_path, capsys):
    """A comparison of a sessions workload named its runs "static at 1 req/s" (the keep-up and
    failed notes, the run warnings, the paired differences), in its printout and in report.md's
    caveats beside "At 1 sessions/s:", and the sessions note said the rates read "at N req/s".
    The rate is of sessions: every name and the note say sessions/s; goodput stays req/s."""
    from servesim.outputs.checks import sessions_rate_note
    from servesim.outputs.verdicts import study_warnings

    sc = tmp_path / "s.yaml"
    data = with_values(BASE, {"workload.num_requests": 12, "workload.sessions": {
        "turns": {"dist": "uniform", "min": 2, "max": 3}, "think_time_s": 0.5}})
    sc.write_text(yaml.safe_dump(data))
    out = tmp_path / "cmp"
    assert main(["compare", str(sc), "--policies", "continuous,static", "--rates", "1", "--seeds", "2",
                 "--out", str(out), "--workers", "1", "--quiet"]) == 0
    printed = capsys.readouterr()
    assert "static vs continuous at 1 sessions/s" in printed.out
    text = (out / "report.md").read_text()
    for t in (printed.out + printed.err, text):
        assert not re.search(r"\bat 1 req/s", t), re.findall(r".{60}\bat 1 req/s.{20}", t)
    assert "'at N sessions/s'" in sessions_rate_note(data) and "req/s'" not in sessions_rate_note(data)
    row = {"point": 0, "label": "static", "workload.arrival.rate_rps": 2.0, "status": "failed", "error": "boom"}
    assert study_warnings([row], unit="sessions/s")[0]["message"].startswith("static at 2 sessions/s did not run")
    assert study_warnings([row])[0]["message"].startswith("static at 2 req/s did not run")


def test_report_seconds_keep_three_digits_as_its_milliseconds_do():
    """userpass41: a run's report read "E2E: p50 3145 ms and p99 19 s" where `servesim run` printed
    the p99 as 18.55 s: from 10 s the report's latencies kept two digits (an SLO of 12.5 s read
    "12 s"), below it four."""
    from servesim.plots.report import _ms

    assert _ms(18.55) == "18.6 s" and _ms(12.5) == "12.5 s" and _ms(38.215) == "38.2 s"
    assert _ms(10.0) == "10 s" and _ms(164.2) == "164 s" and _ms(3.1447) == "3145 ms"


def test_a_cdf_sentence_gives_p50_and_p99_in_one_unit():
    """A capacity report's CDF sentence read "E2E: p50 6522 ms and p99 16.4 s": two scales in one
    breath. From a p99 of 10 s both are seconds; below it, both milliseconds as before."""
    from types import SimpleNamespace

    from servesim.plots.report import _cdf_sentence

    ctx = SimpleNamespace(status={}, under={})
    long = np.array([6.522] * 60 + [16.4] * 40)
    assert _cdf_sentence("e2e", {"a": long}, "", ctx, {}) == "E2E: p50 6.52 s and p99 16.4 s."
    short = np.array([0.0851] * 60 + [3.1447] * 40)
    assert _cdf_sentence("e2e", {"a": short}, "", ctx, {}) == "E2E: p50 85.1 ms and p99 3145 ms."


def test_a_capacity_report_counts_the_probes_its_search_ran(tmp_path, capsys):
    """small41: capacity printed 63 probes and its report said "60 points, 60 ran": the 3 short
    probes run again longer (probe_rerun in results.csv; the longer one decides, and is drawn)
    were dropped from the count without a word. The report counts them and says what they are."""
    from servesim.studies.sweep import read_results

    data = copy.deepcopy(BASE)
    # 16 replicas of 4 sequences, probes of 100 requests: near capacity a probe is too short to
    # tell whether it keeps up, and is run again longer
    data["policy"]["max_num_seqs"] = 4
    data["cluster"] = {"replicas": 16, "router": "round_robin"}
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(data))
    out = tmp_path / "cap"
    assert main(["capacity", str(sc), "--seeds", "1", "--slo", "tpot_p99=1", "--probe-requests", "100",
                 "--out", str(out), "--workers", "1", "--quiet"]) == 0
    printed = capsys.readouterr().out
    rows = read_results(out / "results.csv")
    reruns = sum(r["probe_rerun"] in (True, "True") for r in rows)
    assert reruns > 0
    table = printed.split("probes (", 1)[1].split("\n\n", 1)[0].splitlines()[2:]  # (one line per probe)
    assert len(table) == len(rows)
    assert main(["report", str(out)]) == 0
    line = (out / "report.md").read_text().splitlines()[2]
    assert (f": {len(rows)} probes, {reruns} of them short ones rerun longer (the longer run decided its rate): "
            f"{len(rows) - reruns} points drawn, ") in line


def test_report_tables_print_a_runs_figures_with_the_digits_compare_prints():
    """One run's p99 TTFT of 117.3 ms read "117.3" in report.md's table and "117" in compare's, and a
    goodput of 6.598 req/s "6.6" in both beside "6.58" (Python's g format drops the trailing zero):
    every figure without an interval has three significant digits, alike in both tables."""
    from servesim.cli.studies import format_table
    from servesim.plots.report import _md_table

    cols = ["label", "goodput_rps", "slo_attainment", "ttft_p99_s", "e2e_p99_s", "mean_batch_size"]
    rows = [{"label": "a", "goodput_rps": 6.598834, "slo_attainment": 1.0, "ttft_p99_s": 0.11734, "e2e_p99_s": 3.9667,
             "mean_batch_size": 7.1049},
            {"label": "b", "goodput_rps": 6.5751, "slo_attainment": 0.99667, "ttft_p99_s": 0.0112, "e2e_p99_s": 22.6043,
             "mean_batch_size": 33.01}]
    md = [[c.strip() for c in line.strip("|").split("|")] for line in _md_table(rows, cols).splitlines()[2:]]
    text = [line.split() for line in format_table(rows, cols).splitlines()[1:]]
    assert md == text
    assert md[0] == ["a", "6.60", "1", "117", "3967", "7.10"]
    assert md[1] == ["b", "6.58", "0.997", "11.2", "22604", "33.0"]


def test_report_sentences_write_limits_as_given_and_figures_as_the_tables_do():
    """report.md said "p99 TTFT stays within the 1000 ms SLO" and "... the 50.0 ms SLO" under figures
    titled "SLO TTFT <= 1 s, TPOT <= 50 ms", and an ITL p50 of 8.15 ms "8.2 ms" beside the table's
    "8.15": a limit reads as given, a figure with three significant digits as in the tables."""
    from servesim.outputs.intervals import format_value
    from servesim.plots.report import _load_sentence, _ms

    series = {"a": {"rate": [4.0, 8.0], "p99": [0.2, 0.4], "p99_ci": [None, None], "behind": [False, False]}}
    assert "stays within the 1 s SLO for a at every load" in _load_sentence("ttft", series, 1.0)
    assert "stays within the 50 ms SLO" in _load_sentence("tpot", {"a": {**series["a"], "p99": [0.01, 0.02]}}, 0.05)
    for v in (0.00815, 0.0005123, 0.0459, 0.171, 2.7034, 20.04):
        assert _ms(v) == (f"{format_value(v * 1e3)} ms" if v < 10 else f"{format_value(v)} s")
    assert _ms(0.00815) == "8.15 ms" and _ms(20.04) == "20.0 s"
