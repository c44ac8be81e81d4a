"""Input files that once crashed, were replaced, or were read wrong: each case from a fuzzer of
servesim's input files (traces, datasets, Hugging Face configs, kernel profiles, vLLM benchmark
results, output paths; about 600 cases, 2026-12-06), checked as its class. Every one must end
with one ``servesim: error:`` line naming the file (and line, field or flag) and exit 2: no
traceback, and no run on a value the file never meant."""

import csv
import json
import math
import os
import re
from pathlib import Path

import pytest
import yaml

from servesim.cost.profiles import MAX_TIME_MS, read_compute_profile
from servesim.errors import InputError
from servesim.inputs.hf_config import model_from_hf_config
from servesim.inputs.overrides import with_values
from servesim.inputs.vllm_result import MAX_BURSTINESS, read_vllm_result
from tests.conftest import BASE
from servesim.cli.main import main
from tests.test_input_safety import run_cli, scenario_file

H200_MLP = Path(__file__).parent / "data" / "h200" / "compute" / "h200" / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv"


def one_error(err: str) -> str:
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("servesim: error: "), err
    return lines[0]


def traced(tmp_path, name: str, text: str) -> Path:
    (tmp_path / name).write_text(text)
    p = tmp_path / "s.yaml"
    data = with_values(BASE, {})
    data["workload"] = {"trace": {"path": str(tmp_path / name)}}
    p.write_text(yaml.safe_dump(data))
    return p


# ---------------------------------------------------------------- traces
@pytest.mark.parametrize("column", ["prompt_tokens", "output_tokens"])
@pytest.mark.parametrize("digits", [11, 4301, 10_000])
def test_a_length_of_too_many_digits_is_refused_naming_the_line(tmp_path, capsys, column, digits):
    """int() refuses strings of more than 4,300 digits (a ValueError, once a traceback); past 10
    digits the CSV reader's fast path now leaves a cell to the checks that name the line."""
    row = {"arrival_s": "0", "prompt_tokens": "100", "output_tokens": "10"}
    row[column] = "7" * digits
    p = traced(tmp_path, "t.csv", "arrival_s,prompt_tokens,output_tokens\n" + ",".join(row.values()) + "\n")
    rc, err = run_cli(capsys, "validate", p)
    assert rc == 2
    assert f"t.csv line 2: {column} must be at most 2147483647 tokens" in one_error(err)


@pytest.mark.parametrize("first", ["9" * 4301, "[" * 100_000 + "]" * 100_000, '{"a": ' + "1" * 5000 + "}"])
def test_an_unreadable_first_jsonl_line_is_named_when_the_format_is_sniffed(tmp_path, capsys, first):
    """The format sniffer read the first line and let a too-long number or too-deep nesting
    escape (ValueError, RecursionError); the row reader now names it, as with format: jsonl."""
    p = traced(tmp_path, "t.jsonl", first + "\n")
    rc, err = run_cli(capsys, "validate", p)
    assert rc == 2
    assert "t.jsonl line 1: cannot read the JSON" in one_error(err)


@pytest.mark.parametrize("value, says", [("null", "got null"), ("[1]", "got [1]"), ("true", "got true")])
def test_a_jsonl_arrival_that_is_no_number_shows_what_the_file_holds(tmp_path, capsys, value, says):
    """A JSON null was shown as the text 'None' (str() of it, quoted)."""
    p = traced(tmp_path, "t.jsonl", f'{{"arrival_s": {value}, "prompt_tokens": 10, "output_tokens": 5}}\n')
    rc, err = run_cli(capsys, "validate", p)
    assert rc == 2
    assert f"arrival_s must be a number or a timestamp, {says}" in one_error(err)


@pytest.mark.parametrize("key", ["prompt_tokens", "output_tokens"])
def test_a_jsonl_length_of_null_is_shown_as_the_file_writes_it(tmp_path, capsys, key):
    """A JSON null length was shown as Python's 'None' (the arrival's as 'null' already)."""
    row = {"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5}
    row[key] = None
    p = traced(tmp_path, "t.jsonl", json.dumps(row) + "\n")
    rc, err = run_cli(capsys, "validate", p)
    assert rc == 2
    assert one_error(err).endswith(f"t.jsonl line 1: {key} must be a positive integer, got null")


@pytest.mark.parametrize("third", [
    '{"arrival_s": 1.0, "prompt_tokens": 300, "output_tokens": 30, "prompt_tokens": 5}',
    '{"arrival_s": 1.0, "arrival_s": 9.0, "prompt_tokens": 300, "output_tokens": 30}',
    '{"arrival_s": 1.0, "prompt_tokens": 300, "output_tokens": 30, "prompt\\u005ftokens": 5}',
])
def test_a_jsonl_key_the_trace_reads_given_twice_is_refused_naming_the_line(tmp_path, capsys, third):
    """JSON keeps a key's last value: a line giving prompt_tokens twice replayed one of them
    silently. A key the trace reads is now refused when given twice (any spelling); other keys
    are not read, so a duplicate of one is let be (docs/workloads.md)."""
    rows = [json.dumps({"arrival_s": i * 0.1, "prompt_tokens": 100, "output_tokens": 10}) for i in range(5)]
    p = traced(tmp_path, "t.jsonl", "\n".join(rows + [third]) + "\n")
    rc, err = run_cli(capsys, "validate", p)
    assert rc == 2
    assert re.search(r"t\.jsonl line 6: key '(prompt_tokens|arrival_s)' is given twice", one_error(err))
    p = traced(tmp_path, "u.jsonl", "\n".join(rows + ['{"arrival_s": 1.0, "prompt_tokens": 3, "output_tokens": 3, '
                                                     '"note": 1, "note": 2}']) + "\n")
    assert run_cli(capsys, "validate", p)[0] == 0


def test_a_jsonl_key_given_twice_that_is_not_read_is_let_be(tmp_path, capsys):
    """With workload.arrival set the trace gives lengths only: its arrival key is not read, so a
    line giving it twice is no error (in the block reader and the row reader alike)."""
    from servesim.inputs.traces import read_trace

    rows = [json.dumps({"arrival_s": i * 0.1, "prompt_tokens": 100, "output_tokens": 10}) for i in range(5)]
    rows.append('{"arrival_s": 1.0, "arrival_s": 0.0, "prompt_tokens": 7, "output_tokens": 3}')
    for extra in ([], ['{"arrival_s": 2.0, "prompt_tokens": 8.0, "output_tokens": 3}']):  # (8.0: the row reader)
        (tmp_path / "t.jsonl").write_text("\n".join(rows + extra) + "\n")
        data = read_trace(str(tmp_path / "t.jsonl"), need_arrival=False)
        assert data.prompt_tokens.tolist() == [100] * 5 + [7] + [8] * len(extra)
        with pytest.raises(InputError, match="line 6: key 'arrival_s' is given twice"):
            read_trace(str(tmp_path / "t.jsonl"))


@pytest.mark.parametrize("name, text, says", [
    ("d.jsonl", '{"prompt": "hello there", "output": 5}\n{"prompt": "hi", "output": 5, "prompt": "x"}\n',
     "d.jsonl line 2: key 'prompt' is given twice"),
    ("d.json", '[{"conversations": [{"from": "human", "value": "hello"}, '
               '{"from": "gpt", "value": "a", "value": "a much longer reply"}]}]',
     "d.json line 1: key 'value' is given twice in one object"),
])
def test_a_dataset_key_given_twice_is_refused_naming_the_line(tmp_path, capsys, name, text, says):
    """A dataset row or ShareGPT message giving its prompt or reply twice was read by the last."""
    (tmp_path / name).write_text(text)
    p = tmp_path / "s.yaml"
    data = with_values(BASE, {})
    data["workload"] = {"num_requests": 1, "arrival": {"process": "poisson", "rate_rps": 1.0},
                        "dataset": {"path": str(tmp_path / name)}}
    p.write_text(yaml.safe_dump(data))
    rc, err = run_cli(capsys, "validate", p)
    assert rc == 2
    assert says in one_error(err)


@pytest.mark.parametrize("name, text, trace, warned", [
    ("t.csv", "timestamp,prompt_tokens,output_tokens\n0,100,10\n4314.6,200,20\n", {"columns": {"arrival": "timestamp"}},
     "timestamp"),
    ("t.jsonl", '{"t": 0, "prompt_tokens": 100, "output_tokens": 10}\n{"t": 4314.6, "prompt_tokens": 9, '
     '"output_tokens": 9}\n', {"columns": {"arrival": "t"}}, "t"),
    ("t.csv", "timestamp,prompt_tokens,output_tokens\n0,100,10\n4314.6,200,20\n",
     {"columns": {"arrival": "timestamp"}, "time_unit": "s"}, None),
    ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,100,10\n4314.6,200,20\n", {}, None),
    ("t.csv", "timestamp,prompt_tokens,output_tokens\n2023-11-16 18:00:00,100,10\n2023-11-16 18:00:04,200,20\n",
     {"columns": {"arrival": "timestamp"}}, None),
])
def test_an_arrival_column_read_as_seconds_for_want_of_a_unit_is_warned(tmp_path, capsys, name, text, trace, warned):
    """A trace in milliseconds under a column named 'timestamp' replayed 1000x slower, silently
    (the Azure conversation trace so: 0.0047 req/s over 4.9 days, 'throughput 0.00 req/s'). The
    numbers cannot tell seconds from ms, so a unit taken for want of one is warned, in run and
    validate; a unit stated (time_unit, a suffix) or timestamps are not."""
    (tmp_path / name).write_text(text)
    p = scenario_file(tmp_path, workload={"num_requests": 2, "trace": {"path": str(tmp_path / name), **trace}})
    rc = main(["validate", str(p)])
    out = capsys.readouterr().out
    assert rc == 0
    assert (f"the arrival column '{warned}' names no unit" in out) == bool(warned), out
    assert main(["run", str(p), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    codes = [w["code"] for w in summary["warnings"]]
    assert ("trace_unit" in codes) == bool(warned), summary["warnings"]
    assert summary["workload"].get("trace_unit_guessed") == warned


@pytest.mark.parametrize("column, unit, warned", [("arrival_s", "ms", True), ("arrival_ms", "s", True),
                                                  ("arrival_ms", "ms", False), ("arrival_s", "s", False)])
def test_a_time_unit_against_the_unit_named_by_the_column_is_warned(tmp_path, capsys, column, unit, warned):
    """time_unit: ms on a column named arrival_s was read as milliseconds (the replay 1000x faster
    than the name says) with no word. The stated unit is read, as documented (the name's unit
    applies where time_unit is null), but the contradiction is warned in run and validate,
    naming the field and the column; a time_unit that agrees with the name is not."""
    (tmp_path / "t.csv").write_text(f"{column},prompt_tokens,output_tokens\n0,100,10\n2000,200,20\n")
    trace = {"path": str(tmp_path / "t.csv"), "time_unit": unit, "columns": {"arrival": column}}
    p = scenario_file(tmp_path, workload={"num_requests": 2, "trace": trace})
    assert main(["validate", str(p)]) == 0
    out = capsys.readouterr().out
    said = f"workload.trace.time_unit={unit} contradicts the arrival column '{column}'"
    assert (said in out) == warned, out
    assert main(["run", str(p), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    msgs = [w["message"] for w in summary["warnings"] if w["code"] == "trace_unit"]
    assert any(said in m for m in msgs) == warned, summary["warnings"]
    # (read in the stated unit all the same: the second row 2,000 of it after the first)
    from servesim.outputs.rundir import read_columns

    arrivals = read_columns(tmp_path / "o" / "requests.csv", ["arrival_s"])["arrival_s"]
    assert arrivals[1] == pytest.approx(2000 * {"s": 1.0, "ms": 1e-3}[unit])


@pytest.mark.parametrize("text, extra, why", [
    ("timestamp,prompt_tokens,output_tokens\n2024-05-10T00:00:00,100,10\n2024-05-10T00:00:00.5,200,20\n", {},
     "holds timestamps"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,100,10\n2023-11-16 18:00:04,200,20\n", {},
     "holds timestamps"),
    ("timestamp,prompt_tokens,output_tokens\n0,100,10\n4,200,20\n",
     {"arrival": {"process": "poisson", "rate_rps": 1.0}}, "arrivals come from workload.arrival"),
    ("timestamp,prompt_tokens,output_tokens\n0,100,10\n4,200,20\n", {}, None),
])
def test_a_trace_time_unit_never_read_is_a_no_effect(tmp_path, capsys, text, extra, why):
    """workload.trace.time_unit on a trace of ISO / Azure timestamps (or with arrivals drawn from
    workload.arrival) changed nothing and said nothing: the user's 'ms' looked applied. It is a
    no_effect warning in run and validate, as other settings the run never reads; numbers read
    in the unit are not warned."""
    (tmp_path / "t.csv").write_text(text)
    trace = {"path": str(tmp_path / "t.csv"), "time_unit": "ms"}
    if text.startswith("timestamp"):
        trace["columns"] = {"arrival": "timestamp"}
    p = scenario_file(tmp_path, workload={"num_requests": 2, "trace": trace, **extra})
    rc = main(["validate", str(p)])
    out = capsys.readouterr().out
    assert rc == 0
    said = [line for line in out.splitlines() if "workload.trace.time_unit=ms changes nothing" in line]
    assert len(said) == (1 if why else 0), out
    assert not why or why in said[0]
    assert main(["run", str(p), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    hits = [w for w in summary["warnings"] if w["code"] == "no_effect" and "workload.trace.time_unit" in w["message"]]
    assert len(hits) == (1 if why else 0), summary["warnings"]


@pytest.mark.parametrize("name, encoding, says", [
    ("t.csv", "utf-16", "t.csv: a UTF-16 (little-endian) text file (it begins with the byte-order mark 0xfffe)"),
    ("t.jsonl", "utf-16-be", "t.jsonl: a UTF-16 (big-endian) text file (it begins with the byte-order mark 0xfeff)"),
    ("t.csv", "utf-16-le", "t.csv line 1: no column 'arrival_s' for the arrival"),
    ("t.jsonl", "utf-16-le", "t.jsonl line 1: the line holds NUL bytes (0x00), as UTF-16 text does"),
])
def test_a_utf16_trace_is_named_as_utf16(tmp_path, capsys, name, encoding, says):
    """A trace saved as UTF-16 (Windows' "Unicode") was 'byte offset 0 (0xff) is not valid UTF-8'
    with its mark, and without one 'malformed JSON: Expecting property name' or a header of
    fields 'that do not look like column names': true, but no hint of what to do."""
    text = ("arrival_s,prompt_tokens,output_tokens\n0,100,10\n" if name.endswith(".csv") else
            '{"arrival_s": 0, "prompt_tokens": 100, "output_tokens": 10}\n')
    p = traced(tmp_path, name, "")
    (tmp_path / name).write_bytes((("\ufeff" if encoding == "utf-16-be" else "") + text).encode(encoding))
    rc, err = run_cli(capsys, "validate", p)
    assert rc == 2
    line = one_error(err)
    assert says in line and "save the file as UTF-8" in line, line


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\u0085", "\x1c"])
def test_dataset_text_holding_a_unicode_line_separator_is_read(tmp_path, capsys, sep):
    """str.splitlines() also splits at U+2028, U+0085 and the like, which JSON strings may hold
    unescaped: a valid dataset was refused as malformed JSON, its later lines misnumbered."""
    rows = [json.dumps({"prompt": f"one{sep}two three", "output": 2}, ensure_ascii=False) for _ in range(3)]
    (tmp_path / "d.jsonl").write_text("\r\n".join(rows) + "\n", encoding="utf-8")
    data = with_values(BASE, {})
    data["workload"] = {"num_requests": 3, "arrival": {"process": "poisson", "rate_rps": 2.0},
                        "dataset": {"path": str(tmp_path / "d.jsonl")}}
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    rc, err = run_cli(capsys, "validate", p)
    assert rc == 0, err
    (tmp_path / "d.jsonl").write_text("\n".join(rows[:2] + ['{"prompt": "x", "output": }']) + "\n", encoding="utf-8")
    rc, err = run_cli(capsys, "validate", p)
    assert rc == 2 and "d.jsonl line 3 column" in one_error(err)  # (the line numbers stay a text editor's)


# ---------------------------------------------------------------- Hugging Face config.json
QWEN_MOE = {"model_type": "qwen2_moe", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
            "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 128256, "num_experts": 8,
            "num_experts_per_tok": 2, "moe_intermediate_size": 1024, "shared_expert_intermediate_size": 0}


@pytest.mark.parametrize("only", [[0, "a"], [0, None], [0, True], ["0"], [[0]], 3])
def test_mlp_only_layers_of_other_types_are_refused_naming_the_field(only):
    """sorted() of mixed types raised TypeError; True sorted as 1 and passed."""
    with pytest.raises(InputError, match=r"m.json: field 'mlp_only_layers': only leading dense layers"):
        model_from_hf_config({**QWEN_MOE, "mlp_only_layers": only}, "m.json", "m")


def test_leading_dense_layers_still_read():
    spec = model_from_hf_config({**QWEN_MOE, "mlp_only_layers": [1, 0]}, "m.json", "m")
    assert spec.num_experts == 8


@pytest.mark.parametrize("key, value, says", [("model_type", 5, "field 'model_type' must be a string"),
                                              ("model_type", ["llama"], "field 'model_type' must be a string"),
                                              ("alibi", "false", "field 'alibi' must be true or false")])
def test_config_keys_of_the_wrong_type_are_refused_not_guessed(key, value, says):
    """A model_type that is no string was ignored (the file read Llama-style) and the string
    "false" for alibi counted as true (rotary switched off): both silently."""
    cfg = {"model_type": "falcon", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
           "vocab_size": 65024, key: value}
    with pytest.raises(InputError, match=f"m.json: {says}"):
        model_from_hf_config(cfg, "m.json", "m")


# ---------------------------------------------------------------- kernel profiles
def _profile(tmp_path, edit) -> Path:
    """A copy of servesim's own H200 mlp.csv with ``edit(header, rows)`` applied; its root folder."""
    with H200_MLP.open() as fh:
        rows = list(csv.reader(fh))
    edit(rows[0], rows[1:])
    folder = tmp_path / "prof" / "compute" / "h200" / "meta-llama" / "Llama-2-7b-hf"
    folder.mkdir(parents=True)
    with (folder / "mlp.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return tmp_path / "prof"


def test_a_linear_layer_column_with_no_value_is_refused(tmp_path, capsys):
    """An empty required GEMM column was an argmax of nothing in calibrate (a traceback) and the
    roofline in its place, silently, in a run."""
    def blank(header, rows):
        i = header.index("time_stats.mlp_up_proj.median")
        for r in rows:
            r[i] = ""
    root = _profile(tmp_path, blank)
    with pytest.raises(InputError, match=r"column 'time_stats.mlp_up_proj.median' has no measured value"):
        read_compute_profile(next(root.rglob("mlp.csv")))
    rc, err = run_cli(capsys, "calibrate", "--profiles", root, "--gpu", "h200", "--out", tmp_path / "c.yaml")
    assert rc == 2 and "has no measured value" in one_error(err)
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize("value", ["1e300", "2e6"])
def test_a_time_past_any_kernels_is_refused_naming_the_line(tmp_path, value):
    """A cell of 1e300 ms ran: finish times of 1e299 s and numpy overflow warnings."""
    def huge(header, rows):
        rows[3][header.index("time_stats.attn_pre_proj.median")] = value
    root = _profile(tmp_path, huge)
    with pytest.raises(InputError, match=rf"mlp.csv: line 5: column 'time_stats.attn_pre_proj.median': "
                                         rf"'{value}' ms is more than"):
        read_compute_profile(next(root.rglob("mlp.csv")))
    assert float(value) > MAX_TIME_MS


# ---------------------------------------------------------------- vLLM benchmark results
def _result(tmp_path, **over) -> Path:
    obj = {"request_rate": 4, "input_lens": [100, 200, 300], "output_lens": [10, 20, 30],
           "ttfts": [0.05, 0.06, 0.07], "latencies": [1.0, 1.1, 1.2], **over}
    p = tmp_path / "r.json"
    p.write_text(json.dumps(obj))
    return p


@pytest.mark.parametrize("over, says", [
    ({"latencies": [1.0, 0.01, 1.2]}, r"r.json: latencies\[1\] \(0.01 s\) is shorter than ttfts\[1\] \(0.06 s\)"),
    ({"errors": ["", ""]}, r"r.json: errors must be a list with one entry per request \(3, .*got a list of 2"),
    ({"errors": "none"}, r"r.json: errors must be a list .*got str"),
    ({"start_times": 5}, r"r.json: start_times must be a list with one value per request, got int"),
    ({"burstiness": 1e-12}, r"r.json: burstiness must be in \[1e-06, 1e\+06\] or \"inf\""),
    ({"request_rate": "inf", "max_concurrency": 10**12}, r"r.json: max_concurrency must be an integer in \[1, "),
    # (one request's gaps were said to need "one value per request")
    ({"itls": [0.1, [], []]}, r"r.json: itls\[0\] must be a list with the request's gaps between streamed tokens "
                              r"\(s\), got float"),
    # (-Infinity, which JSON readers take, was replayed as an infinite rate: all at once)
    ({"request_rate": -math.inf}, r"r.json: request_rate must be a number in \[1e-06, 1e\+09\] req/s or \"inf\", "
                                  r"got -inf"),
])
def test_benchmark_results_that_would_replay_wrong_are_refused_naming_the_key(tmp_path, over, says):
    """Each was taken before: a negative TPOT in the report, failures replayed as successes,
    send times dropped for the rate, or a range error blamed on the scenario's field."""
    with pytest.raises(InputError, match=says):
        read_vllm_result(str(_result(tmp_path, **over)))


@pytest.mark.parametrize("name, text, says", [
    ("r.json", json.dumps({"request_rate": 4, "input_lens": [100, 200], "output_lens": [10, 20], "ttfts": [0.05, 0.06],
                           "latencies": [1.0, 1.1], "start_times": [10.0, 2e9]}),
     r"r.json: start_times span 2e\+09 s from the first successful request to the last; a replay takes at most "
     r"1e\+09 s"),
    ("m.csv", "sent_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n0,100,10,0.05,0.3\n1e11,100,10,0.05,0.3\n",
     r"m.csv: the send times span 1e\+11 s, where a replay takes at most 1e\+09 s \(a unit mix-up\? set --time-unit\)"),
])
def test_send_times_past_the_simulated_horizon_name_the_measurement(tmp_path, capsys, name, text, says):
    """Send times spanning more than the simulated clock resolves were let through to the replay,
    whose refusal blamed the scenario's workload (which validate-run replaces) and told to raise its
    arrival rate; the measurement's file and key are what is wrong."""
    (tmp_path / name).write_text(text)
    rc, err = run_cli(capsys, "validate-run", tmp_path / name, "--out", tmp_path / "out", "--quiet")
    assert rc == 2 and re.search(says, one_error(err)), err
    assert "arrival rate" not in err


def test_a_failed_request_may_hold_any_latency(tmp_path):
    res = read_vllm_result(str(_result(tmp_path, latencies=[1.0, 0.0, 1.2], errors=["", "timeout", ""])))
    assert res.ok.tolist() == [True, False, True]
    assert read_vllm_result(str(_result(tmp_path, burstiness=MAX_BURSTINESS))).burstiness == MAX_BURSTINESS


# ---------------------------------------------------------------- output paths
RUN = {"workload.num_requests": 5}


@pytest.mark.parametrize("flags, says", [
    (["--trace-events", "{out}/requests.csv"], "--trace-events {out}/requests.csv: --out {out} writes that file"),
    (["--decision-trace", "{out}/summary.json"], "--decision-trace {out}/summary.json: --out {out} writes that file"),
    (["--trace-events", "{tmp}/x.json", "--decision-trace", "{tmp}/x.json"],
     "--decision-trace {tmp}/x.json: --trace-events writes that file"),
])
def test_a_trace_flag_cannot_overwrite_another_output(tmp_path, capsys, flags, says):
    """--trace-events out/requests.csv replaced the run's requests (report then called the folder
    damaged); two trace flags on one file kept only the last."""
    out = tmp_path / "out"
    fill = {"out": out, "tmp": tmp_path}
    rc, err = run_cli(capsys, "run", scenario_file(tmp_path, **RUN), "--out", out, "--quiet",
                      *[f.format(**fill) for f in flags])
    assert rc == 2 and says.format(**fill) in one_error(err)
    assert not (out / "summary.json").exists()  # (refused before the run)


def test_a_trace_file_beside_the_run_files_is_written(tmp_path, capsys):
    out = tmp_path / "out"
    rc, _ = run_cli(capsys, "run", scenario_file(tmp_path, **RUN), "--out", out, "--quiet",
                    "--trace-events", out / "t.json")
    assert rc == 0 and json.loads((out / "t.json").read_text())
    assert run_cli(capsys, "report", out)[0] == 0


def test_outputs_that_exist_and_are_no_file_are_refused(tmp_path, capsys):
    """calibrate --out replaced whatever stood there (a pipe, a device node) through os.replace;
    a folder where validate-cost writes into one was 'File exists'."""
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    rc, err = run_cli(capsys, "calibrate", "--profiles", H200_MLP.parents[4], "--gpu", "h200", "--out", fifo)
    assert rc == 2 and f"--out {fifo}: exists and is not a regular file" in one_error(err)
    assert fifo.is_fifo()
    rc, err = run_cli(capsys, "run", scenario_file(tmp_path, **RUN), "--out", tmp_path / "o", "--quiet",
                      "--trace-events", fifo)
    assert rc == 2 and "exists and is not a regular file" in one_error(err)
    plain = tmp_path / "f.txt"
    plain.write_text("x")
    rc, err = run_cli(capsys, "validate-cost", "--profiles", H200_MLP.parents[4], "--gpu", "h200",
                      "--out", plain)
    assert rc == 2 and f"--out {plain}: exists and is not a folder" in one_error(err)
    assert plain.read_text() == "x"


def test_a_long_plain_list_is_not_called_an_alias_bomb(tmp_path, capsys, monkeypatch):
    """Past the node limit without an alias, the message said "an alias bomb?" (the limit is
    lowered here: the real one takes seconds to reach)."""
    from servesim.inputs import schema

    monkeypatch.setattr(schema, "MAX_NODES", 300)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(with_values(BASE, {})) + "extra: [" + ", ".join(["1"] * 400) + "]\n")
    rc, err = run_cli(capsys, "validate", p)
    line = one_error(err)
    assert rc == 2 and "more than 300 values" in line and "alias bomb" not in line and "trace" in line
    p.write_text(yaml.safe_dump(with_values(BASE, {})) + "a: &a [" + ", ".join(["1"] * 100) + "]\nb: [*a, *a, *a]\n")
    rc, err = run_cli(capsys, "validate", p)
    assert rc == 2 and "once aliases are expanded (an alias bomb?)" in one_error(err)



def test_a_long_list_is_refused_as_soon_as_it_passes_the_limit(tmp_path, capsys, monkeypatch):
    """The node limit was counted once the whole document was composed: a 4 MB list of two million
    values took over a minute and a half to be refused (under the 8 MB a scenario may have). It is
    now counted as values are composed: what follows the limit is never read (here a syntax error,
    which a reader of the whole file would report instead)."""
    from servesim.inputs import schema

    monkeypatch.setattr(schema, "MAX_NODES", 300)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(with_values(BASE, {})) + "extra: [" + ", ".join(["1"] * 400) + ", {]\n")
    rc, err = run_cli(capsys, "validate", p)
    line = one_error(err)
    assert rc == 2 and "more than 300 values" in line, line


@pytest.mark.parametrize("first, says", [("1e3", None), ("-1e3", "line 1: length must be a positive integer"),
                                         ("nan", "line 1: length must be a positive integer"), ("tokens", None)])
def test_a_lengths_files_first_line_is_a_header_only_when_it_is_no_number(tmp_path, first, says):
    """1e3, -1e3 and nan on line 1 were dropped as a header (on line 2 they were read or refused)."""
    from servesim.inputs.traces import read_lengths

    p = tmp_path / f"l-{len(first)}-{first[0]}.txt"
    p.write_text(f"{first}\n20\n30\n")
    if says is None:
        got = read_lengths(str(p)).tolist()
        assert got == ([1000, 20, 30] if first == "1e3" else [20, 30])
    else:
        with pytest.raises(InputError, match=says):
            read_lengths(str(p))


@pytest.mark.parametrize("text, value", [("0144", 144), ("08", 8), ("1_000", 1000), ("0x10", "0x10"), ("0o17", "0o17"),
                                         ("-0b1", "-0b1"), ("-0", 0), ("1:40", "1:40"), ("1:40.5", "1:40.5"),
                                         ("0b_", "0b_"), ("1__0", "1__0"), ("10_", "10_"), ("1e3", 1000.0),
                                         ("1_000.5", 1000.5), ("1__0.5", "1__0.5"), ("1.0_", "1.0_")])
def test_yaml_integers_read_in_base_10_only(text, value):
    """YAML 1.1 read 0144 as octal 100 and 1:40 (1:40.5) as base 60 (100), silently; YAML 1.2's 0x10
    and 0o17 read as numbers where a trace cell or a flag refused them (DIGITS_RULE): text now. '_'
    groups digits as Python's int() takes it. A packaged file reads the same through the C loader."""
    from servesim.inputs.schema import load_packaged_yaml, load_yaml

    assert load_yaml(f"a: {text}") == {"a": value} == load_packaged_yaml(f"a: {text}")


def test_a_leading_zero_count_is_the_number_written(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(with_values(BASE, {})).replace("num_requests: 50", "num_requests: 0144"))
    rc, _ = run_cli(capsys, "run", p, "--out", tmp_path / "o", "--quiet")
    assert rc == 0 and json.loads((tmp_path / "o" / "summary.json").read_text())["num_requests"] == 144
    p.write_text(yaml.safe_dump(with_values(BASE, {})).replace("num_requests: 50", "num_requests: 1:40"))
    rc, err = run_cli(capsys, "validate", p)
    assert rc == 2 and "workload.num_requests must be an integer" in one_error(err)


@pytest.mark.parametrize("name", ["08", "0o17", "0144", "1:40", "0x1F", "1_000", "1e3", "true", "null"])
def test_a_written_scenario_reads_back_as_written(tmp_path, capsys, name):
    """scenario.yaml wrote the name "08" plain, which the YAML 1.2 integers then read as 8 ("name
    must be a string" on reading the run's own file back); strings either reading takes for a
    number are quoted."""
    from servesim.inputs.scenario import load_scenario, scenario_to_yaml
    from servesim.inputs.schema import dump_yaml

    data = with_values(BASE, {"name": name})
    p = tmp_path / "s.yaml"
    p.write_text(dump_yaml(data))
    sc = load_scenario(str(p))
    assert sc.name == name
    back = tmp_path / "back.yaml"
    back.write_text(scenario_to_yaml(sc))
    assert load_scenario(str(back)).name == name


# ---------------------------------------------------------------- sweeps
@pytest.mark.parametrize("block, grid, says", [
    ({"grid": {"seed": [1, 2, 1]}}, [], "s.yaml: sweep.grid.seed: 1 is given twice (items 1 and 3)"),
    ({"grid": {"workload.arrival.rate_rps": [4, 8.0, 8]}}, [],
     "sweep.grid.workload.arrival.rate_rps: 8 is given twice (items 2 and 3)"),
    (None, ["--grid", "policy.max_num_seqs=8,16,08"], "--grid policy.max_num_seqs: 8 is given twice (values 1 and 3)"),
])
def test_a_sweep_value_given_twice_is_refused(tmp_path, capsys, block, grid, says):
    """A grid value given twice (a typo: rates 4,8,8) ran the same point twice, as two rows of
    results.csv and two marks of each figure that look like two measurements."""
    data = json.loads(json.dumps(BASE))
    if block:
        data["sweep"] = block
    s = scenario_file(tmp_path, data)
    rc, err = run_cli(capsys, "sweep", s, *grid, "--out", tmp_path / "sw", "--quiet")
    assert rc == 2 and says in one_error(err) and "give each value once" in err, err
    assert not (tmp_path / "sw").exists()


def test_sweep_values_that_differ_in_type_only_are_both_run(tmp_path, capsys):
    """true is not 1: a boolean and a number are different values of a grid (checked on the parse)."""
    from servesim.studies.points import pop_sweep_block

    assert pop_sweep_block({"sweep": {"grid": {"x": [1, True]}}}) == {"x": [1, True]}



@pytest.mark.parametrize("override, says", [
    ("seed=true", "seed must be an integer, got true"),
    ("name=null", "name must be a string, got null"),  # (an empty value is refused: test_cli)
    ("workload.num_requests=false", "workload.num_requests must be an integer, got false"),
])
def test_a_scenario_field_shows_null_and_booleans_as_yaml_writes_them(capsys, override, says):
    """A field's error showed YAML's null, true and false as Python's None, True and False."""
    assert main(["validate", "default", "--set", override]) == 2
    assert says in capsys.readouterr().err


def test_a_config_json_null_is_shown_as_the_file_writes_it():
    with pytest.raises(InputError, match="field 'vocab_size' must be a positive integer .*, got null$"):
        model_from_hf_config({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                              "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": None},
                             "config.json", "m")


@pytest.mark.parametrize("text, value", [("yes", "yes"), ("No", "No"), ("ON", "ON"), ("off", "off"), ("y", "y"),
                                         ("true", True), ("True", True), ("FALSE", False), ("false", False)])
def test_yaml_booleans_are_true_and_false_only(text, value):
    """YAML 1.1 (PyYAML's default) read yes, no, on and off as booleans: YAML 1.2's rule now, as
    its integers already were. A string that 1.1 reads as a boolean is written quoted."""
    from servesim.inputs.schema import dump_yaml, load_packaged_yaml, load_yaml

    assert load_yaml(f"a: {text}") == {"a": value} == load_packaged_yaml(f"a: {text}")
    assert load_yaml(f"{text}: 1") == {value: 1}
    assert load_yaml(dump_yaml({"a": text})) == {"a": text} == yaml.safe_load(dump_yaml({"a": text}))


@pytest.mark.parametrize("old, new, says", [
    ("prefix_caching: false", "prefix_caching: yes", "policy.prefix_caching must be true or false, got the text "
                                                     "'yes' (YAML 1.2, as servesim reads YAML, takes only true and "
                                                     "false as booleans: write true)"),
    ("prefix_caching: false", "prefix_caching: Off", "write false)"),
    ("prefix_caching: false", "prefix_caching: false\n  on: 1", "policy.on: unknown field"),
])
def test_a_yaml_1_1_boolean_in_a_scenario_is_named(tmp_path, capsys, old, new, says):
    """policy.prefix_caching: yes was taken as true in silence, and a key on: was True ('policy.True:
    unknown field'); a field that wants true or false now says to write it."""
    p = tmp_path / "s.yaml"
    text = yaml.safe_dump(with_values(BASE, {"policy.prefix_caching": False}), sort_keys=False)
    assert old in text
    p.write_text(text.replace(old, new))
    rc, err = run_cli(capsys, "validate", p)
    assert rc == 2 and says in one_error(err)


def test_a_name_written_no_is_the_name_no(tmp_path, capsys):
    """name: no was refused as 'name must be a string, got false' (YAML 1.1's boolean)."""
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(with_values(BASE, {"workload.num_requests": 5})).replace("name: ", "name: no #", 1))
    rc, _ = run_cli(capsys, "run", p, "--out", tmp_path / "o", "--quiet")
    assert rc == 0 and json.loads((tmp_path / "o" / "summary.json").read_text())["scenario"] == "no"


@pytest.mark.parametrize("field, text, shown", [("hardware.tp", "1e300", "got 1e+300"),
                                                ("workload.num_requests", "1e20", "got 1e+20"),
                                                ("hardware.tp", "5e3", "got 5000 "),
                                                ("workload.num_requests", "-0.0", "got 0 ")])
def test_an_integer_field_out_of_range_shows_the_number_written(capsys, field, text, shown):
    """hardware.tp: 1e300 was refused as 'got 100000000000000005...6386865459400540160' (the
    integer it converts to, 301 digits cut short), not as the number written."""
    rc, err = run_cli(capsys, "validate", "default", "--set", f"{field}={text}")
    last = err.strip().splitlines()[-1]
    assert rc == 2 and f"{field} must be > 0 and <= " in last and shown in last + " "
