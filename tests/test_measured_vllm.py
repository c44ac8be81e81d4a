"""``servesim.studies.measured_vllm`` on a folder of measured runs it was not built for: every
``<model>-tp<N>-<workload>.csv`` of the study is found, its model resolved (a ``config.json``
beside it, else the catalog), replayed at its TP size and reported; a model it cannot resolve is
named, not guessed. The tables here are made up, in the data's columns."""

import numpy as np
import pytest

from servesim.studies import measured_vllm as mv

COLUMNS = "index,arrival_ms,input_tokens,output_tokens_recorded,max_tokens,ttft_ms,e2e_ms,has_error"


def write_table(path, n=60, rate_rps=2.0, prompt=600, out=40, failed=0):
    rng = np.random.default_rng(1)
    arr = np.cumsum(rng.exponential(1e3 / rate_rps, n))
    rows = [COLUMNS]
    for i in range(n):
        err = 1 if i < failed else 0
        rows.append(f"{i},{arr[i] - arr[0]:.3f},{prompt + i % 3},{out},{out},50.0,{50.0 + 20.0 * (out - 1)},{err}")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_a_table_a_little_out_of_send_order_is_replayed_in_it(tmp_path):
    path = write_table(tmp_path / "llama-2-70b-tp4-x.csv", n=40)
    lines = path.read_text().splitlines()
    lines[5], lines[6] = lines[6], lines[5]  # two neighbours swapped, as concurrent senders write them
    path.write_text("\n".join(lines) + "\n")
    d = mv.load_file(path)
    run = mv.discover(tmp_path)[0]
    ttft, e2e = mv.replay(run.label, d, {}, run, "meta-llama/Llama-2-70b-hf")
    # each row keeps its own results: the swapped rows' E2E follow their own arrivals
    assert np.all(np.isfinite(ttft)) and np.all(e2e > ttft) and len(ttft) == 40


def test_finds_the_runs_and_their_models(tmp_path):
    for name in ("llama-2-7b-tp1-general.csv", "codellama-34b-tp2-codegen.csv",
                 "Mixtral-8x7B-v0.1-TP2-roleplay.csv", "llama-2-70b-hf-tp4-reasoning.csv", "notes.csv"):
        (tmp_path / name).write_text(COLUMNS + "\n")
    (tmp_path / "llama-2-7b-hf-config.json").write_text("{}")
    runs = mv.discover(tmp_path)
    assert [r.label for r in runs] == ["general", "codellama-34b TP2 codegen", "llama-2-70b-hf TP4 reasoning",
                                       "mixtral-8x7b-v0.1 TP2 roleplay"]  # (names in any case)
    assert runs[0].calibration and not runs[1].calibration and runs[2].tp == 4
    # the config.json beside the table names its model; else the catalog's by loose name
    assert mv.model_for("llama-2-7b", tmp_path) == str(tmp_path / "llama-2-7b-hf-config.json")
    assert mv.model_for("codellama-34b", tmp_path) == "codellama/CodeLlama-34b-Instruct-hf"
    assert mv.model_for("mixtral-8x7b-v0-1", tmp_path) == "mistralai/Mixtral-8x7B-v0.1"
    assert mv.model_for(runs[3].model_stem, tmp_path) == "mistralai/Mixtral-8x7B-v0.1"
    assert mv.model_for("llama-2-70b-hf", tmp_path) == "meta-llama/Llama-2-70b-hf"
    assert mv.model_for("nosuch-9b", tmp_path) is None
    # the variant suffixes go at the end of a name only
    assert mv._norm("mistralai/Mixtral-8x7B-Instruct-v0.1") == mv._norm("Mixtral-8x7B-v0.1") == "mixtral-8x7b"
    assert mv._norm("Llama-2-7b-chat-hf") == "llama-2-7b" and mv._norm("qwen-v1x-7b") == "qwen-v1x-7b"
    assert mv.model_for("llama-2-7b-hfx", tmp_path) is None
    # the study's load stages when the rows are as many, else the run as one
    assert mv.stages_of(runs[2], 4800) == mv.STAGES["reasoning"]
    assert mv.stages_of(runs[2], 100) == ((0, 100, "whole run"),)


def test_a_run_of_another_model_is_replayed_at_its_tp_and_reported(tmp_path, monkeypatch):
    write_table(tmp_path / "llama-2-70b-tp4-tiny.csv", failed=6)
    write_table(tmp_path / "nosuch-9b-tp1-general.csv")
    (tmp_path / "llama-2-7b-tp1-other.csv").write_text("index,arrival_ms,input_tokens\n0,0.0,600\n")
    (tmp_path / "llama-2-7b-tp1-blank.csv").write_text(COLUMNS + "\n0,0.0,x,40,40,50,830,0\n")
    (tmp_path / "llama-2-7b-tp1-neg.csv").write_text(COLUMNS + "\n0,0.0,600,40,-3,50,830,0\n")
    # a prompt past Llama-2-7B's 4,096-token context: rejected in the replay, so the run is named
    (tmp_path / "llama-2-7b-tp1-long.csv").write_text(COLUMNS + "\n0,0.0,9000,40,40,50,830,0\n")
    _, errs, whole, notes = mv.errors(tmp_path)
    assert set(whole) == {"llama-2-70b TP4 tiny"}
    per = whole["llama-2-70b TP4 tiny"]
    assert per["ttft"]["mean"][0] == pytest.approx(50.0) and per["tpot"]["mean"][0] == pytest.approx(20.0)
    # a 70B decode step at TP4 on H100 takes milliseconds, far from 0 and from a second
    assert 5.0 < per["tpot"]["mean"][1] < 60.0
    assert "10% of its requests failed" in notes["llama-2-70b TP4 tiny"][0]
    assert "no model named 'nosuch-9b'" in notes["nosuch-9b TP1 general"][0]
    # a table of another layout, or with a cell that is no number, is named and left out
    assert "not read as a run table (KeyError: \"no column 'max_tokens'\")" in notes["llama-2-7b TP1 other"][0]
    assert "input_tokens of row 0 is not a finite number" in notes["llama-2-7b TP1 blank"][0]
    assert "max_tokens of row 0 is -3: token counts are whole numbers from 1" in notes["llama-2-7b TP1 neg"][0]
    assert "not replayed" in notes["llama-2-7b TP1 long"][0]

    from servesim.studies.reproduce import Options, exp_vllm_h100

    monkeypatch.setenv("SERVESIM_SHARED_DATA", str(tmp_path.parent))
    (tmp_path.parent / "vllm-h100").mkdir(exist_ok=True)
    for f in tmp_path.glob("*.csv"):
        (tmp_path.parent / "vllm-h100" / f.name).write_text(f.read_text())
    exp = exp_vllm_h100(Options())
    labels = [f.label for f in exp.figures]
    assert "llama-2-70b TP4 tiny: mean TPOT" in labels and "nosuch-9b TP1 general: replay" in labels
    # the p99 TTFT figure says how many requests were late on their own, measured and simulated
    p99 = next(f for f in exp.figures if f.label == "llama-2-70b TP4 tiny: p99 TTFT")
    assert "requests late on their own" in p99.missing and "0.0% measured" in p99.missing
    mean = next(f for f in exp.figures if f.label == "llama-2-70b TP4 tiny: mean TTFT")
    assert "late on their own" not in mean.missing
    assert any("held out (no constant fitted to them): llama-2-70b TP4 tiny" in n for n in exp.notes)


def test_cells_out_of_range_are_named_not_cast(tmp_path):
    """Fuzzing found these: a prompt of 1e12 tokens made a 7 TiB array (the prompt matcher counted
    lengths with ``np.bincount``), inf passed the number check and was cast to int64, a negative
    latency went into the means, and one-token outputs divided by zero in TPOT."""
    rows = {"inf": "0,0.0,inf,40,40,50,830,0", "huge": "0,0.0,1e15,40,40,50,830,0",
            "late": "0,0.0,600,40,40,50,-5,0", "never": "0,nan,600,40,40,50,830,0"}
    for name, row in rows.items():
        (tmp_path / f"llama-2-7b-tp1-{name}.csv").write_text(COLUMNS + "\n" + row + "\n")
    # a prompt longer than any context but a whole token count: read, then refused by the replay
    (tmp_path / "llama-2-7b-tp1-long.csv").write_text(COLUMNS + "\n0,0.0,1e12,2061,1e3,1,5,0\n")
    _, _, whole, notes = mv.errors(tmp_path)
    assert not whole
    assert "input_tokens of row 0 is not a finite number" in notes["llama-2-7b TP1 inf"][0]
    assert "input_tokens of row 0 is 1e+15: token counts are whole numbers from 1 to 2,147,483,647" \
        in notes["llama-2-7b TP1 huge"][0]
    assert "e2e_ms of row 0 is -5: a latency is >= 0" in notes["llama-2-7b TP1 late"][0]
    assert "arrival_ms of row 0 is not a finite number" in notes["llama-2-7b TP1 never"][0]
    assert "not replayed" in notes["llama-2-7b TP1 long"][0]


def test_one_token_outputs_have_no_tpot(tmp_path, monkeypatch):
    path = write_table(tmp_path / "llama-2-70b-tp4-short.csv", n=30, out=1)
    lines = path.read_text().splitlines()
    lines[1] = lines[1].replace(",1,1,", ",5,5,", 1)  # (index 0: the one row of five tokens)
    path.write_text("\n".join(lines) + "\n")
    text, errs, whole, _ = mv.errors(tmp_path)
    per = whole["llama-2-70b TP4 short"]
    # TPOT over the one request of more than one token; TTFT and E2E over all of them
    assert np.isfinite(per["tpot"]["mean"][0]) and np.isfinite(per["ttft"]["mean"][1])
    e = errs[("llama-2-70b TP4 short", "whole run")]
    assert all(np.isfinite(x) for k in ("ttft", "e2e") for x in e[k].values())
    write_table(path, n=30, out=1)  # none of more than one token: no TPOT, said as a dash, not nan%
    text, errs, whole, _ = mv.errors(tmp_path)
    assert np.isnan(whole["llama-2-70b TP4 short"]["tpot"]["mean"][0]) and "nan%" not in text
    # reproduce says so instead of a nan figure
    from servesim.studies.reproduce import Options, exp_vllm_h100

    monkeypatch.setenv("SERVESIM_SHARED_DATA", str(tmp_path))
    (tmp_path / "vllm-h100").mkdir()
    (tmp_path / "vllm-h100" / path.name).write_text(path.read_text())
    tpot = [f for f in exp_vllm_h100(Options()).figures if "TPOT" in f.label]
    assert len(tpot) == 2 and all(f.published is None and f.simulated is None for f in tpot)
    assert all("no request of more than one output token" in f.missing for f in tpot)


def test_requests_late_on_their_own_are_counted_apart_from_load():
    """A request held alone (its neighbours on time) is late on its own; a slow stretch of load
    (every neighbour as slow) is not; the p99 without the measured late rows is reported for
    both sides."""
    rng = np.random.default_rng(3)
    n = 2000
    base = 28.0 + rng.normal(0.0, 2.0, n)
    base[1000:1300] += 20.0  # a busy stretch: every request in it slower
    meas = base.copy()
    held = rng.choice(np.r_[100:900, 1400:1900], 40, replace=False)
    meas[held] += 40.0  # 2% held alone by 40 ms (half the median is 14 ms)
    late = mv.late_rows(meas)
    assert set(np.flatnonzero(late)) == set(held)  # the busy stretch is not, the held rows are
    assert not mv.late_rows(base).any()
    r = mv.late_requests(meas, base)
    assert r["share"] == (pytest.approx(0.02), 0.0)
    assert r["threshold_ms"] == (pytest.approx(0.5 * np.median(meas)), pytest.approx(0.5 * np.median(base)))
    # without the held rows the two sides are the same requests: the same p99
    assert r["p99_without"][0] == pytest.approx(r["p99_without"][1])
    assert r["p99_without"][0] < np.percentile(meas, 99)
    # a table of one row, or none, does not fail
    assert not mv.late_rows(np.array([30.0])).any() and len(mv.late_rows(np.array([]))) == 0
    # at the ends too, a request held alone is set against the requests nearest it: a cold first
    # request (and a held last one) was its own neighbours' median with the ends padded by its value
    ends = base[:600].copy()
    ends[[0, 3, 599]] += 40.0
    assert set(np.flatnonzero(mv.late_rows(ends))) == {0, 3, 599}
    short = np.full(30, 28.0)
    short[0] += 40.0  # (fewer rows than a window: set against the whole run's median)
    assert set(np.flatnonzero(mv.late_rows(short))) == {0}


def test_the_late_note_says_what_each_share_is_counted_against():
    """Each side's late rows are counted against half its own run's median (``late_rows``), but
    the note printed one threshold, half the MEASURED median, as if both shares were counted
    against it. A replay twice as slow as the measurement has its own, twice as high, and the
    note gives both."""
    from servesim.studies.reproduce import late_note

    rng = np.random.default_rng(5)
    meas = 28.0 + rng.normal(0.0, 2.0, 1000)
    sim = 2 * meas
    meas[rng.choice(1000, 20, replace=False)] += 40.0  # late against 14 ms; the same 40 ms in sim would not be
    r = mv.late_requests(meas, sim)
    tm, ts = r["threshold_ms"]
    assert ts == pytest.approx(2 * tm, rel=0.05) and r["share"][1] == 0.0
    note = late_note(r)
    assert (f"by more than half the run's own median: {tm:.0f} ms measured, {ts:.0f} ms simulated): "
            f"{r['share'][0]:.1%} measured, 0.0% simulated") in note
