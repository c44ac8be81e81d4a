"""The report's service-per-class section (plots/service.py): figures and sentences for runs and
comparisons with more than one request class."""

import math
import re

import pytest

from servesim.cli.main import main
from servesim.plots.service import wilson
from servesim.simulation import simulate
from servesim.studies.compare import plan_compare, run_compare
from servesim.studies.executors import ExecutorOptions
from tests.conftest import make_scenario, two_classes


def test_wilson_interval():
    lo, hi = wilson(0.5, 100)
    assert 0.40 < lo < 0.41 and 0.59 < hi < 0.60
    assert wilson(1.0, 50)[1] == 1.0 and wilson(0.0, 50)[0] == 0.0
    assert all(math.isnan(x) for x in wilson(0.5, 0))


def test_run_folder_with_classes_gets_bars_per_class(tmp_path):
    out = tmp_path / "run"
    simulate(make_scenario(**two_classes(), **{"workload.num_requests": 60})).write(out)
    assert main(["report", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "(figures/classes.png)" in md and (out / "figures" / "classes.png").stat().st_size > 0
    assert re.search(r"class chat: test \d+\.\d% \(95% interval", md)


def test_comparison_with_classes_gets_attainment_vs_load(tmp_path, monkeypatch):
    """... and draws its configurations as the other figures do (the report's docs say so of
    the per-class figures too): two with identical results once, named together, each entry with
    its GPU count (they were two curves, one under the other, named without GPUs). (fcfs-again
    differs by a router, which one replica never uses: compare refuses one configuration twice.)"""
    import yaml

    from servesim.plots import figures as F

    legends, save = {}, F.save

    def keep_legends(fig, stem):
        legends[stem.name] = [t.get_text() for ax in fig.axes if ax.get_legend()
                              for t in ax.get_legend().get_texts()]
        return save(fig, stem)

    monkeypatch.setattr(F, "save", keep_legends)

    scen = tmp_path / "s.yaml"
    from tests.conftest import BASE
    from servesim.inputs.overrides import with_values

    data = with_values(BASE, {**two_classes(0.6), "workload.num_requests": 150, "policy.max_num_seqs": 24})
    scen.write_text(yaml.safe_dump(data))
    plan = plan_compare(scen, None, [["fcfs", "policy.queue.order=fcfs"], ["priority", "policy.queue.order=priority"],
                                     ["fcfs-again", "policy.queue.order=fcfs",
                                      "cluster.router=least_outstanding_tokens"]], "4,14")
    run_compare(plan, tmp_path / "cmp", ExecutorOptions(workers=1, progress=False))
    assert main(["report", str(tmp_path / "cmp")]) == 0
    md = (tmp_path / "cmp" / "report.md").read_text()
    assert "(figures/classes_vs_load.png)" in md
    assert "class chat meets its SLO for >= 90% of requests: fcfs" in md
    assert "Jain's fairness index of SLO attainment across tenants: fcfs" in md
    drawn = legends["classes_vs_load"]
    assert "fcfs = fcfs-again (1 GPU)" in drawn and "priority (1 GPU)" in drawn
    assert "fcfs (1 GPU)" not in drawn and "fcfs-again (1 GPU)" not in drawn


def test_class_figures_over_seeds_are_means_with_intervals_across_seeds():
    from servesim.outputs.intervals import t_interval
    from servesim.plots.service import class_series_over_seeds

    def summ(att, p99):
        return {"classes": {"chat": {"slo_attainment": att, "num_requests": 100, "ttft_s": {"p99": p99}}}}

    series = class_series_over_seeds({"fcfs": [(8.0, [summ(0.8, 0.5), summ(1.0, 0.3), summ(0.9, 0.4)])]})
    d = series["chat"]["fcfs"]
    iv = t_interval([0.8, 1.0, 0.9])
    assert d["rate"] == [8.0] and d["attainment"] == [pytest.approx(0.9)]
    assert d["lo"] == [pytest.approx(iv.low)] and d["hi"] == [1.0]  # (clipped to 100%)
    assert d["ttft_p99"] == [pytest.approx(0.4)] and d["ttft_lo"][0] < 0.4 < d["ttft_hi"][0]


def test_class_figures_name_each_class_slo_and_the_90_percent_line():
    """Classes carry their own SLOs (chat 1 s, a batch class 30 s): the figures plotted attainment
    against them without saying which, and the 90% line had no legend entry (none at all on the
    bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from servesim.plots.service import attainment_bars, attainment_vs_load, slo_label

    assert slo_label({"ttft_s": 1.0, "tpot_s": 0.05}) == "TTFT <= 1 s, TPOT <= 50 ms"
    assert slo_label({"ttft_s": None, "tpot_s": 0.2}) == "TPOT <= 200 ms" and slo_label(None) == ""
    one = {"attainment": [0.95], "lo": [0.9], "hi": [0.99]}
    fig, ax = plt.subplots()
    attainment_bars({"chat": {"a": one}, "batch": {"a": one}}, ax,
                    slos={"chat": {"ttft_s": 1.0, "tpot_s": 0.05}, "batch": {"ttft_s": 30.0, "tpot_s": 0.2}})
    assert [t.get_text() for t in ax.get_xticklabels()] == ["chat\nTTFT <= 1 s, TPOT <= 50 ms",
                                                            "batch\nTTFT <= 30 s, TPOT <= 200 ms"]
    assert "90%: meets the SLO" in [t.get_text() for t in ax.get_legend().get_texts()]
    # its error bars (a class's share over its requests) were unexplained beside "no interval" notes
    assert "error bars: 95% interval (Wilson, over requests)" in [t.get_text() for t in ax.get_legend().get_texts()]
    fig, ax = plt.subplots()
    attainment_vs_load({"a": {"rate": [1, 2], **{k: v * 2 for k, v in one.items()}}}, ax, "chat",
                       slo={"ttft_s": 1.0, "tpot_s": 0.05})
    assert ax.get_title() == "class chat: SLO attainment vs load\n(SLO TTFT <= 1 s, TPOT <= 50 ms)"
    assert "90%: meets the SLO" in [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close("all")


def test_class_figures_say_what_their_bars_are_and_run_open_bars_off_the_axis():
    """Over two seeds a class's p99 TTFT interval can reach below 0: errorbar on the log axis cut
    it at the axes' edge, as if the interval ended there, and neither panel's legend said what
    its bars were. The TTFT bars are drawn as latency_vs_load draws them (open below, said in
    the legend), and the attainment legend names its interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from servesim.plots.service import attainment_vs_load, class_ttft_vs_load

    seeds = {"rate": [4, 8], "ttft_p99": [0.17, 0.15], "ttft_lo": [-0.2, 0.11], "ttft_hi": [0.54, 0.19]}
    fig, ax = plt.subplots()
    class_ttft_vs_load({"continuous": seeds}, ax, "chat", slo_s=1.0)
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert texts[-1] == "bars: 95% interval over seeds (open below: low end <= 0)"
    fig.canvas.draw()
    lo_ms = ax.get_ylim()[0]
    open_bar = [a for a in ax.get_children() if isinstance(a, matplotlib.lines.Line2D)
                and len(a.get_xdata()) == 2 and a.get_xdata()[0] == 4 and a.get_xdata()[1] == 4]
    assert open_bar and min(open_bar[0].get_ydata()) < lo_ms  # (runs off the bottom, no cap there)
    assert max(open_bar[0].get_ydata()) == pytest.approx(170 + 370)  # (its top: mean + half-width)
    fig, ax = plt.subplots()
    attainment_vs_load({"a": {"rate": [4, 8], "attainment": [1.0, 0.95], "lo": [1.0, 0.9], "hi": [1.0, 1.0],
                              **{k: v for k, v in seeds.items() if k != "rate"}}}, ax, "chat")
    assert "bars: 95% interval over seeds" in [t.get_text() for t in ax.get_legend().get_texts()]
    fig, ax = plt.subplots()
    attainment_vs_load({"a": {"rate": [4], "attainment": [0.95], "lo": [0.9], "hi": [0.99]}}, ax, "chat")
    assert "bars: 95% interval (Wilson, over requests)" in [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close("all")


def test_class_sentence_rounds_attainment_honestly_and_gives_seeds_their_interval():
    """A class with 2999 of 3000 requests within its SLO read "100.0%"; over seeds the sentence
    printed the mean alone ("72.5% at 16 req/s") for two seeds at 99.7% and 45%."""
    from servesim.plots.service import class_sentence, class_series_over_seeds

    one = {"chat": {"a": {"rate": [16.0], "attainment": [2999 / 3000], "lo": [0.998], "hi": [1.0],
                          "ttft_p99": [0.5]}}}
    assert "(99.97% at 16 req/s)" in class_sentence(one, True)
    runs = [{"classes": {"chat": {"slo_attainment": a, "ttft_s": {"p99": 0.5}}}} for a in (0.997, 0.453)]
    text = class_sentence(class_series_over_seeds({"a": [(16.0, runs)]}), True)
    assert "(72.5% at 16 req/s, 95% interval over seeds 0.0%-100.0%)" in text
    same = [{"classes": {"chat": {"slo_attainment": 1.0, "ttft_s": {"p99": 0.5}}}}] * 2
    assert "(100.0% at 16 req/s)" in class_sentence(class_series_over_seeds({"a": [(16.0, same)]}), True)


def test_class_sentence_up_to_means_every_load_up_to_it():
    """A class within its SLO at 8 and 24 req/s but not at 16 read "up to 24 req/s"."""
    from servesim.plots.service import class_sentence

    d = {"rate": [8.0, 16.0, 24.0], "attainment": [0.99, 0.8, 0.95], "lo": [0.9] * 3, "hi": [1.0] * 3,
         "ttft_p99": [0.5] * 3}
    text = class_sentence({"chat": {"a": d}}, True)
    assert "a up to 8 req/s (also at 24 req/s)" in text and "up to 24" not in text
    low = {**d, "attainment": [0.8, 0.95, 0.95]}
    assert "a only at 16, 24 req/s" in class_sentence({"chat": {"a": low}}, True)


def test_jain_sentence_over_seeds_says_it_is_the_first_seeds():
    """Beside the class sentence's means over the seeds, Jain's index was the first seed's runs'
    with no word of it."""
    from servesim.plots.service import jain_sentence

    s = {"fairness": {"jain": {"classes": {"slo_attainment": 0.98, "service_share": 1.0}}}}
    assert jain_sentence({"a": [(16.0, s)]}, 3).startswith(
        "Jain's fairness index of SLO attainment across tenants (the first of 3 seeds' runs): a 0.98")
    assert "first of" not in jain_sentence({"a": [(16.0, s)]})


def test_a_class_that_drew_no_request_is_said_so_not_drawn_at_0_percent(tmp_path):
    """A rare class that drew no request at a point has no attainment: the report read "class
    rare: test 0.0% (95% interval nan%-nan%)", drew an empty bar as 0%, and over loads counted
    such a load as one where the class failed its SLO; `run` printed "SLO 0.0%" for it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from servesim.plots.service import attainment_bars, class_sentence, class_series, class_series_over_seeds

    kw = {**two_classes(0.5), "workload.num_requests": 40}
    rare = {**kw["workload.classes"][0], "name": "rare", "share": 1e-9, "tenant": "c"}
    kw["workload.classes"] = [*kw["workload.classes"], rare]
    out = tmp_path / "run"
    simulate(make_scenario(**kw)).write(out)
    assert main(["report", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "class rare: test no requests." in md and "nan%" not in md
    fig, ax = plt.subplots()
    one = {"attainment": [0.95], "lo": [0.9], "hi": [0.99]}
    attainment_bars({"chat": {"a": one}, "rare": {"a": {"attainment": [math.nan], "lo": [math.nan],
                                                         "hi": [math.nan]}}}, ax)
    assert len(ax.patches) == 1 and "no requests" in [t.get_text() for t in ax.texts]
    assert ax.get_xlim()[1] >= 1.5  # (the empty class's slot is on the axis)
    plt.close("all")

    def summ(n, att):
        return {"classes": {"rare": {"slo_attainment": att, "num_requests": n, "ttft_s": {"p99": None}}}}

    # over loads: none at 8 req/s is no failure there; within the SLO at 16 it is "every load"
    text = class_sentence(class_series({"a": [(8.0, summ(0, 0.0)), (16.0, summ(5, 1.0))]}), True)
    assert "a at every load tried (up to 16 req/s) (100.0% at 16 req/s; no requests at 8 req/s)" in text
    text = class_sentence(class_series({"a": [(8.0, summ(5, 1.0)), (16.0, summ(0, 0.0))]}), True)
    assert "(100.0% at 8 req/s; no requests at 16 req/s)" in text
    assert "a no requests at any load tried" in class_sentence(class_series({"a": [(8.0, summ(0, 0.0))]}), True)
    # over seeds: a seed with no request of the class is left out of the mean, not counted as 0
    d = class_series_over_seeds({"a": [(8.0, [summ(0, 0.0), summ(4, 1.0), summ(6, 1.0)])]})["rare"]["a"]
    assert d["attainment"] == [pytest.approx(1.0)]


def test_run_prints_no_attainment_for_a_class_without_requests():
    from servesim.cli.main import format_summary

    kw = {**two_classes(0.5), "workload.num_requests": 40}
    rare = {**kw["workload.classes"][0], "name": "rare", "share": 1e-9, "tenant": "c"}
    kw["workload.classes"] = [*kw["workload.classes"], rare]
    text = format_summary(simulate(make_scenario(**kw)).summary)
    line = next(ln for ln in text.splitlines() if ln.startswith("class rare:"))
    assert "0 requests" in line and "SLO - (" in line and "0.0%" not in line


def test_verdict_fails_a_run_with_a_class_under_90_percent_and_names_it(tmp_path):
    """90.7% of all requests within their class's SLO "meets the SLO", and the verdict said that
    alone while the chat class (tight SLO) had 87.2% within it, hidden by the batch class's 100%:
    a report crediting a configuration that fails one class's SLO. Then it said "meets the SLO
    ...; but class chat: ..." and still ranked and bolded it as meeting. A class under 90% of
    its own SLO fails the SLO now, and the verdict names the class."""
    import json

    from servesim.plots.report import _classes_under, _run_verdict

    out = tmp_path / "run"
    simulate(make_scenario(**two_classes(), **{"workload.num_requests": 60})).write(out)
    s = json.loads((out / "summary.json").read_text())
    n = s["classes"]["chat"]["num_requests"]
    s["slo_attainment"] = 0.95
    s["classes"]["chat"]["slo_attainment"] = 0.85
    s["classes"]["batch"]["slo_attainment"] = 1.0
    (out / "summary.json").write_text(json.dumps(s))
    line = _run_verdict(s)[2]
    assert f"fails the SLO (95.0% of requests within it, but class chat: 85.0% of its {n} requests within its own " \
           "SLO, under 90%)." in line and "class batch" not in line
    data = {"path": tmp_path, "seed_groups": {}, "cols": [], "kind": "sweep", "meta": {}}
    row = {"dir": "run", "status": "ok", "slo_attainment": 0.95, "class_slo_attainment_min": 0.85}
    assert _classes_under(data, row) == [("chat", 0.85, n, 1)]
    s["classes"]["chat"]["slo_attainment"] = 0.92
    (out / "summary.json").write_text(json.dumps(s))
    assert _classes_under(data, {**row, "class_slo_attainment_min": 0.92}) == []
    assert main(["report", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "but class" not in md and "meets the SLO (95.0% of requests within it)" in md


def test_class_figures_of_a_sweep_over_a_class_slo_draw_each_configurations_own(tmp_path, monkeypatch):
    """Sweeping workload.classes[0].slo.ttft_s: the per-class figure titled the chat panel with
    the first run's SLO (100 ms) and drew its limit line alone, as if the 5 s configuration, at
    100% of its requests within its own SLO, met that one."""
    import yaml

    from servesim.inputs.overrides import with_values
    from servesim.plots import figures as F
    from tests.conftest import BASE

    axes_of, save = {}, F.save

    def keep(fig, stem):
        axes_of[stem.name] = [(ax.get_title(), [t.get_text() for t in ax.get_legend().get_texts()])
                              for ax in fig.axes if ax.get_legend()]
        return save(fig, stem)

    monkeypatch.setattr(F, "save", keep)
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(with_values(BASE, {**two_classes(), "workload.num_requests": 40})))
    out = tmp_path / "sw"
    assert main(["sweep", str(scen), "--grid", "workload.classes[0].slo.ttft_s=0.1,5",
                 "--grid", "workload.arrival.rate_rps=2,4", "--out", str(out), "--workers", "1", "--quiet"]) == 0
    assert main(["report", str(out)]) == 0
    panels = dict(axes_of["classes_vs_load"])
    chat = panels["class chat: SLO attainment vs load\n(each against its own SLO, in the legend)"]
    assert any(t.endswith(": SLO TTFT <= 100 ms") for t in chat) and any(t.endswith(": SLO TTFT <= 5 s") for t in chat)
    ttft = panels["class chat: p99 TTFT vs load"]
    assert any(t.startswith("SLO 100 ms (") for t in ttft) and any(t.startswith("SLO 5 s (") for t in ttft)
    assert "class batch: SLO attainment vs load\n(SLO TTFT <= 10 s)" in panels  # (the same in every run)
    assert "SLO 10 s" in panels["class batch: p99 TTFT vs load"]


def test_report_names_no_single_slo_when_classes_carry_their_own(tmp_path):
    """Classes with their own SLOs beside a top-level slo.ttft_s of 2 s: every figure title said
    "SLO TTFT <= 2 s", the CDFs drew it as every request's limit and the verdict ranked by goodput
    "within the SLO: TTFT <= 2 s", while chat requests were judged at 0.5 s and batch at 10 s."""
    from servesim.plots.report import _class_slos

    out = tmp_path / "run"
    simulate(make_scenario(**two_classes(), **{"workload.num_requests": 40, "slo.ttft_s": 2.0})).write(out)
    assert main(["report", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "SLO TTFT <= 2 s" not in md and "| SLO per class]" in md
    assert _class_slos({"slo": {"ttft_s": 2.0}, "workload": {"classes": [
        {"name": "chat", "slo": {"ttft_s": 0.5, "tpot_s": None}}, {"name": "other", "slo": {}}]}}) == \
        "chat: TTFT <= 500 ms; other: TTFT <= 2 s"
    same = {"slo": {"ttft_s": 2.0}, "workload": {"classes": [{"name": "a", "slo": {"ttft_s": 2.0}}, {"name": "b"}]}}
    assert _class_slos(same) == "" and _class_slos({"slo": {"ttft_s": 1.0}}) == ""


def test_every_verdict_counts_a_class_under_90_percent_of_its_own_slo():
    """results.csv rows and summaries: 94.7% of all requests within their class's SLO while the
    chat class had 20% was "meets" in the compare table, ranked above a configuration that meets
    it for every class, and credited as "better" in the paired differences."""
    from servesim.outputs.verdicts import (class_fails, difference_sentences, meets_slo, rank_key, slo_phrase,
                                           study_warnings)

    hidden = {"status": "ok", "label": "a", "slo_attainment": 0.947, "class_slo_attainment_min": 0.2,
              "goodput_rps": 9.2}
    whole = {"status": "ok", "label": "b", "slo_attainment": 0.93, "class_slo_attainment_min": 0.91,
             "goodput_rps": 9.0}
    assert meets_slo(hidden) is False and meets_slo(whole) is True and class_fails(hidden)
    assert slo_phrase(hidden) == ("fails the SLO (94.7% of requests within it, but a request class: 20.0% of its "
                                  "requests within its own SLO (class_slo_attainment_min), under 90%)")
    assert slo_phrase(hidden, [("chat", 0.2, 20, 1)]) == ("fails the SLO (94.7% of requests within it, but class "
                                                          "chat: 20.0% of its 20 requests within its own SLO, under "
                                                          "90%)")
    assert sorted([hidden, whole], key=rank_key)[0] is whole
    # a results.csv from before the column, and a run without classes: the overall share alone
    assert meets_slo({"slo_attainment": 0.947}) is True and meets_slo({"slo_attainment": 0.947, "classes": {}})
    # a summary.json: its classes (one that drew no request judges nothing)
    summ = {"slo_attainment": 0.95, "classes": {
        "chat": {"num_requests": 20, "slo_attainment": 0.2}, "batch": {"num_requests": 280, "slo_attainment": 1.0},
        "rare": {"num_requests": 0, "slo_attainment": None}}}
    assert meets_slo(summ) is False and "class chat: 20.0% of its 20 requests" in slo_phrase(summ)
    del summ["classes"]["chat"]
    assert meets_slo(summ) is True
    # paired differences: never "better" for a configuration that fails the SLO through a class
    from servesim.outputs.intervals import Interval

    diffs = [{"label": "a", "rate": None, "column": "goodput_rps", "name": "goodput", "interval": Interval(0.2, 0.1, 5),
              "scale": 1.0, "unit": "req/s", "significant": True, "better": True}]
    text = difference_sentences(diffs, "b", rows=[hidden, whole])[0]
    assert "a fails the SLO, so none of its figures counts as better" in text and "(better)" not in text
    assert not any(w["code"] == "failed" for w in study_warnings([hidden, whole]))


def test_compare_table_fails_a_configuration_whose_class_misses_its_own_slo(tmp_path, capsys):
    """The compare table said "meets" for a configuration with 95% of all requests within their
    class's SLO while every chat request missed chat's own; only report.md named the class.
    results.csv now carries the lowest class's attainment, the table says FAILS, and a note
    (the run's class_under_slo warning) names the class."""
    import csv
    import json

    import yaml

    from servesim.inputs.overrides import with_values
    from tests.conftest import BASE

    kw = {**two_classes(0.05), "workload.num_requests": 100}
    kw["workload.classes"][0]["slo"] = {"ttft_s": 1e-4}  # no chat request is this fast
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(with_values(BASE, kw)))
    out = tmp_path / "cmp"
    assert main(["compare", str(scen), "--policies", "continuous", "--variant", "loose",
                 "workload.classes[0].slo.ttft_s=5", "--out", str(out), "--workers", "1", "--quiet",
                 "--no-report"]) == 0
    text = capsys.readouterr().out
    rows = {r["label"]: r for r in csv.DictReader((out / "results.csv").open())}
    tight, loose = rows["continuous"], rows["loose"]
    s = json.loads((out / tight["dir"] / "summary.json").read_text())
    chat = s["classes"]["chat"]
    assert chat["num_requests"] > 0 and chat["slo_attainment"] == 0.0 and s["slo_attainment"] >= 0.9
    assert float(tight["class_slo_attainment_min"]) == 0.0 and float(loose["class_slo_attainment_min"]) >= 0.9
    lines = {ln.split()[0]: ln for ln in text.splitlines() if ln.split() and ln.split()[0] in rows}
    assert " FAILS " in lines["continuous"] and " meets " in lines["loose"]
    assert "each request class's within its own SLO" in text
    assert f"note: continuous: class chat: 0.0% of its {chat['num_requests']} requests within its own SLO " \
           "(TTFT <= 0.1 ms)" in text
    # (and slo_floor: no chat request can be this fast even alone, as validate warns)
    assert [w["code"] for w in s["warnings"]] == ["class_under_slo", "slo_floor"]
    # ranked below the one that meets it, though its goodput is no higher
    assert text.index(lines["loose"]) < text.index(lines["continuous"])
    assert main(["report", str(out)]) == 0
    verdict = "continuous (1 GPU): goodput"
    md = (out / "report.md").read_text()
    from servesim.outputs.verdicts import attainment_pct

    assert f"fails the SLO ({attainment_pct(s['slo_attainment'])} of requests within it, but class chat: 0.0% of " \
           f"its {chat['num_requests']}" in md
    # a results.csv from before the column: the report judges by the runs' summaries
    table = list(csv.reader((out / "results.csv").open()))
    k = table[0].index("class_slo_attainment_min")
    with (out / "results.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows([r[:k] + r[k + 1:] for r in table])
    assert main(["report", str(out)]) == 0
    assert (out / "report.md").read_text() == md and verdict in md


def test_a_class_with_no_request_at_any_load_says_so_in_its_panels():
    """A rare class that drew no request at any load tried: its two panels were blank, with an x
    axis around 0 and no word why."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from servesim.plots.service import attainment_vs_load, class_ttft_vs_load

    none = {"a": {"rate": [4.0, 8.0], "attainment": [math.nan, math.nan], "lo": [math.nan] * 2,
                  "hi": [math.nan] * 2, "ttft_p99": [None, None]}}
    fig, (a1, a2) = plt.subplots(1, 2)
    attainment_vs_load(none, a1, "rare")
    class_ttft_vs_load(none, a2, "rare", 2.0)
    for ax in (a1, a2):
        assert "no requests at any load tried" in [t.get_text() for t in ax.texts]
        lo, hi = ax.get_xlim()
        assert lo < 4.0 and hi > 8.0 and lo > 3.0
    some = {"a": {**none["a"], "attainment": [math.nan, 1.0], "ttft_p99": [None, 0.1]}}
    fig2, (b1, b2) = plt.subplots(1, 2)
    attainment_vs_load(some, b1, "rare")
    class_ttft_vs_load(some, b2, "rare", 2.0)
    assert not b1.texts and not b2.texts
    plt.close("all")


def test_report_names_the_classes_common_slo_not_the_top_level_one(tmp_path):
    """Classes that all carry the same SLO of their own (TTFT <= 50 ms) beside a top-level
    slo.ttft_s of 2 s that judges no request: every title said "SLO TTFT <= 2 s" and the CDFs
    drew 2 s as the limit."""
    from servesim.plots.report import scenario_slo

    kw = {**two_classes(0.5), "workload.num_requests": 30, "slo.ttft_s": 2.0}
    for c in kw["workload.classes"]:
        c["slo"] = {"ttft_s": 0.05}
    out = tmp_path / "run"
    simulate(make_scenario(**kw)).write(out)
    assert main(["report", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "SLO TTFT <= 2 s" not in md and "| SLO TTFT <= 50 ms]" in md
    assert scenario_slo({"slo": {"ttft_s": 2.0}}) == (2.0, None)
    assert scenario_slo({"slo": {"ttft_s": 2.0, "tpot_s": 0.1}, "workload": {"classes": [
        {"name": "a", "slo": {"ttft_s": 0.5}}, {"name": "b", "slo": {"ttft_s": 0.5}}]}}) == (0.5, 0.1)
    assert scenario_slo({"slo": {"ttft_s": 2.0}, "workload": {"classes": [
        {"name": "a", "slo": {"ttft_s": 0.5}}, {"name": "b"}]}}) == (None, None)


@pytest.mark.parametrize("labels", [1, 3])
def test_class_bars_legend_lies_over_no_bar(tmp_path, labels):
    """Bars that meet the SLO reach 100%: the legend, placed inside the axes, lay over a class's
    bar and its error bar. It sits under the axes, clear of every bar and of the tick labels."""
    from servesim.plots.figures import save, subplots
    from servesim.plots.service import attainment_bars

    full = {"attainment": [1.0], "lo": [0.93], "hi": [1.0]}
    data = {c: {f"config-{j}": full for j in range(labels)} for c in ("chat", "summarize")}
    fig, ax = subplots(figsize=(6.4, 4.2))  # (the report's size for two classes)
    attainment_bars(data, ax, slos={c: {"ttft_s": 1.0, "tpot_s": 0.05} for c in data})
    save(fig, tmp_path / "classes")
    fig.canvas.draw()  # (the extents at the figure's own dpi: the last save drew the SVG at 72)
    legend = ax.get_legend().get_window_extent()
    bars = [p.get_window_extent() for p in ax.patches]
    assert bars and not any(legend.overlaps(b) for b in bars)
    ticks = [t.get_window_extent() for t in ax.get_xticklabels() if t.get_text()]
    assert not any(legend.overlaps(t) for t in ticks)
    assert not any(a.overlaps(b) for a, b in zip(ticks, ticks[1:]))  # (the axes kept their width)
    assert legend.y1 <= ax.get_window_extent().y0  # (under the axes, not over its data)


def _classes(n: int, name: str = "class-{}") -> list:
    return [{"name": name.format(i), "share": 1.0, "slo": {"ttft_s": 10.0 + i, "tpot_s": 0.25},
             "prompt_tokens": {"dist": "fixed", "value": 64}, "output_tokens": {"dist": "fixed", "value": 8}}
            for i in range(n)]


def test_many_classes_figures_wrap_instead_of_growing_ever_wider(tmp_path, monkeypatch):
    """A class's two panels were placed side by side with every other class's (5.5 inches each):
    five classes made a figure 27.5 inches wide, ten 55. At most four classes sit side by side, more
    wrap onto a second row, and every class still has its two panels."""
    import yaml

    from servesim.inputs.overrides import with_values
    from servesim.plots import figures as F
    from tests.conftest import BASE

    seen, save = {}, F.save

    def keep(fig, stem):
        seen[stem.name] = (tuple(fig.get_size_inches()), [ax.get_title() for ax in fig.axes])
        return save(fig, stem)

    monkeypatch.setattr(F, "save", keep)
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(with_values(BASE, {"workload.prompt_tokens": None, "workload.output_tokens": None,
                                                      "workload.classes": _classes(5),
                                                      "workload.num_requests": 20})))
    out = tmp_path / "sw"
    assert main(["sweep", str(scen), "--grid", "workload.arrival.rate_rps=2,4", "--out", str(out), "--workers", "1",
                 "--quiet"]) == 0
    assert main(["report", str(out), "--quiet"]) == 0
    (width, height), titles = seen["classes_vs_load"]
    assert width <= 4 * 5.5 and height >= 2 * 8.5
    for i in range(5):
        assert f"class class-{i}: p99 TTFT vs load" in titles


def test_ten_classes_bars_stay_a_page_wide_and_their_names_apart(tmp_path, monkeypatch):
    """The per-class bars grew 2.2 inches a class (ten: 24 inches wide). The figure stops at 16
    inches; where the names and limits then run into each other, each limit takes its own line."""
    from servesim.plots import figures as F

    seen, save = {}, F.save

    def keep(fig, stem):
        out = save(fig, stem)
        fig.canvas.draw()  # (the extents at the figure's own dpi: the last save drew the SVG at 72)
        ax = fig.axes[0]
        seen[stem.name] = (tuple(fig.get_size_inches()), [t.get_window_extent() for t in ax.get_xticklabels()])
        return out

    monkeypatch.setattr(F, "save", keep)
    kw = {"workload.prompt_tokens": None, "workload.output_tokens": None, "workload.num_requests": 40,
          "workload.classes": _classes(10, "interactive-chat-session-{}")}
    out = tmp_path / "run"
    simulate(make_scenario(**kw)).write(out)
    assert main(["report", str(out), "--quiet"]) == 0
    (width, _), ticks = seen["classes"]
    assert width <= 16 and len(ticks) == 10
    assert not any(a.overlaps(b) for a, b in zip(ticks, ticks[1:]))


def test_class_vs_load_legends_lie_over_no_line(tmp_path):
    """The per-class panels placed their legends at matplotlib's "best", the least-bad spot: with
    several configurations across the panel it lay over their lines. They are placed as
    latency_vs_load's are: inside where they cover no line, else under the axes."""
    import numpy as np

    from servesim.plots.figures import save, subplots
    from servesim.plots.service import attainment_vs_load, class_ttft_vs_load
    from tests.test_figures import _line_points_in

    rng = np.random.default_rng(3)
    rates = [2, 4, 6, 8]
    att = {}
    for i in range(5):
        a = list(rng.uniform(0.05, 1.0, 4))
        att[f"configuration-{i} (1 GPU)"] = {"rate": rates, "attainment": a, "lo": [max(v - 0.05, 0.0) for v in a],
                                             "hi": [min(v + 0.05, 1.0) for v in a]}
    ttft = {k: {"rate": rates, "ttft_p99": list(rng.uniform(0.05, 20.0, 4))} for k in att}
    fig, axes = subplots(1, 2, figsize=(11, 4.5))
    attainment_vs_load(att, axes[0], "chat", slo={"ttft_s": 1.0})
    class_ttft_vs_load(ttft, axes[1], "chat", slo_s=1.0)
    save(fig, tmp_path / "classes_vs_load")  # (laid out as the report lays it out)
    fig.canvas.draw()  # (the extents at the figure's own dpi: the last save drew the SVG at 72)
    for ax in axes:
        assert _line_points_in(ax, ax.get_legend().get_window_extent()) == [], ax.get_title()
