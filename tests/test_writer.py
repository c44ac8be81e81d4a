"""The run-folder writer (CSV and Parquet) against the reader, csv.writer, and `servesim run
--outputs / --format`."""

import csv
import io
import re

import numpy as np
import pytest

from servesim.cli.main import main
from servesim.outputs import writer
from servesim.outputs.columns import REQUEST_COLUMNS, STEP_COLUMNS
from servesim.outputs.rundir import RunData, read_columns, read_parquet_columns, read_table
from servesim.outputs.writer import Labels, write_csv
from servesim.simulation import simulate
from tests.conftest import make_scenario

REASONS = ["", "prompt + output (9000 tokens) exceed the KV cache, 512 blocks", 'the "watermark" keeps 1% free',
           "two\nlines", "naïve, ünïcode", "a\rcarriage return", ",", '"', ""]


def table(n: int, seed: int = 0) -> dict:
    """Columns shaped like requests.csv: ids, times with NaN, small ints with -1, free-text reasons."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(0.1, n))
    first = arrival + rng.random(n)
    first[rng.random(n) < 0.2] = np.nan
    return {"request_id": np.arange(n), "arrival_s": arrival, "first_token_s": first,
            "prompt_tokens": rng.integers(1, 9000, n), "replica": rng.integers(-1, 4, n),
            "status": np.array(["completed", "rejected", "unfinished"], dtype=object)[rng.integers(0, 3, n)],
            "reason": np.array(REASONS, dtype=object)[rng.integers(0, len(REASONS), n)],
            "flops": np.round(rng.random(n) * 1e13), "bytes": rng.random(n) * 1e9}


def csv_writer_text(columns: dict) -> str:
    """What the writer replaced wrote: csv.writer rows of repr(float) ("" for NaN) and str."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(list(columns))
    for row in zip(*(c.tolist() for c in columns.values())):
        w.writerow(["" if isinstance(v, float) and v != v else repr(v) if isinstance(v, float) else v for v in row])
    return buf.getvalue()


def test_csv_is_what_csv_writer_wrote(tmp_path):
    cols = table(3000)
    cols["reason"] = np.array([r.replace("\r", "") for r in cols["reason"]], dtype=object)  # see below
    write_csv(tmp_path / "t.csv", cols, chunk_rows=1000)
    assert (tmp_path / "t.csv").read_bytes() == csv_writer_text(cols).encode()


def test_csv_reads_back_exactly(tmp_path):
    """Every float equal (bit for bit: repr reads back), NaN an empty cell, free text quoted,
    including a carriage return (which csv.writer left bare and its reader then split on)."""
    cols = table(5000, seed=1)
    write_csv(tmp_path / "t.csv", cols, chunk_rows=777)  # blocks end mid-table
    back = read_columns(tmp_path / "t.csv")
    assert list(back) == list(cols)
    for k, v in cols.items():
        if v.dtype.kind == "f":
            assert np.array_equal(back[k], v, equal_nan=True), k
            assert np.isnan(back[k]).sum() == np.isnan(v).sum()
        else:
            assert back[k].tolist() == v.tolist(), k
    text = (tmp_path / "t.csv").read_bytes().decode()
    assert ',,' in text  # NaN: empty cells
    assert '"the ""watermark"" keeps 1% free"' in text and '"a\rcarriage return"' in text


def test_csv_reads_back_exactly_across_read_blocks(tmp_path, monkeypatch):
    """The reader converts READ_BLOCK rows at a time (a large table was held whole as Python
    strings: 1.4 GB for 1.3 million step rows): the same columns whatever the block size."""
    from servesim.outputs import rundir

    cols = table(3000, seed=2)
    write_csv(tmp_path / "t.csv", cols)
    whole = read_columns(tmp_path / "t.csv")
    monkeypatch.setattr(rundir, "READ_BLOCK", 7)
    blocks = read_columns(tmp_path / "t.csv")
    assert list(blocks) == list(whole)
    for k, v in whole.items():
        assert blocks[k].dtype == v.dtype and blocks[k].tolist() == v.tolist() or \
            np.array_equal(blocks[k], v, equal_nan=True), k
    (tmp_path / "h.csv").write_text("request_id,arrival_s,status\n")  # a header alone: empty columns
    empty = read_columns(tmp_path / "h.csv")
    assert [(k, v.dtype.kind, len(v)) for k, v in empty.items()] == [("request_id", "i", 0), ("arrival_s", "f", 0),
                                                                      ("status", "O", 0)]


@pytest.mark.parametrize("body, says", [
    ("5,1.5,x\n6,abc,x\n", "line 3: column 'arrival_s' must be a number (or empty), got 'abc'"),
    ("5,1.5,x\n1.0,2.5,x\n", "line 3: column 'request_id' must be an integer, got '1.0'"),
    # (an integer past int64 was an OverflowError traceback)
    ("5,1.5,x\n" + "9" * 30 + ",2.5,x\n", "line 3: column 'request_id' must be an integer"),
    ("5,1.5,x\n6,2.5\n", "line 3 has 2 cells, the header 3"),
])
def test_a_damaged_table_names_the_line_and_column(tmp_path, monkeypatch, body, says):
    from servesim.errors import InputError
    from servesim.outputs import rundir

    monkeypatch.setattr(rundir, "READ_BLOCK", 1)  # (the line is counted across blocks)
    (tmp_path / "t.csv").write_text("request_id,arrival_s,status\n" + body)
    with pytest.raises(InputError, match=re.escape(says)):
        read_columns(tmp_path / "t.csv")


def test_labels_write_their_label(tmp_path):
    write_csv(tmp_path / "t.csv", {"bound": Labels(np.array([1, 0, 1], np.int8), ("memory", "compute")),
                                   "x": np.array([1.5, 2.0, np.nan])})
    assert (tmp_path / "t.csv").read_text() == "bound,x\ncompute,1.5\nmemory,2.0\ncompute,\n"


def test_a_run_folder_is_byte_identical_to_csv_writer(tmp_path):
    res = simulate(make_scenario(**{"workload.num_requests": 300, "cluster.replicas": 2}))
    res.write(tmp_path)
    assert (tmp_path / "requests.csv").read_text() == csv_writer_text({c: res.requests[c] for c in REQUEST_COLUMNS})
    steps = {c: res.steps[c] for c in STEP_COLUMNS if c != "bound"}
    steps["bound"] = np.where(res.steps["compute_bound"], "compute", "memory").astype(object)
    assert (tmp_path / "steps.csv").read_text() == csv_writer_text({c: steps[c] for c in STEP_COLUMNS})


def test_outputs_subset_writes_only_those(tmp_path, capsys):
    sc = tmp_path / "s.yaml"
    import yaml

    sc.write_text(yaml.safe_dump(make_scenario(**{"workload.num_requests": 20}).to_dict()))
    out = tmp_path / "o"
    assert main(["run", str(sc), "--out", str(out), "--quiet", "--outputs", "steps,summary"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["steps.csv", "summary.json"]
    assert f"wrote {out}/summary.json, steps.csv" in capsys.readouterr().out
    # a report needs the requests table the run left out: it says so and how to get it
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the run wrote no requests table" in err and "--outputs" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, needle", [
    (["--outputs", "sumary"], "--outputs 'sumary': unknown output; (did you mean 'summary'?) valid: requests, "
                              "scenario, steps, summary"),
    (["--outputs", ","], "--outputs: give at least one of summary, requests, steps, scenario"),
    (["--format", "feather"], "--format 'feather': unknown format;"),
])
def test_bad_outputs_or_format_exit_2_before_running(tmp_path, capsys, argv, needle):
    out = tmp_path / "o"
    assert main(["run", "--out", str(out), "--quiet", *argv]) == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()


def test_parquet_without_pyarrow_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(writer, "parquet_available", lambda: False)
    assert main(["run", "--out", str(tmp_path / "o"), "--quiet", "--format", "parquet"]) == 2
    assert "pip install pyarrow" in capsys.readouterr().err


def test_parquet_round_trip(tmp_path):
    pytest.importorskip("pyarrow", reason="Parquet output needs pyarrow (pip install pyarrow)")
    res = simulate(make_scenario(**{"workload.num_requests": 200, "policy.name": "pd_split",
                                    "policy.prefill.replicas": 1, "policy.decode.replicas": 1}))
    res.write(tmp_path / "pq", fmt="parquet")
    res.write(tmp_path / "csv")
    assert sorted(p.name for p in (tmp_path / "pq").iterdir()) == ["requests.parquet", "scenario.yaml", "steps.parquet",
                                                                   "summary.json"]
    for name in ("requests", "steps"):
        pq_cols, csv_cols = read_table(tmp_path / "pq", name), read_table(tmp_path / "csv", name)
        assert list(pq_cols) == list(csv_cols)
        for k in pq_cols:
            assert pq_cols[k].dtype == csv_cols[k].dtype, (name, k)
            if pq_cols[k].dtype.kind == "f":
                assert np.array_equal(pq_cols[k], csv_cols[k], equal_nan=True), (name, k)
            else:
                assert pq_cols[k].tolist() == csv_cols[k].tolist(), (name, k)
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "pq" / "requests.parquet").column("finish_s").null_count == \
        int(np.isnan(res.requests["finish_s"]).sum())  # NaN times are nulls
    run = RunData.from_dir(tmp_path / "pq")  # what servesim report reads
    assert run.latency("ttft").tolist() == RunData.from_results(res).latency("ttft").tolist()


def test_parquet_reader_names_a_damaged_file(tmp_path):
    pytest.importorskip("pyarrow", reason="Parquet output needs pyarrow (pip install pyarrow)")
    from servesim.errors import InputError

    (tmp_path / "steps.parquet").write_bytes(b"not parquet")
    with pytest.raises(InputError, match="steps.parquet"):
        read_parquet_columns(tmp_path / "steps.parquet")


def _study_scenario(tmp_path) -> str:
    import yaml

    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(make_scenario(**{"workload.num_requests": 30}).to_dict()))
    return str(sc)


def _run_files(out) -> list:
    return [sorted(p.name for p in d.iterdir()) for d in sorted((out / "runs").iterdir())]


def test_sweep_outputs_keeps_summary_and_scenario_and_a_rerun_wanting_more_runs_again(tmp_path, capsys):
    sc, out = _study_scenario(tmp_path), tmp_path / "sw"
    grid = ["--grid", "workload.arrival.rate_rps=2,4"]
    assert main(["sweep", sc, *grid, "--out", str(out), "--quiet", "--outputs", "steps"]) == 0
    assert _run_files(out) == [["scenario.yaml", "steps.csv", "summary.json"]] * 2
    # asking for no more than a folder holds: the points are finished
    assert main(["sweep", sc, *grid, "--out", str(out), "--quiet", "--outputs", "summary"]) == 0
    assert "0 ran, 2 already finished" in capsys.readouterr().out
    # asking for more (the default: every file): each point runs again, and says why
    assert main(["sweep", sc, *grid, "--out", str(out), "--quiet"]) == 0
    cap = capsys.readouterr()
    assert "2 ran, 0 already finished" in cap.out
    assert "lacks requests.csv, tbt_s.npy (an earlier run wrote fewer files), running the point again" in cap.err
    assert _run_files(out) == [["requests.csv", "scenario.yaml", "steps.csv", "summary.json", "tbt_s.npy"]] * 2


def test_a_report_on_study_folders_written_without_tables_leaves_the_runs_out_and_says_so(tmp_path, capsys):
    sc = _study_scenario(tmp_path)
    sw, cmp_ = tmp_path / "sw", tmp_path / "cmp"
    assert main(["sweep", sc, "--grid", "workload.arrival.rate_rps=2,4", "--out", str(sw), "--quiet",
                 "--outputs", "summary"]) == 0
    assert main(["report", str(sw)]) == 0
    text = (sw / "report.md").read_text()
    assert "no requests or steps table (written with --outputs)" in text
    assert (sw / "figures" / "latency_vs_load.png").is_file()  # drawn from results.csv
    assert not (sw / "figures" / "timeline.png").exists()  # per-run: left out
    # a comparison at one rate draws only per-run figures: none, and the report and the command say so
    assert main(["compare", sc, "--policies", "continuous,static", "--out", str(cmp_), "--quiet",
                 "--outputs", "summary"]) == 0
    assert "(no figures: nothing to draw)" in capsys.readouterr().out
    text = (cmp_ / "report.md").read_text()
    assert "## Figures\n\nNone: no finished run here holds the requests and steps tables" in text
    assert "continuous, static: their run folders hold no requests or steps table" in text


def test_figures_of_a_study_without_tables_name_a_policy_only_when_every_run_has_it(tmp_path):
    """Drawn from results.csv alone, a comparison's figures must not take the base scenario's policy
    for their title (its variants run others); a sweep that does not vary the policy keeps it."""
    sc = _study_scenario(tmp_path)
    cmp_, sw = tmp_path / "cmp", tmp_path / "sw"
    assert main(["compare", sc, "--policies", "chunked_prefill,static", "--rates", "2,4", "--out", str(cmp_),
                 "--quiet", "--outputs", "summary", "--no-report"]) == 0
    assert main(["report", str(cmp_), "--quiet"]) == 0
    titles = [line for line in (cmp_ / "report.md").read_text().splitlines() if line.startswith("![")]
    assert titles and not any("| policy " in t for t in titles), titles
    assert main(["sweep", sc, "--grid", "workload.arrival.rate_rps=2,4", "--out", str(sw), "--quiet",
                 "--outputs", "summary"]) == 0
    assert main(["report", str(sw), "--quiet"]) == 0
    titles = [line for line in (sw / "report.md").read_text().splitlines() if line.startswith("![")]
    assert titles and all("| policy continuous" in t for t in titles), titles


@pytest.mark.parametrize("command", ["sweep", "compare"])
def test_study_outputs_refuses_an_unknown_name_before_running(tmp_path, capsys, command):
    out = tmp_path / "o"
    extra = ["--grid", "workload.arrival.rate_rps=2"] if command == "sweep" else ["--policies", "continuous"]
    assert main([command, _study_scenario(tmp_path), *extra, "--out", str(out), "--quiet", "--outputs", "tbts"]) == 2
    assert ("--outputs 'tbts': unknown output; (did you mean 'tbt'?) valid: requests, scenario, steps, summary, tbt"
            in capsys.readouterr().err)
    assert not (out / "runs").exists()


def test_capacity_outputs_keeps_what_each_verdict_reads_and_finds_the_same_answer(tmp_path, capsys):
    sc = _study_scenario(tmp_path)
    args = ["capacity", sc, "--slo", "ttft_p99=1", "--seeds", "1", "--probe-requests", "60", "--tol", "0.05",
            "--workers", "1", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "all")]) == 0
    assert main([*args, "--out", str(tmp_path / "lean"), "--outputs", "summary"]) == 0
    import json

    answer = [json.loads((tmp_path / d / "capacity.json").read_text())["capacity_rps"] for d in ("all", "lean")]
    assert answer[0] == answer[1] and answer[0] > 0
    assert set(map(tuple, _run_files(tmp_path / "lean"))) == {
        ("requests.csv", "scenario.yaml", "summary.json", "tbt_s.npy")}
    assert main(["report", str(tmp_path / "lean")]) == 0


def test_cells_taken_as_strings_and_placed_whole_are_csv_writers():
    """The writer's ``take`` of small-range integers and of labels, and its pieces copied a row
    at a time (``_place``), over widths 0 to 20: a block whose labels are all empty, negative
    and 3- and 5-character integers, one-character columns."""
    rng = np.random.default_rng(11)
    n = 2000
    reason = np.array(REASONS, dtype=object)[rng.integers(0, len(REASONS), n)]
    reason[:700] = ""  # (the first block: no text at all)
    cols = {"small": rng.integers(-5, 9, n), "three": rng.integers(100, 300, n), "five": rng.integers(-9999, 99, n),
            "reason": np.array([r.replace("\r", "") for r in reason], dtype=object),
            "digit": rng.integers(0, 10, n), "t": np.cumsum(rng.exponential(0.01, n)),
            "whole": np.round(rng.random(n) * 1e9),
            "bound": Labels(rng.integers(0, 2, n).astype(np.int8), ("memory", "compute"))}
    text = csv_writer_text({k: (np.array(v.labels, dtype=object)[v.codes] if isinstance(v, Labels) else v)
                            for k, v in cols.items()})
    for chunk in (700, 1 << 14):
        buf = io.BytesIO()
        write_csv(buf, cols, chunk_rows=chunk)
        assert buf.getvalue() == text.encode()
