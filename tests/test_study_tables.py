"""The text cells of the study tables (``servesim compare``/``sweep`` and report.md): labels longer
than a column allows are cut visibly, and two different labels never read the same."""

from __future__ import annotations

import json

from servesim.cli.studies import format_table
from servesim.plots.report import _md_table


def _labels(lines: list) -> list:
    return [line.split()[0] for line in lines[1:]]


def test_long_labels_are_cut_visibly_and_stay_distinct():
    a = "policies.x:ShortestPromptFirst_with_a_long_name-seqs8"
    b = "policies.x:ShortestPromptFirst_with_a_long_name-seqs16"
    rows = [{"label": a, "goodput_rps": 1.0}, {"label": b, "goodput_rps": 2.0}, {"label": "fcfs", "goodput_rps": 3.0}]
    shown = _labels(format_table(rows, ["label", "goodput_rps"]).splitlines())
    assert len(set(shown)) == 3
    assert shown[2] == "fcfs"
    for text, full in zip(shown[:2], (a, b)):
        assert text != full[:len(text)]  # (not a silent prefix: the cut is marked)
        assert "..." in text and len(text) <= 40
    md = _md_table([{"label": a + "_" * 10 + x} for x in ("1", "2")], ["label"]).splitlines()[2:]
    assert md[0] != md[1] and all("..." in line for line in md)


def test_labels_whose_cuts_would_read_the_same_are_shown_whole():
    from servesim.errors import clip_distinct

    base = "x" * 30
    texts = [base + "-left-" + "z" * 20, base + "-right-" + "z" * 20, "short"]
    out = clip_distinct(texts, 40)
    assert len(set(out.values())) == 3
    assert out["short"] == "short"
    for t in texts[:2]:  # (the same start and end: cut, they would read alike)
        assert out[t] == t
    assert clip_distinct(["a" * 41], 40)["a" * 41].count("...") == 1


def _run(tmp_path, name: str, warnings: list) -> str:
    d = tmp_path / "runs" / name
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"warnings": warnings}))
    return f"runs/{name}"


def test_a_caveat_says_how_many_runs_warned_and_whose_figures_it_quotes(tmp_path):
    """Several runs raising one warning, each with its own figures: the caveat counts them, names
    them (their seeds too) and says whose figures it quotes (the names were followed by the first
    run's "16 preemptions", read as every named run's)."""
    from servesim.outputs.verdicts import run_warning_caveats

    def pre(n):
        return [{"code": "preemptions", "message": f"{n} preemptions over 200 requests"}]

    rate = "workload.arrival.rate_rps"
    rows = [{"status": "ok", "label": "a", rate: 4.0, "seed": 0, "dir": _run(tmp_path, "1", pre(16))},
            {"status": "ok", "label": "a", rate: 4.0, "seed": 1, "dir": _run(tmp_path, "2", pre(40))},
            {"status": "ok", "label": "b", rate: 8.0, "seed": 0, "dir": _run(tmp_path, "3", pre(90))},
            {"status": "ok", "label": "c", rate: 8.0, "seed": 0, "dir": _run(tmp_path, "4", [])}]
    [text] = run_warning_caveats(rows, tmp_path)
    assert text.startswith("3 runs warn of preemptions")
    assert "a at 4 req/s (seeds 0, 1)" in text and "b at 8 req/s (seed 0)" in text and "c at" not in text
    assert "the first, a at 4 req/s (seed 0): 16 preemptions" in text
    assert "40 preemptions" not in text and "90 preemptions" not in text
    # one run: its name and its message, nothing to count
    [one] = run_warning_caveats(rows[2:], tmp_path)
    assert one == "b at 8 req/s (seed 0): 90 preemptions over 200 requests"


def test_a_cdf_sentence_over_seeds_claims_no_cut_from_one_seeds_runs():
    """With --seeds, the CDFs draw each configuration's first seed: their sentence said "pd_split
    cuts p99 TPOT from 9.1 ms (continuous) to 7.8 ms" next to the verdict's paired differences
    finding no significant difference over the seeds. One seed's runs are said to be that; with one
    seed, the sentence is as before."""
    from types import SimpleNamespace

    import numpy as np

    from servesim.plots.report import _cdf_sentence

    samples = {"continuous": np.full(50, 0.0091), "pd_split": np.full(50, 0.0078)}
    rows = {g: {"status": "ok", "slo_attainment": 1.0} for g in samples}

    def ctx(seeds, kind="compare"):
        return SimpleNamespace(seeds=seeds, status={g: True for g in samples}, under={}, kind=kind)

    over = _cdf_sentence("tpot", samples, "", ctx(3), rows)
    assert "cuts" not in over and over.startswith("In the first seed's runs, pd_split has the lowest p99")
    assert "3 seeds" in over and "paired differences" in over
    assert "paired" not in _cdf_sentence("tpot", samples, "", ctx(3, "sweep"), rows)  # (a sweep has none)
    assert " cuts p99 " in _cdf_sentence("tpot", samples, "", ctx(1), rows)


def _summary(goodput: float, attainment: float, keep_up: float) -> dict:
    dist = {"p50": 0.01, "p99": 0.02}
    return {"completed": 100, "throughput_rps": goodput, "goodput_rps": goodput, "slo_attainment": attainment,
            **{f"{m}_s": dist for m in ("ttft", "tpot", "itl", "e2e")},
            "utilization": {"mean_batch_size": 4.0, "mfu": 0.1, "mbu": 0.5},
            "workload": {"keep_up": {"ratio": keep_up, "warmup": 0.0}}}


def test_the_per_run_table_ranks_a_run_that_fell_behind_below_one_that_meets_the_slo():
    """The report's per-run table is sorted as the verdict ranks; it judged the SLO without the
    run's keep-up, so a run whose backlog grew (95% within the SLO so far, more goodput) was its
    first row, above the run that meets the SLO."""
    from types import SimpleNamespace

    from servesim.plots.report import _run_table

    runs = {"behind": SimpleNamespace(summary=_summary(9.0, 0.95, 0.5)),
            "keeps-up": SimpleNamespace(summary=_summary(6.0, 0.99, 1.0))}
    body = _run_table(runs, {}).splitlines()[2:]
    assert [line.split("|")[1].strip() for line in body] == ["keeps-up", "behind"]


def test_grid_values_print_as_given():
    """A sweep's grid values (and compare's rates) are what the user asked for, not measurements:
    12.25 req/s printed "12.2", so 12.25 and 12.24 read as one. The figures beside them keep their
    three digits."""
    rate = "workload.arrival.rate_rps"
    rows = [{"point": 0, rate: 12.25, "goodput_rps": 1.23456}, {"point": 1, rate: 12.24, "goodput_rps": 2.0},
            {"point": 2, rate: 2.0, "goodput_rps": 2.0}]
    lines = format_table(rows, ["point", rate, "goodput_rps"], given=[rate]).splitlines()[1:]
    assert [line.split()[1] for line in lines] == ["12.25", "12.24", "2"]
    assert lines[0].split()[2] == "1.23"
    md = _md_table(rows, ["point", rate, "goodput_rps"], given=[rate]).splitlines()[2:]
    assert [line.split("|")[2].strip() for line in md] == ["12.25", "12.24", "2"]


def test_a_sweeps_table_quotes_its_grid_values_whole(tmp_path, capsys):
    import yaml

    from servesim.cli.main import main
    from tests.conftest import BASE

    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump({**BASE, "workload": {**BASE["workload"], "num_requests": 10}}))
    out = tmp_path / "sw"
    assert main(["sweep", str(sc), "--grid", "workload.arrival.rate_rps=12.25,12.24", "--out", str(out),
                 "--workers", "1", "--quiet"]) == 0
    blocks = capsys.readouterr().out.split("\n\n")
    table = blocks[0].splitlines()[1:]
    assert blocks[1].startswith("slo: meets when")  # (the slo column's rule, after a blank line under the table)
    assert [line.split()[1] for line in table] == ["12.25", "12.24"]


def test_sweep_points_of_two_swept_values_are_told_apart_in_a_caveat(tmp_path):
    """A sweep over two fields names each point by both values ("rate_rps=40, replicas=1"): two
    such points joined by ", " read as four ("rate_rps=40, replicas=1, rate_rps=40, replicas=2
    did not keep up"). Points whose names hold a comma are joined by "; "; one-value names keep ", "."""
    from servesim.outputs.verdicts import run_warning_caveats, study_warnings

    rate, reps = "workload.arrival.rate_rps", "cluster.replicas"
    hol = [{"code": "head_of_line", "message": "a prompt waited"}]
    rows = [{"point": i, rate: 40.0, reps: n, "status": "ok", "keep_up": 0.5, "seed": 0,
             "dir": _run(tmp_path, str(i), hol)} for i, n in enumerate((1, 2))]
    (w,) = [w for w in study_warnings(rows) if w["code"] == "not_keeping_up"]
    assert w["message"].startswith("rate_rps=40, replicas=1; rate_rps=40, replicas=2 did not keep up")
    [text] = run_warning_caveats(rows, tmp_path)
    assert "(rate_rps=40, replicas=1 (seed 0); rate_rps=40, replicas=2 (seed 0))" in text
    one = [{"point": i, rate: r, "status": "ok", "keep_up": 0.5} for i, r in enumerate((30.0, 40.0))]
    (w,) = [w for w in study_warnings(one) if w["code"] == "not_keeping_up"]
    assert w["message"].startswith("rate_rps=30, rate_rps=40 did not keep up")


def test_compare_and_sweep_of_sessions_say_their_rate_starts_sessions(tmp_path, capsys):
    """With workload.sessions the rate starts sessions: compare and sweep printed their rate column
    and 'at 2 req/s' with no word that it was not one of requests (capacity says so since 5c05a81).
    A note after the table (sweep.json notes: report.md's caveats and figure notes too) says it;
    a scenario without sessions gets none."""
    import yaml

    from servesim.cli.main import main
    from tests.conftest import BASE

    data = {**BASE, "workload": {**BASE["workload"], "num_requests": 12,
                                 "sessions": {"turns": {"dist": "uniform", "min": 2, "max": 3}, "think_time_s": 0.5}}}
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(data))
    plain = tmp_path / "p.yaml"
    plain.write_text(yaml.safe_dump({**BASE, "workload": {**BASE["workload"], "num_requests": 12}}))
    said = "workload.arrival.rate_rps starts sessions"
    for path, has in ((sc, True), (plain, False)):
        out = tmp_path / f"sweep-{path.stem}"
        assert main(["sweep", str(path), "--grid", "workload.arrival.rate_rps=2", "--out", str(out), "--workers", "1",
                     "--quiet"]) == 0
        text = capsys.readouterr().out
        assert (said in text.split("\nslo: ")[1]) is has  # (a note below the table)
        assert any(said in n for n in json.loads((out / "sweep.json").read_text()).get("notes", [])) is has
        out = tmp_path / f"compare-{path.stem}"
        assert main(["compare", str(path), "--policies", "continuous,chunked_prefill", "--rates", "2", "--out",
                     str(out), "--workers", "1", "--quiet", "--no-report"]) == 0
        text = capsys.readouterr().out
        assert (f"note: with workload.sessions, {said}" in text) is has
        assert "sessions started per second, not requests" in text or not has
