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
