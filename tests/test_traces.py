"""Trace replay: formats, options, errors with file and line, and the real Azure trace when present."""

import csv
import json
import os
from pathlib import Path

import numpy as np
import pytest

from servesim.cli.main import main
from servesim.errors import InputError
from servesim.inputs.scenario import Workload, build
from servesim.simulation import simulate
from servesim.inputs.traces import read_trace
from servesim.inputs.workload import clip_to_context, generate
from tests.conftest import make_scenario

# Made-up rows in the Azure format (a leap day, and two requests 100 ns apart).
AZURE_ROWS = [("2024-02-29 23:59:56.6805900", 350, 40), ("2024-02-29 23:59:56.6805901", 410, 120),
              ("2024-03-01 00:00:00.0000000", 1000, 7), ("2024-03-01 00:00:10.2500000", 20, 300)]


def write_azure(path: Path, rows=AZURE_ROWS, newline_at_end=False):
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(f"{t},{p},{o}" for t, p, o in rows)
    path.write_text(text + ("\n" if newline_at_end else ""))
    return str(path)


def workload(trace, **kw):
    return build(Workload, {"trace": trace, **kw}, "workload")


def gen(trace, seed=0, **kw):
    return generate(workload(trace, **kw), np.random.default_rng(seed))


def test_azure_replay_is_exact(tmp_path):
    s = gen({"path": write_azure(tmp_path / "t.csv")})
    # 100 ns resolution kept: 56.6805901 - 56.6805900 = 1e-7 s; across midnight into March
    assert s.arrival_s.tolist() == pytest.approx([0.0, 1e-7, 3.31941, 13.56941], abs=1e-12)
    assert s.prompt_tokens.tolist() == [350, 410, 1000, 20] and s.output_tokens.tolist() == [40, 120, 7, 300]


def test_azure_2024_timestamps_with_utc_offsets_replay_exactly(tmp_path):
    """Azure's 2024 traces write an offset (``+00:00``); stamps in other offsets are the same
    instants taken to UTC, the 100 ns digit kept."""
    path = tmp_path / "t24.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.0099300+00:00,374,44\n"
                    "2024-05-10 00:00:00.0099301+00:00,396,109\n2024-05-09 19:00:01.5099300-05:00,10,2\n"
                    "2024-05-10 05:30:02Z,7,7\n")
    s = gen({"path": str(path)})
    assert s.arrival_s.tolist() == pytest.approx([0.0, 1e-7, 1.5, 2.0 + 5.5 * 3600 - 0.00993], abs=1e-9)
    assert s.prompt_tokens.tolist() == [374, 396, 10, 7]


def test_splitwise_generic_csv_and_jsonl_formats(tmp_path):
    sw = tmp_path / "splitwise.csv"
    sw.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,2\n0.5,20,3\n")
    assert gen({"path": str(sw)}).arrival_s.tolist() == [0.0, 0.5]
    g = tmp_path / "mine.csv"
    g.write_text("id,t_ms,in,out\na,1000,5,6\nb,1250,7,8\n")
    s = gen({"path": str(g), "format": "csv", "time_unit": "ms",
             "columns": {"arrival": "t_ms", "prompt": "in", "output": "out"}})
    assert s.arrival_s.tolist() == [0.0, 0.25] and s.prompt_tokens.tolist() == [5, 7]
    j = tmp_path / "t.jsonl"
    j.write_text("\n".join(json.dumps(r) for r in [{"ts": "2024-01-01T00:00:00Z", "p": 3, "o": 4},
                                                    {"ts": "2024-01-01T00:00:02.5Z", "p": 5, "o": 6}]) + "\n")
    s = gen({"path": str(j), "columns": {"arrival": "ts", "prompt": "p", "output": "o"}})
    assert s.arrival_s.tolist() == [0.0, 2.5] and s.output_tokens.tolist() == [4, 6]


def test_an_arrival_column_named_with_a_unit_is_read_in_that_unit(tmp_path):
    """``columns: {arrival: arrival_ms}`` with no time_unit was read as seconds: a trace 1000x
    slower than written, silently. The name's suffix sets the unit; time_unit still overrides it."""
    ms = tmp_path / "ms.csv"
    ms.write_text("arrival_ms,prompt_tokens,output_tokens\n1000,5,6\n1500,7,8\n")
    assert gen({"path": str(ms), "columns": {"arrival": "arrival_ms"}}).arrival_s.tolist() == [0.0, 0.5]
    assert gen({"path": str(ms), "columns": {"arrival": "arrival_ms"}, "time_unit": "s"}).arrival_s.tolist() == [
        0.0, 500.0]
    us = tmp_path / "us.jsonl"
    us.write_text('{"t_us": 0, "prompt_tokens": 3, "output_tokens": 4}\n{"t_us": 250000, '
                  '"prompt_tokens": 3, "output_tokens": 4}\n')
    assert gen({"path": str(us), "columns": {"arrival": "t_us"}}).arrival_s.tolist() == [0.0, 0.25]
    ns = tmp_path / "ns.csv"
    ns.write_text("t_ns,prompt_tokens,output_tokens\n0,5,6\n2000000000,7,8\n")
    assert gen({"path": str(ns), "columns": {"arrival": "t_ns"}}).arrival_s.tolist() == [0.0, 2.0]


def test_byte_order_mark_and_crlf_are_read(tmp_path):
    """Spreadsheet exports start with a UTF-8 byte-order mark and end lines with CRLF: the first
    column's name is still found (the mark once made it '\ufeffarrival_s', "no column")."""
    c = tmp_path / "excel.csv"
    c.write_bytes(b"\xef\xbb\xbfarrival_s,prompt_tokens,output_tokens\r\n0,10,2\r\n1.5,20,3\r\n")
    s = gen({"path": str(c)})
    assert s.arrival_s.tolist() == [0.0, 1.5] and s.prompt_tokens.tolist() == [10, 20]
    a = tmp_path / "azure.csv"
    a.write_bytes(b"\xef\xbb\xbf" + Path(write_azure(tmp_path / "plain.csv")).read_bytes())
    assert gen({"path": str(a)}).prompt_tokens.tolist() == [350, 410, 1000, 20]
    j = tmp_path / "t.jsonl"
    j.write_bytes(b'\xef\xbb\xbf{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 4}\n')
    assert gen({"path": str(j)}).output_tokens.tolist() == [4]


def test_csv_columns_are_found_in_any_case(tmp_path):
    """An Azure trace saved with lower-case headers is still detected and read as Azure; a
    generic CSV's columns and named ``columns`` match in any case; two columns that match only
    in case are refused naming both (they were 'no column', though the header showed them); a
    column of the exact name wins over one that differs in case."""
    low = tmp_path / "azure_lower.csv"
    low.write_text(Path(write_azure(tmp_path / "plain.csv")).read_text().replace(
        "TIMESTAMP,ContextTokens,GeneratedTokens", "timestamp,contexttokens,generatedtokens"))
    s = gen({"path": str(low)})
    assert s.arrival_s.tolist() == pytest.approx([0.0, 1e-7, 3.31941, 13.56941], abs=1e-12)
    assert s.prompt_tokens.tolist() == [350, 410, 1000, 20]
    g = tmp_path / "g.csv"
    g.write_text("Arrival_S,PROMPT_TOKENS,Output_Tokens\n0,10,2\n1,20,3\n")
    assert gen({"path": str(g)}).output_tokens.tolist() == [2, 3]
    n = tmp_path / "n.csv"
    n.write_text("T,In,Out\n0,10,2\n")
    named = gen({"path": str(n), "columns": {"arrival": "t", "prompt": "in", "output": "OUT"}})
    assert named.prompt_tokens.tolist() == [10]
    twice = tmp_path / "twice.csv"
    twice.write_text("arrival_s,Prompt_Tokens,PROMPT_TOKENS,output_tokens\n0,10,11,2\n")
    with pytest.raises(InputError, match=r"twice.csv line 1: columns 'Prompt_Tokens', 'PROMPT_TOKENS' \(columns 2, "
                                         r"3\) each match 'prompt_tokens' but for case; which one to read cannot be"):
        gen({"path": str(twice)})
    exact = tmp_path / "exact.csv"
    exact.write_text("arrival_s,prompt_tokens,PROMPT_TOKENS,output_tokens\n0,10,11,2\n")
    assert gen({"path": str(exact)}).prompt_tokens.tolist() == [10]


def test_another_separator_is_named(tmp_path):
    """A spreadsheet's ';' or a tab-separated export reads as one column: the error says which
    separator the first line has, and that the file must be comma-separated; a first line that is
    no table is still not echoed."""
    for sep, name in ((";", "';'"), ("\t", "tabs")):
        f = tmp_path / "s.csv"
        f.write_text(sep.join(["arrival_s", "prompt_tokens", "output_tokens"]) + "\n" + sep.join("0 10 2".split()))
        with pytest.raises(InputError, match=rf"separated by {name} \(arrival_s, prompt_tokens, output_tokens\); "
                                             r"the file must be comma-separated"):
            gen({"path": str(f)})
    junk = tmp_path / "junk.csv"
    junk.write_bytes(b"\x01\x02;\x03\n0\n")
    with pytest.raises(InputError, match=r"1 field that does not look like column names"):
        gen({"path": str(junk)})


def test_our_own_requests_csv_replays(tmp_path):
    res = simulate(make_scenario(**{"workload.num_requests": 20}))
    res.write(tmp_path / "run")
    s = gen({"path": str(tmp_path / "run" / "requests.csv")})
    a = res.requests["arrival_s"]
    assert np.allclose(s.arrival_s, a - a[0]) and s.prompt_tokens.tolist() == res.requests["prompt_tokens"].tolist()


def test_speedup_window_loop(tmp_path):
    p = write_azure(tmp_path / "t.csv")
    assert gen({"path": p, "speedup": 2.0}).arrival_s[-1] == pytest.approx(13.56941 / 2)
    w = gen({"path": p, "start_s": 1.0, "end_s": 14.0})
    assert w.prompt_tokens.tolist() == [1000, 20] and w.arrival_s.tolist() == pytest.approx([2.31941, 12.56941])
    # Loop a 20 s window three times and a bit: period = end_s - start_s = 20 s.
    lp = gen({"path": p, "end_s": 20.0, "loop": True}, num_requests=10)
    assert lp.prompt_tokens.tolist() == [350, 410, 1000, 20] * 2 + [350, 410]
    assert lp.arrival_s[4] == pytest.approx(20.0) and np.all(np.diff(lp.arrival_s) >= 0)
    # duration_s cuts a loop; without a window the period is the span plus one mean gap.
    d = gen({"path": p, "loop": True}, duration_s=30.0)
    period = 13.56941 * 4 / 3
    assert d.arrival_s.tolist() == pytest.approx([0, 1e-7, 3.31941, 13.56941, period, period + 1e-7, period + 3.31941])


def test_resample_arrivals_keeping_lengths(tmp_path):
    p = write_azure(tmp_path / "t.csv")
    s = gen({"path": p}, arrival={"process": "poisson", "rate_rps": 100.0}, num_requests=4)
    assert s.prompt_tokens.tolist() == [350, 410, 1000, 20]  # in trace order
    assert s.arrival_s[-1] < 1.0  # new times, at 100 req/s
    with pytest.raises(InputError, match="set workload.trace.loop: true"):
        gen({"path": p}, arrival={"process": "poisson", "rate_rps": 100.0}, num_requests=5)
    joint = gen({"path": p, "sample": True}, arrival={"process": "poisson", "rate_rps": 1.0}, num_requests=2000)
    pairs = set(zip(joint.prompt_tokens.tolist(), joint.output_tokens.tolist()))
    assert pairs == {(350, 40), (410, 120), (1000, 7), (20, 300)}  # each row's lengths stay together


def test_all_at_once_over_a_traces_lengths_needs_num_requests(tmp_path, capsys):
    """A trace's lengths with arrival all_at_once and duration_s alone: duration_s does not say how
    many arrive at once, as without a trace (num_requests is needed), yet it passed the checks and
    read as an endless batch: "the run needs at least inf GiB of memory (inf requests ...)"
    (sampled, looped or in order); now the field's own error, in run and validate; with
    num_requests it runs."""
    import yaml

    p = write_azure(tmp_path / "t.csv")
    for trace in ({"path": str(p)}, {"path": str(p), "sample": True}, {"path": str(p), "loop": True}):
        sc = {"model": "meta-llama/Meta-Llama-3-8B", "hardware": {"gpu": "h100-sxm"},
              "workload": {"trace": trace, "arrival": {"process": "all_at_once"}, "duration_s": 5.0}}
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump(sc))
        for cmd in (["validate", str(path)], ["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]):
            capsys.readouterr()
            assert main(cmd) == 2
            err = capsys.readouterr().err
            assert "workload.num_requests is needed with arrival process all_at_once" in err and "inf" not in err
    sc["workload"]["num_requests"] = 3
    path.write_text(yaml.safe_dump(sc))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["num_requests"] == 3 == s["completed"] + s["rejected"] + s["unfinished"]


def test_trace_rows_in_other_forms_read_as_the_plain_ones(tmp_path):
    """The fast paths (plain digits, ``YYYY-MM-DD HH:MM:SS``) and the full parse agree: the same
    requests from padded lengths, a T separator, a UTC offset, a timestamp without fraction."""
    plain = tmp_path / "plain.csv"
    plain.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00.5,12,3\n"
                     "2023-11-16 18:00:01.0,7,40\n2023-11-16 18:00:02.25,100,1\n")
    other = tmp_path / "other.csv"
    other.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n 2023-11-16T18:00:00.5 , 12 ,003\n"
                     "2023-11-16 19:00:01+01:00,7.0,40\n2023-11-16 18:00:02.250000000,0100,1\n")
    a, b = gen({"path": str(plain)}), gen({"path": str(other)})
    assert a.arrival_s.tolist() == b.arrival_s.tolist() == [0.0, 0.5, 1.75]
    assert a.prompt_tokens.tolist() == b.prompt_tokens.tolist() == [12, 7, 100]
    assert a.output_tokens.tolist() == b.output_tokens.tolist() == [3, 40, 1]


@pytest.mark.parametrize("text, message", [
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "the trace has no data rows"),
    ("", "the trace is empty"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:01.0,5,5\n2023-11-16 18:00:00.5,5,5\n",
     "line 3: TIMESTAMP goes back in time"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:01.0,5,5\n2023-11-16 18:00:02.0,-4,5\n",
     r"line 3: ContextTokens must be a positive integer \(>= 1\), got -4"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:01.0,5,5\n2023-11-16 18:00:02.0,5\n",
     "line 3: expected 3 fields"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:01.0,5,5\nyesterday,5,5\n",
     "line 3: TIMESTAMP must be a number or a timestamp, got 'yesterday'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:01.0,5,1.5\n",
     "line 2: GeneratedTokens must be a positive integer, got '1.5'"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n1,5,5\n0.5,5,5\n",
     "line 4: arrived_at goes back in time"),
    ("when,a,b\n0,1,1\n", "line 1: no column 'arrival_s' for the arrival"),
    # lengths alone (Vidur's arxiv summarization file): the way to replay them is named
    ("num_prefill_tokens,num_decode_tokens\n5,5\n", "line 1: no column 'arrived_at' for the arrival "
     r"\(set workload.trace.columns.arrival, or, for a file without arrival times, give workload.arrival: the trace "
     r"then gives only lengths\)"),
    # found by fuzzing: numbers too large for a length or a clock
    ("arrival_s,prompt_tokens,output_tokens\n0,1e308,5\n", "line 2: prompt_tokens must be at most 2147483647"),
    ("arrival_s,prompt_tokens,output_tokens\n0,5,5\n1e308,5,5\n",
     r"line 3: arrival_s must be at most 1e\+12 s after time_unit"),
    # rows the fast paths (plain digits, a plain timestamp) pass on to the full checks: zero, an
    # impossible date laid out as a timestamp, a length past the limit
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:01.0,0,5\n",
     r"line 2: ContextTokens must be a positive integer \(>= 1\), got 0"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-30 18:00:01.0,5,5\n",
     "line 2: TIMESTAMP must be a number or a timestamp, got '2023-02-30 18:00:01.0'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:01.0,5,99999999999\n",
     "line 2: GeneratedTokens must be at most 2147483647"),
])
def test_trace_errors_name_file_and_line(tmp_path, text, message):
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(InputError, match=f"bad.csv.*{message}"):
        gen({"path": str(f)})


def test_empty_window_and_too_few_rows(tmp_path):
    p = write_azure(tmp_path / "t.csv")
    with pytest.raises(InputError, match=r"no rows of .*t.csv in the window \[100.0, end\) s; the trace spans 13.569"):
        gen({"path": p, "start_s": 100.0})
    with pytest.raises(InputError, match="workload.num_requests=9 exceeds the 4 rows"):
        gen({"path": p}, num_requests=9)


def test_jsonl_errors(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 3}\n{"arrival_s": 1, "prompt_tokens": 3\n')
    with pytest.raises(InputError, match=r"bad.jsonl line 2 column \d+: malformed JSON"):
        gen({"path": str(f)})
    # an integer beyond a float's range (JSON has them; float() of one raised OverflowError)
    f.write_text('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 3}\n{"arrival_s": 1%s, "prompt_tokens": 3, '
                 '"output_tokens": 3}\n' % ("0" * 400))
    with pytest.raises(InputError, match=r"bad.jsonl line 2: arrival_s must be at most 1e\+12 s after time_unit"):
        gen({"path": str(f)})


@pytest.mark.parametrize("data, message", [
    ({"trace": {"path": "x.csv", "speedup": 0}}, r"workload.trace.speedup must be >= 1e-06 and <= 1e\+06, got 0"),
    ({"trace": {"path": "x.csv", "start_s": 5, "end_s": 5}}, "workload.trace.end_s must be > workload.trace.start_s"),
    ({"trace": {"path": "x.csv", "format": "parquet"}}, "workload.trace.format: 'parquet' is not valid"),
    ({"trace": {"path": "x.csv", "sample": True}, "num_requests": 5}, "workload.trace.sample needs workload.arrival"),
    ({"trace": {"path": "x.csv"}, "prompt_tokens": {"dist": "fixed", "value": 1}},
     "workload.prompt_tokens: lengths come from workload.trace"),
    ({"trace": {"path": "x.csv", "columns": {"prompt": 3}}}, "workload.trace.columns.prompt must be a string"),
    ({"trace": {"path": "x.csv", "loop": True}},
     "workload.trace.loop needs workload.num_requests or workload.duration_s"),
    # options that would change nothing
    ({"trace": {"path": "x.csv", "sample": True, "loop": True}, "num_requests": 5,
      "arrival": {"process": "poisson", "rate_rps": 1.0}}, "workload.trace.loop: sampled rows"),
    ({"trace": {"path": "x.csv", "speedup": 2.0}, "num_requests": 5,
      "arrival": {"process": "poisson", "rate_rps": 1.0}}, "speedup changes nothing"),
    # (a window with an arrival process: the lengths were taken from the rows before start_s too)
    ({"trace": {"path": "x.csv", "start_s": 1.0}, "num_requests": 5,
      "arrival": {"process": "poisson", "rate_rps": 1.0}}, "workload.trace.start_s: with workload.arrival the trace "
                                                           "gives only lengths"),
    ({"trace": {"path": "x.csv", "end_s": 1.0}, "num_requests": 5,
      "arrival": {"process": "poisson", "rate_rps": 1.0}}, "workload.trace.end_s: .* changes nothing"),
    ({"dataset": {"path": "x.json", "sample": True, "loop": True}, "num_requests": 5,
      "arrival": {"process": "poisson", "rate_rps": 1.0}}, "workload.dataset.loop: sampled rows"),
])
def test_trace_fields_checked(data, message):
    with pytest.raises(InputError, match=message):
        build(Workload, data, "workload")


def test_cli_exit_2_for_a_malformed_trace(tmp_path, capsys):
    f = tmp_path / "bad.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:01.0,5,5\n2023-11-16 18:00:02.0,x,5\n")
    sc = tmp_path / "s.yaml"
    sc.write_text(f"model: meta-llama/Meta-Llama-3-8B\nhardware: {{gpu: h100-sxm}}\n"
                  f"workload: {{trace: {{path: '{f}'}}}}\n")
    for cmd in (["validate", str(sc)], ["run", str(sc), "--out", str(tmp_path / "o"), "--quiet"]):
        assert main(cmd) == 2
        err = capsys.readouterr().err
        assert "bad.csv line 3: ContextTokens must be a positive integer, got 'x'" in err and "Traceback" not in err


# ---------------------------------------------------------------- the real Azure trace (optional)
def shared_data() -> Path:
    env = os.environ.get("SERVESIM_SHARED_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data"


AZURE_CONV = shared_data() / "traces" / "AzureLLMInferenceTrace_conv.csv"
needs_azure = pytest.mark.skipif(not AZURE_CONV.exists(),
                                 reason=f"Azure conversation trace not found at {AZURE_CONV} "
                                        f"(set SERVESIM_SHARED_DATA to the folder holding traces/)")


@needs_azure
def test_azure_conversation_replay_reproduces_count_duration_and_tokens():
    # Independent reading of the file with the csv module and datetime (microseconds suffice
    # for the duration check at 1 us; the 7th digit is checked exactly in the synthetic test).
    from datetime import datetime
    with AZURE_CONV.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    first = datetime.fromisoformat(rows[0]["TIMESTAMP"][:26])
    last = datetime.fromisoformat(rows[-1]["TIMESTAMP"][:26])
    s = gen({"path": str(AZURE_CONV)})
    assert len(s) == len(rows) == 19366
    assert s.arrival_s[-1] == pytest.approx((last - first).total_seconds(), abs=1e-6)
    assert int(s.prompt_tokens.sum()) == sum(int(r["ContextTokens"]) for r in rows)
    assert int(s.output_tokens.sum()) == sum(int(r["GeneratedTokens"]) for r in rows)
    # Vidur's processed copy of the same trace gives the same requests.
    vidur = shared_data() / "vidur" / "processed_traces" / "splitwise_conv.csv"
    if vidur.exists():
        v = read_trace(str(vidur))
        assert np.array_equal(v.prompt_tokens, s.prompt_tokens) and np.allclose(v.arrival_s, s.arrival_s, atol=1e-6)


@needs_azure
def test_azure_conversation_window_runs_and_accounts_for_every_request():
    # The first 60 s of the trace through the simulator: every row arrives, at its time, with its lengths.
    sc = make_scenario(**{"workload": {"trace": {"path": str(AZURE_CONV), "end_s": 60.0}}})
    res = simulate(sc)
    tr = read_trace(str(AZURE_CONV))
    n = int(np.sum(tr.arrival_s < 60.0))
    r = res.requests
    assert res.summary["num_requests"] == n
    assert res.summary["completed"] + res.summary["rejected"] + res.summary["unfinished"] == n
    assert np.allclose(r["arrival_s"], tr.arrival_s[:n], rtol=0, atol=1e-9)  # stamped with env.now
    # Lengths are the trace's, shortened only where prompt + output exceeds Llama-3-8B's 8192 tokens.
    p, o, clipped = clip_to_context(tr.prompt_tokens[:n], tr.output_tokens[:n], 8192)
    assert np.array_equal(r["prompt_tokens"], p) and np.array_equal(r["output_tokens"], o)
    assert res.summary["workload"]["clipped_requests"] == int(clipped.sum())


CELLS_LEN = ["12", " 12", "+12", "12.0", "1e3", "\u0661\u0662", "0", "-3", "", "abc", "1_000", "99999999999", "7 "]
CELLS_T = ["1.5", " 2.5", "1e3", "3", "nan", "inf", "-1", "2e12", "2024-03-01 00:00:10", "x", "", "0x10"]


def test_a_column_the_header_has_twice_is_refused(tmp_path):
    """The first of two prompt_tokens columns was read without a word (the YAML reader refuses
    duplicate keys); a duplicate of a column nobody reads is no matter."""
    g = tmp_path / "g.csv"
    g.write_text("arrival_s,prompt_tokens,prompt_tokens,output_tokens\n0,10,99,2\n1,20,99,3\n")
    with pytest.raises(InputError, match=r"g.csv line 1: column 'prompt_tokens' appears 2 times \(columns 2, 3\)"):
        gen({"path": str(g)})
    g.write_text("arrival_s,prompt_tokens,note,note,output_tokens\n0,10,a,b,2\n")
    assert gen({"path": str(g)}).prompt_tokens.tolist() == [10]


def test_a_csv_trace_reads_the_same_column_by_column_as_row_by_row(tmp_path):
    """The fast reader (every column converted at once) hands anything not plain to the row-by-row
    reader: on random files mixing plain rows with odd cells (signs, spaces, floats, other
    digits, zeros, empties, timestamps, times going back, blank lines, rows of another width,
    CRLF), both give the same trace or the same error."""
    import random

    from servesim.inputs import traces as T

    rnd = random.Random(0)
    taken = {"fast": 0, "rows": 0}
    for case in range(300):
        odd = rnd.random()
        lines, t = ["arrival,prompt,output"], 0.0
        for _ in range(rnd.randint(0, 12)):
            t += rnd.choice([0.0, 0.25, 1.0, -0.5 if odd < 0.1 else 0.5])
            cells = [f"{t:g}", str(rnd.randint(1, 5000)), str(rnd.randint(1, 900))]
            if rnd.random() < odd * 0.3:
                k = rnd.randrange(3)
                cells[k] = rnd.choice(CELLS_T if k == 0 else CELLS_LEN)
            if rnd.random() < 0.05:
                cells.append("extra")
            lines.append(",".join(cells))
            if rnd.random() < 0.05:
                lines.append(rnd.choice(["", "  "]))
        text = ("\r\n" if case % 7 == 0 else "\n").join(lines) + "\n"
        path = tmp_path / f"t{case}.csv"
        path.write_text(text, newline="")
        args = (str(path), {"arrival": "arrival", "prompt": "prompt", "output": "output"}, 1.0, True)
        outcome = []
        for read in (T._read_csv, T._read_csv_rows):
            try:
                d = read(*args)
                outcome.append(("ok", d.arrival_s.tolist() if d.arrival_s is not None else None,
                                d.prompt_tokens.tolist(), d.output_tokens.tolist()))
            except InputError as e:
                outcome.append(("error", str(e)))
        assert outcome[0] == outcome[1], text
        taken["fast" if T._read_csv_columns(*args) is not None else "rows"] += 1
    assert taken["fast"] > 50 and taken["rows"] > 50  # both readers were exercised


VALUES_JSON = ["12", "12.0", "1e3", "1e18", "true", "null", '"12"', "0", "-3", "99999999999", "1" + "0" * 400, "NaN",
               "Infinity", "2147483647", "2147483648", "[1]", "{}", '"2024-03-01 00:00:10"', "-0.0", "1.5"]
HASH_JSON = ["[]", "[0, 1, 2]", "[1, true]", "[-1]", "[9223372036854775807]", "[9223372036854775808]", "[1.0]", "7",
             '["a"]', "null"]
LINES_JSON = ["", "  ", "\x0c", "\u2028", "[1, 2]", "1", "{}", "{R} x", "{R} {R}", "{R}, {R}", "{R", "\ufeff{R}",
              "\x0c{R}", " \t{R} \t", '{"x": [{}', "{}]}"]  # {R: a plain row}


def test_a_jsonl_trace_reads_the_same_column_by_column_as_row_by_row(tmp_path):
    """As for CSV: the column reader hands anything not plain to the row reader. On random JSONL
    files (with and without hash ids) mixing plain rows with odd values (floats, strings, bools,
    nulls, integers beyond float or int64, NaN, lists), odd lines (blank, not JSON, two values
    on a line, an object over two lines, a byte-order mark, form feed, CR line ends), keys
    missing and times going back, both give the same trace or the same error."""
    import random

    from servesim.inputs import traces as T

    rnd = random.Random(2)
    taken = {"fast": 0, "rows": 0}
    for case in range(1000):
        odd = rnd.random()
        hashed = case % 2 == 0
        lines, t = [], 0.0
        for _ in range(rnd.randint(0, 12)):
            t += rnd.choice([0.0, 0.25, 1.0, -0.5 if odd < 0.1 else 0.5])
            cells = {"timestamp": rnd.choice([f"{t:g}", str(int(t))]), "input_length": str(rnd.randint(1, 5000)),
                     "output_length": str(rnd.randint(1, 900))}
            if hashed:
                cells["hash_ids"] = str(list(range(rnd.randint(0, 4))))
            if rnd.random() < odd * 0.4:
                key = rnd.choice(list(cells))
                if rnd.random() < 0.15:
                    del cells[key]
                else:
                    cells[key] = rnd.choice(HASH_JSON if key == "hash_ids" else VALUES_JSON)
            row = ", ".join(f'"{k}": {v}' for k, v in cells.items())
            lines.append("{" + row + "}")
            if rnd.random() < odd * 0.1:
                lines.append(rnd.choice(LINES_JSON).replace("{R", "{" + row).replace("R}", row + "}"))
        text = ("\r\n" if case % 7 == 0 else "\r" if case % 11 == 0 else "\n").join(lines) + "\n"
        path = tmp_path / f"t{case}.jsonl"
        path.write_text(text, newline="", encoding="utf-8")
        args = (str(path), T.MOONCAKE_COLUMNS, 1e-3, case % 5 != 0)
        outcome = []
        for read in (T._read_jsonl, T._read_jsonl_rows):
            try:
                d = read(*args)
                outcome.append(("ok", d.arrival_s.tolist() if d.arrival_s is not None else None,
                                d.prompt_tokens.tolist(), d.output_tokens.tolist(), d.hash_ids))
            except InputError as e:
                outcome.append(("error", str(e)))
        assert outcome[0] == outcome[1], text
        taken["fast" if T._read_jsonl_columns(*args) is not None else "rows"] += 1
    assert taken["fast"] > 200 and taken["rows"] > 200  # both readers were exercised


CELLS_TS = ["2024-03-01T00:00:10", "2024-03-01 00:00:10", "2024-03-01 00:00:10.123456789123", "2024-03-01 00:00:10.",
            " 2024-03-01 00:00:10.5", "2024-03-01 00:00:10.5 ", "2024-03-01 00:00:10+01:00", "2024-02-30 00:00:10.5",
            "2024-3-01 00:00:10.5", "2024-03-01 99:99:99.5", "2024-03-01 00:00:1x.5", "2024-03-01 00:00:10.5x",
            "\u0662024-03-01 00:00:10.5", "2024-03-01 00:00:10.\u0665", "0001-01-01 00:00:00", "9999-12-31 23:59:59.9",
            "2023-12-31 23:59:59.9999999", "12.5", "", "2024-03-01 00:00:09.9", "2024-03-01 00:00:10.1234567+00:00",
            "2024-03-01 00:00:10-07:30", "2024-03-01 00:00:10Z", "2024-03-01 00:00:10+24:00", "2024-03-01 24:00:00",
            "2024-03-01 00:60:00", "2024-03-01 00:00:60", "2024-03-01 00:00:10+0530", "2024-03-01 00:00:10+05:3x",
            "2024-03-01 00:00:10.5+00:60", "2024-03-01 00:00:10.+00:00", "2024-03-01 00:00:10.5 +00:00"]


def test_timestamp_traces_read_the_same_column_by_column_as_row_by_row(tmp_path):
    """Timestamps laid out as Azure's (``YYYY-MM-DD HH:MM:SS.fffffff``) are parsed a column at a
    time with numpy; on random files of them mixing odd cells (a T separator, no fraction, long
    fractions, UTC offsets as Azure's 2024 traces write them and others, impossible dates and
    times, other digits, spaces, numbers, dates centuries apart, times going back, rows crossing
    midnight and new year) both readers give the same trace, bit for bit, or the same error."""
    import datetime as dt
    import random

    from servesim.inputs import traces as T

    rnd = random.Random(1)
    taken = {"fast": 0, "rows": 0}
    for case in range(300):
        odd = rnd.random()
        t = dt.datetime(2023, 12, 31, 23, 59, 50) + dt.timedelta(microseconds=rnd.randrange(10**6))
        lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
        zone = rnd.choice(["", "", "+00:00", "Z", "-05:00", "+05:30"])
        for _ in range(rnd.randint(1, 12)):
            t += dt.timedelta(microseconds=rnd.choice([0, 1, 250_000, 3_000_000, -500_000 if odd < 0.1 else 7]))
            frac = rnd.choice(["", f".{t.microsecond:06d}", f".{t.microsecond:06d}0", f".{t.microsecond // 1000:03d}"])
            cell = t.strftime("%Y-%m-%d %H:%M:%S") + (frac if frac else (f".{t.microsecond:06d}" if t.microsecond
                                                                         and odd > 0.5 else "")) + zone
            cells = [cell, str(rnd.randint(1, 5000)), str(rnd.randint(1, 900))]
            if rnd.random() < odd * 0.3:
                cells[0] = rnd.choice(CELLS_TS)
            lines.append(",".join(cells))
        path = tmp_path / f"t{case}.csv"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        args = (str(path), {"arrival": "TIMESTAMP", "prompt": "ContextTokens", "output": "GeneratedTokens"}, 1.0, True)
        outcome = []
        for read in (T._read_csv, T._read_csv_rows):
            try:
                d = read(*args)
                outcome.append(("ok", d.arrival_s.tolist(), d.prompt_tokens.tolist(), d.output_tokens.tolist()))
            except InputError as e:
                outcome.append(("error", str(e)))
        assert outcome[0] == outcome[1], "\n".join(lines)
        taken["fast" if T._read_csv_columns(*args) is not None else "rows"] += 1
    assert taken["fast"] > 50 and taken["rows"] > 50  # both readers were exercised


def test_timestamps_parse_as_the_row_reader_parses_them():
    """The column parser's day, second and nanosecond fields are ``_timestamp_ns``'s, and it
    leaves to the row reader anything not laid out exactly so."""
    from servesim.inputs import traces as T

    import datetime as dt

    cells = ["2023-11-16 18:17:03.9799600", "2024-02-29T00:00:00", "2024-03-01 23:59:59.123456789987",
             "2024-05-10 00:00:00.0099300+00:00", "2024-05-10 05:30:00.5+05:30", "2024-05-09 19:00:00.25-05:00",
             "2024-05-10 00:00:00Z"]
    day, sec, ns = T._plain_timestamps(cells)
    got = [(dd * 86400 + s) * 1_000_000_000 + n for dd, s, n in zip(day.tolist(), sec.tolist(), ns.tolist())]
    assert got == [T._timestamp_ns(c) for c in cells]
    # the offsets are UTC's, the 100 ns digit kept
    utc = dt.datetime(2024, 5, 10).toordinal() * 86400 * 1_000_000_000
    assert got[3:] == [utc + 9_930_000, utc + 500_000_000, utc + 250_000_000, utc]
    for odd in ("2024-02-30 00:00:00", "2024-03-01 00:00:00.", " 2024-03-01 00:00:00", "2024-03-01 00:00:00z",
                "2024-03-01 00:00:0\u0665", "2024-03-01 00:00:00\x00", "2024-03-01 24:00:00", "2024-03-01 00:00:60",
                "2024-03-01 00:00:00+24:00", "2024-03-01 00:00:00+0530", "2024-03-01 00:00:00+05:30:00"):
        assert T._plain_timestamps([cells[0], odd]) is None, odd
    # a cell too long to pad every row to goes to the row reader, which reads it as such
    long = "2024-03-01 00:00:00." + "1" * 200
    assert T._plain_timestamps([cells[0], long]) is None
    assert T._timestamp_ns(long) == T._timestamp_ns("2024-03-01 00:00:00.111111111")
    for bad in ("2024-02-30 00:00:00", "2024-03-01 00:00:00.", "2024-03-01 00:00:0\u0665", "2024-03-01 24:00:00",
                "2024-03-01 00:60:00", "2024-03-01 00:00:60", "2024-03-01 00:00:00+24:00", "2024-03-01 00:00:00-23:60"):
        with pytest.raises(ValueError):  # (the row reader's InputError names the line)
            T._timestamp_ns(bad)


def test_auto_reads_a_jsonl_trace_whatever_its_name(tmp_path):
    # JSON lines in t.json were read as a CSV: "no column 'arrival_s' ...; the first line has 3
    # field(s) that do not look like column names"
    rows = [{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 4}, {"arrival_s": 1.5, "prompt_tokens": 5,
                                                                      "output_tokens": 6}]
    for name in ("t.json", "t.txt"):
        p = tmp_path / name
        p.write_text("\n" + "\n".join(json.dumps(r) for r in rows) + "\n")
        s = gen({"path": str(p)})
        assert s.arrival_s.tolist() == [0.0, 1.5] and s.prompt_tokens.tolist() == [3, 5]
    moon = tmp_path / "m.json"
    moon.write_text('{"timestamp": 500, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n')
    assert gen({"path": str(moon)}).prompt_tokens.tolist() == [10]


@pytest.mark.parametrize("name, text", [
    ("t.csv", "arrival_s,prompt_tokens,output_tokens\n5,10,2\n1,20,3\n,30,4\n"),
    ("t.jsonl", '{"arrival_s": 5, "prompt_tokens": 10, "output_tokens": 2}\n'
                '{"arrival_s": 1, "prompt_tokens": 20, "output_tokens": 3}\n'
                '{"arrival_s": null, "prompt_tokens": 30, "output_tokens": 4}\n'),
])
def test_a_traces_times_are_not_read_when_workload_arrival_gives_them(tmp_path, name, text):
    # the trace gives only lengths, but a time column out of order or blank refused them ('a trace
    # must be sorted by arrival time'), a column the run never reads
    p = tmp_path / name
    p.write_text(text)
    s = gen({"path": str(p)}, arrival={"process": "fixed", "rate_rps": 2.0}, num_requests=3)
    assert s.prompt_tokens.tolist() == [10, 20, 30] and s.arrival_s.tolist() == [0.5, 1.0, 1.5]
    with pytest.raises(InputError, match="goes back in time|must be a number"):
        gen({"path": str(p)})  # (replayed, its times are checked as ever)


def test_json_lines_read_as_csv_say_they_look_like_json(tmp_path):
    # format: csv on JSON lines said 'the first line has 3 field(s) that do not look like column names'
    p = tmp_path / "t.jsonl"
    p.write_text('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 4}\n')
    with pytest.raises(InputError, match=r"the first line looks like JSON, not a CSV header \(a JSONL trace takes "
                                         r"format: jsonl\)"):
        gen({"path": str(p), "format": "csv"})
