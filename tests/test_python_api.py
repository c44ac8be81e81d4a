"""The Python API as a notebook uses it: values computed with numpy, scenarios changed after loading,
packaged scenarios by name, results shown and figures drawn next to the user's own."""

import dataclasses
import importlib

import numpy as np
import pytest

import servesim
from servesim import ContinuousPolicy
from servesim.inputs.scenario import scenario_to_yaml


def test_numpy_numbers_are_taken_as_the_numbers_they_hold():
    # (a loop over np.arange gives np.int64: it was refused as "seed must be an integer, got np.int64(3)",
    # and a rate of np.int64(4) as "must be a number")
    sc = servesim.load_scenario(None, seed=np.int64(3))
    assert sc.seed == 3 and type(sc.seed) is int
    data = sc.to_dict()
    data["workload"]["num_requests"] = np.int64(20)
    data["workload"]["arrival"]["rate_rps"] = np.int64(4)
    data["memory"]["gpu_memory_utilization"] = np.float32(0.5)
    data["policy"]["prefix_caching"] = np.bool_(True)
    data["hardware"]["gpu"] = np.str_("a100-80g")
    s2 = servesim.scenario_from_dict(data)
    assert (s2.workload.num_requests, s2.workload.arrival.rate_rps, s2.hardware.gpu) == (20, 4.0, "a100-80g")
    assert type(s2.workload.arrival.rate_rps) is float and s2.policy.prefix_caching is True
    assert type(s2.memory.gpu_memory_utilization) is float
    assert "num_requests: 20" in scenario_to_yaml(s2)  # plain values: the scenario's YAML can be written
    assert servesim.simulate(s2).summary["completed"] == 20
    # a numpy value is checked as the plain one is
    data["workload"]["num_requests"] = np.float64(2.5)
    with pytest.raises(servesim.InputError, match="workload.num_requests must be an integer"):
        servesim.scenario_from_dict(data)
    with pytest.raises(servesim.InputError, match="seed must be >= 0"):
        servesim.load_scenario(None, seed=np.int64(-1))


def test_packaged_scenarios_load_by_name_from_any_folder(tmp_path, monkeypatch):
    # (the command line found them after pip install; load_scenario and the studies said
    # "scenario 'scenarios/chat.yaml' does not exist" outside a checkout)
    from servesim.studies.points import load_base

    monkeypatch.chdir(tmp_path)
    for name in ("chat", "chat.yaml", "scenarios/chat.yaml"):
        assert servesim.load_scenario(name).name == "chat-llama3-8b-h100"
    assert servesim.load_scenario("lessons/offline", ["workload.num_requests=5"]).workload.num_requests == 5
    assert load_base("scenarios/default.yaml", ["seed=4"], None)[0]["seed"] == 4
    with pytest.raises(servesim.InputError, match=r"'chta' does not exist.*did you mean 'chat'"):
        servesim.load_scenario("chta")
    with pytest.raises(servesim.InputError, match="'nope/chat.yaml' does not exist"):
        servesim.load_scenario("nope/chat.yaml")
    # a file of that name here comes first
    (tmp_path / "chat.yaml").write_text(scenario_to_yaml(servesim.load_scenario(None, ["name=mine"])))
    assert servesim.load_scenario("chat.yaml").name == "mine"


@pytest.mark.parametrize("change, says", [
    # (each ran into the library's own error deep in the run: numpy's "expected non-negative
    # integer", "negative dimensions are not allowed", a ZeroDivisionError)
    (lambda sc: dataclasses.replace(sc, seed=-1), "seed must be >= 0"),
    (lambda sc: dataclasses.replace(sc, workload=dataclasses.replace(sc.workload, num_requests=-5)),
     "workload.num_requests must be > 0"),
    (lambda sc: dataclasses.replace(sc, cluster=dataclasses.replace(sc.cluster, replicas=0)),
     "cluster.replicas must be > 0"),
    (lambda sc: dataclasses.replace(sc, policy=dataclasses.replace(sc.policy, max_num_seqs="8")),
     "policy.max_num_seqs must be an integer"),
    (lambda sc: dataclasses.replace(sc, policy=dataclasses.replace(sc.policy, name=ContinuousPolicy)),
     r"policy.name must be a string, got <class .*'__main__:ContinuousPolicy'"),
])
def test_a_scenario_changed_in_python_is_checked_before_it_runs(change, says):
    sc = servesim.load_scenario(None, ["workload.num_requests=5"])
    with pytest.raises(servesim.InputError, match=r"simulate\(scenario\), a field set in Python: " + says):
        servesim.simulate(change(sc))


def test_a_valid_change_runs_and_a_loaded_scenario_is_not_checked_again(monkeypatch):
    from servesim.inputs import scenario as scenario_module

    sc = servesim.load_scenario(None, ["workload.num_requests=5"])
    changed = dataclasses.replace(sc, seed=7, workload=dataclasses.replace(sc.workload, num_requests=6))
    first = servesim.simulate(changed)
    assert first.summary["completed"] == 6 and first.scenario.seed == 7
    calls = []
    monkeypatch.setattr(scenario_module, "build", lambda *a: calls.append(a))
    servesim.simulate(changed)
    servesim.simulate(sc)
    assert calls == []  # (checked once: the same objects are not built again)


def test_drawing_a_report_leaves_the_users_matplotlib_alone(tmp_path):
    # (importing servesim.plots.report ran matplotlib.use("Agg"): a notebook's inline backend, or a
    # desktop's, was switched away, and the user's figures stopped showing)
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import matplotlib
        matplotlib.use("svg")  # stands in for a notebook's inline backend: not the Agg servesim draws with
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots()
        ax.plot([1, 2])
        import servesim
        from servesim.plots import figures
        from servesim.plots.report import build_report
        res = servesim.simulate(servesim.load_scenario(None, ["workload.num_requests=20"]))
        res.write("run")
        report = build_report("run")
        figures.panels_png(figures, [("latency_cdfs", {"x": res.requests["finish_s"]})], "p.png")
        print(matplotlib.get_backend(), plt.get_fignums(), report.name)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["svg", "[1]", "report.md"]
    assert (tmp_path / "run" / "figures").is_dir() and any((tmp_path / "run" / "figures").glob("*.png"))


def test_results_show_in_a_notebook_as_one_line():
    # (the dataclass repr printed the scenario, the summary and every column: ~40,000 characters)
    res = servesim.simulate(servesim.load_scenario(None, ["workload.num_requests=12"]))
    text = repr(res)
    assert "\n" not in text and len(text) < 300
    assert "'default-llama3-8b-h100': 12 requests, 12 completed, 0 rejected, 0 unfinished" in text
    assert f"{res.summary['sim_time_s']:.4g} s simulated" in text
    one = servesim.simulate(servesim.load_scenario(None), specs=servesim.RequestSpecs([0.0], [10], [2]))
    assert ": 1 request, 1 completed," in repr(one)


@pytest.mark.parametrize("column", ["arrival_s", "prompt_tokens", "output_tokens"])
def test_request_specs_without_a_needed_column_name_it(column):
    # (a column left None was a KeyError on its name)
    cols = {"arrival_s": [0.0, 1.0], "prompt_tokens": [10, 20], "output_tokens": [5, 5], column: None}
    with pytest.raises(servesim.InputError, match=f"specs.{column}: a column is needed"):
        servesim.simulate(servesim.load_scenario(None), specs=servesim.RequestSpecs(**cols))


def test_studies_from_python_take_scenario_objects_and_data_and_name_them_by_name(tmp_path):
    # (a sweep or compare of scenario data wrote the data's whole repr into sweep.json / compare.json as
    # "scenario", and report.md began "A sweep of `{'model': ...`"; a Scenario object was a TypeError
    # from os.lstat)
    import json

    from servesim.plots.report import build_report
    from servesim.studies.compare import plan_compare
    from servesim.studies.executors import ExecutorOptions
    from servesim.studies.sweep import run_sweep

    ex = ExecutorOptions(workers=1, progress=False)
    sc = servesim.load_scenario(None, ["workload.num_requests=10", "name=mine"])
    for i, given in enumerate((sc, sc.to_dict())):
        out = tmp_path / f"s{i}"
        res = run_sweep(given, ["policy.max_num_seqs=8,16"], out, ex=ex)
        assert [r["status"] for r in res.rows] == ["ok", "ok"] and res.rows[0]["num_requests"] == 10
        assert json.loads((out / "sweep.json").read_text())["scenario"] == "mine"
    assert "A sweep of `mine`" in build_report(tmp_path / "s0").read_text()
    # (rates as a list: "'list' object has no attribute 'split'")
    plan = plan_compare(sc, "continuous", None, [8, 16.5])
    assert plan.scenario == "mine" and plan.rates == [8.0, 16.5]
    assert plan_compare(sc, "continuous", None, np.float64(4)).rates == [4.0]
    # (policies as a list, as rates may be one: "'list' object has no attribute 'split'")
    assert [c[0] for c in plan_compare(sc, ["continuous", "chunked_prefill"], None, None).configs] == [
        "continuous", "chunked_prefill"]
    assert plan_compare("scenarios/default.yaml", "continuous", None, None).scenario == "scenarios/default.yaml"


def study(name):
    return importlib.import_module(f"servesim.studies.{name}")


@pytest.mark.parametrize("call, says", [
    # (each string was taken character by character: "--set 'w': expected dotted.key=value")
    (lambda: study("sweep").run_sweep(None, "policy.max_num_seqs=8,16", "unused"), r"grid_texts=.*put it in a list"),
    (lambda: study("sweep").run_sweep(None, ["policy.max_num_seqs=8,16"], "unused", overrides="seed=3"),
     r"overrides: .*put it in a list"),
    (lambda: study("compare").plan_compare(None, "continuous", None, None, overrides="seed=3"),
     r"plan_compare\(overrides=.*put it in a list"),
    (lambda: study("compare").plan_compare(5, "continuous", None, None), "the scenario: a file path .* got int"),
    # (a variant as (label, [texts]) ended in "'list' object has no attribute 'split'"; one variant
    # given bare was taken character by character: "--variant s: 'p': expected dotted.key=value")
    (lambda: study("compare").plan_compare(None, None, [("spf", ["policy.max_num_seqs=8"])], None),
     r"plan_compare\(variants=...\): a list of variants, each a list of texts \[label, 'key=value', ...\], got "
     r"\('spf', \['policy.max_num_seqs=8'\]\)"),
    (lambda: study("compare").plan_compare(None, None, ["spf", "policy.max_num_seqs=8"], None),
     r"plan_compare\(variants=...\): .*got 'spf' \(one variant: put it in a list\)"),
    (lambda: study("compare").plan_compare(None, 5, None, None),
     r"plan_compare\(policies=...\): 'a,b' or a list of policy names, got 5"),
    # (a number given as text failed as "'<=' not supported between instances of 'int' and 'str'")
    (lambda: study("executors").ExecutorOptions(workers="2"),
     r"ExecutorOptions\(workers=...\): a number, got '2'"),
    (lambda: study("capacity").CapacityOptions(probe_requests="300"),
     r"CapacityOptions\(probe_requests=...\): a number, got '300'"),
    # (None where a number is needed failed inside the search: "'<=' not supported ... 'float' and 'NoneType'")
    (lambda: study("capacity").find_capacity("scenarios/default.yaml", "ttft_p99=1",
                                             study("capacity").CapacityOptions(tol=None)),
     r"CapacityOptions\(tol=...\): a number, got None"),
    (lambda: study("plan").PlanOptions(rate_rps="3", slo="ttft_p99=1"),
     r"PlanOptions\(rate_rps=...\): a number, got '3'"),
    (lambda: study("plan").PlanOptions(rate_rps=3, slo="ttft_p99=1", max_gpus=None),
     r"PlanOptions\(max_gpus=...\): a number, got None"),
    # (a bare text was taken character by character: "--tp: expected positive integers, got 1,,,2")
    (lambda: study("plan").PlanOptions(rate_rps=3, slo="ttft_p99=1", tps="1,2"),
     r"PlanOptions\(tps=...\): a list or tuple, got '1,2' \(one value: put it in a list\)"),
    (lambda: study("plan").PlanOptions(rate_rps=3, slo={"ttft_p99": 1}), r"PlanOptions\(slo=...\): text such as"),
    (lambda: study("reproduce").Options(workers="2"), r"Options\(workers=...\): a number, got '2'"),
])
def test_studies_from_python_name_a_wrong_argument(call, says, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError, match=says):
        call()
    assert not (tmp_path / "unused").exists()


def test_simulate_and_run_data_name_a_wrong_argument():
    from servesim.outputs.rundir import RunData

    sc = servesim.load_scenario(None, ["workload.num_requests=5"])
    with pytest.raises(TypeError, match=r"simulate\(decision_trace=...\): True or False, got 'no'"):
        servesim.simulate(sc, decision_trace="no")  # (text was true: the trace was recorded)
    assert servesim.simulate(sc, decision_trace=np.bool_(False)).decisions is None
    with pytest.raises(TypeError, match=r"RunData.from_results: a servesim.Results .* got Scenario"):
        RunData.from_results(sc)  # (AttributeError: 'Scenario' object has no attribute 'steps')
    with pytest.raises(TypeError, match="RunData.from_dir"):
        RunData.from_results("out/run")


@pytest.mark.parametrize("change", [
    # (each passed the check, which reads the scenario's data, and then ran the object as it was:
    # AttributeError "'dict' object has no attribute 'ttft_s'", numpy's "expected a sequence of
    # integers ... got '20.0'", SeedSequence's "expects int ... not 3.0")
    lambda sc: dataclasses.replace(sc, slo={"ttft_s": 2.0, "tpot_s": 0.1}),
    lambda sc: dataclasses.replace(sc, hardware=dataclasses.asdict(sc.hardware)),
    lambda sc: dataclasses.replace(sc, workload=dataclasses.replace(sc.workload, num_requests=5.0)),
    lambda sc: dataclasses.replace(sc, seed=3.0),
])
def test_a_change_in_python_runs_as_the_scenario_its_data_makes(change):
    sc = servesim.load_scenario(None, ["workload.num_requests=5"])
    changed = change(sc)
    res = servesim.simulate(changed)
    assert res.summary["completed"] == 5
    assert res.scenario == servesim.scenario_from_dict(changed.to_dict())
    assert type(res.scenario.seed) is int and type(res.scenario.workload.num_requests) is int
    # the same object again: the same results, from the scenario built once
    again = servesim.simulate(changed)
    assert again.scenario is res.scenario
    assert again.summary["ttft_s"] == res.summary["ttft_s"]


def test_overrides_given_as_a_mapping_are_named_as_such():
    # (a dict was taken as the list of its keys: {"seed": 3} read "--set 'seed': expected
    # dotted.key=value", about a --set the user never wrote)
    with pytest.raises(TypeError, match=r"load_scenario\(overrides=...\): a list of 'dotted.key=value' strings, "
                                        r"got \{'seed': 3\} \(a mapping: write \['seed=3'\]\)"):
        servesim.load_scenario(None, overrides={"seed": 3})


def test_every_exported_class_and_function_has_a_docstring_of_its_own():
    # (Results, Scenario, ContinuousPolicy and Request had none: docs/reference/api.md showed the
    # signature dataclasses invent, or nothing, for the results object every notebook reads)
    import inspect

    for name in servesim.__all__:
        obj = getattr(servesim, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
        assert doc and not doc.startswith(obj.__name__ + "("), f"servesim.{name} has no docstring of its own"


def test_results_attributes_are_what_its_docstring_says():
    res = servesim.simulate(servesim.load_scenario(None, ["workload.num_requests=8"]), sample_every_s=1.0)
    doc = servesim.Results.__doc__
    for attr in ("scenario", "summary", "requests", "steps", "tbt", "tbt_s", "kv_blocks_in_use", "queue_samples",
                 "engine_stats", "decisions", "write"):
        assert f"``{attr}``" in doc, attr
        getattr(res, attr)
    from servesim.outputs.columns import REQUEST_COLUMNS, STEP_COLUMNS

    assert list(res.requests) == list(REQUEST_COLUMNS)
    # the steps: steps.csv's columns, with compute_bound (bool) for its bound text, as the docstring says
    assert list(res.steps) == [c if c != "bound" else "compute_bound" for c in STEP_COLUMNS]
    assert res.steps["compute_bound"].dtype == bool
    assert all(isinstance(c, np.ndarray) and len(c) == 8 for c in res.requests.values())
    assert len(res.tbt_s) == int((res.requests["output_tokens"] - 1).sum())
    assert res.kv_blocks_in_use == [0] and res.queue_samples and all(len(s) == 4 for s in res.queue_samples)


def _six_requests(**kw):
    return servesim.RequestSpecs(arrival_s=np.zeros(6), prompt_tokens=np.full(6, 2000), output_tokens=np.full(6, 50),
                                 **kw)


def test_own_requests_are_scheduled_as_the_class_their_name_says():
    # (the engine took class_index as an index into the scenario's workload.classes, the results
    # into the specs' class_names: with ("summarize", "chat") the requests labelled chat were
    # scheduled with summarize's 30 s deadline under EDF, and served last, without a word)
    sc = servesim.load_scenario("multi-class", ["policy.queue.order=edf", "workload.num_requests=5",
                                                "cluster.replicas=1", "policy.max_num_seqs=1"])
    assert [c.name for c in sc.workload.classes] == ["chat", "summarize"]
    same = servesim.simulate(sc, specs=_six_requests(class_index=np.array([0, 0, 0, 1, 1, 1]),
                                                      class_names=("chat", "summarize")))
    swapped = servesim.simulate(sc, specs=_six_requests(class_index=np.array([1, 1, 1, 0, 0, 0]),
                                                         class_names=("summarize", "chat")))
    for res in (same, swapped):
        assert res.requests["class"].tolist() == ["chat"] * 3 + ["summarize"] * 3
        first = res.requests["first_token_s"]
        assert first[:3].max() < first[3:].min()  # EDF: chat's 1 s deadlines before summarize's 30 s
    assert same.requests["first_token_s"].tolist() == swapped.requests["first_token_s"].tolist()


@pytest.mark.parametrize("scenario, kw, says", [
    # (an index past the scenario's classes was an IndexError inside the run; a name it does not
    # have, or none on a scenario with classes, ran with another class's priority and deadline)
    ("default", {"class_index": np.array([0, 1, 0, 1, 0, 1]), "class_names": ("a", "b")},
     r"specs.class_names: 'a' is no request class of the scenario \(it has none: every request is 'default'\)"),
    ("multi-class", {"class_index": np.zeros(6, int), "class_names": ("chatt",)},
     r"specs.class_names: 'chatt' is no request class of the scenario \(workload.classes: chat, summarize\).*"
     r"did you mean 'chat'"),
    ("multi-class", {}, r"specs.class_index: the scenario has request classes \(chat, summarize\): give each "
                        r"request's class"),
])
def test_own_requests_of_a_class_the_scenario_lacks_are_refused(scenario, kw, says):
    sc = servesim.load_scenario(scenario, ["policy.queue.order=edf", "workload.num_requests=5"])
    with pytest.raises(servesim.InputError, match=says):
        servesim.simulate(sc, specs=_six_requests(**kw))


def test_own_requests_that_end_before_duration_s_are_rated_over_their_own_window():
    # (the run's window was the scenario's duration_s whenever its num_requests were not all there:
    # three requests done by 1.2 s on a scenario with duration_s=100 read 0.03 req/s, not 2.5)
    three = servesim.RequestSpecs(arrival_s=[0.0, 0.5, 1.0], prompt_tokens=[100, 200, 300], output_tokens=[10, 20, 30])
    plain = servesim.simulate(servesim.load_scenario("chat"), specs=three).summary
    for extra in (["workload.duration_s=100"], ["workload.duration_s=100", "workload.num_requests=null"]):
        cut = servesim.simulate(servesim.load_scenario("chat", extra), specs=three).summary
        assert cut["completed"] == 3 and cut["sim_time_s"] == plain["sim_time_s"] < 2
        assert cut["throughput_rps"] == plain["throughput_rps"] > 2
    # requests that go on past duration_s: the run is cut there, and its window is duration_s
    late = servesim.RequestSpecs(arrival_s=[0.0, 0.5, 5.0], prompt_tokens=[100, 200, 300], output_tokens=[10, 20, 30])
    cut = servesim.simulate(servesim.load_scenario("chat", ["workload.duration_s=3"]), specs=late).summary
    assert cut["num_requests"] == 2 and cut["completed"] == 2 and cut["sim_time_s"] == 3.0
    cut = servesim.simulate(servesim.load_scenario("chat", ["workload.duration_s=3", "workload.num_requests=2"]),
                            specs=late).summary
    assert cut["num_requests"] == 2 and cut["sim_time_s"] == 3.0


def test_scenario_data_with_a_sweep_block_builds_as_its_file_loads():
    # (a scenario file may hold servesim sweep's grid, which load_scenario leaves out; the same
    # data given to scenario_from_dict read "sweep: unknown field; (did you mean 'seed'?)")
    sc = servesim.load_scenario(None)
    data = {**sc.to_dict(), "sweep": {"grid": {"policy.max_num_seqs": [8, 16]}}}
    assert servesim.scenario_from_dict(data) == sc
    assert "sweep" in data  # (the caller's mapping is left as it was)


def test_an_error_in_the_progress_callback_is_raised_as_itself(tmp_path, monkeypatch):
    # (with a plug-in in use it was wrapped in a PluginError blaming the plug-in: "the run stopped on
    # ValueError ... with plug-in shortest_prompt_first:ShortestPromptFirst in use. Policies and
    # routers must only read ...")
    import shutil
    from pathlib import Path

    shutil.copy(Path(__file__).parent.parent / "examples" / "shortest_prompt_first.py", tmp_path)
    monkeypatch.chdir(tmp_path)
    sc = servesim.load_scenario(None, ["policy.name=shortest_prompt_first:ShortestPromptFirst",
                                       "workload.num_requests=5"])

    def progress(done, total, now_s):
        raise ValueError("the progress bar broke")

    with pytest.raises(ValueError, match="the progress bar broke"):
        servesim.simulate(sc, progress=progress)


def test_both_built_in_policies_a_plug_in_subclasses_are_exported():
    # (docs/extending.md names StaticPolicy plug-ins, but only ContinuousPolicy was importable from
    # servesim; a user had to know the servesim.policies.static path)
    from servesim.policies.static import StaticPolicy

    assert servesim.StaticPolicy is StaticPolicy
    assert "StaticPolicy" in servesim.__all__ and "StaticPolicy" in dir(servesim)


def test_scenario_from_none_says_empty_as_the_cli_does(tmp_path, capsys):
    """``scenario_from_dict(yaml.safe_load(empty_file))`` said "got NoneType"; the CLI says of the
    same empty file that it is an empty document with no fields. Both say so now."""
    from servesim.cli.main import main

    with pytest.raises(servesim.InputError) as e:
        servesim.scenario_from_dict(None)
    assert "NoneType" not in str(e.value) and "an empty document (no fields)" in str(e.value)
    p = tmp_path / "empty.yaml"
    p.write_text("# nothing yet\n")
    assert main(["validate", str(p)]) == 2
    assert "an empty document (no fields)" in capsys.readouterr().err
    with pytest.raises(servesim.InputError, match="a scenario must be a mapping, got list"):
        servesim.scenario_from_dict([{"name": "x"}])
