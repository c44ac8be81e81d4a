"""Wrong types, negatives, NaN/inf, huge values, empty lists, unknown keys and repeated values in
the fields added last: ``workload.arrival.reject_wait_s``, ``cluster.class_replicas``, a plug-in's
``module:Class``, ``--outputs`` and ``--set`` with dotted keys into lists. Each is refused with
exit status 2 and one line naming the field (or flag) and what is valid: no traceback, and no
run that silently reads something else."""

import pytest

from servesim.cli.main import main

CLOSED = ["--set", "workload.arrival={process: closed_loop, clients: 4}", "--set", "workload.num_requests=20"]
CLASSES = ["--set", "cluster.router=class_aware"]


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("servesim: error: ") and not any("Traceback" in x for x in err), err
    return err[-1]


@pytest.mark.parametrize("value, says", [
    ("-1", "must be >= 0 and <= 1e+09, got -1"), (".nan", "must be a finite number >= 0"),
    (".inf", "must be a finite number >= 0"), ("1e400", "must be a finite number >= 0"),
    ("1e12", "must be >= 0 and <= 1e+09"), ("[]", "must be a number, got []"), ("true", "must be a number, got true"),
    ("abc", "must be a number, got 'abc'"), ("'5'", "got the text '5' (write it without quotes)"),
    ("0x10", "written in ASCII digits 0-9 in base 10"), ("{a: 1}", "must be a number"),
])
def test_reject_wait_s_refuses_what_is_no_wait(capsys, value, says):
    assert main(["validate", "default", *CLOSED, "--set", f"workload.arrival.reject_wait_s={value}"]) == 2
    err = _one_error(capsys)
    assert "workload.arrival.reject_wait_s" in err and says in err


@pytest.mark.parametrize("value, says", [
    ("[{name: chat, replicas: []}]", "class_replicas[0].replicas must list at least one replica"),
    ("[{name: chat, replicas: [-1]}]", "class_replicas[0].replicas must be >= 0"),
    ("[{name: chat, replicas: [5]}]", "class_replicas[0].replicas: 5 is not a replica; the router chooses among 2"),
    ("[{name: chat, replicas: [99999999999999999999]}]", "is not a replica"),
    ("[{name: chat, replicas: [.nan]}]", "class_replicas[0].replicas[0] must be an integer, got nan"),
    ("[{name: chat, replicas: [0.5]}]", "class_replicas[0].replicas[0] must be an integer"),
    ("[{name: chat, replicas: [true]}]", "class_replicas[0].replicas[0] must be an integer, got true"),
    ("[{name: chat, replicas: 0}]", "class_replicas[0].replicas must be a list"),
    ("[{name: chat}]", "class_replicas[0].replicas is missing"),
    ("[{name: chat, replicas: [0], extra: 1}]", "class_replicas[0].extra: unknown field; valid: name, replicas"),
    ("[{name: nope, replicas: [0]}]", "class_replicas[0].name: no request class 'nope'; valid: chat, summarize"),
    ("[{name: chat, replicas: [0]}, {name: chat, replicas: [1]}]", "'chat' is listed twice"),
    # a replica listed twice was taken once in silence
    ("[{name: chat, replicas: [0, 1, 0]}]", "class_replicas[0].replicas: 0 is listed twice, got [0, 1, 0]"),
    ("{name: chat, replicas: [0]}", "cluster.class_replicas must be a list"),
    # a null entry read as an empty mapping: "class_replicas[1].name is missing"
    ("[{name: chat, replicas: [0]}, null]", "cluster.class_replicas[1] must be a mapping, got null; its fields: name "
                                            "(required), replicas (required)"),
])
def test_class_replicas_refuses_what_names_no_replica_once(capsys, value, says):
    assert main(["validate", "multi-class", *CLASSES, "--set", f"cluster.class_replicas={value}"]) == 2
    err = _one_error(capsys)
    assert says in err and "(given by --set cluster.class_replicas=" in err


@pytest.mark.parametrize("sets, says", [
    (["workload.classes[9].share=1"], "workload.classes has 2 entries, so indexes 0 to 1"),
    (["workload.classes[-1].share=1"], "'classes[-1]' is not a field name"),
    (["workload.classes.0.share=1"], "is not a mapping but a list: index an entry, e.g. workload.classes[0].share"),
    (["workload.classes[0][0]=1"], "workload.classes[0] is not a list"),
    (["workload.classes[0].shar=1"], "workload.classes[0].shar: unknown field; (did you mean 'share'"),
    (["workload.classes=[]"], "workload.classes must list at least one class"),
    (["workload.classes[1]=null"], "workload.classes[1] must be a mapping, got null; its fields: name (required)"),
    (["workload.classes[0].share=.nan"], "workload.classes[0].share must be"),
    # an index in other digits than ASCII's (\d took ١ for 1: the second class changed in silence)
    (["workload.classes[١].share=1"], "'classes[١]' is not a field name"),
    # a field made a mapping by a --set inside it was blamed on the --set before
    (["workload.classes[0].slo={tpot_s: 1}", "workload.classes[0].slo.ttft_s.x=1"],
     "workload.classes[0].slo.ttft_s must be a number, got {'x': 1} (given by --set "
     "workload.classes[0].slo.ttft_s.x=1)"),
    (["workload.classes[0]={name: chat}", "workload.classes[0].share.x=1"],
     "(given by --set workload.classes[0].share.x=1)"),
])
def test_set_into_lists_names_the_override(capsys, sets, says):
    argv = ["validate", "multi-class"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    assert says in _one_error(capsys)


def test_set_inside_a_field_is_the_override_named(capsys):
    """--set workload.arrival.think_time_s.x=1 made think_time_s a mapping; the error named the
    earlier --set workload.arrival=... as the one that gave it."""
    assert main(["validate", "default", *CLOSED, "--set", "workload.arrival.reject_wait_s.x=5"]) == 2
    err = _one_error(capsys)
    assert "(given by --set workload.arrival.reject_wait_s.x=5)" in err and "closed_loop" not in err


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    (tmp_path / "fz_plug.py").write_text(
        "X = 5\n"
        "def func():\n    pass\n"
        "class NotPolicy:\n    pass\n"
        "class Raises:\n    def __init__(self, *a, **k):\n        raise RuntimeError('boom')\n")
    (tmp_path / "fz_broken.py").write_text("import fz_no_such_package_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("field, name, says", [
    ("policy.name", "fz_nomod:Good", "cannot import module 'fz_nomod'"),
    ("policy.name", "fz_plug:Nope", "module 'fz_plug' has no attribute 'Nope'"),
    ("policy.name", "fz_plug:X", "'fz_plug:X' is not a class or a function"),
    ("policy.name", "fz_plug:NotPolicy", "'fz_plug:NotPolicy' is no policy"),
    ("policy.name", "fz_plug:func", "'fz_plug:func' is no policy"),
    ("policy.name", "fz_plug:Raises", "making the policy raised RuntimeError: 'boom'"),
    ("policy.name", "fz_broken:A", "cannot import module 'fz_broken' (No module named 'fz_no_such_package_xyz')"),
    ("policy.name", ":Good", "is no module:Class"),
    ("policy.name", "fz_plug:A:B", "is no module:Class"),
    ("cluster.router", "fz_plug:NotPolicy", "'fz_plug:NotPolicy' is no router"),
    ("cluster.router", "fz_plug:X", "'fz_plug:X' is not a class or a function"),
    ("cluster.router", "fz_nomod:X", "cannot import module 'fz_nomod'"),
])
def test_a_plugin_that_is_none_is_named(capsys, plugin_dir, field, name, says):
    assert main(["validate", "default", "--set", f"{field}={name}"]) == 2
    err = _one_error(capsys)
    assert f"{field}:" in err and says in err


@pytest.mark.parametrize("command, value, says", [
    ("run", "summary,summary", "--outputs: 'summary' is given twice; give each output once"),
    ("run", "summary,steps,summary", "'summary' is given twice"),
    ("run", ",", "--outputs: give at least one of summary, requests, steps, scenario"),
    ("run", "SUMMARY", "--outputs 'SUMMARY': unknown output; (did you mean 'summary'?)"),
    ("run", "tbt", "--outputs 'tbt': unknown output"),
    ("sweep", "steps,steps", "--outputs: 'steps' is given twice"),
    ("sweep", "summary,tbt,requests,tbt", "--outputs: 'tbt' is given twice"),
])
def test_outputs_refuses_what_names_no_file_once(tmp_path, capsys, command, value, says):
    extra = ["--grid", "seed=1,2"] if command == "sweep" else []
    assert main([command, "default", "--set", "workload.num_requests=5", "--quiet", "--out", str(tmp_path / "o"),
                 "--outputs", value, *extra]) == 2
    assert says in _one_error(capsys) and not (tmp_path / "o").exists()


_S, _F = "sliding_attention", "full_attention"


@pytest.mark.parametrize("extra, says", [
    ({"layer_types": [], "sliding_window": 4096}, "field 'layer_types': 0 entries for 32 layers; give one per layer"),
    ({"layer_types": [_S] * 3, "sliding_window": 4096}, "field 'layer_types': 3 entries for 32 layers"),
    ({"layer_types": [_S, _F] * 3, "sliding_window": 4096}, "field 'layer_types': 6 entries for 32 layers"),
    ({"layer_types": [1] * 32, "sliding_window": 4096}, "field 'layer_types' must be a list of strings"),
    ({"layer_types": [None] * 32}, "field 'layer_types' must be a list of strings"),
    ({"layer_types": _S, "sliding_window": 4096}, "field 'layer_types' must be a list of strings"),
    ({"sliding_window_pattern": 0, "sliding_window": 4096}, "field 'sliding_window_pattern' must be a positive"),
    ({"sliding_window_pattern": -2, "sliding_window": 4096}, "field 'sliding_window_pattern' must be a positive"),
    ({"sliding_window_pattern": float("nan"), "sliding_window": 4096}, "field 'sliding_window_pattern' must be"),
    ({"sliding_window_pattern": 2.5, "sliding_window": 4096}, "field 'sliding_window_pattern' must be"),
    ({"sliding_window_pattern": 10**30, "sliding_window": 4096}, "field 'sliding_window_pattern' must be"),
    ({"sliding_window_pattern": "6", "sliding_window": 4096}, "field 'sliding_window_pattern' must be an integer"),
    ({"sliding_window_pattern": [6], "sliding_window": 4096}, "field 'sliding_window_pattern' must be"),
    ({"sliding_window_pattern": True, "sliding_window": 4096}, "field 'sliding_window_pattern' must be"),
    ({"sliding_window": -5}, "field 'sliding_window' must be a positive integer"),
    ({"sliding_window": float("inf")}, "field 'sliding_window' must be a positive integer"),
])
def test_a_config_json_window_field_that_is_none_is_named(tmp_path, capsys, extra, says):
    """A model's config.json (model: path) with a layer_types / sliding_window_pattern / sliding_window
    of the wrong type, sign, length or size: refused naming the file and key."""
    import json

    from servesim.inputs.specs import packaged_configs

    cfg = json.loads(packaged_configs()["meta-llama/Llama-3.1-8B"].read_text()) | extra
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert main(["validate", "default", "--set", f"model={p}"]) == 2
    err = _one_error(capsys)
    assert str(p) in err and says in err


@pytest.mark.parametrize("argv, says", [
    (["compare", "default", "--policies", "continuous", "--rates", "1", "--rates", "2"],
     "argument --rates: given twice ('1', then '2'); give one comma-separated list: --rates 1,2"),
    (["compare", "default", "--policies", "continuous", "--policies", "static"], "argument --policies: given twice"),
    (["run", "default", "--outputs", "summary", "--outputs", "steps"], "argument --outputs: given twice"),
    (["sweep", "default", "--grid", "seed=1,2", "--outputs", "steps", "--outputs", "steps"],
     "argument --outputs: 'steps' is given twice"),
    (["capacity", "default", "--slo", "ttft_p99=1", "--outputs", "steps", "--outputs", "tbt"],
     "argument --outputs: given twice"),
])
def test_a_list_flag_given_twice_is_refused(tmp_path, capsys, argv, says):
    """argparse kept a list flag's last value in silence (compare --rates 1 --rates 2 ran rate 2
    alone; run --outputs summary --outputs steps wrote steps alone). (workload.num_requests=0: were
    the flag let through, the command stops at that error, not in a study's runs.)"""
    assert main([*argv, "--out", str(tmp_path / "o"), "--quiet", "--set", "workload.num_requests=0"]) == 2
    assert says in _one_error(capsys) and not (tmp_path / "o").exists()


@pytest.mark.parametrize("field, value, says", [
    ("policy.name", "fz_plug:", "write module:Class for a plug-in"),
    ("cluster.router", "my_router:", "write module:Class for a plug-in"),
    ("name", "run:", "quote it if it is text"),
])
def test_text_ending_in_a_colon_is_named_as_yaml_reads_it(capsys, field, value, says):
    """policy.name: my_module: (the class left out) read "must be a string, got {'my_module': None}"."""
    assert main(["validate", "default", "--set", f"{field}={value}"]) == 2
    err = _one_error(capsys)
    assert f"{field} must be a string" in err and f"YAML reads the text {value!r} ending in a colon" in err
    assert says in err
