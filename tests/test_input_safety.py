"""Inputs a user can type cannot crash, hang or flood servesim: each class of issue 17's
findings, checked as a class (every field, every file kind), not by its one example.

- every number of every schema is bounded, so values past what the code can hold are refused
  naming the field;
- arrival generators refuse schedules that would take forever to draw;
- every file servesim reads refuses bytes that are not UTF-8 with the file and byte offset;
- YAML: alias bombs, deep nesting, recursive aliases, duplicate keys and unknown tags are
  refused fast naming the file; quoted values are cut short;
- messages show paths as written (no expanded $VARS or ~) and no line of another file;
- a run too large for the machine's memory is refused before it starts.
"""

import csv
import dataclasses
import json
import math
import os
import time
import typing
from pathlib import Path

import pytest
import yaml

from servesim import resources
from servesim.cli.main import main
from servesim.cost import efficiency
from servesim.errors import MAX_MESSAGE, MAX_SHOWN, InputError, shown, shown_path
from servesim.inputs import scenario as S
from servesim.inputs.overrides import with_values
from servesim.inputs.schema import check_value, read_mapping
from servesim.inputs.specs import GpuFile
from tests.conftest import BASE
from tests.fuzzing import _strip_optional, schema_leaves

DATA = Path(__file__).parent / "data"


def run_cli(capsys, *argv) -> tuple[int, str]:
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    return rc, err


def one_bounded_line(err: str) -> bool:
    lines = err.strip("\n").split("\n")
    return len(lines) == 1 and lines[0].startswith("servesim: error: ") and len(lines[0]) <= MAX_MESSAGE + 20


def scenario_file(tmp_path, data=None, **over) -> Path:
    """BASE (or ``data``) with dotted-key overrides (``workload`` alone replaces the workload),
    written to ``tmp_path/s.yaml``."""
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(with_values(data or BASE, over)))
    return p


# ---------------------------------------------------------------- sections
STUDIES = {
    "run": ["--quiet"],
    "compare": ["--policies", "continuous,pd_split", "--no-report", "--quiet", "--workers", "1"],
    "plan": ["--rate", "2", "--slo", "ttft_p99=2", "--probe-requests", "30", "--no-report", "--quiet"],
    "capacity": ["--slo", "ttft_p99=2", "--probe-requests", "30", "--quiet", "--workers", "1"],
    "sweep": ["--grid", "seed=1,2", "--quiet", "--workers", "1"],
}


@pytest.mark.parametrize("section", ["hardware", "cluster", "policy", "workload", "cost", "memory", "slo"])
@pytest.mark.parametrize("value", [5, [1], "x"])
def test_a_section_that_is_not_a_mapping_is_refused_by_every_command(tmp_path, capsys, section, value):
    """Every command that reads a scenario refuses a section that is no mapping, naming it (a
    study read a section before the scenario was checked: ``compare`` with ``cluster: 5`` and
    ``plan`` with ``hardware: 5`` stopped with an AttributeError, found by a random mutation of
    the packaged scenarios)."""
    p = scenario_file(tmp_path, **{section: value})
    for cmd, args in STUDIES.items():
        out = tmp_path / cmd
        rc, err = run_cli(capsys, cmd, p, "--out", out, *args)
        says = f"{section} is not a mapping" if cmd == "compare" and section == "policy" else \
            f"{section} must be a mapping"  # (compare's configurations set policy.name first)
        assert rc == 2 and says in err and one_bounded_line(err), (cmd, err)
        assert not out.exists() or cmd in ("sweep", "compare"), cmd  # (studies keep their folder's record)


@pytest.mark.parametrize("section, value, hint", [
    ("workload", {"trace": "t.csv"}, "workload.trace must be a mapping, got 't.csv'; write trace: {path: 't.csv'}"),
    ("hardware", "h100-sxm", "hardware must be a mapping, got 'h100-sxm'; write hardware: {gpu: 'h100-sxm'}"),
    ("workload", {"arrival": "poisson"}, "got 'poisson'; write arrival: {process: poisson, ...}"),
    ("workload", {"arrival": 4}, "'process' key (valid: poisson, fixed, gamma, on_off, piecewise, sinusoidal, "
                                 "closed_loop, all_at_once), got 4; e.g. arrival: {process: fixed, rate_rps: 4}"),
    ("workload", {"prompt_tokens": 512}, "got 512; e.g. prompt_tokens: {dist: fixed, value: 512}"),
    ("workload", {"arrival": [1]}, "'process' key (valid: poisson"),
    ("cluster", 5, "cluster must be a mapping, got 5; its fields: replicas, router"),
])
def test_a_value_where_a_mapping_belongs_says_what_to_write(tmp_path, capsys, section, value, hint):
    """A scalar where the schema wants a mapping gets the mapping it most likely meant (the one
    required field, the tag it names, a bare number as the fixed case), else the fields."""
    data = {**BASE, section: value} if section != "workload" else {**BASE, "workload": {**BASE["workload"], **value}}
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    rc, err = run_cli(capsys, "validate", p)
    assert rc == 2 and hint in err and one_bounded_line(err), err


@pytest.mark.parametrize("args, says", [
    (["--set", "workload.arrival={process:poisson,rate_rps:2}"],
     "workload.arrival.process:poisson: YAML reads 'process:poisson' as one key without a value (no space after the "
     "colon); write 'process: poisson'"),
    (["--set", "hardware={gpu:h100-sxm}"], "hardware.gpu:h100-sxm: YAML reads 'gpu:h100-sxm' as one key"),
    (["--set", "workload.prompt_tokens={dist:fixed,value:9}"], "write 'dist: fixed'"),
])
def test_key_colon_value_without_a_space_is_named(tmp_path, capsys, args, says):
    """``{process:poisson}`` (no space after the colon, as a --set value is easily typed) is one
    YAML key without a value: it was 'workload.arrival.process is missing' or 'unknown field'."""
    rc, err = run_cli(capsys, "validate", scenario_file(tmp_path), *args)
    assert rc == 2 and says in err and one_bounded_line(err), err


@pytest.mark.parametrize("value, says", [
    ("inf", "workload.arrival.rate_rps must be a finite number >= 1e-06 and <= 1e+09, got 'inf'"),
    ("nan", "must be a finite number >= 1e-06"),
    ("'5'", "workload.arrival.rate_rps must be a number, got the text '5' (write it without quotes)"),
    ("five", "workload.arrival.rate_rps must be a number, got 'five'"),
])
def test_text_where_a_number_belongs_says_what_is_wrong(tmp_path, capsys, value, says):
    """--set x=inf gives the text 'inf' (YAML spells infinity .inf): it was 'must be a number,
    got inf', which reads as a contradiction; a quoted number is text and is now called so."""
    p = scenario_file(tmp_path)
    rc, err = run_cli(capsys, "validate", p, "--set", f"workload.arrival.rate_rps={value}")
    assert rc == 2 and says in err and one_bounded_line(err), err
    rc, err = run_cli(capsys, "validate", p, "--set", f"workload.num_requests={value}")
    assert rc == 2 and "workload.num_requests must be" in err and one_bounded_line(err), err


# ---------------------------------------------------------------- numbers
def numeric_leaves():
    """(schema, leaf) of every numeric field: the scenario's, a GPU file's, a calibration file's."""
    out = []
    for root in (S.Scenario, GpuFile, efficiency.Efficiencies):
        for leaf in schema_leaves(root):
            tp, _ = _strip_optional(leaf.tp)
            if typing.get_origin(tp) is tuple:
                tp = typing.get_args(tp)[0]
            if tp in (int, float):
                out.append((root.__name__, leaf, tp))
    return out


NUMERIC = numeric_leaves()


def test_the_walk_sees_the_numeric_fields():
    paths = {leaf.path for _, leaf, _ in NUMERIC}
    assert {"workload.num_requests", "memory.swap_space_gib", "policy.max_num_seqs", "peak_flops",
            "gemm.latency_s"} <= paths
    assert len(NUMERIC) > 60


@pytest.mark.parametrize("root,leaf,tp", NUMERIC, ids=[f"{r}:{leaf.path}" for r, leaf, _ in NUMERIC])
def test_every_numeric_field_has_both_bounds(root, leaf, tp):
    """The schema's contract: a number any file gives has a lower and an upper bound (the
    ``_f`` metadata), so no value past what the code can hold gets in."""
    m = leaf.meta
    assert m.get("gt") is not None or m.get("ge") is not None, f"{root} {leaf.path}: no lower bound"
    assert m.get("lt") is not None or m.get("le") is not None, f"{root} {leaf.path}: no upper bound"


EXTREMES = [1e300, -1e300, math.nan, math.inf, -math.inf, 10**400, -(10**400)]


@pytest.mark.parametrize("root,leaf,tp", NUMERIC, ids=[f"{r}:{leaf.path}" for r, leaf, _ in NUMERIC])
def test_every_numeric_field_refuses_numbers_past_its_range(root, leaf, tp):
    m = leaf.meta
    hi = m["le"] if m.get("le") is not None else m["lt"]
    lo = m["ge"] if m.get("ge") is not None else m["gt"]
    for value in EXTREMES + [hi * 2 + 1, lo - 1 if lo == int(lo) else lo / 2 - 1]:
        with pytest.raises(InputError) as e:
            check_value(leaf.tp, value, leaf.path, leaf.meta)
        assert leaf.path in str(e.value) and len(str(e.value)) < 400


@pytest.mark.parametrize("over,field", [
    ({"workload.output_tokens": {"dist": "fixed", "value": 1e20}}, "workload.output_tokens.value"),
    ({"workload.prompt_tokens": {"dist": "uniform", "min": 1, "max": 1e20}}, "workload.prompt_tokens.max"),
    ({"workload.prompt_tokens": {"dist": "normal", "mean": 1e30, "std": 1}}, "workload.prompt_tokens.mean"),
    ({"workload.output_tokens": {"dist": "lognormal", "median": 100, "sigma": 1000}}, "workload.output_tokens.sigma"),
    ({"workload.prompt_tokens": {"dist": "quantiles", "p": [0, 1], "tokens": [1, 1e300]}},
     "workload.prompt_tokens.tokens[1]"),
    ({"workload.arrival": {"process": "gamma", "rate_rps": 5, "cv": 1e300}}, "workload.arrival.cv"),
    ({"workload.arrival": {"process": "gamma", "rate_rps": 5, "cv": 1e-300}}, "workload.arrival.cv"),
    ({"memory.swap_space_gib": 1e300}, "memory.swap_space_gib"),
    ({"memory.block_size": 10**12}, "memory.block_size"),
])
def test_the_issues_numbers_exit_2_naming_the_field(tmp_path, capsys, over, field):
    for cmd in ("validate", "run"):
        rc, err = run_cli(capsys, cmd, scenario_file(tmp_path, **over), *(["--out", tmp_path / "o", "--quiet"]
                                                                          if cmd == "run" else []))
        assert rc == 2 and field in err and one_bounded_line(err), err


@pytest.mark.parametrize("arrival", [
    {"process": "piecewise", "segments": [{"duration_s": 1e-300, "rate_rps": 5}]},
    {"process": "piecewise", "segments": [{"duration_s": 1e-9, "rate_rps": 1e-6}, {"duration_s": 1e-9,
                                                                                 "rate_rps": 0}]},
    {"process": "on_off", "rate_rps": 5, "on_s": 1e-300, "off_s": 1e9},
    {"process": "on_off", "rate_rps": 5, "on_s": 1e-300, "off_s": 1e9, "durations": "exponential"},
    {"process": "on_off", "rate_rps": 1e-6, "on_s": 1e-6, "off_s": 1e-6},
])
def test_arrival_schedules_that_would_never_finish_drawing_are_refused_at_once(tmp_path, capsys, arrival):
    """Drawing arrivals ends fast or is refused: a schedule that needs num_requests from a rate
    that barely arrives is refused naming the arrival; one whose duration holds few cycles just
    runs (with the few requests that arrive)."""
    for n, d in ((1000, None), (None, 1e9), (1000, 1e9)):
        s = scenario_file(tmp_path, **{"workload.arrival": arrival, "workload.num_requests": n,
                                       "workload.duration_s": d})
        for cmd in ("validate", "run"):
            t0 = time.perf_counter()
            rc, err = run_cli(capsys, cmd, s, *(["--out", tmp_path / "o", "--quiet"] if cmd == "run" else []))
            assert time.perf_counter() - t0 < 10
            assert rc == 0 or (rc == 2 and "workload.arrival" in err), err
            if d is None:
                assert rc == 2, err


def test_a_sinusoid_whose_valley_keeps_almost_no_draw_is_refused(tmp_path, capsys):
    """Thinning at the peak rate through the trough of a long cycle (amplitude 1) would draw ~1e10
    candidates for 12 requests (found by the long fuzz run as a hang): refused naming the arrival.
    The same cycle with an amplitude that keeps a quarter of the draws runs."""
    valley = {"process": "sinusoidal", "rate_rps": 1e6, "period_s": 1e9, "amplitude": 1.0, "phase_s": 2.5e8}
    s = scenario_file(tmp_path, **{"workload.arrival": valley, "workload.num_requests": 12})
    for cmd in ("validate", "run"):
        rc, err = run_cli(capsys, cmd, s, *(["--out", tmp_path / "o", "--quiet"] if cmd == "run" else []))
        assert rc == 2 and "workload.arrival" in err and "draws (at most" in err and one_bounded_line(err), err
    mild = {**valley, "rate_rps": 5.0, "amplitude": 0.6}
    s = scenario_file(tmp_path, **{"workload.arrival": mild, "workload.num_requests": 12})
    assert run_cli(capsys, "validate", s)[0] == 0


def test_a_sinusoid_of_a_vanishing_period_is_refused_and_the_shortest_one_runs(tmp_path, capsys):
    """A period of 1e-320 s made 2 pi / period_s infinite: cos(inf) raised a traceback in validate
    and run (found by the long fuzz run). Periods are bounded below (a microsecond), and the
    shortest allowed one, shifted by the longest phase, runs and keeps the mean rate."""
    short = {"process": "sinusoidal", "rate_rps": 50.0, "period_s": 1e-320, "amplitude": 0.5, "phase_s": 3.0}
    s = scenario_file(tmp_path, **{"workload.arrival": short, "workload.num_requests": 40})
    for cmd in ("validate", "run"):
        rc, err = run_cli(capsys, cmd, s, *(["--out", tmp_path / "o", "--quiet"] if cmd == "run" else []))
        assert rc == 2 and "workload.arrival.period_s must be >= 1e-06" in err and one_bounded_line(err), err
    shortest = {**short, "period_s": 1e-6, "phase_s": 1e9}
    s = scenario_file(tmp_path, **{"workload.arrival": shortest, "workload.num_requests": 40})
    rc, err = run_cli(capsys, "run", s, "--out", tmp_path / "o2", "--quiet")
    assert rc == 0, err
    with open(tmp_path / "o2" / "requests.csv", newline="") as f:
        arrivals = [float(row["arrival_s"]) for row in csv.DictReader(f)]
    assert len(arrivals) == 40 and all(math.isfinite(t) and t >= 0 for t in arrivals)
    assert 40 / max(arrivals) == pytest.approx(50.0, rel=0.5)  # (40 Poisson arrivals: a loose check)


def test_the_draws_a_sinusoid_needs_are_its_peak_rate_times_the_span():
    from servesim.inputs.arrivals import candidates_needed
    from servesim.inputs.scenario import SinusoidalArrival

    a = SinusoidalArrival("sinusoidal", rate_rps=8.0, period_s=120.0, amplitude=0.5, phase_s=0.0)
    assert candidates_needed(a, None, 300.0) == pytest.approx(8.0 * 1.5 * 300.0)
    # a whole number of cycles holds rate x span arrivals: 960 requests take 120 s
    assert candidates_needed(a, 960, None) == pytest.approx(8.0 * 1.5 * 120.0, rel=1e-9)


def test_arrivals_past_the_simulated_horizon_are_refused(tmp_path, capsys):
    trace = tmp_path / "far.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,5\n1e12,100,5\n")
    data = json.loads(json.dumps(BASE))
    data["workload"] = {"trace": {"path": str(trace)}}
    rc, err = run_cli(capsys, "validate", scenario_file(tmp_path, data))
    assert rc == 2 and "simulated time" in err


# ---------------------------------------------------------------- encodings
BAD_BYTES = {"latin1": "caf\xe9".encode("latin-1"), "utf16": "hello".encode("utf-16"), "binary": bytes(range(256))}


def _file_kinds(tmp_path):
    """(file name, valid text, scenario overrides or a command) for every kind of file servesim reads."""
    from servesim.cost.calibration import shipped_calibrations

    cal = shipped_calibrations()["a100-80g"].read_text()
    config = json.dumps({"hidden_size": 2048, "num_attention_heads": 16, "num_hidden_layers": 8,
                         "intermediate_size": 5632, "vocab_size": 32000})
    gpu = "name: g\npeak_flops: 5e14\nmem_bytes: 80e9\nmem_bw_bytes_per_s: 2e12\n"
    trace = "arrival_s,prompt_tokens,output_tokens\n0,100,5\n0.1,100,5\n"
    return [
        ("config.json", config, {"model": "{p}"}),
        ("gpu.yaml", gpu, {"hardware.gpu": "{p}"}),
        ("cal.yaml", cal, {"cost.calibration": "{p}"}),
        ("lens.txt", "100\n200\n", {"workload.prompt_tokens": {"dist": "empirical", "path": "{p}"}}),
        ("trace.csv", trace, {"workload": {"trace": {"path": "{p}"}}}),
        ("trace.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [1]}\n',
         {"workload": {"trace": {"path": "{p}"}}}),
        ("sg.json", json.dumps([{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}]),
         {"workload.dataset": {"path": "{p}", "loop": True}, "workload.prompt_tokens": None}),
        ("p.jsonl", '{"prompt": "hello", "output": 3}\n',
         {"workload.dataset": {"path": "{p}", "format": "jsonl", "loop": True}, "workload.prompt_tokens": None}),
    ]


def _with(tmp_path, over: dict, p: Path) -> Path:
    """``scenario_file`` with ``{p}`` in the overrides replaced by the path ``p``."""
    return scenario_file(tmp_path, **json.loads(json.dumps(over).replace("{p}", str(p))))


@pytest.mark.parametrize("bad", list(BAD_BYTES))
def test_every_input_file_that_is_not_utf8_names_the_file_and_byte(tmp_path, capsys, bad):
    for name, text, over in _file_kinds(tmp_path):
        p = tmp_path / name
        if name == "config.json":
            p = tmp_path / "m" / name
            p.parent.mkdir(exist_ok=True)
        p.write_text(text)
        s = _with(tmp_path, over, p)
        assert run_cli(capsys, "validate", s)[0] == 0, (name, capsys.readouterr())  # valid as written
        p.write_bytes(text.encode()[:3] + BAD_BYTES[bad] + text.encode()[3:])
        for cmd in ("validate", "run"):
            rc, err = run_cli(capsys, cmd, s, *(["--out", tmp_path / "o", "--quiet"] if cmd == "run" else []))
            assert rc == 2 and name in err and "byte offset" in err and one_bounded_line(err), (name, bad, err)


@pytest.mark.parametrize("kind", ["gzip", "bz2", "lzma"])
def test_every_input_file_that_is_compressed_says_so(tmp_path, capsys, kind):
    # a gzipped trace (as traces are often kept) was 'line 1: not UTF-8 text: byte offset 1 (0x8b) ...;
    # save the file as UTF-8': true of the bytes, no help to whoever has to gunzip it
    import importlib

    name = {"gzip": "gzip", "bz2": "bzip2", "lzma": "xz"}[kind]
    compress = importlib.import_module(kind).compress
    for fname, text, over in _file_kinds(tmp_path):
        p = tmp_path / fname
        if fname == "config.json":
            p = tmp_path / "m" / fname
            p.parent.mkdir(exist_ok=True)
        p.write_bytes(compress(text.encode()))
        s = _with(tmp_path, over, p)
        rc, err = run_cli(capsys, "validate", s)
        assert rc == 2 and f"{fname}: a {name}-compressed file, not text: decompress it first" in err, (fname, err)
        assert one_bounded_line(err)


@pytest.mark.parametrize("bad", list(BAD_BYTES))
def test_a_scenario_that_is_not_utf8_names_the_byte(tmp_path, capsys, bad):
    s = scenario_file(tmp_path)
    s.write_bytes(b"# " + BAD_BYTES[bad] + b"\n" + s.read_bytes())
    rc, err = run_cli(capsys, "validate", s)
    assert rc == 2 and "s.yaml" in err and "byte offset" in err


def test_a_benchmark_result_and_a_profile_that_are_not_utf8_name_the_byte(tmp_path, capsys):
    res = tmp_path / "r.json"
    res.write_bytes(b'{"x": "caf\xe9"}')
    rc, err = run_cli(capsys, "validate-run", res, "--out", tmp_path / "v", "--quiet")
    assert rc == 2 and "r.json" in err and "byte offset" in err
    prof = tmp_path / "prof" / "mlp.csv"
    prof.parent.mkdir()
    prof.write_bytes(b"num_tokens,caf\xe9\n1,2\n")
    rc, err = run_cli(capsys, "cost", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "a100-80g", "--prefill", "8",
                      "--profiles", prof.parent)
    assert rc == 2 and "mlp.csv" in err and "byte offset" in err, err


def test_a_tokenizer_that_is_not_utf8_names_the_byte(tmp_path, capsys):
    pytest.importorskip("tokenizers")
    (tmp_path / "p.jsonl").write_text('{"prompt": "hello", "output": 3}\n')
    (tmp_path / "tok.json").write_bytes(b'{"version": "caf\xe9"}')
    s = scenario_file(tmp_path, **{"workload.prompt_tokens": None, "workload.dataset": {
        "path": str(tmp_path / "p.jsonl"), "format": "jsonl", "loop": True, "tokenizer": str(tmp_path / "tok.json")}})
    rc, err = run_cli(capsys, "validate", s)
    assert rc == 2 and "tok.json" in err and "byte offset 16" in err, err


# ---------------------------------------------------------------- YAML abuse
def billion_laughs() -> str:
    """The issue's 599-byte alias bomb shape: nine anchors, each nine of the one before."""
    text = "a: &a [x, x, x, x, x, x, x, x, x]\n"
    for prev, cur in zip("abcdefgh", "bcdefghi"):
        text += f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]\n"
    return text + "workload: {num_requests: *i}\n"


def test_an_alias_bomb_is_refused_fast_naming_the_file(tmp_path, capsys):
    s = tmp_path / "bomb.yaml"
    s.write_text(billion_laughs())
    assert len(s.read_bytes()) < 700
    t0 = time.perf_counter()
    rc, err = run_cli(capsys, "validate", s)
    assert rc == 2 and "bomb.yaml" in err and "alias" in err and time.perf_counter() - t0 < 5, err


@pytest.mark.parametrize("text,says", [
    ("name: " + "[" * 500 + "]" * 500 + "\n", "nested deeper"),
    ("name: " + "{a: " * 500 + "1" + "}" * 500 + "\n", "nested deeper"),
    ("x: &l [*l]\n", "recursive"),
    ("seed: 1\nname: a\nseed: 2\n", "lines 1 and 3"),
    ("name: !!python/object/apply:os.system ['true']\n", "malformed YAML"),
    ("name: !custom x\n", "malformed YAML"),
    ("seed: " + "9" * 5000 + "\n", "cannot read a value"),
])
def test_yaml_tricks_are_refused_naming_the_file(tmp_path, capsys, text, says):
    s = tmp_path / "t.yaml"
    s.write_text(text)
    rc, err = run_cli(capsys, "validate", s)
    assert rc == 2 and "t.yaml" in err and says in err and one_bounded_line(err), err


def test_an_echoed_value_is_cut_short(tmp_path, capsys):
    for over in ({"name": "x" * 1_000_000}, {"hardware.gpu": "y" * 1_000_000}, {"policy.preemption": "z" * 1_000_000},
                 {"z" * 1_000_000: 1}):
        rc, err = run_cli(capsys, "validate", scenario_file(tmp_path, **over))
        assert rc == 2 and one_bounded_line(err) and len(err) < 1000, err[:300]


def test_a_long_path_is_named_whole(tmp_path, capsys):
    """A path is the user's way back to the file: one of deep folders (past the 80 characters a
    quoted value keeps) is named whole, in every kind of message that names a file (it was cut in
    its middle: '/tmp/pytest-of-root/pytest-1/popen-...cl0/file/l'); past MAX_PATH_SHOWN, its start
    and its end (the file's name) are kept."""
    deep = tmp_path / ("a-rather-long-folder-name-" * 3) / ("and-another-one-below-it-" * 3)
    deep.mkdir(parents=True)
    assert len(str(deep)) > 150
    scenario = scenario_file(tmp_path, **{"workload.num_requests": 3})
    blocker = deep / "file"
    blocker.write_text("x")
    for argv, path in ((["run", deep / "missing.yaml"], deep / "missing.yaml"),  # no such file
                       (["run", deep], deep),  # a folder where a file is needed
                       (["run", scenario, "--out", blocker / "o", "--quiet"], blocker / "o"),  # OSError
                       (["validate", scenario_file(deep, workload={"trace": {"path": str(deep / "t.csv")}})],
                        deep / "t.csv")):
        rc, err = run_cli(capsys, *argv)
        assert rc == 2 and one_bounded_line(err), err
        assert str(path) in err and "..." not in err, err
    huge = "/" + "d" * 500 + "/name.yaml"
    rc, err = run_cli(capsys, "run", huge)
    assert rc == 2 and one_bounded_line(err) and huge[:150] in err and "d.../" not in err and "/name.yaml'" in err


def test_a_quoted_value_is_cut_at_its_limit():
    """``shown(value, limit)`` keeps ``limit`` characters of a string, not the default's 80 (reprlib
    cut strings at 80 first, so a message that asked for 120 got 80), and bounds any value."""
    assert len(shown("x" * 500)) == MAX_SHOWN and len(shown("x" * 500, 120)) == 120
    assert shown("short", 120) == "'short'" and len(shown(list(range(10**4)), 120)) <= 120
    assert shown(10**5000, 120) == "<int>" and shown_path(10**5000) == "<int>"
    assert shown_path(b"/a/\xff") == repr("/a/\\xff") and shown_path(Path("/a/b")) == "'/a/b'"


def test_duplicate_keys_in_nested_mappings_name_both_lines(tmp_path):
    p = tmp_path / "g.yaml"
    p.write_text("name: g\npeak_flops: 5e14\nmem_bytes: 80e9\npeak_flops: 6e14\n")
    with pytest.raises(InputError, match=r"g.yaml: line 4, column 1: .*'peak_flops' is given twice .*lines 2 and 4"):
        read_mapping(p, "GPU file")


def test_json_tricks_are_input_errors(tmp_path):
    p = tmp_path / "config.json"
    for text, says in (("[" * 10000 + "]" * 10000, "nested deeper"), ('{"a": 1, "a": 2}', "given twice"),
                       ('{"a": ' + "9" * 5000 + "}", "cannot read")):
        p.write_text(text)
        with pytest.raises(InputError, match=says):
            read_mapping(p, "config file")


def test_devices_and_folders_are_no_input_files(tmp_path, capsys):
    for over in ({"hardware.gpu": "/dev/zero.yaml"}, {"model": "/dev/zero"},
                 {"workload": {"trace": {"path": "/dev/zero"}}},
                 {"workload.prompt_tokens": {"dist": "empirical", "path": str(tmp_path)}}):
        t0 = time.perf_counter()
        rc, err = run_cli(capsys, "validate", _with(tmp_path, over, tmp_path))
        assert rc == 2 and time.perf_counter() - t0 < 5, err


# ---------------------------------------------------------------- what messages may show
def test_messages_show_paths_as_written_never_expanded(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SERVESIM_TEST_SECRET", "hunter2-token")
    monkeypatch.setenv("HOME", "/home/secret-user")
    for path in ("${SERVESIM_TEST_SECRET}/t.csv", "$SERVESIM_TEST_SECRET/t.csv", "~/t.csv"):
        for over in ({"workload": {"trace": {"path": path}}},
                     {"workload.prompt_tokens": {"dist": "empirical", "path": path}},
                     {"workload.dataset": {"path": path}, "workload.prompt_tokens": None}):
            rc, err = run_cli(capsys, "validate", _with(tmp_path, over, tmp_path))
            assert rc == 2 and "hunter2" not in err and "secret-user" not in err, err
            assert path in err, err


def test_an_expanded_path_still_finds_its_file_and_outputs_show_it_as_written(tmp_path, capsys, monkeypatch):
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,100,5\n0.1,100,5\n")
    monkeypatch.setenv("SERVESIM_TEST_DIR", str(tmp_path))
    s = _with(tmp_path, {"workload": {"trace": {"path": "${SERVESIM_TEST_DIR}/t.csv"}}}, tmp_path)
    assert run_cli(capsys, "run", s, "--out", tmp_path / "o", "--quiet")[0] == 0


def test_another_files_lines_are_not_echoed(tmp_path, capsys):
    secret = "root:x:0:0:the-secret-line:/root:/bin/bash"
    f = tmp_path / "passwd"
    f.write_text(f"{secret}\nuser:x:1000:1000::/home/user:/bin/sh\n")
    for over in ({"workload": {"trace": {"path": str(f), "format": "csv"}}},
                 {"workload.prompt_tokens": {"dist": "empirical", "path": str(f), "column": "x"}},
                 {"workload.prompt_tokens": {"dist": "empirical", "path": str(f)}},
                 {"hardware.gpu": str(f)}, {"model": str(f)}, {"cost.calibration": str(f)}):
        rc, err = run_cli(capsys, "validate", _with(tmp_path, over, tmp_path))
        assert rc == 2 and "the-secret-line" not in err, err
    f.write_text(f"name: a\n{secret}: [\n")  # a YAML syntax error on the secret's line
    rc, err = run_cli(capsys, "validate", f)
    assert rc == 2 and "passwd: line" in err and "the-secret-line" not in err, err


# ---------------------------------------------------------------- memory
def test_a_run_far_too_large_for_memory_is_refused_at_once(tmp_path, capsys):
    t0 = time.perf_counter()
    default = Path(S.default_scenario_path())
    for cmd in ("validate", "run"):
        extra = ["--quiet", "--out", tmp_path / "o"] if cmd == "run" else []
        rc, err = run_cli(capsys, cmd, default, "--set", "workload.num_requests=200000000", *extra)
        assert rc == 2 and "GiB" in err and "available" in err and "num_requests" in err, err
    assert time.perf_counter() - t0 < 20


def test_the_estimate_uses_the_available_memory(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(resources.LIMIT_ENV, "0.05")  # 51 MiB: below what any run needs
    rc, err = run_cli(capsys, "validate", scenario_file(tmp_path))
    assert rc == 2 and "51 MiB available" in err
    monkeypatch.setenv(resources.LIMIT_ENV, "64")
    assert run_cli(capsys, "validate", scenario_file(tmp_path))[0] == 0


def test_a_looped_trace_beyond_memory_is_refused_before_it_is_drawn(tmp_path, capsys, monkeypatch):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,5\n1e-6,100,5\n")
    data = json.loads(json.dumps(BASE))
    data["workload"] = {"trace": {"path": str(trace), "loop": True}, "duration_s": 1e9}
    rc, err = run_cli(capsys, "validate", scenario_file(tmp_path, data))
    assert rc == 2 and "memory" in err, err


def test_the_guard_stops_a_block_that_outgrows_its_limit():
    with pytest.raises(resources.MemoryExceeded, match="past the"):
        with resources.guard(resources.rss_bytes() + 64 * resources.MIB, interval_s=0.01):
            hog = []
            for _ in range(400):
                hog.append(bytearray(2 * resources.MIB))
                time.sleep(0.005)
    with resources.guard(resources.rss_bytes() + 512 * resources.MIB, interval_s=0.01):
        time.sleep(0.05)  # within the limit: nothing happens


def test_available_memory_is_finite_here():
    assert 0 < resources.available_bytes() < math.inf


# ---------------------------------------------------------------- validate accepts what run runs
@pytest.mark.parametrize("over", [
    {"workload": {"trace": {"path": "{p}"}, "num_requests": 50}},  # more requests than rows
    {"workload.sessions": {"turns": {"dist": "empirical", "path": "{p}/none.txt"}}},  # a file read lazily
])
def test_validate_and_run_agree(tmp_path, capsys, over):
    t = tmp_path / "t.csv"
    t.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,5\n0.1,100,5\n")
    s = _with(tmp_path, json.loads(json.dumps(over).replace("{p}", str(t) if "trace" in json.dumps(over)
                                                            else str(tmp_path))), t)
    v = run_cli(capsys, "validate", s)
    r = run_cli(capsys, "run", s, "--out", tmp_path / "o", "--quiet")
    assert v[0] == r[0] == 2, (v, r)


def test_os_environment_untouched():
    assert "SERVESIM_TEST_SECRET" not in os.environ
    assert dataclasses.is_dataclass(S.Scenario)


# ---------------------------------------------------------------- numeric command-line options
@pytest.mark.parametrize("opt", ["--probe-duration", "--tol", "--start", "--workers", "--attainment", "--keep-up"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e300", "-1", "1" + "0" * 30, "0"])
def test_capacity_options_past_their_range_exit_2(tmp_path, capsys, opt, value):
    if opt == "--workers" and not value.lstrip("-").isdigit():
        return  # argparse takes only integers there
    if value == "0" and opt == "--keep-up":
        return  # (0: off)
    workers = [] if opt == "--workers" else ["--workers", "1"]  # (given twice is refused before its value is read)
    rc, err = run_cli(capsys, "capacity", scenario_file(tmp_path), "--slo", "ttft_p99=1", "--quiet", "--max-probes",
                      "3", "--probe-requests", "30", *workers, f"{opt}={value}", "--out", tmp_path / "cap")
    assert rc == 2 and opt in err and one_bounded_line(err), err


@pytest.mark.parametrize("argv", [["sweep", "{s}", "--grid", "seed=0,1", "--workers", "1" + "0" * 30],
                                  ["cost", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "a100-80g",
                                   "--prefill", "1" + "0" * 30],
                                  ["cost", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "a100-80g",
                                   "--decode-batch", "8", "--context=-1"],
                                  ["run", "{s}", "--seed=-1"], ["run", "{s}", "--seed", "1" + "0" * 30]])
def test_other_numeric_options_past_their_range_exit_2(tmp_path, capsys, argv):
    s = scenario_file(tmp_path)
    rc, err = run_cli(capsys, *[str(s) if a == "{s}" else a for a in argv], "--quiet" if argv[0] != "cost" else
                      "--json", *(["--out", tmp_path / "o"] if argv[0] in ("run", "sweep") else []))
    # (argparse's own refusals print the subcommand's usage block first: the error is the line after it)
    assert rc == 2 and one_bounded_line(err[err.find("servesim: error:"):] if err.startswith("usage") else err), err


def test_a_sweep_grid_too_large_is_refused_before_any_point_is_made(tmp_path, capsys):
    data = json.loads(json.dumps(BASE))
    data["sweep"] = {"grid": {"seed": list(range(1000)), "policy.max_num_seqs": list(range(1, 1001))}}
    t0 = time.perf_counter()
    rc, err = run_cli(capsys, "sweep", scenario_file(tmp_path, data), "--out", tmp_path / "sw", "--quiet")
    assert rc == 2 and "1000000 points" in err and time.perf_counter() - t0 < 10, err


@pytest.mark.parametrize("block, says", [({"grd": {"seed": [1, 2]}}, "sweep: expected a mapping with one key"),
                                         ({"grid": {"seed": 3}}, "sweep.grid.seed: expected a non-empty list")])
def test_a_malformed_sweep_block_is_named_with_its_file(tmp_path, capsys, block, says):
    """The sweep block's errors named no file (every other error in a scenario file leads with it)."""
    data = json.loads(json.dumps(BASE))
    data["sweep"] = block
    s = scenario_file(tmp_path, data)
    rc, err = run_cli(capsys, "sweep", s, "--out", tmp_path / "sw", "--quiet")
    assert rc == 2 and f"servesim: error: {s}: {says}" in err, err


def test_negative_zero_is_zero(tmp_path, capsys):
    """Found by the fuzzer: std -0.0 passed ``>= 0`` but numpy's normal refused it as negative."""
    s = scenario_file(tmp_path, **{"workload.prompt_tokens": {"dist": "normal", "mean": 100, "std": -0.0},
                                   "workload.arrival": {"process": "closed_loop", "clients": 2, "think_time_s": -0.0}})
    assert run_cli(capsys, "validate", s)[0] == 0
    assert run_cli(capsys, "run", s, "--out", tmp_path / "o", "--quiet")[0] == 0


@pytest.mark.parametrize("over", [{"cluster.router": "os:system"}, {"policy.name": "os:system"},
                                  {"cluster.router": "builtins:id"}, {"policy.name": "builtins:len"},
                                  {"cluster.router": "sys:exit"}])
def test_a_plugin_name_that_makes_no_policy_or_router_exits_2_in_validate_and_run(tmp_path, capsys, over):
    """Found by the fuzzer: ``router: os:system`` resolved (a callable) so validate said ok, and
    run's call of it as a router factory raised TypeError."""
    s = scenario_file(tmp_path, **over)
    for cmd in ("validate", "run"):
        rc, err = run_cli(capsys, cmd, s, *(["--out", tmp_path / "o", "--quiet"] if cmd == "run" else []))
        assert rc == 2 and next(iter(over)) in err and "is no " in err and one_bounded_line(err), err


def test_a_model_whose_context_holds_no_request_is_refused(tmp_path, capsys):
    """Found by the fuzzer: max_position_embeddings 1 clipped every prompt to 0 tokens and the
    run stalled (exit 1)."""
    cfg = tmp_path / "m" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps({"hidden_size": 2048, "num_attention_heads": 16, "num_hidden_layers": 8,
                               "intermediate_size": 5632, "vocab_size": 32000, "max_position_embeddings": 1}))
    s = scenario_file(tmp_path, model=str(cfg.parent))
    for cmd in ("validate", "run"):
        rc, err = run_cli(capsys, cmd, s, *(["--out", tmp_path / "o", "--quiet"] if cmd == "run" else []))
        assert rc == 2 and "max_position_embeddings" in err, err


def test_closed_loop_think_times_past_the_horizon_are_refused(tmp_path, capsys):
    s = scenario_file(tmp_path, **{"workload.arrival": {"process": "closed_loop", "clients": 2,
                                                        "think_time_s": 1e9}, "workload.num_requests": 100})
    rc, err = run_cli(capsys, "validate", s)
    assert rc == 2 and "workload.arrival" in err and "simulated time" in err, err


@pytest.mark.parametrize("path, value, says", [
    ("hardware.tensor_parallel_size", 2, "hardware.tensor_parallel_size: unknown field; (vLLM's tensor_parallel_size "
                                         "is hardware.tp here) valid: dtype, expert_parallel, gpu"),
    ("policy.enable_chunked_prefill", True, "(vLLM's enable_chunked_prefill is policy.name: chunked_prefill here)"),
    ("policy.kv_cache_dtype", "fp8", "(vLLM's kv_cache_dtype is hardware.kv_dtype here)"),
    ("policy.max_model_len", 4096, "(vLLM's max_model_len is the model's context here: max_position_embeddings"),
    ("policy.max_num_seq", 8, "(did you mean 'max_num_seqs'?)"),  # (a typo still gets the spelling hint)
    ("workload.request_rate", 4, "(vllm bench serve's request_rate is workload.arrival.rate_rps here)"),
    # (a hint holding braces: it raised KeyError from str.format while it was written)
    ("workload.arrival.burstiness", 0.5, "(vllm bench serve's burstiness is workload.arrival: {process: gamma, "
                                         "cv: 1/sqrt(burstiness)} here)"),
])
def test_a_field_under_vllms_name_is_told_where_it_lives(path, value, says):
    from servesim.inputs.overrides import with_values
    from servesim.inputs.scenario import scenario_from_dict
    from tests.conftest import BASE

    with pytest.raises(InputError) as e:
        scenario_from_dict(with_values(BASE, {path: value}))
    assert says in str(e.value)


def test_a_pools_tp_under_vllms_name_is_the_pools_own_field():
    from servesim.inputs.overrides import with_values
    from servesim.inputs.scenario import scenario_from_dict
    from tests.conftest import BASE

    data = with_values(BASE, {"policy.name": "pd_split", "policy.prefill": {"tensor_parallel_size": 2}})
    with pytest.raises(InputError, match=r"\(vLLM's tensor_parallel_size is policy\.prefill\.tp here\)"):
        scenario_from_dict(data)
