"""--seeds N: runs on N seeds, means with 95% intervals that agree with the per-seed rows, paired
differences, capacity with an interval over seeds, and single-seed outputs left as they were."""

import copy
import csv
import json

import pytest
import yaml

from servesim.cli.main import main
from servesim.outputs.intervals import t_interval
from servesim.studies.capacity import CapacityOptions, SeedOptions, capacity_interval, find_capacity
from servesim.studies.executors import ExecutorOptions
from servesim.studies.sweep import METRIC_COLUMNS, read_results
from tests.conftest import BASE

QUIET = ExecutorOptions(workers=1, progress=False)


def scenario_file(tmp_path, n=40, **extra):
    data = copy.deepcopy(BASE)
    data["workload"]["num_requests"] = n
    data["slo"] = {"ttft_s": 0.5, "tpot_s": 0.05}
    data.update(extra)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(p)


def header(path):
    with open(path) as fh:
        return next(csv.reader(fh))


def test_sweep_with_seeds_averages_the_per_seed_rows(tmp_path, capsys):
    sc = scenario_file(tmp_path)
    out = tmp_path / "sw"
    assert main(["sweep", sc, "--grid", "policy.max_num_seqs=2,64", "--seeds", "3", "--out", str(out),
                 "--workers", "1", "--quiet"]) == 0
    rows, seeds = read_results(out / "results.csv"), read_results(out / "seeds.csv")
    assert len(rows) == 2 and len(seeds) == 6 and {r["seed"] for r in seeds} == {0, 1, 2}
    for r in rows:
        mine = [s for s in seeds if s["policy.max_num_seqs"] == r["policy.max_num_seqs"]]
        assert r["seeds"] == 3
        for col in ("goodput_rps", "ttft_p99_s", "tpot_p50_s", "completed"):
            iv = t_interval([s[col] for s in mine])
            assert r[col] == pytest.approx(iv.mean) and r[col + "_ci95"] == pytest.approx(iv.half)
        assert (out / r["dir"] / "summary.json").is_file()  # the first seed's run
    printed = capsys.readouterr().out
    assert "\u00b1" in printed and "means and 95% intervals over 3 seeds" in printed


def test_seeds_csv_rows_name_the_point_they_ran_for(tmp_path, capsys):
    """seeds.csv has "the same columns" as results.csv and a seed column, yet its ``point`` was the
    run's own number (0 .. points x seeds - 1): a join on ``point`` paired point 0's second seed with
    results.csv's point 1, and the sweep's notes named runs as points results.csv does not have
    ("point 1 at 4 req/s, point 2 at 30 req/s, point 3 at 30 req/s" over two points). Found by
    recomputing a --seeds sweep's means from seeds.csv by point."""
    sc = scenario_file(tmp_path, n=60, memory={"num_gpu_blocks": 40})
    out = tmp_path / "sw"
    assert main(["sweep", sc, "--grid", "policy.max_num_seqs=2,64", "--seeds", "2", "--out", str(out),
                 "--workers", "1", "--quiet"]) == 0
    rows, seeds = read_results(out / "results.csv"), read_results(out / "seeds.csv")
    by_point = {r["point"]: r for r in rows}
    assert sorted(s["point"] for s in seeds) == [0, 0, 1, 1]
    for s in seeds:
        assert s["policy.max_num_seqs"] == by_point[s["point"]]["policy.max_num_seqs"]
    printed = capsys.readouterr()
    notes = printed.out + printed.err
    assert "preemptions" in notes and "point 2" not in notes and "point 3" not in notes


def test_single_seed_results_keep_their_columns(tmp_path):
    sc = scenario_file(tmp_path)
    out = tmp_path / "one"
    assert main(["sweep", sc, "--grid", "policy.max_num_seqs=2,64", "--out", str(out), "--workers", "1",
                 "--quiet"]) == 0
    head = header(out / "results.csv")
    assert not [c for c in head if c.endswith("_ci95")] and "seeds" not in head
    assert head[head.index("error") + 1:head.index("hash")] == list(METRIC_COLUMNS)
    assert not (out / "seeds.csv").exists()
    # a second run with seeds reuses the first seed's folders
    assert main(["sweep", sc, "--grid", "policy.max_num_seqs=2,64", "--out", str(out), "--workers", "1",
                 "--quiet", "--seeds", "2"]) == 0
    assert read_results(out / "results.csv")[0]["dir"] == read_results(out / "seeds.csv")[0]["dir"]


def test_compare_with_seeds_pairs_differences_and_flags_identical_variants(tmp_path, capsys):
    sc = scenario_file(tmp_path, n=60)
    out = tmp_path / "cmp"
    # (a variant whose change cannot matter, another router for one replica: the same results by
    # another configuration; the same configuration under two names is refused, test_sweep)
    assert main(["compare", sc, "--policies", "continuous",
                 "--variant", "same", "cluster.router=least_outstanding_tokens",
                 "--variant", "small", "policy.max_num_seqs=2", "--seeds", "3", "--out", str(out),
                 "--workers", "1", "--quiet", "--no-report"]) == 0
    printed = capsys.readouterr().out
    assert "same gave exactly the same results as continuous" in printed
    warns = json.loads((out / "sweep.json").read_text())["warnings"]
    assert [w["code"] for w in warns] == ["identical_variants"] and "same gave" in warns[0]["message"]
    seeds = read_results(out / "seeds.csv")
    small = [r for r in seeds if r["label"] == "small"]
    cont = [r for r in seeds if r["label"] == "continuous"]
    # the difference printed is the paired one (same seed through both)
    d = t_interval([s["ttft_p99_s"] - c["ttft_p99_s"] for s, c in zip(small, cont)])
    line = next(x for x in printed.splitlines() if x.startswith("small vs continuous"))
    assert "over 3 seeds" in line
    if d.excludes(0.0):
        assert "p99 TTFT +" in line and "(worse)" in line
    else:
        assert "p99 TTFT" in line.split("no significant difference in")[-1]
    # identical configurations have no significant difference at all
    same = next(x for x in printed.splitlines() if x.startswith("same vs continuous"))
    assert same.endswith("): no significant difference.")


def test_compare_runs_pd_split_on_a_colocated_scenario_with_the_same_gpus(tmp_path, capsys):
    sc = scenario_file(tmp_path, cluster={"replicas": 2})
    out = tmp_path / "pd"
    assert main(["compare", sc, "--policies", "continuous,pd_split", "--out", str(out), "--workers", "1",
                 "--quiet", "--no-report"]) == 0
    rows = {r["label"]: r for r in read_results(out / "results.csv")}
    assert rows["pd_split"]["status"] == "ok" and rows["pd_split"]["num_gpus"] == rows["continuous"]["num_gpus"] == 2
    resolved = yaml.safe_load((out / rows["pd_split"]["dir"] / "scenario.yaml").read_text())
    assert resolved["policy"]["prefill"]["replicas"] == 1 and resolved["policy"]["decode"]["replicas"] == 1
    assert "runs as a P/D split of the same GPUs" in capsys.readouterr().out
    notes = json.loads((out / "sweep.json").read_text())["notes"]
    assert any("policy.prefill.replicas=1" in n for n in notes)


def test_pd_split_with_replicas_says_what_to_set(tmp_path, capsys):
    sc = scenario_file(tmp_path, cluster={"replicas": 3})
    assert main(["run", sc, "--set", "policy.name=pd_split", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "cluster.replicas=1 policy.prefill.replicas=1 policy.decode.replicas=2" in err


def test_run_with_seeds_adds_a_seeds_section(tmp_path, capsys):
    sc = scenario_file(tmp_path)
    out = tmp_path / "run"
    assert main(["run", sc, "--seeds", "3", "--out", str(out), "--quiet", "--workers", "1"]) == 0
    s = json.loads((out / "summary.json").read_text())
    sec = s["seeds"]
    assert sec["seeds"] == [0, 1, 2] and sec["method"] == "student-t over seeds"
    g = sec["figures"]["goodput_rps"]
    assert g["values"][0] == s["goodput_rps"] and len(g["values"]) == 3  # seed 0 is the run written
    assert g["mean"] == pytest.approx(sum(g["values"]) / 3) and g["ci95"] == pytest.approx(t_interval(g["values"]).half)
    assert sec["figures"]["ttft_s.p99"]["values"][0] == s["ttft_s"]["p99"]
    assert "over 3 seeds (0..2" in capsys.readouterr().out
    # one seed: no section, the summary as before
    assert main(["run", sc, "--out", str(tmp_path / "one"), "--quiet"]) == 0
    assert "seeds" not in json.loads((tmp_path / "one" / "summary.json").read_text())


def _strict_json(path):
    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_seeds_without_a_figure_give_null_and_say_how_many_have_it(tmp_path, capsys):
    """One-token outputs have no TPOT or ITL: every seed without one wrote NaN (not JSON) as the
    mean; some seeds without one were left out of the mean without a word."""
    sc = scenario_file(tmp_path, n=1)
    one = ["--set", "workload.output_tokens={dist: fixed, value: 1}"]
    assert main(["run", sc, "--seeds", "3", "--out", str(tmp_path / "none"), "--quiet", "--workers", "1", *one]) == 0
    f = _strict_json(tmp_path / "none" / "summary.json")["seeds"]["figures"]
    assert f["tpot_s.p50"] == {"mean": None, "ci95": None, "n": 0, "values": [None, None, None]}
    assert f["ttft_s.p50"]["n"] == 3 and f["ttft_s.p50"]["mean"] > 0
    capsys.readouterr()
    # one request of 1 or 2 output tokens: some seeds have a TPOT, some none
    mixed = ["--set", "workload.output_tokens={dist: uniform, min: 1, max: 2}"]
    assert main(["run", sc, "--seeds", "8", "--out", str(tmp_path / "some"), "--quiet", "--workers", "1", *mixed]) == 0
    f = _strict_json(tmp_path / "some" / "summary.json")["seeds"]["figures"]["tpot_s.p50"]
    have = [v for v in f["values"] if v is not None]
    assert 0 < f["n"] == len(have) < 8 and f["mean"] == pytest.approx(sum(have) / len(have))
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("TPOT") and " p50 " in x)
    assert line.endswith(f"(over the {f['n']} of 8 seeds that have one)")


def cap_scenario(tmp_path):
    data = copy.deepcopy(BASE)
    data["policy"]["max_num_seqs"] = 4  # a sharp knee: above capacity the queue grows through the run
    data["workload"]["num_requests"] = 200
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


def test_capacity_interval_is_the_t_interval_of_the_seeds_searches(tmp_path):
    sc = cap_scenario(tmp_path)
    opts = CapacityOptions(probe_requests=200)
    ci = capacity_interval(sc, "ttft_p99=300ms", opts, SeedOptions(seeds=3), tmp_path / "cap", ex=QUIET)
    assert ci.error is None and ci.seeds == [0, 1, 2] and ci.stopped_short is None
    caps = [r.capacity_rps for r in ci.per_seed]
    assert ci.interval.mean == pytest.approx(sum(caps) / 3)
    assert ci.interval.half == pytest.approx(t_interval(caps).half)
    cap = json.loads((tmp_path / "cap" / "capacity.json").read_text())
    assert cap["capacity_rps"] == pytest.approx(ci.interval.mean)
    assert cap["capacity_ci95_rps"] == pytest.approx(ci.interval.half)
    assert [x["seed"] for x in cap["seeds"]] == [0, 1, 2] and cap["interval"]["seeds"] == 3
    # each seed's answer is the one a single-seed search on that seed finds (bracket floor within --tol)
    one = find_capacity(sc, "ttft_p99=300ms", opts, tmp_path / "one", seed=1, ex=QUIET)
    assert abs(one.capacity_rps / caps[1] - 1) <= 2 * opts.tol
    rows = read_results(tmp_path / "cap" / "results.csv")
    assert {r["seed"] for r in rows} == {0, 1, 2} and not list((tmp_path / "cap").glob("results-seed*"))


def test_capacity_keeps_adding_seeds_until_the_target_or_says_it_stopped_short(tmp_path, capsys):
    sc = cap_scenario(tmp_path)
    opts = CapacityOptions(probe_requests=200)
    short = capacity_interval(sc, "ttft_p99=300ms", opts, SeedOptions(max_seeds=4, target=1e-6), ex=QUIET)
    assert len(short.seeds) == 4 and "--max-seeds 4" in short.stopped_short
    wide = capacity_interval(sc, "ttft_p99=300ms", opts, SeedOptions(target=0.9), ex=QUIET)
    assert len(wide.seeds) == 3 and wide.stopped_short is None and wide.interval.rel <= 0.9
    # the command prints the interval to its precision and the per-seed answers
    assert main(["capacity", sc, "--slo", "ttft_p99=300ms", "--probe-requests", "200", "--max-seeds", "3",
                 "--ci-target", "0.001", "--per-gpu", "--workers", "1", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "\u00b1" in printed and "per GPU" in printed and "stopped short" in printed
    assert printed.count("\n   ") >= 3  # a row per seed


def test_bad_seed_options_exit_2(tmp_path, capsys):
    sc = scenario_file(tmp_path)
    assert main(["run", sc, "--seeds", "0", "--out", str(tmp_path / "o")]) == 2
    assert main(["capacity", sc, "--slo", "ttft_p99=1", "--max-seeds", "1"]) == 2
    assert main(["capacity", sc, "--slo", "ttft_p99=1", "--ci-target", "2"]) == 2
    err = capsys.readouterr().err
    assert "--seeds must be >= 1" in err and "--max-seeds" in err and "--ci-target" in err
    # with one seed too (no interval to aim at, yet a value that could never work is still refused)
    assert main(["capacity", sc, "--slo", "ttft_p99=1", "--seeds", "1", "--ci-target", "nan"]) == 2
    assert "--ci-target must be a share in (0, 1), got nan" in capsys.readouterr().err
    # given with --seeds, which runs exactly that many, they would change nothing: refused, not ignored
    for flag, value in (("--max-seeds", "20"), ("--ci-target", "0.01")):
        assert main(["capacity", sc, "--slo", "ttft_p99=1", "--seeds", "3", flag, value,
                     "--out", str(tmp_path / "c")]) == 2
        assert f"{flag} {value}: " in capsys.readouterr().err and not (tmp_path / "c").exists()


def test_seed_counts_past_the_bound_exit_2_before_running(tmp_path, capsys):
    """A count of seeds is bounded (MAX_SEEDS): 999,999,999 seeds used to be listed in memory and
    the process was killed for it; now every command that takes one says so, exit 2, at once."""
    from servesim.studies.replicates import MAX_SEEDS

    sc = scenario_file(tmp_path)
    big = str(MAX_SEEDS + 1)
    calls = [["run", sc, "--seeds", "999999999", "--out", str(tmp_path / "o")],
             ["capacity", sc, "--slo", "ttft_p99=1", "--seeds", big],
             ["capacity", sc, "--slo", "ttft_p99=1", "--max-seeds", str(2**63)],
             ["sweep", sc, "--grid", "seed=1,2", "--seeds", big, "--out", str(tmp_path / "s")],
             ["compare", sc, "--seeds", big, "--out", str(tmp_path / "c"), "--quiet"],
             ["plan", sc, "--rate", "1", "--slo", "ttft_p99=1", "--seeds", big, "--out", str(tmp_path / "p"),
              "--quiet"]]
    for argv in calls:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert err and f"must be <= {MAX_SEEDS:,}" in err[-1], (argv, err)
    assert main(["run", sc, "--seeds", "1", "--out", str(tmp_path / "one"), "--quiet"]) == 0  # (the bound alone)


def test_seeds_after_the_largest_start_again_at_zero():
    """Every seed a run lists can be given back as --seed (0 .. 2**63 - 1): past the largest the
    seeds go on from 0."""
    from servesim.studies.replicates import seeds_for

    top = 2**63 - 1
    assert seeds_for(top, 3) == [top, 0, 1]
    assert seeds_for(None, 2) == [0, 1] and seeds_for(5, 1) == [5]


def test_run_with_seeds_says_which_seeds_warned(tmp_path, capsys):
    """The seeds section lists each warning code with the seeds whose runs raised it (the same as
    running each seed alone); the printed summary and the report name those the first seed's run
    (whose figures are shown) did not raise."""
    from servesim.cli.main import format_seeds
    from servesim.plots.report import _run_verdict
    from servesim.simulation import simulate
    from servesim.inputs.scenario import load_scenario

    sc = scenario_file(tmp_path, n=120, memory={"num_gpu_blocks": 300},
                       workload={**BASE["workload"], "num_requests": 120,
                                 "arrival": {"process": "poisson", "rate_rps": 100.0},
                                 "prompt_tokens": {"dist": "uniform", "min": 256, "max": 1024},
                                 "output_tokens": {"dist": "uniform", "min": 32, "max": 128}})
    out = tmp_path / "run"
    assert main(["run", sc, "--seeds", "3", "--out", str(out), "--quiet", "--workers", "1"]) == 0
    warned = json.loads((out / "summary.json").read_text())["seeds"]["warnings"]
    alone: dict = {}
    for seed in (0, 1, 2):
        for w in simulate(load_scenario(sc, seed=seed)).summary["warnings"]:
            alone.setdefault(w["code"], []).append(seed)
    assert warned == alone and warned
    sec = {"seeds": [0, 1, 2], "figures": json.loads((out / "summary.json").read_text())["seeds"]["figures"],
           "warnings": {"preemptions": [1, 2], "clipped": [0, 1, 2]}}
    assert "  warnings    preemptions on seeds 1, 2; clipped on every seed" in format_seeds(sec)
    text = "\n".join(_run_verdict({"goodput_rps": 1.0, "slo_attainment": 1.0, "warnings": [
        {"code": "clipped", "message": "m"}], "seeds": sec}))
    assert ("- The runs on other seeds than 0 (whose figures these are) also warned: preemptions (seeds 1, 2)"
            in text) and "clipped (" not in text


@pytest.mark.parametrize("workers", ["0", "-1"])
def test_run_refuses_workers_the_studies_refuse(tmp_path, capsys, workers):
    """run --workers 0 / -1 ran (0 meaning every core); sweep, capacity and reproduce refuse them."""
    sc = scenario_file(tmp_path)
    assert main(["run", sc, "--seeds", "2", "--workers", workers, "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert capsys.readouterr().err.strip().endswith(f"--workers must be >= 1 and <= 4096, got {workers}")
    assert not (tmp_path / "o" / "summary.json").exists()  # refused before anything ran


def test_the_lowest_class_over_seeds_is_the_lowest_of_the_class_means():
    """class_slo_attainment_min over seeds is judged as the overall share is, by its mean: each
    class's mean over the seeds on which it drew requests, then the lowest, not the mean of each
    seed's lowest class (0.85 and 0.97 for chat, 0.97 and 0.85 for batch: every class's mean is
    0.91, while the mean of the lowest, 0.85, failed the SLO with no class under it)."""
    from servesim.outputs.verdicts import CLASS_ATTAINMENTS, CLASS_MIN
    from servesim.studies.replicates import aggregate_row

    def row(att):
        return {"status": "ok", "slo_attainment": 0.95, CLASS_MIN: min(att.values()) if att else None,
                CLASS_ATTAINMENTS: att}

    out = aggregate_row([row({"chat": 0.85, "batch": 0.97}), row({"chat": 0.97, "batch": 0.85})],
                        ("slo_attainment", CLASS_MIN))
    assert out[CLASS_MIN] == pytest.approx(0.91) and out[CLASS_MIN + "_ci95"] > 0
    # a seed on which the class drew no request is left out of its mean
    out = aggregate_row([row({"chat": 0.5, "batch": 1.0}), row({"batch": 1.0}), row({"chat": 0.7, "batch": 1.0})],
                        (CLASS_MIN,))
    assert out[CLASS_MIN] == pytest.approx(0.6)
    # rows without the classes (a results.csv read back): the column's mean
    out = aggregate_row([{"status": "ok", CLASS_MIN: 0.5}, {"status": "ok", CLASS_MIN: 0.7}], (CLASS_MIN,))
    assert out[CLASS_MIN] == pytest.approx(0.6)
