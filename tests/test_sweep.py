"""servesim sweep / compare: rows per point, resume by hash, failing points recorded, executors agree."""

import copy
import json
import os
import re

import pytest
import yaml

import servesim.studies.executors as executors_mod
import servesim.studies.sweep as sweep_mod
from servesim.policies import POLICIES
from servesim.cli.main import main
from servesim.studies.points import grid_points, scenario_hash
from servesim.studies.sweep import read_results
from tests.conftest import BASE

RATES = "1,2,4,8"


def scenario_file(tmp_path, **extra):
    data = copy.deepcopy(BASE)
    data["workload"]["num_requests"] = 30
    data["slo"] = {"ttft_s": 0.5, "tpot_s": 0.05}
    data.update(extra)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(p)


def two_configs():
    """Two registered policies when there are two, else two settings of the one policy."""
    names = list(POLICIES)[:2]
    if len(names) == 2:
        return "policy.name", names
    return "policy.max_num_seqs", [2, 64]


def count_runs(monkeypatch):
    calls = []
    real = executors_mod.run_point

    def counting(data, out, outputs=None):
        calls.append(out)
        return real(data, out, outputs)

    monkeypatch.setattr(executors_mod, "run_point", counting)
    return calls


def test_sweep_2x4_writes_8_rows_and_resumes_without_rerunning(tmp_path, monkeypatch, capsys):
    key, values = two_configs()
    sc = scenario_file(tmp_path)
    out = tmp_path / "sw"
    argv = ["sweep", sc, "--grid", f"{key}={','.join(map(str, values))}", "--grid",
            f"workload.arrival.rate_rps={RATES}", "--out", str(out), "--workers", "1", "--quiet"]
    calls = count_runs(monkeypatch)
    assert main(argv) == 0
    assert len(calls) == 8
    rows = read_results(out / "results.csv")
    assert len(rows) == 8 and all(r["status"] == "ok" for r in rows)
    # the swept values are columns, in cross-product order
    assert [(r[key], r["workload.arrival.rate_rps"]) for r in rows] == [
        (v, r) for v in values for r in (1, 2, 4, 8)]
    assert all((out / r["dir"] / "summary.json").is_file() for r in rows)
    assert all((out / r["dir"] / "tbt_s.npy").is_file() for r in rows)
    # each run's folder holds its resolved scenario, and the folder name is its hash
    for r in rows:
        resolved = yaml.safe_load((out / r["dir"] / "scenario.yaml").read_text())
        assert scenario_hash(resolved) == r["hash"]
        assert resolved["workload"]["arrival"]["rate_rps"] == r["workload.arrival.rate_rps"]
    before = (out / "results.csv").read_text()

    calls.clear()
    assert main(argv) == 0
    assert calls == []  # nothing reran
    assert "0 ran, 8 already finished" in capsys.readouterr().out
    after = (out / "results.csv").read_text()
    assert after == before

    # a wider grid reruns only the new points
    argv[argv.index(f"workload.arrival.rate_rps={RATES}")] = f"workload.arrival.rate_rps={RATES},16"
    assert main(argv) == 0
    assert len(calls) == 2 and len(read_results(out / "results.csv")) == 10


def test_failing_point_is_recorded_and_the_rest_go_on(tmp_path, capsys):
    sc = scenario_file(tmp_path)
    out = tmp_path / "sw"
    # tp=3 does not divide Llama-3-8B's 32 heads (fails when the run starts); max_num_seqs=0 is invalid
    assert main(["sweep", sc, "--grid", "hardware.tp=1,3", "--grid", "policy.max_num_seqs=0,8",
                 "--out", str(out), "--workers", "1", "--quiet"]) == 0
    rows = {(r["hardware.tp"], r["policy.max_num_seqs"]): r for r in read_results(out / "results.csv")}
    assert rows[(1, 8)]["status"] == "ok" and rows[(1, 8)]["completed"] == 30
    assert rows[(3, 8)]["status"] == "error" and "hardware.tp=3" in rows[(3, 8)]["error"]
    assert rows[(1, 0)]["status"] == "error" and "policy.max_num_seqs must be > 0" in rows[(1, 0)]["error"]
    assert rows[(1, 0)]["dir"] is None
    # (exit 0: a grid may span what fits and what does not; stderr names the refused, which only
    # the table's "error" cells showed before)
    err = capsys.readouterr().err.strip().splitlines()
    # (the first refused named by its values, not "point 0" to look up in the table)
    assert err == ["note: 3 points refused as invalid and not run (each reason is in results.csv); "
                   "tp=1, max_num_seqs=0: " + rows[(1, 0)]["error"]]


def test_one_point_refused_or_failed_is_said_in_the_singular(tmp_path, capsys):
    """"1 point(s) refused as invalid ... (each reason is in results.csv)" and "1 point(s) failed
    while running (their error ...)": the counts are said in the number they take."""
    from servesim.cli.studies import EXIT_POINTS_FAILED, _status

    sc = scenario_file(tmp_path)
    assert main(["sweep", sc, "--grid", "policy.max_num_seqs=0,8", "--out", str(tmp_path / "sw"), "--workers", "1",
                 "--quiet"]) == 0
    [err] = capsys.readouterr().err.strip().splitlines()
    assert err.startswith("note: 1 point refused as invalid and not run (its reason is in results.csv); "
                          "max_num_seqs=0: ")
    assert _status(1) == EXIT_POINTS_FAILED
    assert "error: 1 point failed while running (its error is in results.csv)" in capsys.readouterr().err
    assert _status(2) == EXIT_POINTS_FAILED
    assert "error: 2 points failed while running (their error is in results.csv)" in capsys.readouterr().err


@pytest.mark.parametrize("seeds", ["1", "2"])
def test_a_sweep_whose_every_point_is_refused_exits_2(tmp_path, capsys, seeds):
    """Every point refused by its own run's checks (here: more requests than the machine's memory
    holds) used to print a table of errors and exit 0. It is an input error, as when every point
    is invalid before running; results.csv keeps each point's reason. One point that runs is
    enough for the sweep to answer (test_failing_point_is_recorded_and_the_rest_go_on)."""
    sc = scenario_file(tmp_path)
    out = tmp_path / "sw"
    assert main(["sweep", sc, "--grid", "workload.arrival.rate_rps=1,2", "--set", "workload.num_requests=999999999",
                 "--seeds", seeds, "--out", str(out), "--workers", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # (named by its scenario file first, as servesim run names a refused deployment)
    assert err[-1].startswith(f"servesim: error: {sc}: every sweep point was refused; the first: "
                              "workload: the run needs")
    assert "GiB of memory" in err[-1] and ("results.csv" if seeds == "1" else "seeds.csv") in err[-1]
    rows = read_results(out / "results.csv")
    assert len(rows) == 2 and all(r["status"] == "error" for r in rows)
    # the same when some points are invalid before running and the others refused while running
    assert main(["sweep", sc, "--grid", "policy.max_num_seqs=0,8", "--set", "workload.num_requests=999999999",
                 "--seeds", seeds, "--out", str(tmp_path / "mixed"), "--workers", "1", "--quiet"]) == 2


def test_sweep_block_in_the_yaml(tmp_path):
    sc = scenario_file(tmp_path, sweep={"grid": {"workload.arrival.rate_rps": [1, 4], "seed": [0, 1]}})
    out = tmp_path / "sw"
    assert main(["sweep", sc, "--out", str(out), "--workers", "1", "--quiet"]) == 0
    rows = read_results(out / "results.csv")
    assert [(r["workload.arrival.rate_rps"], r["seed"]) for r in rows] == [(1, 0), (1, 1), (4, 0), (4, 1)]


def test_a_grid_key_in_the_sweep_block_and_on_the_command_line_is_refused(tmp_path, capsys):
    """--grid rate_rps=32 beside a block sweeping rate_rps [1, 4] ran one rate, 32: the --grid
    values replaced the block's without a word (a second --grid of one key, or a --set of a swept
    one, is refused)."""
    sc = scenario_file(tmp_path, sweep={"grid": {"workload.arrival.rate_rps": [1, 4]}})
    out = tmp_path / "sw"
    assert main(["sweep", sc, "--grid", "workload.arrival.rate_rps=32", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert ("--grid workload.arrival.rate_rps: workload.arrival.rate_rps is also swept by the scenario's sweep "
            "block (sweep.grid: [1, 4])") in err and "Traceback" not in err
    assert not out.exists()
    # another key on the command line widens the block's grid, as before
    assert main(["sweep", sc, "--grid", "seed=0,1", "--out", str(out), "--workers", "1", "--quiet"]) == 0
    assert len(read_results(out / "results.csv")) == 4


@pytest.mark.parametrize("argv_tail, needle", [
    (["--grid", "policy.max_num_sqs=1,2"], "policy.max_num_sqs: unknown field"),
    (["--grid", "workload.arrival.rate_rps"], "expected dotted.key=v1,v2"),
    (["--grid", "seed=1,,2"], "empty value"),
    (["--grid", "seed=1", "--grid", "seed=2"], "--grid seed is given twice"),  # the last one silently won
    ([], "nothing to sweep"),
    (["--grid", "seed=1", "--workers", "0"], "--workers must be >= 1"),
    (["--grid", "seed=1", "--address", "x:1"], "--address needs --executor ray"),
])
def test_bad_sweep_input_exits_2(tmp_path, capsys, argv_tail, needle):
    sc = scenario_file(tmp_path)
    assert main(["sweep", sc, "--out", str(tmp_path / "o"), "--quiet", *argv_tail]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_process_pool_gives_the_same_rows_as_inline(tmp_path):
    base = yaml.safe_load(open(scenario_file(tmp_path)))
    grid = {"workload.arrival.rate_rps": [2, 8], "policy.max_num_seqs": [4, 64]}
    rows = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        points = grid_points(base, grid)
        sweep_mod.execute(points, out, "local", workers, progress=False)
        rows[workers] = [{k: v for k, v in p.row.items() if k != "wall_time_s"} for p in points]
    assert rows[1] == rows[2]


@pytest.mark.slow
def test_ray_executor_equals_local(tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'servesim[ray]'")
    base = yaml.safe_load(open(scenario_file(tmp_path)))
    grid = {"workload.arrival.rate_rps": [2, 8], "policy.max_num_seqs": [4, 64]}
    rows = {}
    for ex in ("local", "ray"):
        points = grid_points(base, grid)
        sweep_mod.execute(points, tmp_path / ex, ex, 2, progress=False)
        rows[ex] = [{k: v for k, v in p.row.items() if k != "wall_time_s"} for p in points]
        assert all(p.row["status"] == "ok" for p in points), [p.row for p in points]
    assert not ray.is_initialized()
    assert rows["local"] == rows["ray"]
    for p in grid_points(base, grid):  # byte-identical per-run files too
        for f in ("requests.csv", "steps.csv"):
            local, ray_run = (tmp_path / ex / "runs" / p.hash / f for ex in ("local", "ray"))
            assert local.read_bytes() == ray_run.read_bytes()


def test_compare_runs_each_configuration_on_the_same_requests(tmp_path, capsys):
    sc = scenario_file(tmp_path)
    out = tmp_path / "cmp"
    assert main(["compare", sc, "--policies", "continuous", "--variant", "small", "policy.max_num_seqs=2",
                 "--out", str(out), "--workers", "1", "--quiet", "--no-report"]) == 0
    printed = capsys.readouterr().out
    assert "continuous" in printed and "small" in printed
    rows = read_results(out / "results.csv")
    assert [r["label"] for r in rows] == ["continuous", "small"]
    reqs = [(out / r["dir"] / "requests.csv").read_text().splitlines() for r in rows]
    arrivals = [[line.split(",")[1] for line in rq] for rq in reqs]
    assert arrivals[0] == arrivals[1]  # same workload through both
    assert json.loads((out / "sweep.json").read_text())["kind"] == "compare"
    assert not (out / "report.md").exists()  # --no-report; tests/test_report.py covers the report


def test_compare_rejects_unregistered_policy(tmp_path, capsys):
    sc = scenario_file(tmp_path)
    assert main(["compare", sc, "--policies", "continuous,nope", "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "unknown policy 'nope'" in err and "continuous" in err


def test_sweep_refuses_a_set_of_a_swept_key(tmp_path, capsys):
    sc = scenario_file(tmp_path)
    out = tmp_path / "s"
    assert main(["sweep", sc, "--grid", "policy.max_num_seqs=4,8", "--set", "policy.max_num_seqs=16",
                 "--out", str(out)]) == 2
    assert "--set policy.max_num_seqs=16: policy.max_num_seqs is also swept" in capsys.readouterr().err
    assert not out.exists()


def test_compare_refuses_a_set_that_every_configuration_overrides(tmp_path, capsys):
    # --policies sets policy.name in every configuration: a --set policy.name was silently ignored
    sc = scenario_file(tmp_path)
    out = tmp_path / "c"
    assert main(["compare", sc, "--policies", "continuous,chunked_prefill", "--set", "policy.name=static",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--set policy.name=static: every configuration sets policy.name itself" in err and not out.exists()
    # one configuration that leaves the key alone takes it: a valid comparison
    from servesim.studies.compare import plan_compare
    plan = plan_compare(sc, "continuous", [["small", "policy.max_num_seqs=2"]], None, ["policy.name=static"])
    assert [c[0] for c in plan.configs] == ["continuous", "small"]


def test_compare_refuses_one_invalid_configuration_before_running(tmp_path, capsys):
    # a typo in one --variant ran the others and exited 0, the named configuration missing from
    # the table but for a stderr note; each configuration is one the user named, so it is an error
    sc = scenario_file(tmp_path)
    out = tmp_path / "c"
    assert main(["compare", sc, "--variant", "a", "policy.max_num_seqs=4", "--variant", "b", "policy.max_num_seqs=-1",
                 "--rates", "1,2", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "configuration 'b' (--policies/--variant) is invalid: policy.max_num_seqs must be > 0" in err
    assert not out.exists()


@pytest.mark.parametrize("arrival", [{"process": "closed_loop", "clients": 2}, {"process": "all_at_once"}])
def test_compare_rates_on_an_arrival_process_without_one_says_so(tmp_path, capsys, arrival):
    # found by running the packaged scenarios through the studies: each point was refused as
    # 'workload.arrival.rate_rps: unknown field', a key the user never wrote (--rates sets it)
    sc = scenario_file(tmp_path)
    assert main(["compare", sc, "--policies", "continuous,static", "--rates", "1,2", "--set",
                 f"workload.arrival={json.dumps(arrival)}", "--out", str(tmp_path / "c"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"--rates sets workload.arrival.rate_rps; the {arrival['process']!r} arrival process has none" in err
    assert not (tmp_path / "c").exists()


def test_compare_notes_when_chunked_prefill_keeps_a_large_budget():
    from servesim.studies.compare import chunk_budget_note, configurations

    big = {"policy": {"name": "continuous", "max_num_batched_tokens": 8192}}
    note = chunk_budget_note(configurations("continuous,chunked_prefill", None), big)
    assert "policy.max_num_batched_tokens=8192" in note and "--variant chunked-512" in note
    assert chunk_budget_note(configurations("continuous,chunked_prefill", None), {"policy": {}})  # default 8192
    # a variant that sets the budget, a small scenario budget, or no chunked_prefill: nothing to say
    assert chunk_budget_note(configurations(None, [["c", "policy.name=chunked_prefill",
                                                    "policy.max_num_batched_tokens=512"]]), big) is None
    small = {"policy": {"name": "continuous", "max_num_batched_tokens": 1024}}
    assert chunk_budget_note(configurations("chunked_prefill", None), small) is None
    assert chunk_budget_note(configurations("continuous,static", None), big) is None


def test_compare_takes_names_from_the_registry(tmp_path, monkeypatch):
    from servesim.studies.compare import configurations

    from servesim.studies.compare import policy_names

    # (another policy than continuous: one policy by two names is refused,
    # test_compare_refuses_one_configuration_by_two_names)
    monkeypatch.setitem(POLICIES, "toy", POLICIES["chunked_prefill"])
    assert configurations("continuous,toy", None) == [("continuous", {"policy.name": "continuous"}),
                                                       ("toy", {"policy.name": "toy"})]
    assert set(POLICIES) <= set(policy_names())


def test_run_ignores_the_sweep_block(tmp_path):
    sc = scenario_file(tmp_path, sweep={"grid": {"seed": [0, 1]}})
    assert main(["run", sc, "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert "sweep" not in (tmp_path / "o" / "scenario.yaml").read_text()


def test_ray_executor_without_ray_exits_2(tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    sc = scenario_file(tmp_path)
    assert main(["sweep", sc, "--grid", "seed=0,1", "--out", str(tmp_path / "o"), "--executor", "ray", "--quiet"]) == 2
    assert "pip install 'servesim[ray]'" in capsys.readouterr().err


def _sweep_failing_at_seed_1(tmp_path, monkeypatch, error: BaseException, seeds: str) -> tuple:
    """A sweep over ``seeds`` in which the point with seed 1 raises ``error``: (rows, out folder)."""
    import servesim.simulation

    real = servesim.simulation.simulate

    def failing(scenario, *a, **kw):
        if scenario.seed == 1:
            raise error
        return real(scenario, *a, **kw)

    monkeypatch.setattr(servesim.simulation, "simulate", failing)
    out = tmp_path / "sw"
    # the other points go on; the sweep then exits 3: a point failed while running
    assert main(["sweep", scenario_file(tmp_path), "--grid", f"seed={seeds}", "--out", str(out), "--workers", "1",
                 "--quiet"]) == 3
    return read_results(out / "results.csv"), out


def test_a_bug_in_one_point_is_recorded_with_its_traceback(tmp_path, monkeypatch):
    rows, out = _sweep_failing_at_seed_1(tmp_path, monkeypatch, RuntimeError("boom"), "0,1,2")
    assert [r["status"] for r in rows] == ["ok", "error", "ok"]
    assert rows[1]["error"].startswith("RuntimeError: boom") and "Traceback" in rows[1]["error"]
    assert not any(p.name.startswith(".tmp") for p in (out / "runs").iterdir())


def test_a_point_too_large_for_memory_is_recorded_without_a_traceback(tmp_path, monkeypatch):
    rows, _ = _sweep_failing_at_seed_1(tmp_path, monkeypatch, MemoryError(), "0,1")
    assert [r["status"] for r in rows] == ["ok", "error"]
    assert rows[1]["error"].startswith("out of memory") and "Traceback" not in rows[1]["error"]


def test_a_point_whose_input_file_changed_runs_again(tmp_path, monkeypatch):
    """A point's resume key digests the files its scenario reads (here a trace): edited, the
    points run again (before, a rerun reported the old trace's results as finished)."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,100,20\n0.5,200,30\n")
    data = copy.deepcopy(BASE)
    data["workload"] = {"trace": {"path": str(trace)}}
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "sw"
    argv = ["sweep", str(sc), "--grid", "policy.max_num_seqs=4,8", "--out", str(out), "--workers", "1", "--quiet"]
    calls = count_runs(monkeypatch)
    assert main(argv) == 0 and len(calls) == 2
    calls.clear()
    assert main(argv) == 0 and calls == []  # unchanged: finished
    with trace.open("a") as fh:
        fh.write("1.0,300,10\n")
    assert main(argv) == 0 and len(calls) == 2
    assert {r["num_requests"] for r in read_results(out / "results.csv")} == {3}


def test_input_digests_take_files_and_folders_named_and_nothing_else(tmp_path, monkeypatch):
    from servesim.studies.points import input_digests

    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpu.yaml").write_text("name: x\n")
    (tmp_path / "prof" / "compute").mkdir(parents=True)
    (tmp_path / "prof" / "compute" / "mlp.csv").write_text("a\n1\n")
    (tmp_path / "h100-sxm").write_text("a file named like a catalog GPU\n")
    data = {"hardware": {"gpu": "gpu.yaml"}, "cost": {"profile": "prof/"}, "model": "h100-sxm",
            "policy": {"name": "continuous"}, "list": ["gpu.yaml", "missing/file.csv", "2.5"]}
    digests = input_digests(data)
    assert sorted(digests) == ["gpu.yaml", "prof/"]
    before = digests["prof/"]
    (tmp_path / "prof" / "compute" / "mlp.csv").write_text("a\n1\n2\n")
    assert input_digests(data)["prof/"] != before
    assert input_digests({"seed": 1, "name": "x"}) == {}


@pytest.mark.parametrize("study, argv, needle", [
    ("sweep", ["--grid", "policy.max_num_seqs=-1,0"],
     "every sweep point is invalid; the first (policy.max_num_seqs=-1): policy.max_num_seqs must be > 0"),
    ("compare", ["--variant", "small", "policy.max_num_seqs=-1", "--variant", "zero", "policy.max_num_seqs=0"],
     "every configuration is invalid; the first (label=small): policy.max_num_seqs must be > 0"),
])
def test_a_study_whose_every_point_is_invalid_names_the_first_as_the_study_calls_it(tmp_path, capsys, study, argv,
                                                                                 needle):
    out = tmp_path / "o"
    assert main([study, scenario_file(tmp_path), *argv, "--out", str(out), "--quiet"]) == 2
    assert needle in capsys.readouterr().err
    assert not (out / "runs").exists()


def test_a_grid_written_as_a_list_says_to_drop_the_brackets():
    # "--grid k=[8,16]" was split at its comma into "[8" and "16]": every point then failed
    from servesim.errors import InputError
    from servesim.studies.points import parse_grid

    with pytest.raises(InputError, match=r"give the values separated by commas, without brackets: "
                                         r"--grid policy.max_num_seqs=8,16$"):
        parse_grid(["policy.max_num_seqs=[8,16]"])
    assert parse_grid(["policy.max_num_seqs=8,16"]) == {"policy.max_num_seqs": [8, 16]}


@pytest.mark.parametrize("label", ["", "  ", "policy.max_num_seqs=4"])
def test_a_variant_needs_a_label(tmp_path, capsys, label):
    """A blank label was taken (and shown as "point 2"); a KEY=VALUE first became the label."""
    sc = scenario_file(tmp_path)
    assert main(["compare", sc, "--out", str(tmp_path / "c"), "--variant", label, "policy.max_num_seqs=2",
                 "--quiet"]) == 2
    assert f"--variant {label!r}: the first word is the variant's label" in capsys.readouterr().err


def _slow_point(data, out, outputs=None):
    """A point that takes a while and leaves a mark (module level: the pool's workers call it)."""
    import time
    from pathlib import Path

    time.sleep(0.2)
    Path(out).mkdir(parents=True)
    return {"status": "ok", "error": ""}


def test_ctrl_c_with_worker_processes_stops_the_queued_points(tmp_path, monkeypatch):
    """Ctrl-C with --workers 2: the points not started are dropped and the workers end. The pool's
    shutdown(cancel_futures=True) alone cancelled nothing (Python 3.11): the workers ran every
    queued point, and the process, having said 'interrupted', ran the whole sweep before exiting."""
    import threading
    import time

    monkeypatch.setattr(executors_mod, "run_point", _slow_point)
    tasks = [(i, {}, str(tmp_path / f"p{i}")) for i in range(16)]

    def ctrl_c(key, row):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        executors_mod.run_tasks(tasks, ctrl_c, "local", 2)
    # the pool's manager thread has ended: left running, it raced the interpreter's exit, which
    # then printed "OSError: [Errno 9] Bad file descriptor" from concurrent.futures' exit hook
    assert not [t for t in threading.enumerate() if type(t).__name__ == "_ExecutorManagerThread"]
    time.sleep(1.0)  # (without the fix, the workers went on: 2 points every 0.2 s)
    assert len(list(tmp_path.iterdir())) <= 4


def test_a_file_in_place_of_a_run_folder_is_removed_and_the_point_runs_again(tmp_path, monkeypatch, capsys):
    """runs/<hash> that is a file (or a link) is damaged as an unreadable summary.json is: the
    note said the point ran again, but only folders were removed, and the point then failed
    ('exists and is not a folder', exit 3)."""
    sc, out = scenario_file(tmp_path), tmp_path / "sw"
    argv = ["sweep", sc, "--grid", "workload.arrival.rate_rps=2,4", "--out", str(out), "--workers", "1", "--quiet"]
    assert main(argv) == 0
    run = out / read_results(out / "results.csv")[0]["dir"]
    import shutil

    shutil.rmtree(run)
    run.write_text("x")
    calls = count_runs(monkeypatch)
    capsys.readouterr()
    assert main(argv) == 0
    assert len(calls) == 1 and "is damaged, running the point again" in capsys.readouterr().err
    assert all(r["status"] == "ok" for r in read_results(out / "results.csv"))
    assert (run / "summary.json").is_file()


def test_a_one_seed_study_into_a_folder_of_one_over_seeds_drops_its_seeds_csv(tmp_path):
    """compare --seeds 3, then --seeds 1 (here at another rate) into the same --out: the old
    seeds.csv stayed, and the new report paired the configurations by seed from it ('over 3
    seeds: no significant difference', runs of the other rate)."""
    from servesim.plots.report import load_folder

    sc, out = scenario_file(tmp_path), tmp_path / "cmp"
    argv = ["compare", sc, "--variant", "a", "policy.max_num_seqs=8", "--variant", "b", "policy.max_num_seqs=64",
            "--out", str(out), "--workers", "1", "--quiet", "--no-report"]
    assert main([*argv, "--seeds", "2"]) == 0 and (out / "seeds.csv").is_file()
    assert main([*argv, "--seeds", "1", "--set", "workload.arrival.rate_rps=30"]) == 0
    assert not (out / "seeds.csv").exists()
    assert load_folder(out)["seed_rows"] == []


def test_a_comparison_into_a_folder_another_study_is_writing_leaves_its_sweep_json(tmp_path, capsys):
    """compare wrote sweep.json before it took the folder's lock: refused (exit 2), it had already
    replaced the running study's record of what it runs."""
    import fcntl
    import os

    from servesim.studies.lock import LOCK_FILE

    out = tmp_path / "cmp"
    out.mkdir()
    (out / "sweep.json").write_text('{"kind": "sweep"}\n')
    fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT)  # (another study's: flock is per open file)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert main(["compare", scenario_file(tmp_path), "--variant", "a", "policy.max_num_seqs=8", "--out", str(out),
                     "--workers", "1", "--quiet", "--no-report"]) == 2
    finally:
        os.close(fd)
    assert "another servesim study is writing in this folder" in capsys.readouterr().err
    assert (out / "sweep.json").read_text() == '{"kind": "sweep"}\n'


@pytest.mark.parametrize("seeds", ["1", "2"])
def test_a_sweep_stopped_in_an_earlier_sweeps_folder_leaves_none_of_its_rows(tmp_path, monkeypatch, capsys, seeds):
    """Another grid into a finished sweep's --out, stopped before its first point ended (one seed)
    or before its end (over seeds, results.csv is written last): the earlier sweep's results.csv
    stayed beside the new sweep.json (and seeds.csv), and the report read the two as one study.
    One seed: results.csv lists the new points (pending) from the start; over seeds it is removed."""
    sc, out = scenario_file(tmp_path), tmp_path / "sw"
    tail = ["--out", str(out), "--workers", "1", "--quiet", "--seeds", seeds]
    assert main(["sweep", sc, "--grid", "workload.arrival.rate_rps=2,4", *tail]) == 0

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(executors_mod, "run_point", ctrl_c)
    assert main(["sweep", sc, "--grid", "policy.max_num_seqs=8,64", *tail]) == 130
    if seeds == "1":
        rows = read_results(out / "results.csv")
        assert [(r["policy.max_num_seqs"], r["status"]) for r in rows] == [(8, "pending"), (64, "pending")]
    else:
        assert not (out / "results.csv").exists()


_SIGINT_AT_FORK: list = []


def _sigint_after_fork():
    if _SIGINT_AT_FORK:
        _SIGINT_AT_FORK.clear()
        import signal

        os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_while_the_pool_forks_its_workers_stops_the_study(tmp_path, monkeypatch):
    """Ctrl-C that came while the pool forked its workers ran inside Python's at-fork hooks, which
    swallow exceptions: 'Exception ignored in: <function _releaseLock>', and the study ran on to its
    end with exit 0 (a plan, forking a pool per batch of runs, lost one Ctrl-C in three). It is
    held until the workers are started, then stops the study."""
    monkeypatch.setattr(executors_mod, "run_point", _slow_point)
    tasks = [(i, {}, str(tmp_path / f"p{i}")) for i in range(4)]
    _SIGINT_AT_FORK.append(1)
    with pytest.raises(KeyboardInterrupt):
        executors_mod.run_tasks(tasks, lambda key, row: None, "local", 2)
    assert not _SIGINT_AT_FORK


os.register_at_fork(after_in_parent=_sigint_after_fork)  # (inert until a test arms it)


def _second_worker_starts_late(parent_pid):
    """worker_init, the second worker's late (a loaded machine): the parent's Ctrl-C stops the pool
    before that worker runs (the first fork disarmed _SIGINT_AT_FORK, so only the second sees it
    empty); each worker leaves its pid in the study's folder."""
    import time
    from pathlib import Path

    if not _SIGINT_AT_FORK:
        time.sleep(0.5)
    with open(Path(os.environ["SERVESIM_TEST_PIDS"]), "a") as f:
        f.write(f"{os.getpid()}\n")
    _WORKER_INIT(parent_pid)


_WORKER_INIT = executors_mod.worker_init


def test_ctrl_c_while_the_pool_forks_ends_a_worker_that_starts_late(tmp_path, monkeypatch):
    """The workers forked while Ctrl-C was held inherited the holding handler: one that had not yet
    run its initializer when the stopped pool terminated it swallowed SIGTERM, and the pool, broken by
    the other worker's end, waited for it forever (servesim hung after Ctrl-C; under load the test
    above hung now and then). A worker's inherited handler now ends it on SIGTERM."""
    import signal
    import threading
    import time

    pids = tmp_path / "pids"
    monkeypatch.setenv("SERVESIM_TEST_PIDS", str(pids))
    monkeypatch.setattr(executors_mod, "run_point", _slow_point)
    monkeypatch.setattr(executors_mod, "worker_init", _second_worker_starts_late)
    tasks = [(i, {}, str(tmp_path / f"p{i}")) for i in range(4)]
    done, killed = threading.Event(), []

    def watchdog():  # (without the fix the study never ends: its workers are killed after 10 s)
        if not done.wait(10.0):
            for pid in pids.read_text().split() if pids.exists() else []:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                    killed.append(pid)
                except OSError:
                    pass

    threading.Thread(target=watchdog, daemon=True).start()
    _SIGINT_AT_FORK.append(1)
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            executors_mod.run_tasks(tasks, lambda key, row: None, "local", 2)
    finally:
        done.set()
    assert not killed and time.monotonic() - t0 < 10.0


def test_sweep_prints_the_points_that_fell_behind(tmp_path, capsys):
    """compare prints its caveats after the table; sweep printed none, so a point whose backlog grew
    through the run (its latencies only a function of the run's length) was shown like any other."""
    data = copy.deepcopy(BASE)
    data["policy"]["max_num_seqs"] = 4  # a sharp knee: above it the queue grows through the run
    data["workload"]["num_requests"] = 300
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(data))
    out = tmp_path / "sw"
    assert main(["sweep", str(sc), "--grid", "workload.arrival.rate_rps=1,200", "--out", str(out), "--quiet",
                 "--workers", "1"]) == 0
    rows = {r["workload.arrival.rate_rps"]: r for r in read_results(out / "results.csv")}
    assert rows[200]["keep_up"] < 0.9 <= rows[1]["keep_up"]
    printed = capsys.readouterr().out
    # (named by the swept value: "point 1 at 200 req/s" sent the reader to the table to find point 1)
    assert "note: rate_rps=200 did not keep up" in printed and "rate_rps=1 " not in printed
    assert "point 1" not in printed


def test_sweep_table_judges_each_point_by_the_slo(tmp_path, capsys):
    """compare's table has an slo column (meets / FAILS / -); sweep's had none, so a point whose
    backlog grew (a high share within the SLO over a short run, yet failing it) read like the others."""
    data = copy.deepcopy(BASE)
    data["policy"]["max_num_seqs"] = 4
    data["workload"]["num_requests"] = 300
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(data))
    out = tmp_path / "sw"
    assert main(["sweep", str(sc), "--grid", "workload.arrival.rate_rps=1,200", "--grid", "policy.max_num_seqs=0,4",
                 "--out", str(out), "--quiet", "--workers", "1"]) == 0
    from servesim.outputs.verdicts import meets_slo

    rows = {(r["workload.arrival.rate_rps"], r["policy.max_num_seqs"]): r for r in read_results(out / "results.csv")}
    lines = capsys.readouterr().out.splitlines()
    head = lines[0].split()
    assert "slo" in head and head.index("slo") == head.index("slo_attainment") + 1
    cells = {(float(c[head.index("workload.arrival.rate_rps")]), int(c[head.index("policy.max_num_seqs")])):
             c[head.index("slo")] for c in (line.split() for line in lines[1:5])}
    for k, r in rows.items():
        want = "-" if r["status"] != "ok" else "meets" if meets_slo(r) else "FAILS"
        assert cells[k] == want
    assert cells[(1, 4)] == "meets" and cells[(200, 4)] == "FAILS" and cells[(1, 0)] == "-"
    assert any(line.startswith("slo: meets when >= 90% of requests are within it") for line in lines)


def test_compare_policies_help_names_every_kind_it_takes():
    """``compare --policies`` takes registered names and ``module:Class`` plug-ins
    (``configurations``); its help said 'registered policy names' only."""
    import argparse

    from servesim.cli.parser import build_parser
    from servesim.studies.compare import configurations

    assert [c[0] for c in configurations("static,examples.mine:Mine", None)] == ["static", "examples.mine:Mine"]
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    (flag,) = [a for a in sub.choices["compare"]._actions if "--policies" in a.option_strings]
    assert "module:Class" in flag.help and "static" in flag.help


def test_a_run_folder_holding_another_points_run_is_not_reused(tmp_path, monkeypatch, capsys):
    """runs/<hash> whose (whole, intact) folder holds another scenario's run, e.g. two folders
    swapped or copied in under the wrong name: its results were taken as this point's (the rate-2
    point showed the rate-8 point's throughput). Its scenario.yaml is checked against the point's."""
    sc, out = scenario_file(tmp_path), tmp_path / "sw"
    argv = ["sweep", sc, "--grid", "workload.arrival.rate_rps=2,8", "--out", str(out), "--workers", "1", "--quiet"]
    assert main(argv) == 0
    before = read_results(out / "results.csv")
    a, b = (out / r["dir"] for r in before)
    a.rename(out / "runs" / "x")
    b.rename(a)
    (out / "runs" / "x").rename(b)
    calls = count_runs(monkeypatch)
    capsys.readouterr()
    assert main(argv) == 0
    assert len(calls) == 2 and "holds the run of another scenario" in capsys.readouterr().err
    after = read_results(out / "results.csv")
    assert [r["throughput_rps"] for r in after] == [r["throughput_rps"] for r in before]
    for r in after:
        assert yaml.safe_load((out / r["dir"] / "scenario.yaml").read_text())["workload"]["arrival"]["rate_rps"] == \
            r["workload.arrival.rate_rps"]


def test_an_unreadable_file_of_a_finished_run_reruns_its_point(tmp_path, monkeypatch, capsys):
    """A finished point's requests.csv that cannot be read (permissions, an I/O error) stopped the
    whole study ("cannot use '.../requests.csv': Permission denied", exit 2), where an unreadable
    summary.json reruns the point: it is damaged the same way, named, and its point runs again."""
    import servesim.outputs.rundir as rundir_mod

    sc, out = scenario_file(tmp_path), tmp_path / "sw"
    argv = ["sweep", sc, "--grid", "workload.arrival.rate_rps=2,8", "--out", str(out), "--workers", "1", "--quiet"]
    assert main(argv) == 0
    bad = out / read_results(out / "results.csv")[0]["dir"] / "requests.csv"
    real = rundir_mod.file_digest

    def unreadable(path):  # (chmod 000 does not stop root, who runs the tests here)
        if path == bad:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(rundir_mod, "file_digest", unreadable)
    calls = count_runs(monkeypatch)
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert len(calls) == 1 and "is damaged, running the point again" in err and "Permission denied" in err
    assert all(r["status"] == "ok" for r in read_results(out / "results.csv"))


def test_a_study_removes_the_report_an_earlier_study_left(tmp_path, capsys):
    """A sweep stopped with points to run, its report drawn, then the same sweep run to its end
    (or another study, or a comparison with --no-report, into the folder): the earlier report.md
    and figures stayed beside the new results, saying points 'did not run' that had. A study
    removes servesim's report.md and figures when it starts (a file of the user's stays)."""
    sc, out = scenario_file(tmp_path), tmp_path / "sw"
    sweep = ["sweep", sc, "--grid", "workload.arrival.rate_rps=2", "--out", str(out), "--workers", "1", "--quiet"]
    assert main(sweep) == 0
    (out / "figures").mkdir()  # (what servesim report writes, drawn by hand: drawing takes seconds)
    for f in ("ttft_vs_load.png", "ttft_vs_load.svg"):
        (out / "figures" / f).write_bytes(b"x")
    (out / "figures" / "mine.txt").write_text("the user's")
    (out / "report.md").write_text("# servesim report: sw\n\nA sweep ...: 1 points, 0 ran.\n")
    capsys.readouterr()
    assert main(sweep) == 0
    assert "removed the report.md and figures an earlier study left" in capsys.readouterr().err
    assert not (out / "report.md").exists()
    assert [f.name for f in (out / "figures").iterdir()] == ["mine.txt"]
    (out / "figures" / "mine.txt").unlink()
    (out / "figures" / "a.svg").write_bytes(b"x")
    compare = ["compare", sc, "--variant", "a", "policy.max_num_seqs=8", "--out", str(out), "--workers", "1",
               "--quiet", "--no-report"]
    assert main(compare) == 0
    assert not (out / "figures").exists()
    capsys.readouterr()
    (out / "report.md").write_text("# my notes\n")  # a report.md servesim did not write stays, unnoted
    assert main(compare) == 0
    assert (out / "report.md").read_text() == "# my notes\n" and "removed" not in capsys.readouterr().err


def test_report_refuses_a_folder_a_study_is_still_writing(tmp_path, capsys):
    """servesim report while a study runs in the folder: the report called the points still to run
    'stopped before' (the study was running them) and, drawn before the study's end, stayed as its
    report (a sweep writes none at its end). Refused, naming the study, until the study ends."""
    from servesim.studies.lock import LOCK_FILE, folder_lock, holder

    sc, out = scenario_file(tmp_path), tmp_path / "sw"
    assert main(["sweep", sc, "--grid", "workload.arrival.rate_rps=2", "--out", str(out), "--workers", "1",
                 "--quiet"]) == 0
    assert holder(out) is None
    with folder_lock(out, "sweep"):
        assert holder(out)["what"] == "sweep"
        capsys.readouterr()
        assert main(["report", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "a servesim study is still writing in" in err and "a sweep started" in err
    assert not (out / "report.md").exists() and holder(out) is None
    # a lock file still naming a holder killed with kill -9 (no lock held): no study is writing
    (out / LOCK_FILE).write_text('{"pid": 1, "host": "h", "what": "sweep", "started": "then"}\n')
    assert holder(out) is None


@pytest.mark.parametrize("rates, says", [
    ("1,2,1", r"--rates: '1' is given twice \(rates 1 and 3\)"),
    ("2,2.0", r"--rates: '2.0' is given twice \(rates 1 and 2\)"),
    ("inf", "--rates: each rate must be finite, got 'inf'"),
    ("1,1e400", "--rates: each rate must be finite, got '1e400'"),
])
def test_compare_rates_given_twice_or_infinite_are_refused_at_the_flag(tmp_path, capsys, rates, says):
    """--rates 1,1 ran every configuration twice at 1 req/s (--grid refuses a value given twice);
    inf was refused only as 'every configuration is invalid'."""
    out = tmp_path / "c"
    assert main(["compare", scenario_file(tmp_path), "--policies", "continuous,static", "--rates", rates,
                 "--out", str(out), "--quiet", "--no-report"]) == 2
    assert re.search(says, capsys.readouterr().err)
    assert not out.exists()


@pytest.mark.parametrize("flags, says", [
    (["--policies", "continuous,servesim.policies.continuous:ContinuousPolicy"],
     "'servesim.policies.continuous:ContinuousPolicy' (--policies value 2) runs what 'continuous' (--policies value "
     "1) runs (both ContinuousPolicy without chunked prefill)"),
    (["--policies", "static,servesim.policies.static:StaticPolicy"], "(both StaticPolicy)"),
    (["--policies", "chunked_prefill", "--variant", "c", "policy.name=servesim.policies.continuous:ContinuousPolicy",
      "--variant", "d", "policy.name=chunked_prefill"],
     "'d' (--variant d) runs what 'chunked_prefill' (--policies value 1) runs (both ContinuousPolicy with chunked"),
    (["--variant", "a", "policy.max_num_seqs=8", "--variant", "b", "policy.max_num_seqs=8"],
     "'b' (--variant b) runs what 'a' (--variant a) runs (the same changes)"),
    # the same once the values are read (8.0 is the integer 8): both rows shared one run folder
    (["--variant", "a", "policy.max_num_seqs=8", "--variant", "b", "policy.max_num_seqs=8.0"],
     "'b' (--variant b) runs what 'a' (--variant a) runs (the same scenario once their values are read)"),
    (["--policies", "continuous", "--variant", "v", "policy.name=continuous", "seed=0"],
     "'v' (--variant v) runs what 'continuous' (--policies value 1) runs (the same scenario once their values"),
    # the scenario's name is only a label: both rows ran one configuration, with equal results
    (["--variant", "a", "name=x", "--variant", "b", "name=y"],
     "'b' (--variant b) runs what 'a' (--variant a) runs (the same scenario once their values are read, differing "
     "only in name, a label)"),
])
def test_compare_refuses_one_configuration_by_two_names(tmp_path, capsys, flags, says):
    """compare --policies continuous,servesim.policies.continuous:ContinuousPolicy ran the one
    policy twice, as two rows (plan refuses one policy by two spellings): refused naming both."""
    out = tmp_path / "c"
    assert main(["compare", scenario_file(tmp_path), *flags, "--out", str(out), "--quiet", "--no-report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("servesim: error: servesim compare: ") and says in err[-1], err
    assert "give each once" in err[-1] and not out.exists()


def test_compare_keeps_one_class_with_and_without_chunks_and_variants_that_differ():
    from servesim.studies.compare import configurations

    configs = configurations("continuous,chunked_prefill,servesim.policies.static:StaticPolicy",
                             [["a", "policy.max_num_seqs=8"], ["b", "policy.max_num_seqs=16"],
                              ["c", "policy.name=continuous", "policy.max_num_seqs=8"]])
    assert [label for label, _ in configs] == ["continuous", "chunked_prefill", "servesim.policies.static:StaticPolicy",
                                               "a", "b", "c"]


def test_a_refused_comparison_point_names_its_rate_in_the_rates_unit():
    """compare names a refused point by its label and rate: with workload.sessions the rate starts
    sessions, and "static at 2 req/s" read as requests (the note and the table say sessions/s)."""
    from types import SimpleNamespace

    from servesim.studies.sweep import refused_points

    p = SimpleNamespace(values={"label": "static", "workload.arrival.rate_rps": 2.0}, number=0, error="too big",
                        row={"status": "error"})
    assert refused_points([p], "sessions/s") == [("static at 2 sessions/s", "too big")]
    assert refused_points([p]) == [("static at 2 req/s", "too big")]


def test_compare_refuses_a_configuration_the_setup_refuses_before_running(tmp_path, capsys):
    # userpass41: a P/D variant with --set cluster.replicas=2 (pd_split sizes its pools itself)
    # passed the schema, then was refused by the simulation's setup at every rate: the comparison
    # ran the other configuration, printed a row of errors for it and exited 0
    sc = scenario_file(tmp_path)
    out = tmp_path / "c"
    assert main(["compare", sc, "--set", "cluster.replicas=2", "--variant", "colocated", "policy.name=continuous",
                 "--variant", "pd", "policy.name=pd_split", "policy.prefill.replicas=1", "policy.decode.replicas=1",
                 "--rates", "1,2", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert (f"error: {sc}: configuration 'pd' (--policies/--variant) is invalid: cluster.replicas: "
            "with policy.name=pd_split") in err
    assert not out.exists()
    # the same split sized where the setup takes it is a valid comparison
    from servesim.studies.compare import plan_compare
    plan = plan_compare(sc, None, [["colocated", "policy.name=continuous", "cluster.replicas=2"],
                                   ["pd", "policy.name=pd_split", "policy.prefill.replicas=1"]], "1", [])
    assert [c[0] for c in plan.configs] == ["colocated", "pd"]


def test_the_slo_rule_names_the_limits_each_request_is_judged_against():
    """compare's and sweep's "meets" (90% of requests within the SLO, each request against its
    limits) and servesim plan's (p99s within them) can disagree on one deployment; the line that
    explains the slo column named neither the limits nor that they hold per request. It names them
    where the points share one SLO; with request classes (each its own SLO) it says so instead."""
    from servesim.cli.studies import _points_rule
    from servesim.studies.points import Point

    def point(i, slo, classes=None):
        data = {"slo": slo, "workload": {"classes": classes}} if classes else {"slo": slo}
        return Point(i, {}, data)

    line = _points_rule([point(0, {"ttft_s": 1.0, "tpot_s": 0.05}), point(1, {"ttft_s": 1.0, "tpot_s": 0.05})])
    assert line.startswith("slo: meets when >= 90% of requests are within it (each request's TTFT <= 1 s, "
                           "TPOT <= 50 ms: a share of the requests, not p99s)")
    # points with different SLOs (a variant's --set slo.ttft_s), or none: no limits named
    assert "TTFT" not in _points_rule([point(0, {"ttft_s": 1.0}), point(1, {"ttft_s": 2.0})])
    assert "TTFT" not in _points_rule([point(0, {"ttft_s": None, "tpot_s": None})])


def test_run_writes_the_slo_in_the_units_compare_and_the_report_write_it():
    """run printed "SLO attainment 100.0% (TTFT <= 1.0 s, TPOT <= 0.05 s)" of the SLO that compare's
    rule line, report.md and plan write "TTFT <= 1 s, TPOT <= 50 ms"."""
    from servesim.cli.main import _slo_text
    from servesim.cli.studies import _slo_limits
    from servesim.studies.points import Point

    slo = {"ttft_s": 1.0, "tpot_s": 0.05}
    assert _slo_text(slo) == "TTFT <= 1 s, TPOT <= 50 ms" == _slo_limits([Point(0, {}, {"slo": slo})])
    assert _slo_text({"ttft_s": 2.5, "tpot_s": None}) == "TTFT <= 2.5 s"
    assert _slo_text({}) == "no limits set: every completed request counts"


def test_a_sweep_over_seeds_counts_runs_as_runs_and_points_as_points(tmp_path, capsys):
    """With --seeds 2 a sweep of 2 points printed "2 points: 4 ran": it counted runs (one per seed
    of each point) where the sentence reads as points."""
    from pathlib import Path

    out = tmp_path / "sw"
    argv = ["sweep", str(Path(__file__).resolve().parent.parent / "scenarios" / "default.yaml"),
            "--grid", "workload.arrival.rate_rps=4,8", "--set",
            "workload.num_requests=30", "--seeds", "2", "--workers", "1", "--quiet", "--out", str(out)]
    assert main(argv) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "already finished" in ln)
    assert line.startswith("2 points: 4 runs ran, 0 already finished (2 seeds per point), 0 points failed;"), line
    assert main(argv) == 0
    assert "2 points: 0 runs ran, 4 already finished (2 seeds per point)" in capsys.readouterr().out
