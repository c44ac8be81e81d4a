"""One rule for a number written as text (``servesim.errors.DIGITS_RULE``): ASCII digits, which '_'
may group (1_000), in every input. Python's int() and float() also read other scripts' digits
(full-width １０, Arabic-Indic ٣): a flag and a trace cell took them as numbers while a scenario
field refused them as text "to write without quotes". Now each refuses them, naming where."""

import pytest

from servesim.cli.main import main
from servesim.errors import InputError
from servesim.inputs.request_log import read_request_log
from servesim.inputs.traces import read_lengths, read_trace
from servesim.outputs.metrics import parse_slo
from servesim.studies.compare import parse_rates

OTHER_DIGITS = ["１００", "١٠٠"]  # full-width, Arabic-Indic


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    return err[-1]


@pytest.mark.parametrize("text", OTHER_DIGITS)
def test_a_scenario_field_names_the_rule_not_quotes(text, capsys):
    assert main(["validate", "default", "--set", f"workload.num_requests={text}"]) == 2
    err = _err(capsys)
    assert "workload.num_requests must be an integer written in ASCII digits" in err
    assert "without quotes" not in err  # (nothing was quoted)


@pytest.mark.parametrize("argv", [
    ["capacity", "default", "--slo", "ttft_p99=1", "--max-probes", "２"],
    ["capacity", "default", "--slo", "ttft_p99=1", "--tol", "０.05"],
    ["run", "default", "--seed", "٣"],
])
def test_a_flag_refuses_other_digits(argv, capsys):
    assert main(argv) == 2
    err = _err(capsys)
    assert f"argument {argv[-2]}:" in err and "ASCII digits" in err


def test_a_flag_still_names_other_text_as_argparse_does(capsys):
    assert main(["capacity", "default", "--slo", "ttft_p99=1", "--max-probes", "x"]) == 2
    assert "argument --max-probes: invalid int value: 'x'" in _err(capsys)


def test_underscores_group_digits_everywhere(tmp_path, capsys):
    """The other half of the rule: 1_000 reads as 1000 in a field, a flag, a trace cell, an SLO."""
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,prompt_tokens,output_tokens\n0,1_000,10\n0.5,5,2_0\n")
    t = read_trace(str(f))
    assert t.prompt_tokens.tolist() == [1000, 5] and t.output_tokens.tolist() == [10, 20]
    assert parse_slo("ttft_p99=1_0") == {("ttft", "p99"): 10.0}
    assert parse_rates("1_0,2") == [10.0, 2.0]


@pytest.mark.parametrize("text", OTHER_DIGITS)
@pytest.mark.parametrize("column", ["prompt", "output", "arrival"])
def test_a_csv_trace_cell_in_other_digits_is_named_by_line(tmp_path, text, column):
    row = {"arrival": "1", "prompt": "7", "output": "3", column: text}
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,prompt_tokens,output_tokens\n0,5,5\n" + ",".join(row[c] for c in
                 ("arrival", "prompt", "output")) + "\n")
    name = {"arrival": "arrival_s", "prompt": "prompt_tokens", "output": "output_tokens"}[column]
    with pytest.raises(InputError, match=f"t.csv line 3: {name} must be a .*written in ASCII digits"):
        read_trace(str(f))


def test_a_jsonl_trace_and_a_lengths_file_refuse_other_digits(tmp_path):
    j = tmp_path / "t.jsonl"
    j.write_text('{"arrival_s": 0, "prompt_tokens": "１００", "output_tokens": 5}\n')
    with pytest.raises(InputError, match="t.jsonl line 1: prompt_tokens must be .*ASCII digits"):
        read_trace(str(j))
    n = tmp_path / "n.txt"
    n.write_text("5\n٣\n")
    with pytest.raises(InputError, match="n.txt line 2: length must be .*ASCII digits"):
        read_lengths(str(n))


def test_a_request_log_output_of_other_zero_is_no_failed_request(tmp_path):
    """'０' output tokens was read as 0, the request counted as failed with no output."""
    f = tmp_path / "log.csv"
    f.write_text("sent_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n0,5,5,0.1,0.2\n1,5,０,0.1,0.2\n")
    with pytest.raises(InputError, match="log.csv line 3: output_tokens must be .*ASCII digits"):
        read_request_log(str(f))


def test_plan_lists_and_compare_rates_refuse_other_digits(capsys):
    with pytest.raises(InputError, match="--rates '２' is not a number"):
        parse_rates("２")
    assert main(["plan", "default", "--rate", "4", "--slo", "ttft_p99=1", "--tp", "１"]) == 2
    assert "--tp" in _err(capsys)


# ---------------------------------------------------------------- base 10 only
# YAML 1.2 read 0x10 as 16 and 0o17 as 15 in a scenario field, while a trace cell and a flag
# refused them (Python's int() and float() do not read a base prefix): one rule now, base 10.
PREFIXED = ["0x10", "0o17", "0b1", "-0x1", "0X1F"]


@pytest.mark.parametrize("text", PREFIXED)
@pytest.mark.parametrize("field", ["workload.num_requests", "workload.arrival.rate_rps", "seed"])
def test_a_scenario_field_refuses_a_base_prefix(tmp_path, capsys, text, field):
    from servesim.inputs.overrides import with_values
    from servesim.inputs.schema import dump_yaml
    from tests.conftest import BASE

    p = tmp_path / "s.yaml"
    last = field.split(".")[-1]
    p.write_text(dump_yaml(with_values(BASE, {})).replace(f"{last}: ", f"{last}: {text} #", 1))
    assert main(["validate", str(p)]) == 2
    err = _err(capsys)
    assert f"{field} must be " in err and "base 10" in err and "0x" in err and repr(text) in err
    assert main(["validate", "default", "--set", f"{field}={text}"]) == 2  # (a --set value alike)
    assert f"{field} must be " in _err(capsys)


@pytest.mark.parametrize("text", ["1__0", "10_", "_10", "-1__0", "1__0.5", "10_.5"])
@pytest.mark.parametrize("field", ["workload.num_requests", "workload.arrival.rate_rps"])
def test_a_scenario_field_of_digits_grouped_amiss_names_the_rule(tmp_path, capsys, text, field):
    """1__0 got a plain 'must be an integer' where 0x10 gets the digits rule (where '_' may go);
    1__0.5 was read as 10.5 (YAML 1.1's float), where a trace cell and a flag refuse it."""
    from servesim.inputs.overrides import with_values
    from servesim.inputs.schema import dump_yaml
    from tests.conftest import BASE

    p = tmp_path / "s.yaml"
    last = field.split(".")[-1]
    p.write_text(dump_yaml(with_values(BASE, {})).replace(f"{last}: ", f"{last}: {text} #", 1))
    assert main(["validate", str(p)]) == 2
    err = _err(capsys)
    assert f"{field} must be " in err and "'_' may group them, as in 1_000" in err and repr(text) in err
    assert main(["validate", "default", "--set", f"{field}='1_0'"]) == 2  # (well grouped, quoted: as before)
    assert "(write it without quotes)" in _err(capsys)


@pytest.mark.parametrize("text", PREFIXED)
@pytest.mark.parametrize("column", ["prompt", "output", "arrival"])
@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_a_trace_cell_refuses_a_base_prefix_naming_the_rule(tmp_path, text, column, suffix):
    name = {"arrival": "arrival_s", "prompt": "prompt_tokens", "output": "output_tokens"}[column]
    row = {"arrival_s": "1", "prompt_tokens": "7", "output_tokens": "3", name: text}
    f = tmp_path / f"t.{suffix}"
    if suffix == "csv":
        f.write_text("arrival_s,prompt_tokens,output_tokens\n0,5,5\n" + ",".join(row.values()) + "\n")
        line = 3
    else:
        import json
        f.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5}\n' + json.dumps(row) + "\n")
        line = 2
    with pytest.raises(InputError, match=f"t.{suffix} line {line}: {name} must be .*base 10"):
        read_trace(str(f))


@pytest.mark.parametrize("column", ["prompt_tokens", "arrival_s"])
def test_a_trace_cell_of_digits_grouped_amiss_names_the_rule(tmp_path, column):
    """1__0 in a trace cell got a plain 'must be a positive integer', where 0x10 names the rule."""
    row = {"arrival_s": "1", "prompt_tokens": "7", "output_tokens": "3",
           column: "1__0" if column == "prompt_tokens" else "1__0.5"}
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,prompt_tokens,output_tokens\n" + ",".join(row.values()) + "\n")
    with pytest.raises(InputError, match=f"t.csv line 2: {column} must be .*'_' may group them"):
        read_trace(str(f))


def test_a_number_reads_the_same_in_a_scenario_and_a_trace(tmp_path):
    """The rule's other side: what one reads as a number, the other reads as the same number."""
    from servesim.inputs.schema import load_yaml

    for text, value in [("16", 16), ("016", 16), ("1_6", 16)]:
        f = tmp_path / "t.csv"
        f.write_text(f"arrival_s,prompt_tokens,output_tokens\n0,{text},5\n")
        assert read_trace(str(f)).prompt_tokens.tolist() == [value] == [load_yaml(f"a: {text}")["a"]]


@pytest.mark.parametrize("argv", [["run", "default", "--seed", "0x10"],
                                  ["capacity", "default", "--slo", "ttft_p99=1", "--max-probes", "0o3"],
                                  ["run", "default", "--seed", "1__0"], ["run", "default", "--seed", "10_"]])
def test_a_flag_names_the_base_10_rule(argv, capsys):
    assert main(argv) == 2
    err = _err(capsys)
    assert f"argument {argv[-2]}:" in err and "base 10" in err


@pytest.mark.parametrize("text, value", [("-.5", -0.5), ("+.5", 0.5), ("+.25e+1", 2.5)])
def test_a_signed_number_with_a_leading_dot_reads_as_in_a_trace(tmp_path, text, value):
    """-.5 and +.5 were text in a scenario (YAML 1.1's float has no sign before a leading dot), the
    error saying 'write it without quotes' of a value written without them, while a trace cell and
    a flag read the number; written back, such a text stays text."""
    from servesim.inputs.overrides import with_values
    from servesim.inputs.scenario import load_scenario, scenario_from_dict
    from servesim.inputs.schema import dump_yaml, load_yaml
    from tests.conftest import BASE

    assert load_yaml(f"a: {text}")["a"] == value == float(text)
    assert load_yaml(dump_yaml({"a": text}))["a"] == text
    sc = scenario_from_dict(with_values(BASE, {"workload.arrival": {"process": "sinusoidal", "rate_rps": 4,
                                                                    "period_s": 60}}))
    p = tmp_path / "s.yaml"
    p.write_text(dump_yaml(with_values(BASE, {"workload.arrival": {"process": "sinusoidal", "rate_rps": 4,
                                                                   "period_s": 60, "phase_s": 7}}))
                 .replace("phase_s: 7", f"phase_s: {text}"))
    assert load_scenario(str(p)).workload.arrival.phase_s == value != sc.workload.arrival.phase_s


# ---------------------------------------------------------------- '_' in an exponent
# Python's float() reads 1e1_0 as 1e10, as a trace cell and a flag did, while a scenario reads it
# as text (its floats group the digits before the exponent only) and said "write it without
# quotes" of a value written without them: refused everywhere, naming the rule.
EXPONENT_UNDERSCORES = ["1e1_0", "1.5e+1_0", "2E-0_1", "1_0e1_0"]


@pytest.mark.parametrize("text", EXPONENT_UNDERSCORES)
@pytest.mark.parametrize("column", ["arrival_s", "prompt_tokens", "output_tokens"])
@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_a_trace_cell_with_an_underscore_in_its_exponent_is_refused(tmp_path, text, column, suffix):
    import json

    rows = [{"arrival_s": "0", "prompt_tokens": "5", "output_tokens": "5"},
            {"arrival_s": "1", "prompt_tokens": "7", "output_tokens": "3", column: text}]
    f = tmp_path / f"t.{suffix}"
    if suffix == "csv":
        f.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(",".join(r.values()) + "\n" for r in rows))
    else:
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match=rf"t\.{suffix} line {2 + (suffix == 'csv')}: {column} must be .*"
                                         r"not an exponent's digits.*got '" + text.replace("+", r"\+")):
        read_trace(str(f))


@pytest.mark.parametrize("text", EXPONENT_UNDERSCORES)
def test_a_scenario_field_with_an_underscore_in_its_exponent_names_the_rule(tmp_path, capsys, text):
    from servesim.inputs.schema import load_yaml

    assert load_yaml(f"a: {text}")["a"] == text  # (text, as YAML 1.2 has it)
    assert main(["validate", "default", "--set", f"workload.arrival.rate_rps={text}"]) == 2
    err = _err(capsys)
    assert "workload.arrival.rate_rps must be a number written in ASCII digits" in err
    assert "not an exponent's digits" in err and "without quotes" not in err


@pytest.mark.parametrize("argv", [["capacity", "default", "--slo", "ttft_p99=1", "--tol", "1e-0_2"],
                                  ["compare", "default", "--policies", "continuous", "--rates", "1e0_1"],
                                  ["plan", "default", "--rate", "1", "--slo", "ttft_p99=1", "--price",
                                   "h100-sxm=1e0_1"]])
def test_a_flag_with_an_underscore_in_its_exponent_is_refused(tmp_path, capsys, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = _err(capsys)
    assert argv[-2] in err and argv[-1] in err
    assert not list(tmp_path.iterdir())


def test_a_number_with_grouped_digits_before_its_exponent_reads_the_same_everywhere(tmp_path):
    from servesim.errors import ascii_float
    from servesim.inputs.schema import load_yaml

    f = tmp_path / "t.csv"
    f.write_text("arrival_s,prompt_tokens,output_tokens\n0,5,5\n1_0e-1,7,3\n")
    assert read_trace(str(f)).arrival_s.tolist()[-1] == 1.0 == load_yaml("a: 1_0e-1")["a"] == ascii_float("1_0e-1")
