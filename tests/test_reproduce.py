"""``servesim reproduce``: published figures next to simulated ones, with computed verdicts."""

import json
import re

import pytest

from servesim.cli.main import main
from servesim.inputs.scenario import scenario_from_dict
from servesim.simulation import prepare
from servesim.studies import reproduce as R


def test_verdict_rules():
    f = R.Figure("gain", 2.0, 2.4, "paper", "text", "x", True)
    assert f.ratio == pytest.approx(1.2) and f.within and f.matches and f.verdict == "matches"
    f = R.Figure("gain", 2.0, 1.4, "paper", "text", "x", True, "a mechanism")
    assert not f.matches and f.verdict == "direction right, -30% off"
    assert f.to_dict()["missing"] == "a mechanism"
    f = R.Figure("gain", 2.0, 0.9, "paper", "text", "x", False, "m")
    assert f.verdict == "wrong direction" and not f.matches
    f = R.Figure("range", (1.7, 2.7), 2.0, "paper", "text", "x", True)
    assert f.ratio == 1.0 and f.matches
    assert R.Figure("range", (1.7, 2.7), 3.5, "p", "text", "x", True).ratio == pytest.approx(3.5 / 2.7)
    assert R.Figure("range", (1.7, 2.7), 1.3, "p", "text", "x", True).within  # 1.3 / 1.7 = 0.76
    assert R.Figure("range", (1.7, 2.7), 1.2, "p", "text", "x", True).within is False  # 0.71
    f = R.Figure("absolute", 100.0, 120.0, "paper", "text", "ms")
    assert f.direction is None and f.matches  # no direction to get wrong
    f = R.Figure("not yet", 2.15, None, "paper", "text", "x", None, "a cost model")
    assert f.verdict == "not simulated" and f.ratio is None and not f.matches
    f = R.Figure("direction only", None, 1.3, "paper", "figure", "x", True)
    assert f.matches and f.verdict.startswith("direction right")


def test_a_ratio_at_the_tolerances_edge_reads_on_its_own_side():
    """Yi-34B's 2.764x against 3.7x (0.747) printed "0.75" and "-25% off" while 0.757 printed "0.76",
    matches: at the edge the ratio and the miss carry the digit that decides."""
    off = R.Figure("gain", 3.7, 2.764, "p", "text", "x", True)
    assert not off.within and off.ratio_text == "0.747" and off.verdict == "direction right, -25.3% off"
    near = R.Figure("tbt", 52.0, 39.1, "p", "text", "ms")  # 0.752: "0.75" too, but within
    assert near.within and near.ratio_text == "0.752" and near.verdict == "matches"
    assert R.Figure("tbt", 52.0, 39.36, "p", "text", "ms").ratio_text == "0.76"
    assert R.Figure("x", 2.0, 1.4, "p", "text", "x", True).ratio_text == "0.70"  # away from the edge: 2 decimals
    assert R.Figure("x", 2.0, 1.4, "p", "text", "x", True).verdict == "direction right, -30% off"
    rows = R.figure_rows([R.Experiment("e", "t", "s", [off, near])])
    assert [r[4] for r in rows] == ["0.747", "0.752"]


def test_a_simulated_figure_prints_as_format_value_does():
    """The table printed Yi-34B's simulated gain "2.9x" where format_value, every other table's rule,
    keeps its trailing zero ("2.90x"): one rule for a simulated figure (in reproduce.md, the fidelity
    table and the progress lines); a published figure keeps the paper's own digits ("3.7x")."""
    from servesim.outputs.intervals import format_value

    figs = [R.Figure("gain", 3.7, 2.9001, "p", "text", "x", True),
            R.Figure("batch", 30.42, 29.004, "p", "figure", "requests", True),
            R.Figure("ttft", 44.8, 42.0, "p", "measured", "ms"),
            R.Figure("kv", 15_700, 15_376.0, "p", "text", "tokens"),
            R.Figure("range", (2.7, 8.0), 3.3, "p", "text", "x", True)]
    rows = R.figure_rows([R.Experiment("e", "t", "s", figs)])
    assert [r[3] for r in rows] == ["2.90x", "29.0 requests", "42 ms", "15,376 tokens", "3.30x"]
    assert [r[2].split(" (")[0] for r in rows] == ["3.7x", "30.4 requests", "44.8 ms", "15,700 tokens", "2.7-8x"]
    md = R.reproduce_markdown([R.Experiment("e", "t", "s", figs)], R.Options())
    assert "| gain | 3.7x | 2.90x |" in md and "| batch | 30.4 requests | 29.0 requests |" in md
    for x in (2.9001, 0.7471, 13.95, 0.000123456, 999.4):
        assert R.simulated_text(x) == format_value(x)


def test_the_stated_rule_is_the_rule_applied():
    """reproduce.md states the tolerance for a published range as the verdicts apply it (it said
    [lo / 1.25, hi x 1.25] while 0.76 x lo matched), and counts direction-only figures as such."""
    import re

    lo, hi = 1.7, 2.7
    figs = [R.Figure("range", (lo, hi), 1.3, "p", "text", "x", True),
            R.Figure("direction only", None, 1.3, "p", "figure", "x", True)]
    md = R.reproduce_markdown([R.Experiment("e", "t", "s", figs)], R.Options())
    m = re.search(r"\[lo x ([0-9.]+), hi x ([0-9.]+)\]", md)
    assert m, md[:600]
    low, high = float(m.group(1)), float(m.group(2))
    for value, inside in ((low * lo - 1e-6, False), (low * lo + 1e-6, True),
                          (high * hi - 1e-6, True), (high * hi + 1e-6, False)):
        assert R.Figure("r", (lo, hi), value, "p", "text", "x", True).within is inside, value
    assert "2 of 2 published figures matched" in md and "direction right alone where no number is published" in md


def test_the_summary_counts_directions_only_of_figures_that_have_one():
    """An absolute figure with no ordering (KV slots, a goodput, a measured latency: direction None)
    has no direction to get right: the summary counted it as "direction right" (45 of 47 in the
    fidelity table, where 24 of the 26 figures with a direction were)."""
    figs = [R.Figure("gain", 2.0, 2.2, "p", "text", "x", True),
            R.Figure("gain the wrong way", 2.0, 0.8, "p", "text", "x", False),
            R.Figure("absolute", 100.0, 110.0, "p", "text", "ms"),
            R.Figure("absolute, far off", 100.0, 300.0, "p", "text", "ms"),
            R.Figure("not simulated", 100.0, None, "p", "text", "ms")]
    line = R.summary_line([R.Experiment("e", "t", "s", figs)], quick=False)
    assert "direction right for 1 of 2 with a direction" in line, line
    assert "2 of 5 published figures matched" in line and "within +-25% for 2 of 4" in line, line
    assert "1 not simulated" in line, line


def test_the_summary_counts_the_measured_runs_the_calibration_was_fitted_to_apart():
    """The vllm-h100 figures are the measured runs the default calibration was fitted to: the
    headline (41 of 47) counted them as reproduced published figures alongside the papers'."""
    figs = [R.Figure("gain", 2.0, 2.2, "p", "text", "x", True),
            R.Figure("gain the wrong way", 2.0, 0.8, "p", "text", "x", False),
            R.Figure("mean TTFT", 40.0, 41.0, "p", "measured", "ms"),
            R.Figure("p99 TTFT", 40.0, 20.0, "p", "measured", "ms")]
    line = R.summary_line([R.Experiment("e", "t", "s", figs)], quick=False)
    assert line.startswith("2 of 4 published figures matched"), line
    assert line.endswith("; matched apart: the papers' 1 of 2, the measured vLLM runs the calibration was fitted "
                         "to 1 of 2"), line
    only_papers = R.summary_line([R.Experiment("e", "t", "s", figs[:2])], quick=False)
    assert "matched apart" not in only_papers, only_papers
    # reproduce vllm-h100 alone: no figure has a direction ("direction right for 0 of 0 with a
    # direction") and none is a paper's
    only_fitted = R.summary_line([R.Experiment("e", "t", "s", figs[2:])], quick=False)
    assert "direction right for" not in only_fitted and "within +-25% for 1 of 2" in only_fitted, only_fitted
    assert only_fitted.endswith("all of them the measured vLLM runs the calibration was fitted to, not papers")


def test_a_figures_confidence_is_a_label_the_fidelity_guide_explains():
    """The confidence shown beside a published figure ('3rd-party', 'figure', ...) was free text,
    explained only in notes outside the project; the guide listed 'inferred', which no figure
    carries, and not 'figure', 'measured' or 'text + artifact', which three do."""
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[1] / "docs" / "fidelity.md").read_text()
    for label, meaning in R.CONFIDENCE.items():
        assert f"- `{label}`: {meaning}" in guide, label
    with pytest.raises(ValueError, match="confidence 'inferred' is none of"):
        R.Figure("gain", 2.0, 2.2, "p", "inferred", "x", True)


def test_engine_profile_is_named_and_applied_once_the_field_exists():
    from dataclasses import fields

    from servesim.inputs.scenario import Cost

    has = any(f.name == R.ENGINE_FIELD for f in fields(Cost))
    assert R.engine_overrides("vllm-v0") == ({"cost.engine": "vllm-v0"} if has else {})
    assert "vllm-v0" in R.engine_note("vllm-v0")


def test_scenarios_load_and_use_the_papers_settings():
    for name in ("distserve-opt13b", "sarathi-mistral7b", "sarathi-yi34b", "vllm-opt13b", "splitwise-llama70b",
                 "splitwise-bloom176b"):
        prepare(scenario_from_dict(R.scenario_data(name)))
    # the vLLM paper's Table 1: OPT-13B on an A100-40GB keeps 15.7K KV slots
    cap = prepare(scenario_from_dict(R.scenario_data("vllm-opt13b"))).capacity
    assert 15_000 < cap.num_tokens < 16_000
    # DistServe's placement: 3 GPUs, the decode pool's budget follows its role (not 65,536)
    pd = prepare(scenario_from_dict(R.scenario_data("distserve-opt13b", R.PD_DISTSERVE))).pools_by_name
    assert pd["prefill"].cost_model.tp == 2 and pd["decode"].cost_model.tp == 1
    assert pd["decode"].max_num_batched_tokens == 1024


def test_splitwise_clusters_are_the_papers_and_budgets_come_from_the_catalog():
    # iso-power: 40 DGX-H100 at 700 W a GPU = 70 DGX-A100 at 400 W (the paper's 70)
    assert R.iso_machines(40, "h100-sxm", "power_w", "a100-80g") == pytest.approx(70)
    price = R.iso_machines(40, "h100-sxm", "price_per_gpu_hour_usd", "a100-80g")
    assert price == pytest.approx(40 * R.catalog("h100-sxm", "price_per_gpu_hour_usd")
                                  / R.catalog("a100-80g", "price_per_gpu_hour_usd"))
    aa = R.SPLITWISE_AA["iso-power"]
    assert sum(aa) == R.PAPER_A100_MACHINES["iso-power"] and sum(R.SPLITWISE_AA["iso-cost"]) == 86
    sc = prepare(scenario_from_dict(R.scenario_data("splitwise-bloom176b", {
        "model": R.packaged(R.SPLITWISE_BLOOM), **R.splitwise_pd(*aa)})))
    pools = sc.pools_by_name
    assert pools["prefill"].replicas == 45 and pools["decode"].replicas == 25
    assert pools["prefill"].cost_model.tp == 8 and pools["prefill"].max_num_batched_tokens == 2048
    assert sc.cost_model.model.max_context_tokens == 16384  # the trace's 14,050-token prompts fit
    base = prepare(scenario_from_dict(R.scenario_data("splitwise-bloom176b", R.splitwise_baseline("h100-sxm", 40))))
    assert base.scenario.cluster.replicas == 40 and base.scenario.hardware.gpu == "h100-sxm"


def _stub_clusters(opts):
    fig = R.Figure("iso-power throughput (stub)", 2.15, 2.0, "Splitwise §6.2", "text", "x", True)
    return R.SplitwiseClusters([fig], ["stub note"], {})


def test_quick_splitwise_writes_report_json_and_readme(tmp_path, capsys, monkeypatch):
    # the cluster searches (about 20 s) run in test_quick_splitwise_clusters (slow)
    monkeypatch.setattr(R, "splitwise_clusters", _stub_clusters)
    # (--write-docs needs every experiment: the registry is cut to this one)
    monkeypatch.setattr(R, "EXPERIMENTS", {"splitwise": R.exp_splitwise})
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{R.BEGIN}\nold table\n{R.END}\nafter\n")
    out = tmp_path / "rep"
    assert main(["reproduce", "splitwise", "--quick", "--out", str(out), "--write-readme", str(readme)]) == 0
    data = json.loads((out / "reproduce.json").read_text())
    assert [e["name"] for e in data["experiments"]] == ["splitwise"]
    figs = data["experiments"][0]["figures"]
    simulated = [f for f in figs if f["simulated"] is not None]
    assert len(simulated) == 13 and all(f["direction"] for f in simulated)  # H100 faster than A100 everywhere
    assert figs[-1]["label"] == "iso-power throughput (stub)" and "stub note" in data["experiments"][0]["notes"]
    for f in simulated:
        assert f["ratio"] == pytest.approx(f["simulated"] / f["published"])
        assert f["citation"].startswith("Splitwise") and f["verdict"]
    md = (out / "reproduce.md").read_text()
    assert "| `splitwise` | coding, DGX-A100: P50 TTFT | 185 ms (text) |" in md
    text = readme.read_text()
    assert "old table" not in text and text.startswith("intro\n") and text.endswith("after\n")
    assert "| `splitwise` |" in text and "published figures matched" in text
    assert "published figures matched" in capsys.readouterr().out


def test_write_docs_refuses_a_run_of_some_experiments(tmp_path, capsys):
    # (the table and its summary line were replaced by the run's alone: `reproduce splitwise
    # --write-docs` dropped every other experiment's rows from docs/fidelity.md)
    readme = tmp_path / "fidelity.md"
    readme.write_text(f"{R.BEGIN}\nold table\n{R.END}\n")
    out = tmp_path / "rep"
    assert main(["reproduce", "splitwise", "--quick", "--out", str(out), "--write-docs", str(readme)]) == 2
    err = capsys.readouterr().err
    assert "needs every experiment" in err and "leaves out distserve, sarathi, vllm, vllm-h100" in err
    assert "old table" in readme.read_text() and not out.exists()  # refused before anything ran or was made


def test_unknown_experiment_and_missing_markers_are_input_errors(tmp_path, capsys):
    assert main(["reproduce", "distserv", "--out", str(tmp_path)]) == 2
    assert "unknown experiment 'distserv'" in capsys.readouterr().err
    bare = tmp_path / "README.md"
    bare.write_text("no markers\n")
    with pytest.raises(Exception, match="reproduce-table"):
        R.write_readme(bare, [], R.Options())


@pytest.mark.slow
def test_quick_splitwise_clusters():
    """Fig. 18 in quick form: every cluster's throughput under Table VI's slowdown limits, and both
    ratios simulated with a verdict."""
    c = R.splitwise_clusters(R.Options(quick=True))
    assert [f.published for f in c.figures] == [2.15, 1.4]
    assert all(f.simulated is not None and f.simulated > 0 and f.verdict != "not simulated" for f in c.figures)
    assert len(c.capacity_rps) == 4 and all(v > 0 for v in c.capacity_rps.values())
    aa = [v for k, v in c.capacity_rps.items() if k.startswith("Splitwise-AA")]
    assert aa[1] >= 0.9 * aa[0]  # 51 + 35 machines serve at least about what 45 + 25 do
    assert any("= 70.0 DGX-A100" in n for n in c.notes)


@pytest.mark.slow
def test_quick_reproduce_runs_every_experiment(tmp_path):
    """Every experiment end to end in its quick form (about a minute): each figure gets a
    verdict, and the mechanisms of the vLLM paper's batch-size check land where the paper's do."""
    assert main(["reproduce", "--quick", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "reproduce.json").read_text())
    assert [e["name"] for e in data["experiments"]] == list(R.EXPERIMENTS)
    for e in data["experiments"]:
        for f in e["figures"]:
            assert f["verdict"] and f["citation"]
    vllm = {f["label"]: f for f in data["experiments"][2]["figures"]}
    assert vllm["mean batched requests at 2 req/s: Orca (Max)"]["matches"]  # floor(15.4K / 2048) = 7
    assert vllm["mean batched requests at 2 req/s: Orca (Oracle)"]["matches"]


def test_distserve_requests_are_built_as_its_preparation_script_builds_them():
    """tools/reproduce_lengths.py: conversations cut at 2048 tokens, a prompt = the first k messages,
    the output = the next one (a reply when k is odd), prompt + output < 2048."""
    import numpy as np

    from tools.reproduce_lengths import distserve_requests

    rounds = np.array([[100, 300]] * 10)  # every user message 100 tokens, every reply 300
    req = distserve_requests(rounds, n_conversations=3000, seed=1)
    p, o = req["reply"]
    assert set(o.tolist()) == {300} and set(((p - 100) % 400).tolist()) == {0}  # u, u+a+u, ...
    p, o = req["user_turn"]
    assert set(o.tolist()) == {100} and set((p % 400).tolist()) == {0}  # u+a, 2(u+a), ...
    for p, o in req.values():
        assert (p + o < 2048).all() and p.max() <= 2048 - 300
    # a sample holds at most 5 rounds of 400 tokens (2000 <= 2048): at most 9 messages in a prompt
    assert req["reply"][0].max() <= 4 * 400 + 100


def test_distserve_decode_side_swaps_as_its_scheduler_does():
    pd = prepare(scenario_from_dict(R.scenario_data("distserve-opt13b", R.PD_DISTSERVE)))
    assert pd.scenario.policy.preemption == "swap" and pd.scenario.memory.swap_space_gib == 16
    cls = {c.name: c.share for c in pd.scenario.workload.classes}
    assert cls == {"reply": 0.62, "user_turn": 0.38}


def test_reproduce_says_the_measurements_are_absent(monkeypatch, tmp_path):
    monkeypatch.setenv("SERVESIM_SHARED_DATA", str(tmp_path))
    exp = R.exp_vllm_h100(R.Options())
    assert [f.verdict for f in exp.figures] == ["not simulated"]
    assert "SERVESIM_SHARED_DATA" in exp.figures[0].missing


def test_progress_lines_name_each_experiment_and_quiet_silences_them(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("SERVESIM_SHARED_DATA", str(tmp_path))  # (no measured runs: the experiment is instant)
    assert main(["reproduce", "vllm-h100", "--out", str(tmp_path / "a")]) == 0
    assert "reproduce: running vllm-h100 (1 of 1)..." in capsys.readouterr().err
    assert main(["reproduce", "vllm-h100", "--out", str(tmp_path / "b"), "--quiet"]) == 0
    assert "running" not in capsys.readouterr().err


def test_goodput_crossing_reads_the_curve_as_distserves_notebook_does():
    """find_intersection of the AE's plot.ipynb: the first place the curve falls through the target,
    linear between grid points; a point exactly at the target is not below it."""
    rates = (0.25, 0.5, 1, 1.5)
    assert R.crossing(rates, [0.9, 0.9, 0.85, 0.8], 0.9) == pytest.approx(0.5)  # the artifact's vLLM: 0.5
    assert R.crossing(rates, [1.0, 0.95, 0.85, 0.8], 0.9) == pytest.approx(0.75)
    assert R.crossing(rates, [1.0, 0.8, 0.95, 0.7], 0.9) == pytest.approx(0.25 + 0.25 * 0.1 / 0.2)  # the first
    assert R.crossing(rates, [0.95, 0.95, 0.93, 0.91], 0.9) is None  # above on the whole grid
    assert R.crossing(rates, [0.8, 0.8, 0.7, 0.6], 0.9) is None  # below from the start


def test_ae_goodput_measures_short_runs_at_the_papers_rates(monkeypatch):
    """The AE's protocol: 100 requests per GPU a run at each per-GPU rate, rates scaled by the GPUs,
    one curve averaged over the seeds, and the grid extended while the curve stays above 90%."""
    calls = []

    def fake(name, overrides, rate, opts, slo=(0.25, 0.1), requests=1000):
        calls.append((rate, requests, opts.seed))
        return max(0.0, 1.0 - 0.04 * rate / 3 - 0.01 * opts.seed), None  # per-GPU rate = rate / 3

    monkeypatch.setattr(R, "attainment_at", fake)
    g = R.ae_goodput("distserve-opt13b", {}, 3, R.Options(quick=True))
    assert {n for _, n, _ in calls} == {300} and {s for _, _, s in calls} == {0, 1, 2}
    assert sorted({r for r, _, _ in calls})[:2] == [0.75, 1.5]  # per-GPU 0.25, 0.5 on 3 GPUs
    # mean attainment 1 - 0.04 r - 0.01: 0.9 at r = 2.25, inside the AE's grid
    assert g.per_gpu == pytest.approx(2.25) and g.rates == R.DISTSERVE_AE_RATES
    assert g.per_seed[0] == pytest.approx(2.5) and g.per_seed[2] == pytest.approx(2.0)
    # the seeds' spread at each rate, for the figure's band (its title said "mean of 3 seeds" and showed no spread)
    assert g.band[g.rates.index(1.0)] == pytest.approx((0.94, 0.96))  # seeds 2 and 0 at per-GPU 1 req/s
    calls.clear()
    monkeypatch.setattr(R, "attainment_at", lambda n, o, rate, opts, requests=0: (1.0 - 0.03 * rate, None))
    g = R.ae_goodput("distserve-opt13b", {}, 1, R.Options(quick=True))
    assert g.per_gpu == pytest.approx(10 / 3) and g.rates[-1] == 3.5  # the grid went on past 3 req/s


def test_an_experiments_plots_are_drawn_and_listed(tmp_path):
    """write_reproduce renders each experiment's plot data into out/<name>.png (the report shows it)
    and keeps the data in reproduce.json; an experiment without plots draws nothing."""
    data = {"title": "t", "target": 0.9,
            "series": [{"label": "a", "rates": [0.25, 0.5, 1.0], "attainment": [0.99, 0.95, 0.8], "goodput": 0.67,
                        "band": [(0.98, 1.0), (0.9, 0.99), (0.4, 0.9)]},
                       {"label": "b", "rates": [0.25, 0.5], "attainment": [0.9, 0.6], "measured": True,
                        "goodput": None}]}
    with_plot = R.Experiment("withplot", "T", "S", [R.Figure("g", 2.0, 2.1, "c", "text")],
                             plots=[("attainment_curves", data)])
    without = R.Experiment("noplot", "T", "S", [R.Figure("g", 2.0, 2.1, "c", "text")])
    R.write_reproduce([with_plot, without], tmp_path, R.Options(quick=True))
    png = tmp_path / "withplot.png"
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "noplot.png").exists()
    assert "](withplot.png)" in (tmp_path / "reproduce.md").read_text()
    js = json.loads((tmp_path / "reproduce.json").read_text())
    assert js["experiments"][0]["plots"][0]["kind"] == "attainment_curves"
    assert js["experiments"][1]["plots"] == []


def test_a_goodput_that_never_crosses_says_where_its_curve_lies():
    g = R.Goodput(None, (0.25, 0.5, 1), [0.87, 0.85, 0.8], [None])
    assert g.text() == "under 0.25 (below 90% from the first rate)"
    g = R.Goodput(None, (0.25, 0.5, 8), [0.99, 0.97, 0.95], [None])
    assert g.text() == "over 8 (above 90% to the last rate)"
    assert R.Goodput(2.3333, (0.25,), [0.9], [2.3]).text() == "2.33"


def test_capacity_seeds_searches_each_seed_and_leaves_out_one_with_no_answer(monkeypatch):
    """Sarathi-Serve's capacities: one search a seed (capacity_interval with exactly that many
    seeds), in seed order; a seed that found nothing is None (so both sides of a gain stay paired
    seed by seed), left out of the mean, and the failure noted."""
    from types import SimpleNamespace

    import servesim.studies.capacity as C

    seen = {}

    def fake(scenario, slo, co, seeds, out, sets, seed, ex):
        seen.update(seeds=seeds.seeds, seed=seed, sets=sets)
        per = [SimpleNamespace(capacity_rps=1.5), SimpleNamespace(capacity_rps=None)]
        return SimpleNamespace(per_seed=per, error="no answer")

    monkeypatch.setattr(C, "capacity_interval", fake)
    monkeypatch.setattr(R, "UNCONFIRMED", [])
    got = R.capacity_seeds("sarathi-mistral7b", "tbt_p99=0.1", {"policy.name": "continuous"}, R.Options(seed=7), 4)
    assert got == [1.5, None] and seen["seeds"] == 4 and seen["seed"] == 7
    assert R._mean_found(got) == 1.5 and R._mean_found([None]) == 0.0
    assert seen["sets"] == ['policy.name="continuous"'] and R.UNCONFIRMED


def test_an_earlier_runs_figure_of_an_experiment_not_drawn_now_is_removed(tmp_path):
    """reproduce distserve, then reproduce vllm into the same folder: distserve.png from the first run
    sat beside a report that did not run it (as lessons' figures once did). Any file that is not an
    experiment's is left alone."""
    (tmp_path / "distserve.png").write_bytes(b"\x89PNG\r\n\x1a\nold")
    (tmp_path / "mine.png").write_bytes(b"keep")
    exp = R.Experiment("vllm", "T", "S", [R.Figure("g", 2.0, 2.1, "c", "text")])
    R.write_reproduce([exp], tmp_path, R.Options(quick=True))
    assert not (tmp_path / "distserve.png").exists()
    assert (tmp_path / "mine.png").read_bytes() == b"keep"
    assert "distserve.png" not in (tmp_path / "reproduce.md").read_text()


def test_an_attainment_plots_title_is_drawn_whole_inside_its_figure():
    """distserve.png's title's second line (the SLO, requests per point, seeds) ran past both edges
    of the 7-inch figure: 'TFT 0.25 s ... the seeds' low' was what it said. Each line is now wrapped
    to the panel."""
    import servesim.plots.reproduce as pr
    from servesim.plots.figures import subplots

    title = ("OPT-13B chatbot on A100-80GB: DistServe (prefill TP2 + decode TP1, 3 GPUs) vs vLLM (TP1, 1 GPU)\n"
             "SLO TTFT 0.25 s and TPOT 0.1 s; each point 100 requests per GPU, Poisson, mean of 3 seeds (shaded: "
             "the seeds' lowest to highest)")
    data = {"title": title, "target": 0.9,
            "series": [{"label": "a", "rates": [0.25, 0.5, 1.0], "attainment": [0.99, 0.95, 0.8], "goodput": 0.67}]}
    fig, ax = subplots(1, 1, figsize=(7, 4.5))
    pr.attainment_curves(data, ax)
    fig.tight_layout()
    fig.canvas.draw()
    box, whole = ax.title.get_window_extent(), fig.bbox
    assert whole.x0 <= box.x0 and box.x1 <= whole.x1 and box.y1 <= whole.y1, (box, whole)
    assert "the seeds' lowest to highest)" in ax.get_title().replace("\n", " ")


@pytest.mark.parametrize("quick", [True, False])
def test_a_quick_runs_verdicts_are_marked_rough_wherever_they_are_given(tmp_path, capsys, monkeypatch, quick):
    """--quick's short probes can turn a verdict (distserve's gain read 'wrong direction' quick), yet
    its table, its per-figure lines and reproduce.md said 'matches' / 'wrong direction' as the full
    run does, the summary only adding 'quick run: short probes, coarse searches'."""
    exp = R.Experiment("vllm", "T", "S", [R.Figure("g", 2.0, 2.1, "c", "text")])
    monkeypatch.setitem(R.EXPERIMENTS, "vllm", lambda opts: exp)
    out = tmp_path / "rep"
    assert main(["reproduce", "vllm", "--out", str(out), "--quiet"] + (["--quick"] if quick else [])) == 0
    printed = capsys.readouterr().out
    md = (out / "reproduce.md").read_text()
    js = json.loads((out / "reproduce.json").read_text())
    mark = "rough"
    assert (mark in printed.splitlines()[0]) == quick, printed  # (the experiment's line)
    assert (mark in printed.splitlines()[-1]) == quick, printed  # (the summary)
    assert ("| verdict (rough: --quick) |" in md) == quick and (mark in md.splitlines()[2]) == quick, md
    assert (mark in js["summary"]) == quick


def test_splitwise_notes_count_the_probes_run_again_longer(monkeypatch):
    """A slowdown probe too short to tell whether it keeps up runs again longer (as capacity's);
    the notes say which clusters' searches did, and how long they went. (The note's list was once
    named as another local of splitwise_clusters, and the experiment failed at its end.)"""
    from types import SimpleNamespace

    import servesim.studies.slowdown as SD

    def fake(run, base, limits, start, tol, max_probes, keep_up=0.9):
        n = 1500
        results = {start: {"meets": True, "requests": n}, 2 * start: {"meets": False, "requests": 4 * n}}
        return start, True, SimpleNamespace(results=results)

    monkeypatch.setattr(SD, "slowdown_capacity", fake)
    c = R.splitwise_clusters(R.Options(quick=True))
    (note,) = [n for n in c.notes if n.startswith("probes too short to tell")]
    assert "Baseline-A100 1 (up to 6,000 requests)" in note and note.count("up to 6,000 requests") == 4


def test_distserves_vllm_baseline_pads_its_prompt_batches_as_v023_does():
    """DistServe's baseline is vLLM v0.2.3, whose prompt-only steps pad every prompt to the longest
    (cost.engine vllm-v0.2.3); the vLLM paper's vLLM 0.1 packed them (vllm-v0.2). A loaded run of
    the baseline computes padded tokens, and fewer prompts share a step than packed."""
    from servesim.cost.engines import PROFILES

    assert R.ENGINES["vllm-v0.2.3"] == "vllm-v0.2.3" and PROFILES[R.ENGINES["vllm-2023"]].max_paddings is None
    runs = {}
    for eng in ("vllm-v0.2.3", "vllm-v0.2"):
        ov = {**R.VLLM_V0_SCHEDULER, **R.engine_overrides(eng), "workload.arrival.rate_rps": 3.0}
        runs[eng] = R.run("distserve-opt13b", ov, num_requests=150).summary["phases"]
    padded, packed = runs["vllm-v0.2.3"], runs["vllm-v0.2"]
    assert padded["padding_tokens"] > 0 and packed["padding_tokens"] == 0
    assert padded["prefill_steps"] > packed["prefill_steps"]


def test_sarathi_serves_comparison_runs_on_the_artifacts_runtime():
    """Sarathi-Serve's artifact runs its vLLM scheduler and its own on one eager runtime (no CUDA
    graphs, NCCL all-reduce): both sides of the sarathi experiment are priced as sarathi-serve, so
    Yi-34B's TP2 decode steps launch eagerly (vllm-v0 replayed them in graphs, custom all-reduce)."""
    assert R.ENGINES["sarathi"] == "sarathi-serve"
    model = {"model": R.packaged("yi-34b-max-model-len-8192.json")}
    for variant in (R.VLLM_V0_SCHEDULER, R.sarathi_variant(512)):
        ov = {**model, **variant, **R.engine_overrides(R.ENGINES["sarathi"])}
        eng = prepare(scenario_from_dict(R.scenario_data("sarathi-yi34b", ov))).pools[0].engine
        assert eng.profile.name == "sarathi-serve" and eng.graph_sizes == () and eng.allreduce == "nccl"


def test_splitwise_explains_its_decode_pricing_with_the_artifacts_own_curve(monkeypatch):
    """Fig. 18's iso-cost miss is explained with figures: Splitwise's simulator looks a decode-only
    step up at its number of sequences on a curve keyed by sequences x prompt tokens, so a batch
    costs less than the lone request its slowdowns are taken against, where the curve's own rows of
    32 and 64 sequences grow; the report once also named JSQ routing of hand-offs as missing, where
    the artifact's mixed_pool scheduler picks the token machine by memory, as servesim does."""
    from types import SimpleNamespace

    import servesim.studies.slowdown as SD
    from servesim.cost.published_profiles import SPLITWISE_BLOOM_A100_TOKEN_CURVE_MS as curve

    # the helper is the curve at its keys, linear between them and along the end segments beyond
    assert all(R.splitwise_sim_token_ms(x) == pytest.approx(y) for x, y in curve.items())
    assert R.splitwise_sim_token_ms(1536) == pytest.approx((curve[1024] + curve[2048]) / 2)
    assert R.splitwise_sim_token_ms(0) == pytest.approx(curve[128] - (curve[256] - curve[128]))
    # what the simulator charges a step of up to 512 sequences sits below a lone 1,020-token
    # request's reference; the same curve at 64 sequences x 512 tokens is about twice it
    ref = R.splitwise_sim_token_ms(1020)
    assert max(R.splitwise_sim_token_ms(b) for b in (1, 16, 64, 128, 512)) < ref
    assert R.splitwise_sim_token_ms(64 * 512) > 1.9 * ref

    def fake(run, base, limits, start, tol, max_probes, keep_up=0.9):
        return start, True, SimpleNamespace(results={start: {"meets": True, "requests": 1500}})

    monkeypatch.setattr(SD, "slowdown_capacity", fake)
    c = R.splitwise_clusters(R.Options(quick=True))
    assert all("JSQ routing of hand-offs" not in f.missing for f in c.figures)
    (note,) = [n for n in c.notes if n.startswith("Splitwise's simulator on DGX-A100")]
    assert f"against the {ref:.1f} ms" in note and f"at {curve[16384]:.1f} and {curve[32768]:.1f} ms" in note
    ours = [float(x) for x in re.search(r"servesim's DGX-A100 step at ([\d.]+) and ([\d.]+) ms", note).groups()]
    assert 0 < ours[0] < ours[1]  # servesim's steps grow with the sequences' KV reads


def test_distserves_vllm_prefill_gap_splits_into_host_work_and_gpu_time():
    """DistServe's profile of vLLM v0.2.3 times a whole engine step, its own engine's a model forward;
    vLLM's step also detokenizes the whole prompt, after the first token's timestamp. On OPT-13B the
    prefill gap per prompt token fits ``host + gpu / tp`` at TP 1/2/4 (three points, two unknowns:
    the fit could fail): a few us of host work the same at every TP, the rest shared by the GPUs."""
    from servesim.cost.published_profiles import DISTSERVE, StepModel

    host, gpu, resid = R.prefill_gap_split(DISTSERVE)
    whole = (DISTSERVE["vllm"][("facebook/opt-13b", 1)].prefill[1]
             - DISTSERVE["distserve"][("facebook/opt-13b", 1)].prefill[1]) * 1e3
    assert 2 < host < 10 and resid < 1.0 and host + gpu == pytest.approx(whole, abs=resid)

    def profiles(gaps):  # DistServe's engine at 0.1 ms a token over TP; vLLM's slope adds gaps[tp] us
        prof = {"vllm": {}, "distserve": {}}
        for tp, g in gaps.items():
            prof["distserve"][("m", tp)] = StepModel((10.0, 0.1 / tp, 0.0), (0, 0, 0), (0, 0, 0), 1)
            prof["vllm"][("m", tp)] = StepModel((10.0, 0.1 / tp + g * 1e-3, 0.0), (0, 0, 0), (0, 0, 0), 1)
        return prof

    assert R.prefill_gap_split(profiles({1: 27.0, 2: 17.0, 4: 12.0}), "m") == pytest.approx((7.0, 20.0, 0.0), abs=1e-9)
    assert R.prefill_gap_split(profiles({1: 20.0, 2: 20.0, 8: 20.0}), "m")[:2] == pytest.approx((20.0, 0.0), abs=1e-9)
    with pytest.raises(ValueError, match="TP \\[1, 2\\]"):
        R.prefill_gap_split(profiles({1: 27.0, 2: 17.0}), "m")


def test_distserves_slowed_vllm_evidence_takes_only_the_gpu_part(monkeypatch):
    """The note's vLLM "slowed as DistServe measured it" added the whole profiled gap per prompt token
    (38.6 us at TP 1), host work after the first token's timestamp included; a request's TTFT waits
    for the GPU part alone, and the missing-mechanism text names both parts."""
    from types import SimpleNamespace

    from servesim.cost.published_profiles import DISTSERVE

    seen = []

    def fake_goodput(name, overrides, gpus, opts, target=0.9):
        seen.append(overrides)
        if "cost.per_token_overhead_s" in overrides:  # the slowed vLLM: under 90% from the first rate
            return R.Goodput(None, R.DISTSERVE_AE_RATES, [0.88] * 8, [None] * 8, [(0.8, 0.9)] * 8)
        return R.Goodput(2.0 if gpus == 3 else 1.0, R.DISTSERVE_AE_RATES, [0.95] * 8, [1.0] * 8, [(0.9, 1.0)] * 8)

    monkeypatch.setattr(R, "ae_goodput", fake_goodput)
    monkeypatch.setattr(R, "capacity", lambda *a, **k: (3.0, 1.0))
    monkeypatch.setattr(R, "attainment_at", lambda *a, **k: (0.5, SimpleNamespace(summary={"preemptions": 0})))
    monkeypatch.setattr(R, "decode_rates", lambda res, measured: (1.0, 1.0, 1.0, 1.0, 1.0))
    exp = R.exp_distserve(R.Options())
    host, gpu, _ = R.prefill_gap_split(DISTSERVE)
    slowed = [o["cost.per_token_overhead_s"] for o in seen if "cost.per_token_overhead_s" in o]
    assert slowed == [pytest.approx(gpu * 1e-6, abs=1e-8)]
    whole = (DISTSERVE["vllm"][("facebook/opt-13b", 1)].prefill[1]
             - DISTSERVE["distserve"][("facebook/opt-13b", 1)].prefill[1]) * 1e-3
    assert slowed[0] < whole - 2e-6
    missing = exp.figures[2].missing
    assert f"{host:.1f} us at every TP" in missing and f"{gpu:.1f} us at TP 1" in missing
    note = next(n for n in exp.notes if n.startswith("vLLM with its prefill slowed"))
    assert "gain against it: over 8x (a bound from the grid's ends, so above 1)" in note  # DistServe 2.0 / 0.25


def test_a_gain_whose_goodput_never_crosses_reads_as_a_bound():
    """The AE's grid answers a curve that never crosses 90% only with its ends: below from the first
    rate, the goodput is under that rate; above to the last, over it. DistServe's gain over such a
    vLLM is then a bound with a side of 1, not "undefined" (the slowed-vLLM note once said so)."""
    rates = R.DISTSERVE_AE_RATES

    def g(per_gpu, first=0.95):
        return R.Goodput(per_gpu, rates, [first] + [0.5] * (len(rates) - 1), [], [])

    assert R.gain_text(g(2.27), g(3.06)) == "0.742x"
    assert R.gain_text(g(2.27), g(None, first=0.88)).startswith("over 9.08x") and "so above 1" in R.gain_text(
        g(2.27), g(None, first=0.88))
    above = R.Goodput(None, rates, [0.95] * len(rates), [], [])  # never falls: over the last rate, 3
    assert R.gain_text(g(2.27), above).startswith("under 0.757x") and "so below 1" in R.gain_text(g(2.27), above)
    assert R.gain_text(above, g(2.0)).startswith("over 1.50x")  # (format_value's digits, as every table's)
    assert "not settled" in R.gain_text(g(None, first=0.5), g(0.2))  # under 0.25 / 0.2 = 1.25: either side
    assert R.gain_text(g(None, first=0.5), g(None, first=0.5)).startswith("undefined")


def test_distserves_gain_is_bounded_when_vllm_never_reaches_90_percent(monkeypatch):
    """Were vLLM's curve below 90% from the grid's first rate (its prompts priced slower), its
    goodput would be under 0.25 req/s and DistServe's gain over 2.0 / 0.25: the headline figure
    says so, direction right, where it read "not simulated"; the table and the summary count it."""
    from types import SimpleNamespace

    def fake_goodput(name, overrides, gpus, opts, target=0.9):
        if gpus == 3:
            return R.Goodput(2.0, R.DISTSERVE_AE_RATES, [0.95] * 8, [2.0] * 8, [(0.9, 1.0)] * 8)
        return R.Goodput(None, R.DISTSERVE_AE_RATES, [0.88] * 8, [None] * 8, [(0.8, 0.9)] * 8)

    monkeypatch.setattr(R, "ae_goodput", fake_goodput)
    monkeypatch.setattr(R, "capacity", lambda *a, **k: (3.0, 1.0))
    monkeypatch.setattr(R, "attainment_at", lambda *a, **k: (0.5, SimpleNamespace(summary={"preemptions": 0})))
    monkeypatch.setattr(R, "decode_rates", lambda res, measured: (1.0, 1.0, 1.0, 1.0, 1.0))
    exp = R.exp_distserve(R.Options())
    gain = exp.figures[0]
    assert gain.simulated is None and gain.direction is True and not gain.matches
    assert gain.verdict == "direction right (over 8x (a bound from the grid's ends, so above 1))"
    assert R.figure_rows([exp])[0][3] == "over 8x" and gain.to_dict()["bound"].startswith("over 8x")
    line = R.summary_line([exp], quick=False)
    assert "direction right for 1 of 1 with a direction" in line and "1 not simulated" in line  # vLLM's goodput
    unbounded = R.Figure("g", 2.0, None, "p", "text", "x", True)  # a direction with nothing behind it
    assert unbounded.verdict == "not simulated"


def test_a_bound_that_settles_no_side_is_counted_not_simulated():
    """A gain whose bound settles neither side of 1 ("over 0.8x", or "undefined": both goodputs off
    the grid on the same side) has no direction, and its verdict reads "not simulated"; the
    summary line left it out of its "not simulated" count (it counted only figures with no bound
    text), so the table's verdicts and the summary disagreed."""
    settled = R.Figure("a", 4.6, None, "p", "text", "x", True,
                       bound="over 8x (a bound from the grid's ends, so above 1)")
    unsettled = R.Figure("b", 4.6, None, "p", "text", "x", None,
                         bound="over 0.8x (a bound from the grid's ends, its side of 1 not settled)")
    undefined = R.Figure("c", 4.6, None, "p", "text", "x", None,
                         bound="undefined (both goodputs off the grid on the same side)")
    figs = [settled, unsettled, undefined]
    assert [f.verdict.split(" (")[0] for f in figs] == ["direction right", "not simulated", "not simulated"]
    line = R.summary_line([R.Experiment("e", "t", "s", figs)], quick=False)
    assert "direction right for 1 of 1 with a direction" in line
    assert f"{sum(f.verdict == 'not simulated' for f in figs)} not simulated" in line, line


def test_splitwise_table_iv_runs_the_traces_lengths_unshortened(monkeypatch):
    """Table IV's coding P50 E2E was 29% under the paper's (611 ms for 856 on DGX-A100): Llama-2-70B's
    config.json says 4,096 positions, so 15% of the coding trace's requests ran shortened to a
    4,095-token prompt and one output token, the median output 11 tokens where the trace's is 13.
    Splitwise's vLLM ran the model with prompts of up to 8,192 tokens (its profile's rows), and the
    paper's P50s hold 12.9 decode steps: the experiment runs Llama-2-70B with 8,192 positions."""
    import numpy as np

    monkeypatch.setattr(R, "splitwise_clusters", _stub_clusters)
    seen = {}
    real_run = R.run

    def run(name, overrides=None, opts=R.Options(), num_requests=None):
        res = real_run(name, overrides, opts, num_requests)
        seen[overrides["workload.preset"], overrides["hardware.gpu"]] = res
        return res

    monkeypatch.setattr(R, "run", run)
    exp = R.exp_splitwise(R.Options(quick=True))
    assert len(seen) == 4
    for (preset, gpu), res in seen.items():
        assert res.summary["workload"]["clipped_requests"] <= 0.01 * len(res.requests["request_id"]), (preset, gpu)
    for gpu in ("a100-80g", "h100-sxm"):
        out = np.asarray(seen["azure_code", gpu].requests["output_tokens"])
        assert (out > 1).all()  # no request cut to one output token
    figs = {f.label: f for f in exp.figures}
    for machine in ("DGX-A100", "DGX-H100"):
        assert figs[f"coding, {machine}: P50 E2E"].within, figs[f"coding, {machine}: P50 E2E"].ratio
    note = next(n for n in exp.notes if n.startswith("Llama-2-70B runs with 8,192 positions"))
    assert re.search(r"shorten (\d+\.\d)% of the coding requests", note)
    assert float(re.search(r"shorten (\d+\.\d)% of the coding", note)[1]) > 10  # what 4,096 positions did
    assert "8,192 positions as Splitwise's vLLM ran it" in exp.setup
