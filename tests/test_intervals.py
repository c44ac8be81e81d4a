"""Confidence intervals over seeds (servesim.outputs.intervals): the t quantile, the interval's
coverage, paired differences, and printing to the interval's precision."""

import math

import numpy as np
import pytest
from scipy import stats

from servesim.outputs.intervals import (PM, Interval, format_difference, format_interval, format_value,
                                        paired_difference, row_interval, t_interval, t_quantile)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 9, 20, 30, 31, 60, 500])
def test_t_quantile_matches_scipy(df):
    assert t_quantile(0.975, df) == pytest.approx(stats.t.ppf(0.975, df), rel=2e-4)
    assert t_quantile(0.95, df) == pytest.approx(stats.t.ppf(0.95, df), rel=2e-3)


def test_interval_is_the_student_t_one():
    x = [20.94, 20.15, 19.95, 18.37]
    iv = t_interval(x)
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=stats.sem(x))
    assert iv.mean == pytest.approx(np.mean(x)) and iv.low == pytest.approx(lo, rel=1e-3)
    assert iv.high == pytest.approx(hi, rel=1e-3) and iv.n == 4
    assert iv.rel == pytest.approx(iv.half / iv.mean)


def test_interval_covers_the_mean_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    hits = sum(t_interval(rng.normal(10.0, 2.0, 5)).excludes(10.0) is False for _ in range(4000))
    assert 0.93 <= hits / 4000 <= 0.97


def test_degenerate_samples():
    one = t_interval([3.0])
    assert one.mean == 3.0 and math.isnan(one.half) and not one.excludes(0.0)
    assert t_interval([None, float("nan"), 2.0, 4.0]).n == 2  # missing values are left out
    same = t_interval([5.0, 5.0, 5.0])
    assert same.half == 0.0 and same.excludes(4.0) and not same.excludes(5.0)
    assert math.isinf(t_interval([1.0, math.inf]).half)
    assert t_interval([]).n == 0


def test_equal_values_have_no_spread_whatever_their_mean_rounds_to():
    """Three seeds of one trace replayed row by row give the same p99 ITL, whose mean over them
    differs from it in its last bit: the residue's half-width (1e-17 s) printed "22.044058284177030
    ± 0.000000000000011" in compare's table."""
    x = 0.04327670679050534  # (a value whose mean of three copies is not itself in floating point)
    assert math.fsum([x] * 3) / 3 != x
    iv = t_interval([x] * 3)
    assert iv.half == 0.0
    assert format_interval(iv, 1e3, "ms") == f"{format_interval(t_interval([x, x]), 1e3, 'ms')}"
    assert len(format_interval(iv, 1e3, "ms")) < 16, format_interval(iv, 1e3, "ms")


def test_paired_difference_removes_the_shared_noise():
    rng = np.random.default_rng(2)
    workload = rng.normal(0, 5.0, 6)  # the seed's own noise, shared by both configurations
    a = 100 + workload
    b = 98 + workload + rng.normal(0, 0.2, 6)
    diff = paired_difference(list(a), list(b))
    assert diff.excludes(0.0) and diff.mean < 0
    assert not t_interval(b).scaled(1.0).excludes(t_interval(a).mean)  # unpaired, the intervals overlap
    with pytest.raises(ValueError):
        paired_difference([1.0], [1.0, 2.0])


@pytest.mark.parametrize("mean, half, text", [
    (19.8412, 0.8312, f"19.8 {PM} 0.8"),      # 831 -> one significant digit
    (19.8412, 0.1234, f"19.84 {PM} 0.12"),    # 123 -> two
    (19.8412, 0.0351, f"19.841 {PM} 0.035"),  # 351 -> two
    (19.8412, 0.0972, f"19.84 {PM} 0.10"),    # 972 rounds up to 0.10, two digits
    (12345.0, 370.0, f"12300 {PM} 400"),      # hundreds
    (0.001234, 0.000012, f"0.001234 {PM} 0.000012"),
])
def test_printed_precision_follows_the_interval(mean, half, text):
    assert format_interval(Interval(mean, half, 5)) == text


def test_printing_without_an_interval_and_with_units():
    assert format_interval(Interval(20.9382, math.nan, 1)) == "20.9"
    assert format_interval(Interval(0.0213, 0.0011, 4), 1e3, "ms") == f"21.3 {PM} 1.1 ms"
    assert format_interval(Interval(7.0, 0.0, 3)) == f"7 {PM} 0"
    assert format_difference(Interval(3.1, 1.2, 3), unit="ms") == f"+3.1 {PM} 1.2 ms"
    assert format_difference(Interval(-3.1, 1.2, 3)) == f"-3.1 {PM} 1.2"
    assert format_value(1234.5) == "1234" and format_value(None) == "n/a"


def test_row_interval_reads_results_columns():
    iv = row_interval({"goodput_rps": 7.7, "goodput_rps_ci95": 0.4, "seeds": 5}, "goodput_rps")
    assert (iv.mean, iv.half, iv.n) == (7.7, 0.4, 5)
    assert math.isnan(row_interval({"goodput_rps": 7.7}, "goodput_rps").half)


def test_a_share_interval_stays_between_0_and_1():
    """Two seeds at 10% and 14% SLO attainment: the t-interval 12 +- 25% reaches -13%, a share no
    run can have; compare printed "12 +- 21%" for such a run (and "30 +- 100%" over 0-100%). The
    ends are cut at 0 and 1 (and at -1 and 1 for the paired difference of two shares)."""
    from servesim.outputs.intervals import paired_rows, t_interval
    from servesim.outputs.verdicts import slo_phrase

    raw = t_interval([0.10, 0.14])
    row = {"slo_attainment": raw.mean, "slo_attainment_ci95": raw.half, "seeds": 2}
    iv = row_interval(row, "slo_attainment")
    assert raw.mean - raw.half < 0 and (iv.low, iv.high) == (0.0, pytest.approx(raw.mean + raw.half))
    text = format_interval(iv, 100.0)
    assert text == f"12 (0 to {round((raw.mean + raw.half) * 100)})" and PM not in text
    assert "-" not in slo_phrase(row) and "(0 to " in slo_phrase(row)
    top = row_interval({"class_slo_attainment_min": 0.97, "class_slo_attainment_min_ci95": 0.2, "seeds": 2},
                       "class_slo_attainment_min")
    assert top.high == 1.0 and format_interval(top, 100.0) == "97 (77 to 100)"
    # a rate is cut at 0 too (no offered_rps: no upper end), and a share well inside keeps +-
    assert format_interval(row_interval({"goodput_rps": 0.2, "goodput_rps_ci95": 0.7, "seeds": 2}, "goodput_rps")) \
        == "0.2 (0 to 0.9)"
    assert format_interval(row_interval({"slo_attainment": 0.5, "slo_attainment_ci95": 0.1, "seeds": 3},
                                        "slo_attainment"), 100.0) == f"50 {PM} 10"
    a = [{"seed": s, "status": "ok", "slo_attainment": x} for s, x in ((0, 1.0), (1, 1.0))]
    b = [{"seed": s, "status": "ok", "slo_attainment": x} for s, x in ((0, 0.10), (1, 0.14))]
    d = paired_rows(a, b, "slo_attainment")
    assert d.mean - d.half < -1 and d.low == -1.0 and format_difference(d, 100.0).startswith("-88 (-100 to ")


def test_a_latency_or_count_interval_never_reaches_below_0():
    """Two seeds' p50 TTFT at 40 and 160 ms: the t-interval 100 +- 760 ms reaches -660 ms, a latency
    no run can have; run --seeds, compare and sweep printed "100 +- 800 ms". Every figure that is
    not a share or a difference (a latency, a count, a rate, a capacity) is cut at 0: its mean and
    ends; one whose interval stays above 0 keeps +-, and a paired difference may still be negative."""
    from servesim.cli.main import format_seeds
    from servesim.cli.studies import format_table
    from servesim.outputs.intervals import NONNEGATIVE, paired_difference, t_interval

    raw = t_interval([0.04, 0.16])
    row = {"ttft_p50_s": raw.mean, "ttft_p50_s_ci95": raw.half, "tpot_p99_s": 0.01, "tpot_p99_s_ci95": 0.002,
           "seeds": 2}
    iv = row_interval(row, "ttft_p50_s")
    assert raw.mean - raw.half < 0 and iv.low == 0.0 and iv.high == pytest.approx(raw.mean + raw.half)
    text = format_interval(iv, 1e3, "ms")
    assert PM not in text and text.startswith("100 (0 to ") and text.endswith(" ms")
    assert format_interval(row_interval(row, "tpot_p99_s"), 1e3) == f"10.0 {PM} 2.0"
    table = format_table([row], ["ttft_p50_s", "tpot_p99_s"])
    assert "(0 to " in table and "-" not in table.splitlines()[1]
    # run --seeds: the summary's lines
    fig = {"mean": raw.mean, "ci95": raw.half, "n": 2, "values": [0.04, 0.16]}
    figures = {k: dict(fig) for k in ("throughput_rps", "output_tokens_per_s", "goodput_rps", "completed",
                                      "rejected", "unfinished")}
    figures["slo_attainment"] = {"mean": 1.0, "ci95": 0.0, "n": 2, "values": [1.0, 1.0]}
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        figures[key + ".p50"] = dict(fig)
        figures[key + ".p99"] = dict(fig)
    lines = format_seeds({"seeds": [0, 1], "figures": figures})
    assert not any(f"{PM} 800" in x or f"{PM} 0.8" in x for x in lines), lines
    assert "TTFT        p50 100 (0 to " in "\n".join(lines)
    # a capacity over seeds, and a paired difference that may be negative
    cap = t_interval([4.0, 6.0], bounds=NONNEGATIVE)
    assert cap.low == 0.0 and format_interval(cap, unit="req/s") == "5 (0 to 18) req/s"
    d = paired_difference([0.1, 0.2], [0.05, 0.3])
    assert d.low < 0 and format_difference(d, 1e3, "ms").startswith("+")


def test_a_configuration_that_fails_the_slo_is_never_called_better():
    from servesim.outputs.verdicts import difference_sentences, differences

    rate = "workload.arrival.rate_rps"
    seeds = []
    for s in range(3):  # "fast" has a lower p99 TTFT on every seed, but meets the SLO for few requests
        seeds.append({"label": "base", rate: 8.0, "seed": s, "status": "ok", "ttft_p99_s": 0.30 + 0.01 * s,
                      "goodput_rps": 7.0 + 0.1 * s})
        seeds.append({"label": "fast", rate: 8.0, "seed": s, "status": "ok", "ttft_p99_s": 0.10 + 0.011 * s,
                      "goodput_rps": 0.5 + 0.12 * s})
    rows = [{"label": "base", rate: 8.0, "status": "ok", "slo_attainment": 0.99},
            {"label": "fast", rate: 8.0, "status": "ok", "slo_attainment": 0.05}]
    diffs = differences(seeds, "base")
    [credited] = difference_sentences(diffs, "base")  # without the rows: judged by the figures alone
    assert "p99 TTFT -" in credited and "(better)" in credited
    [line] = difference_sentences(diffs, "base", rows=rows)
    assert "fast fails the SLO at 8 req/s, so none of its figures counts as better" in line
    assert "(better)" not in line and "(lower)" in line and "(worse)" in line  # goodput still worse


def test_paired_goodput_is_per_gpu_when_the_gpu_counts_differ():
    """The verdict ranks configurations on different numbers of GPUs by goodput per GPU; the paired
    differences compare the same figure: a split on 2 GPUs that serves a little more than 1 GPU
    serves about half as much per GPU, and was called "goodput ... (better)"."""
    from servesim.outputs.verdicts import difference_sentences, differences, gpu_counts

    rate = "workload.arrival.rate_rps"
    seeds = []
    for s in range(3):
        seeds.append({"label": "one", rate: 8.0, "seed": s, "status": "ok", "num_gpus": 1,
                      "goodput_rps": 7.6 + 0.1 * s})
        seeds.append({"label": "two", rate: 8.0, "seed": s, "status": "ok", "num_gpus": 2,
                      "goodput_rps": 7.65 + 0.1 * s + 0.001 * s * s})
    rows = [{"label": "one", rate: 8.0, "status": "ok", "slo_attainment": 1.0, "num_gpus": 1},
            {"label": "two", rate: 8.0, "status": "ok", "slo_attainment": 1.0, "num_gpus": 2}]
    [d] = [d for d in differences(seeds, "one") if d["column"].startswith("goodput")]
    assert d["column"] == "goodput_per_gpu" and d["significant"] and not d["better"]
    assert d["interval"].mean < -3.5
    [line] = difference_sentences(differences(seeds, "one"), "one", gpu_counts(rows), rows)
    assert "goodput per GPU -" in line and "req/s per GPU (worse)" in line and "(better)" not in line
    # the same GPUs on both sides: goodput itself
    same = [dict(r, num_gpus=1) for r in seeds]
    [d] = [d for d in differences(same, "one") if d["column"].startswith("goodput")]
    assert d["column"] == "goodput_rps" and d["better"]


def test_seeds_that_repeat_one_workload_are_said_to_and_claim_no_interval():
    """A trace replayed row by row draws nothing from the seed: every seed runs the same requests,
    and `--seeds 3` printed "goodput 4.78 ± 0 req/s" and "goodput +0.448 ± 0 req/s (better)", a
    certainty over samples that were never drawn. The study says so (``seeds_alike``), the paired
    differences are one workload's without "± 0", and run --seeds prints no intervals."""
    from servesim.cli.main import format_seeds
    from servesim.outputs.verdicts import differences, difference_sentences, seeds_alike, study_warnings

    rate = "workload.arrival.rate_rps"
    seeds = []
    for s in range(3):  # the same figures on every seed
        seeds.append({"label": "a", rate: 4.0, "seed": s, "status": "ok", "goodput_rps": 4.33,
                      "ttft_p99_s": 0.0694, "wall_time_s": 0.3 + s})
        seeds.append({"label": "b", rate: 4.0, "seed": s, "status": "ok", "goodput_rps": 4.78,
                      "ttft_p99_s": 0.132, "wall_time_s": 0.2 + s})
    rows = [{"label": lbl, rate: 4.0, "status": "ok", "seeds": 3, "goodput_rps": g, "goodput_rps_ci95": 0.0,
             "ttft_p99_s_ci95": 0.0, "wall_time_s_ci95": 0.12, "slo_attainment": 1.0}
            for lbl, g in (("a", 4.33), ("b", 4.78))]
    assert all(seeds_alike(r) for r in rows)
    [w] = [w for w in study_warnings(rows) if w["code"] == "seeds_alike"]
    assert "a at 4 req/s, b at 4 req/s gave the same figures on every seed" in w["message"]
    assert "workload.trace" in w["message"]
    [line] = difference_sentences(differences(seeds, "a"), "a", rows=rows)
    assert PM not in line and "goodput +0.450 req/s (better)" in line and "one workload's, no interval" in line
    # seeds that differ: neither
    varied = [dict(r, goodput_rps_ci95=0.1) for r in rows]
    assert not any(seeds_alike(r) for r in varied)
    assert not [w for w in study_warnings(varied) if w["code"] == "seeds_alike"]
    # run --seeds: the figures over the seeds, each with a 0-wide interval
    figs = {k: {"mean": 1.0, "ci95": 0.0, "n": 3, "values": [1.0] * 3} for k in (
        "throughput_rps", "output_tokens_per_s", "goodput_rps", "slo_attainment", "completed", "rejected",
        "unfinished", "offered_rps", "ttft_s.p50", "ttft_s.p99", "tpot_s.p50", "tpot_s.p99", "itl_s.p50",
        "itl_s.p99", "e2e_s.p50", "e2e_s.p99")}
    text = "\n".join(format_seeds({"seeds": [0, 1, 2], "figures": figs}))
    assert PM not in text and "every seed gave the same figures" in text
    # a figure with no interval at all (all_at_once arrivals have no offered rate) does not hide it
    figs["offered_rps"] = {"mean": None, "ci95": None, "n": 0, "values": [None] * 3}
    assert PM not in "\n".join(format_seeds({"seeds": [0, 1, 2], "figures": figs}))
    figs["ttft_s.p99"] = dict(figs["ttft_s.p99"], ci95=0.01)
    assert f"{PM} 0" in "\n".join(format_seeds({"seeds": [0, 1, 2], "figures": figs}))


def test_study_caveats_name_the_runs_that_did_not_keep_up():
    """A sweep or comparison row whose keep_up ratio is under 0.9 is named in the caveats (its
    latencies depend on the run's length); a capacity or plan search, which probes such rates on
    purpose, judges them by its own rule and does not repeat it."""
    from servesim.outputs.verdicts import caveats, study_warnings

    rows = [{"label": "a", "status": "ok", "keep_up": 0.99, "workload.arrival.rate_rps": 8.0},
            {"label": "a", "status": "ok", "keep_up": 0.64, "workload.arrival.rate_rps": 30.0},
            {"label": "b", "status": "ok", "keep_up": None, "workload.arrival.rate_rps": 30.0}]
    (w,) = [w for w in study_warnings(rows) if w["code"] == "not_keeping_up"]
    assert w["message"].startswith("a at 30 req/s did not keep up")
    assert any("did not keep up" in n for n in caveats(rows, {"kind": "compare"}))
    assert not any("did not keep up" in n for n in caveats(rows, {"kind": "capacity"}))


def test_study_caveats_tell_a_backlog_from_a_run_too_short_to_tell():
    """A row whose keep_up shortfall its requests' service time could make by itself
    (keep_up + keep_up_warmup >= 0.9: results.csv from the run's summary) is named as too short to
    tell, not as a growing backlog; one short of even that is a backlog."""
    from servesim.outputs.verdicts import study_warnings

    rows = [{"label": "a", "status": "ok", "keep_up": 0.64, "keep_up_warmup": 0.10, "workload.arrival.rate_rps": 30.0},
            {"label": "b", "status": "ok", "keep_up": 0.70, "keep_up_warmup": 0.25, "workload.arrival.rate_rps": 30.0}]
    (w,) = [w for w in study_warnings(rows) if w["code"] == "not_keeping_up"]
    grew, short = w["message"].split("; ", 1)
    assert grew.startswith("a at 30 req/s did not keep up") and "b at" not in grew
    assert short.startswith("b at 30 req/s fell as short") and "too short to tell" in short


def test_study_caveats_word_one_point_too_short_to_tell_for_one():
    """A single-point sweep's note read "rate_rps=80 fell as short ..., but their runs are too short
    to tell whether they keep up" (plural, and "as short" as what: no point before it grew). One
    point: its run, it keeps; several: their runs, they keep; "as short" only after points that grew."""
    from servesim.outputs.verdicts import study_warnings

    one = {"label": "b", "status": "ok", "keep_up": 0.70, "keep_up_warmup": 0.25, "workload.arrival.rate_rps": 80.0}
    (w,) = [w for w in study_warnings([one]) if w["code"] == "not_keeping_up"]
    assert w["message"].startswith("b at 80 req/s fell short (")
    assert "but its run is too short to tell whether it keeps up" in w["message"]
    assert "their" not in w["message"] and " they " not in w["message"]
    two = [one, {**one, "label": "c"}]
    (w,) = [w for w in study_warnings(two) if w["code"] == "not_keeping_up"]
    assert "but their runs are too short to tell whether they keep up" in w["message"]
    grew = {"label": "a", "status": "ok", "keep_up": 0.64, "keep_up_warmup": 0.10, "workload.arrival.rate_rps": 30.0}
    (w,) = [w for w in study_warnings([grew]) if w["code"] == "not_keeping_up"]
    assert "so its latencies depend" in w["message"]


def test_study_tables_print_one_seed_figures_to_three_significant_digits():
    """A compare or sweep table of one-seed runs printed latencies as "22604.0" ms and "1158.4" ms:
    six digits no single run supports. They print as every figure without an interval does
    (``format_value``); figures with an interval keep the half-width's precision."""
    from servesim.cli.studies import format_table

    rows = [{"label": "a", "ttft_p99_s": 1.1584, "e2e_p99_s": 22.604, "tpot_p50_s": 0.0081234, "goodput_rps": 7.5634,
             "slo_attainment": 1.0},
            {"label": "b", "ttft_p99_s": 0.195, "e2e_p99_s": 2.5, "e2e_p99_s_ci95": 0.1, "seeds": 3, "tpot_p50_s": None,
             "goodput_rps": 12345.6, "slo_attainment": 0.943}]
    lines = format_table(rows, ["label", "ttft_p99_s", "e2e_p99_s", "tpot_p50_s", "goodput_rps", "slo_attainment"])
    cells = [line.split() for line in lines.splitlines()]
    assert cells[0] == ["label", "ttft_p99", "ms", "e2e_p99", "ms", "tpot_p50", "ms", "goodput_rps", "slo_attainment"]
    assert cells[1] == ["a", "1158", "22604", "8.12", "7.56", "1"]
    assert cells[2][:2] == ["b", "195"] and cells[2][-3:] == ["-", "12346", "0.943"]
    assert " ".join(cells[2][2:5]) == f"2500 {PM} 100"  # the interval keeps the half-width's precision


def test_a_goodput_interval_stays_within_the_arrivals():
    """Two seeds' t-interval of a goodput reached above the row's arrivals per second (offered_rps),
    which no run's goodput or throughput can exceed (stats.offered_rate): cut there and at 0, as a
    share's is at 0 and 1; the per-GPU figure at the arrivals per GPU."""
    from servesim.outputs.intervals import t_interval
    from servesim.outputs.verdicts import with_per_gpu

    raw = t_interval([16.2, 17.0])  # every arrival within the SLO on both seeds
    row = {"goodput_rps": raw.mean, "goodput_rps_ci95": raw.half, "throughput_rps": raw.mean,
           "throughput_rps_ci95": raw.half, "offered_rps": 16.6, "num_gpus": 2, "seeds": 2}
    for col in ("goodput_rps", "throughput_rps"):
        iv = row_interval(row, col)
        assert raw.mean + raw.half > 16.6 and iv.high == pytest.approx(16.6) and iv.low == pytest.approx(
            raw.mean - raw.half)
        assert format_interval(iv, unit="req/s") == "17 (12 to 17) req/s" and PM not in format_interval(iv)
    per = row_interval(with_per_gpu([row])[0], "goodput_per_gpu")
    assert per.high == pytest.approx(8.3)
    low = row_interval({"goodput_rps": 0.3, "goodput_rps_ci95": 2.0, "offered_rps": 5.0, "seeds": 2}, "goodput_rps")
    assert (low.low, low.high) == (0.0, pytest.approx(2.3))
    # well inside, it keeps its +-; without offered_rps (an older results.csv) nothing to cut at
    assert format_interval(row_interval({**row, "goodput_rps": 12.0, "goodput_rps_ci95": 0.2}, "goodput_rps")) \
        == f"12.00 {PM} 0.20"
    assert row_interval({"goodput_rps": 16.6, "goodput_rps_ci95": 5.0, "seeds": 2}, "goodput_rps").high == 21.6


def test_a_mean_keeps_a_significant_digit_of_its_own_beside_a_wide_interval():
    """The mean is rounded to the half-width's place: two seeds' goodput 0.1 and 0.9 req/s (t
    half-width 5.1) printed "0 (0 to 6) req/s", a mean that reads as nothing beside an upper end
    well above it. The mean, and a cut end, keep their first significant digit; an interval whose
    place already keeps it prints as before."""
    from servesim.outputs.intervals import NONNEGATIVE

    iv = t_interval([0.1, 0.9], bounds=NONNEGATIVE)
    assert format_interval(iv, unit="req/s") == "0.5 (0 to 6) req/s"
    assert format_interval(Interval(0.3, 40.0, 2), unit="ms") == f"0.3 {PM} 40 ms"
    # a cut end just above the mean keeps its own digit too: not "0.3 (0 to 0)"
    assert format_interval(Interval(0.34, 22.0, 2, bounds=(0.0, 0.36))) == "0.3 (anywhere from 0 to 0.4)"
    assert format_interval(Interval(19.8, 0.9, 2)) == f"19.8 {PM} 0.9"
    assert format_interval(t_interval([0.10, 0.14], bounds=(0.0, 1.0)), 100) == "12 (0 to 37)"


def test_run_seeds_cuts_throughput_and_goodput_at_the_arrivals_per_second(tmp_path, capsys):
    """A seed's throughput and goodput count completions over the run's window from 0, which its
    last arrival ends within, so neither exceeds its arrivals per second (workload.offered_rps)
    and their mean over the seeds cannot exceed the seeds' mean offered rate. run --seeds cut their
    intervals at 0 only: six requests on two seeds printed "4 (0 to 27) req/s" at about 4.4 req/s
    arrived. They are cut there, as results.csv's rows are (``rate_bounds``); the token rates,
    which have no such bound, are not."""
    import json

    import yaml

    from servesim.cli.main import main
    from tests.conftest import BASE

    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump({**BASE, "workload": {**BASE["workload"], "num_requests": 6}}))
    assert main(["run", str(sc), "--seeds", "2", "--quiet", "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    f = json.loads((tmp_path / "r" / "summary.json").read_text())["seeds"]["figures"]
    offered = f["offered_rps"]["mean"]
    assert all(t <= o for t, o in zip(f["throughput_rps"]["values"], f["offered_rps"]["values"]))
    tput = Interval(f["throughput_rps"]["mean"], f["throughput_rps"]["ci95"], 2)
    assert tput.mean + tput.half > offered  # (the t-interval reaches past it: what is cut)
    line = next(x for x in out.splitlines() if x.startswith("  throughput"))
    high = float(line.split(" to ", 1)[1].split(")", 1)[0])
    assert high <= float(format_value(offered, 1)) + 1e-9, line
    assert "output tok/s" in line


def test_counts_of_requests_are_cut_at_the_requests_that_arrived(tmp_path, capsys):
    """No seed completes, rejects or leaves unfinished more requests than arrived in its run
    (completed + rejected + unfinished), so their mean over the seeds cannot pass the mean
    arrivals: run --seeds cut their intervals at 0 only, and six requests cut off at 1.5 s on three
    seeds printed "completed 4 (0 to 9), unfinished 2 (0 to 7)" (the default scenario), 5 (0 to 10)
    here. results.csv's rows are cut at
    their num_requests likewise (``count_bounds``); a count with no such bound (preemptions) is not."""
    import json

    import yaml

    from servesim.cli.main import main
    from servesim.outputs.intervals import row_interval
    from tests.conftest import BASE

    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump({**BASE, "workload": {**BASE["workload"], "num_requests": 6, "duration_s": 1.5}}))
    assert main(["run", str(sc), "--seeds", "3", "--quiet", "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    f = json.loads((tmp_path / "r" / "summary.json").read_text())["seeds"]["figures"]
    arrived = [sum(v) for v in zip(*(f[k]["values"] for k in ("completed", "rejected", "unfinished")))]
    line = next(x for x in out.splitlines() if x.startswith("  requests"))
    spread = [k for k in ("completed", "unfinished") if f[k]["mean"] + f[k]["ci95"] > max(arrived)]
    assert spread, f  # (the seeds differ enough that the t-interval reaches past the arrivals: what is cut)
    for k in spread:
        text = line.split(f"{k} ", 1)[1].split(",", 1)[0]
        high = float(text.split(" to ", 1)[1].split(")", 1)[0])
        assert high <= float(format_value(sum(arrived) / len(arrived), 1)) + 1e-9, line
    row = {"num_requests": 6.0, "completed": 4.0, "completed_ci95": 5.0, "preemptions": 4.0,
           "preemptions_ci95": 5.0, "seeds": 3}
    assert row_interval(row, "completed").high == 6.0 and row_interval(row, "preemptions").high == 9.0


def test_an_interval_cut_at_both_ends_says_it_is_anywhere_in_the_range():
    """An interval cut at both ends spans every value the figure can take: compare on six requests
    and two seeds printed goodput "3 (0 to 4) req/s" at 4 req/s arrived, and run --seeds
    "completed 5 (0 to 5)" of 5 requests, which read as intervals that narrowed the figure. They
    say it plainly; an interval cut at one end keeps "mean (low to high)"."""
    from servesim.outputs.intervals import SHARE

    assert format_interval(Interval(3.0, 30.0, 2, bounds=(0.0, 4.0)), unit="req/s") == \
        "3 (anywhere from 0 to 4) req/s"
    assert format_interval(t_interval([0.1, 0.9], bounds=SHARE), 100.0) == "50 (anywhere from 0 to 100)"
    row = {"num_requests": 5.0, "completed": 4.0, "completed_ci95": 9.0, "seeds": 2}
    assert format_interval(row_interval(row, "completed")) == "4 (anywhere from 0 to 5)"
    # cut at one end only: not every value, so the interval as before
    assert format_interval(t_interval([0.10, 0.14], bounds=SHARE), 100) == "12 (0 to 37)"
    assert format_interval(Interval(3.0, 30.0, 2, bounds=(0.0, math.inf))) == "3 (0 to 33)"
    assert "anywhere" not in format_interval(Interval(3.9, 0.3, 3, bounds=(0.0, 4.0)))


def test_an_end_cut_at_a_whole_bound_prints_as_that_bound_not_at_the_means_digits():
    """run --seeds printed a TTFT or goodput "1.3 (0.0 to 3.1)": the t-interval went below 0 and was
    cut there, but the end, rounded to the mean's tenths, read as a low end measured at zero to a
    tenth. An end cut at 0, 100% or the requests that arrived is that number; an end inside the
    bounds keeps the mean's digits; the half-width's rule is unchanged."""
    from servesim.outputs.intervals import NONNEGATIVE, SHARE

    assert format_interval(Interval(1.3, 1.8, 3, bounds=NONNEGATIVE)) == "1.3 (0 to 3.1)"
    assert format_interval(Interval(0.0013, 0.0018, 3, bounds=NONNEGATIVE), 1e3, "ms") == "1.3 (0 to 3.1) ms"
    assert format_interval(Interval(0.013, 0.018, 3, bounds=NONNEGATIVE)) == "0.013 (0 to 0.031)"
    # a share cut at 100%: "99.5 (98.7 to 100)", not "100.0"
    assert format_interval(Interval(0.995, 0.008, 3, bounds=SHARE), 100.0) == "99.5 (98.7 to 100)"
    # a count cut at the 6 requests that arrived, its other end inside: "4.1 (1.1 to 6)"
    assert format_interval(Interval(4.1, 3.0, 3, bounds=(0.0, 6.0))) == "4.1 (1.1 to 6)"
    # a bound that is no whole number (a mean arrival rate) is rounded as the mean is
    assert format_interval(Interval(1.3, 1.8, 3, bounds=(0.0, 3.14))) == "1.3 (0 to 3.1)"
    # a paired difference of shares cut at -100 percentage points
    assert format_interval(Interval(-0.95, 0.1, 3, bounds=(-1.0, 1.0)), 100.0) == "-95 (-100 to -85)"


def test_a_value_without_an_interval_keeps_its_three_significant_digits():
    """format_value dropped trailing zeros (Python's g format): a goodput of 6.598 req/s printed "6.6"
    beside "6.58" in one compare column (run prints it "6.60"), a p99 TPOT of 14.96 ms "15" beside
    "10.6". Three significant digits are kept; a whole number prints as it is."""
    assert [format_value(x) for x in (6.598, 6.58, 14.96, 0.4996, 99.96, 1.5e-5)] == \
        ["6.60", "6.58", "15.0", "0.500", "100", "1.50e-05"]
    assert [format_value(x) for x in (1.0, 33.0, 195.0, 5, 1234.5)] == ["1", "33", "195", "5", "1234"]


@pytest.mark.parametrize("cap, text", [
    ({"estimate": 35.0, "low": 4.0, "high": 66.0, "samples": [1, 2]}, "~35 (4-66)"),  # (was "34.9 (3.53-66.3)")
    ({"estimate": 0.3, "low": -2.0, "high": 80.0, "samples": [1, 2]}, "~0.3 (0-80)"),  # (its own digit; cut at 0)
    ({"estimate": 1.3, "low": -0.5, "high": 3.1, "samples": [1, 2]}, "~1.3 (0-3.1)"),  # (not "0.0")
    ({"estimate": 19.84, "low": 18.93, "high": 20.71, "samples": [1, 2, 3]}, "~19.8 (18.9-20.7)"),
    ({"estimate": 1234.5, "low": 1100.0, "high": 1400.0, "samples": [1, 2]}, "~1230 (1100-1400)"),
    ({"estimate": 12.345, "low": 12.345, "high": 12.345, "samples": [1, 2]}, "~12.3"),  # (no spread)
    ({"estimate": 12.345, "low": 10.0, "high": 14.0, "samples": [1]}, "~12.35"),  # (one seed: no interval)
    ({"estimate": 12.345, "low": 10.0, "high": 14.0, "measured": True, "samples": [1, 2]}, "12.3 (10.0-14.0)"),
])
def test_a_capacity_prints_as_before(cap, text):
    """plandoc prints a capacity through intervals' public interval_texts (it imported four private
    helpers); the printed forms are pinned."""
    from servesim.outputs.plandoc import capacity_text

    assert capacity_text(cap) == text


def test_interval_texts_and_no_private_helper_imported_across_modules():
    import ast
    from pathlib import Path

    from servesim.outputs.intervals import interval_texts

    assert interval_texts(35.0, 4.0, 66.0) == ("35", "4", "66")
    assert interval_texts(0.3, -2.0, 80.0) == ("0.3", "0", "80")
    assert interval_texts(5.0, 5.0, 5.0) == ("5", "5", "5")
    assert interval_texts(5.0, -1.0, math.inf) == ("5", "0", "inf")
    root = Path(__file__).resolve().parent.parent
    private = []
    for f in [*root.joinpath("sim").rglob("*.py"), *root.joinpath("plots").rglob("*.py")]:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "servesim.outputs.intervals":
                private += [f"{f.name}: {a.name}" for a in node.names if a.name.startswith("_")]
    assert not private, private


def test_seeds_alike_on_evenly_spaced_fixed_arrivals_names_them(tmp_path, capsys):
    """Fixed lengths arriving evenly spaced (arrival process fixed) draw nothing from the seed either:
    run --seeds 2 said so, but named only traces and fixed lengths "arriving all at once" as the
    cause, and a trace's sampling as the way to draw one, none of which this scenario is."""
    from servesim.cli.main import main

    args = ["run", "--quiet", "--seeds", "2", "--out", str(tmp_path / "r"),
            "--set", "workload.num_requests=20", "--set", "workload.arrival={process: fixed, rate_rps: 8}",
            "--set", "workload.prompt_tokens={dist: fixed, value: 200}",
            "--set", "workload.output_tokens={dist: fixed, value: 20}"]
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "every seed gave the same figures" in out
    assert "evenly spaced by arrival process fixed" in out and "a random arrival process such as poisson" in out
