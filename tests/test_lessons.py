"""``servesim lessons``: every claim gets a verdict computed from simulated numbers (quick subset)."""

import json

import pytest

from servesim.cli.main import main
from servesim.studies.lessons import LESSONS, lesson_scenario, run_lessons


def test_quick_lessons_compute_every_verdict(tmp_path, capsys):
    out = tmp_path / "lessons"
    assert main(["lessons", "--quick", "--no-figures", "--out", str(out)]) == 0
    data = json.loads((out / "lessons.json").read_text())
    assert [x["name"] for x in data] == list(LESSONS)
    md = (out / "lessons.md").read_text()
    for x in data:
        assert x["verdict"] == ("holds" if x["holds"] else "does not hold")
        assert x["criterion"] and x["findings"] and x["rows"]  # a stated criterion and measured numbers
        assert any(ch.isdigit() for row in x["rows"] for cell in row for ch in cell)
        assert f"## `{x['name']}`: {x['verdict']}" in md
    printed = capsys.readouterr().out
    assert f"of {len(LESSONS)} claims hold" in printed
    # every claim holds (docs/fidelity.md's table says so): two had stopped holding unnoticed
    assert [x["name"] for x in data if not x["holds"]] == []


def test_figures_are_written_and_linked(tmp_path, capsys):
    out = tmp_path / "l"
    assert main(["lessons", "--quick", "--only", "bound,batching", "--only", "decode_flip", "--out", str(out)]) == 0
    # progress: a line on stderr as each lesson starts (--quiet: none)
    assert "lessons: running decode_flip (3 of 3)..." in capsys.readouterr().err
    md = (out / "lessons.md").read_text()
    for name in ("bound", "batching", "decode_flip"):
        assert (out / f"{name}.png").stat().st_size > 1000
        assert f"]({name}.png)" in md
    assert "`chunked`" not in md


def test_unknown_lesson_is_an_input_error(tmp_path, capsys):
    assert main(["lessons", "--only", "prefil", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown lesson 'prefil'" in err and "bound" in err and "Traceback" not in err
    assert not (tmp_path / "lessons.md").exists()


def test_physics_lessons_hold_and_are_deterministic():
    a = run_lessons(["bound", "batching", "long_context"])
    b = run_lessons(["bound", "batching", "long_context"])
    assert all(x.holds for x in a)
    assert [x.table for x in a] == [x.table for x in b]


def test_lesson_scenarios_validate():
    from importlib import resources

    from servesim.simulation import prepare

    names = sorted(p.name[:-5] for p in resources.files("servesim.scenarios.lessons").iterdir()
                   if p.name.endswith(".yaml"))
    assert len(names) >= 9
    for n in names:
        prepare(lesson_scenario(None, n))


@pytest.mark.slow
def test_full_lessons_run(tmp_path):
    assert main(["lessons", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "lessons.json").read_text())
    assert len(data) == len(LESSONS)


def test_seed_replaces_scenario_seeds_deterministically():
    a = run_lessons(["continuous_static"], quick=True, seed=5)[0]
    b = run_lessons(["continuous_static"], quick=True, seed=5)[0]
    c = run_lessons(["continuous_static"], quick=True)[0]
    assert a.table == b.table and a.table != c.table
    assert lesson_scenario(7, "streaming").seed == 7 and lesson_scenario(None, "streaming").seed == 0


def test_lesson_panels_label_their_axes():
    """kv_capacity's bars had no y label, streaming's CDF an x label of just "ms"."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import servesim.plots.lessons as pl

    fig, ax = plt.subplots()
    pl.kv_feasible({"rows": [{"label": "a", "feasible": 10, "peak": 5}], "requests": 20}, ax)
    assert ax.get_ylabel() == "requests in a batch"
    fig, ax = plt.subplots()
    pl.latency_cdfs({"series": {"a": [0.1, 0.2]}, "xlabel": "time to first text (ms)"}, ax)
    assert ax.get_xlabel() == "time to first text (ms)"
    plt.close("all")


def test_bound_roofline_names_step_kinds_once_and_keeps_every_point_in_view():
    """The bound lesson's roofline wrote 'prefill' and 'decode' beside every point: three GPUs'
    'decode' labels ran into each other and two 'prefill' ones printed on top of each other (the
    H100's and H200's steps sit at one intensity). The kind is the marker's shape, told once in
    the legend; hollow markers of different sizes keep two at one spot both visible."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import servesim.plots.lessons as pl

    pts = [{"gpu": g, "peak_flops": pk, "bw": bw, "prefill": (1000.0, 5.6e14), "decode": (1.0, fl)}
           for g, pk, bw, fl in (("a100-80g", 3.1e14, 2.0e12, 1.5e12), ("h100-sxm", 9.9e14, 3.35e12, 2.5e12),
                                 ("h200", 9.9e14, 4.8e12, 3.0e12))]
    fig, ax = plt.subplots()
    pl.roofline({"points": pts}, ax)
    assert list(ax.texts) == []
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[-2:] == ["prefill step", "decode step"]
    at_prefill = [ln for ln in ax.lines if list(ln.get_xdata()) == [1000.0]]
    assert len(at_prefill) == 3 and len({ln.get_markersize() for ln in at_prefill}) == 3
    assert all(ln.get_markerfacecolor() == "none" for ln in at_prefill)
    plt.close(fig)


@pytest.mark.parametrize("kwargs, error, says", [
    # (a bare name was taken letter by letter: "--only: unknown lesson 'b'")
    (dict(names="bound"), TypeError, r"run_lessons\(names=...\): a list of lesson names .* got 'bound' "
                                     r"\(one name: put it in a list\)"),
    (dict(names=5), TypeError, r"run_lessons\(names=...\): a list of lesson names .* got 5"),
    (dict(names=["bound", 3]), TypeError, r"run_lessons\(names=...\): each a lesson name \(text\), got 3"),
    # (an empty list ran all thirteen)
    (dict(names=[]), ValueError, r"run_lessons\(names=...\): an empty list names no lesson \(None: all of them\)"),
    # (text was true: "no" ran the quick subset)
    (dict(names=["bound"], quick="no"), TypeError, r"run_lessons\(quick=...\): True or False, got 'no'"),
    # (the lessons that simulate nothing took any seed in silence; the others failed naming the
    # scenario's field, not the argument)
    (dict(names=["bound"], seed="3"), TypeError, r"run_lessons\(seed=...\): a whole number from 0 to 2\*\*63 - 1 "
                                                 r"or None, got '3'"),
    (dict(names=["bound"], seed=2.5), TypeError, r"run_lessons\(seed=...\): a whole number .* got 2.5"),
    (dict(names=["bound"], seed=True), TypeError, r"run_lessons\(seed=...\): a whole number .* got True"),
    (dict(names=["bound"], seed=-5), ValueError, r"run_lessons\(seed=...\): a seed is from 0 to 2\*\*63 - 1, got -5"),
    (dict(names=["bound"], progress="yes"), TypeError, r"run_lessons\(progress=...\): a function or None, got 'yes'"),
])
def test_run_lessons_names_a_wrong_argument(kwargs, error, says):
    with pytest.raises(error, match=says):
        run_lessons(**kwargs)


def test_write_lessons_names_a_wrong_argument(tmp_path):
    import numpy as np

    from servesim.studies.lessons import write_lessons

    les = run_lessons(["bound"], quick=np.bool_(True), seed=np.int64(3))  # (numpy's bool and int are fine)
    assert les[0].holds
    with pytest.raises(TypeError, match=r"write_lessons\(lessons=...\): the list run_lessons returns, got 'bound'"):
        write_lessons("bound", tmp_path, False)
    with pytest.raises(TypeError, match=r"write_lessons\(figures=...\): True or False, got 'no'"):
        write_lessons(les, tmp_path, False, figures="no")
    with pytest.raises(TypeError, match=r"write_lessons\(out=...\): a folder path, got 3"):
        write_lessons(les, 3, False)
    # a folder given as text is a path ("'str' object has no attribute 'mkdir'")
    assert write_lessons(les, str(tmp_path / "l"), False, figures=False) == {}
    assert (tmp_path / "l" / "lessons.md").is_file()


def _with(monkeypatch, name: str, extra: dict) -> None:
    """Every run of ``scenarios/lessons/<name>.yaml`` in the lessons gets ``extra`` overrides too."""
    import servesim.studies.lessons as L

    orig = L.lesson_scenario

    def patched(seed, base, overrides=None, scale=1.0):
        return orig(seed, base, {**(overrides or {}), **(extra if base == name else {})}, scale)

    monkeypatch.setattr(L, "lesson_scenario", patched)


def test_pd_split_reads_the_decode_replicas_from_the_run(monkeypatch):
    """The decode replica was taken to be replica 1: with two prefill replicas (0, 1) and one decode
    (2) the lesson counted a prefill replica's tokens as interference and said "does not hold"
    while every criterion was met; its text said one prefill replica against two colocated, and
    the colocated deployment kept two replicas (one GPU fewer than the split). Longer prompts than
    the file's: three colocated replicas at 14 req/s see too little interference to lose."""
    _with(monkeypatch, "pd-split", {"policy.prefill": {"replicas": 2}, "workload.num_requests": 600,
                                    "workload.prompt_tokens": {"dist": "lognormal", "mean": 4000, "sigma": 0.5,
                                                               "max": 8000}})
    x = run_lessons(["pd_split"], quick=True)[0]
    assert x.holds, x.findings
    assert {r[1] for r in x.table[1]} == {"colocated x3", "2 prefill + 1 decode"}
    assert "(2 prefill replicas instead of 3)" in x.findings[0]


def test_kv_capacity_sizes_the_feasible_batch_from_the_scenario(monkeypatch):
    """The feasible batch divided the KV blocks by a request of 2048 + 128 tokens written in the
    code: a scenario of other lengths kept the old figures (48 for MHA bf16) and the verdict."""
    import math

    from servesim.simulation import prepare
    from servesim.studies.lessons import lesson_scenario

    _with(monkeypatch, "kv-capacity", {"workload.prompt_tokens": {"dist": "fixed", "value": 1000},
                                       "workload.output_tokens": {"dist": "fixed", "value": 24}})
    x = run_lessons(["kv_capacity"], quick=True)[0]
    cap = prepare(lesson_scenario(None, "kv-capacity")).capacity  # (GQA bf16: the real model)
    gqa_bf16 = next(r for r in x.table[1] if r[:2] == (8, "bf16"))
    assert gqa_bf16[4] == cap.num_blocks // math.ceil(1024 / cap.block_size)
    assert "1000 + 24 tokens" in x.setup


def test_simulated_lessons_figure_titles_name_model_gpus_policy_and_load():
    """A figure's title was the setup's first clause: streaming's said "1000 chat requests on
    Llama-3-8B / H100" (no policy, no rate), decode_flip's and ttft_prompt's no policy, kv_capacity's
    neither policy nor load. The title now has a line computed from the scenarios the lesson ran."""
    from servesim.studies.lessons import figure_title

    want = {
        "ttft_prompt": ("Llama-3.2-1B on 1 x h100-sxm", "policy continuous", "9 requests of 256-65536 tokens",
                        "100 s apart"),
        "decode_flip": ("Meta-Llama-3-8B on 1 x a100-80g", "policy continuous", "307 requests at once"),
        "continuous_static": ("Meta-Llama-3-8B on 1 x h100-sxm", "policy static / continuous",
                              "120 requests, Poisson 50 req/s"),
        "chunked": ("Meta-Llama-3-8B on 1 x h100-sxm", "policy continuous / chunked_prefill",
                    "450 requests, Poisson 3 req/s"),
        "pd_split": ("Meta-Llama-3-8B on 2 x h100-sxm", "policy continuous / pd_split",
                     "600 requests, Poisson 14 req/s"),
        "kv_capacity": ("on 1 x h100-sxm", "policy continuous", "154 requests at once"),
        "streaming": ("Meta-Llama-3-8B on 1 x h100-sxm", "policy continuous", "300 requests, Poisson 6 req/s"),
        "apart": ("Meta-Llama-3-8B on 1 x h100-sxm", "policy continuous / chunked_prefill",
                  "300 requests, Poisson 4 req/s / 300 requests at once"),
    }
    for x in run_lessons(list(want), quick=True):
        title = " ".join(figure_title(x).split())  # (as wrapped: one space between words)
        assert title.startswith(f"{x.name}: {x.verdict}")
        for part in want[x.name]:
            assert part in title, (x.name, part, title)


def test_lessons_md_says_which_seed_ran_and_that_there_is_no_interval(tmp_path):
    """lessons.md said nothing of the seed behind its numbers without --seed, nor that each is
    one run's (no interval); the runs' deployment and load are in each section."""
    from servesim.studies.lessons import write_lessons

    les = run_lessons(["bound", "decode_flip"], quick=True)
    write_lessons(les, tmp_path / "a", True, figures=False)
    md = (tmp_path / "a" / "lessons.md").read_text()
    assert "Each simulation is one run, with the scenario files' seed (0): its numbers carry no interval" in md
    assert "**Runs.** Meta-Llama-3-8B on 1 x a100-80g | policy continuous | 307 requests at once" in md
    assert md.count("**Runs.**") == 1  # (bound calls the cost model: no runs)
    write_lessons(les, tmp_path / "b", True, seed=4, figures=False)
    md = (tmp_path / "b" / "lessons.md").read_text()
    assert "one run, with seed 4 (--seed: every scenario's seed replaced)" in md


def test_a_lesson_named_twice_runs_once_in_registry_order(tmp_path, capsys):
    """--only bound,bound ran bound twice and printed "2 of 2 claims hold" (one claim, counted twice,
    its section twice in lessons.md); the lessons ran in the order given, not the registry's order
    that run_lessons' docstring promised."""
    assert [x.name for x in run_lessons(["long_context", "bound", "bound"])] == ["bound", "long_context"]
    assert [x.name for x in run_lessons(n for n in ["bound"])] == ["bound"]  # (a generator: read once)
    assert main(["lessons", "--quiet", "--no-figures", "--only", "bound,bound", "--out", str(tmp_path)]) == 0
    assert "1 of 1 claims hold" in capsys.readouterr().out
    assert (tmp_path / "lessons.md").read_text().count("## `bound`") == 1


def test_apart_does_not_pick_one_of_tied_configurations(monkeypatch):
    """With every configuration at 100% SLO the interactive workload picks none of them, but the
    lesson took the first in CONFIGS' order as its pick: reordered, the same runs said "holds".
    Its setup also quoted the file's SLO (TTFT 1 s, TPOT 15 ms) whatever the scenario said."""
    import servesim.studies.lessons as L

    monkeypatch.setattr(L, "CONFIGS", dict(reversed(list(L.CONFIGS.items()))))
    _with(monkeypatch, "interactive", {"slo": {"ttft_s": 100.0, "tpot_s": 1.0}})
    x = run_lessons(["apart"], quick=True)[0]
    assert {r[1] for r in x.table[1]} == {"100.0%"}
    assert not x.holds, x.findings
    assert "interactive ties" in x.findings[0] and "chunked 64 x 512 = chunked 256 x 2048 = continuous" in x.findings[0]
    assert "SLO TTFT <= 100 s, TPOT <= 1 s" in x.setup


def test_figures_of_an_earlier_run_do_not_stay_beside_the_new_report(tmp_path):
    """Rerunning into the same folder with --no-figures or another --only left the earlier run's
    PNGs there, beside a lessons.md that no longer linked them (figures of other numbers, maybe
    another seed)."""
    from servesim.studies.lessons import write_lessons

    (tmp_path / "notes.png").write_bytes(b"mine")  # (not a lesson's figure: kept)
    bound = run_lessons(["bound"])
    assert write_lessons(bound, tmp_path, False) == {"bound": ["bound.png"]}
    assert (tmp_path / "bound.png").is_file()
    write_lessons(bound, tmp_path, False, figures=False)
    assert not (tmp_path / "bound.png").exists() and (tmp_path / "notes.png").is_file()
    write_lessons(bound, tmp_path, False)
    write_lessons(run_lessons(["long_context"]), tmp_path, False)
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["long_context.png", "notes.png"]


def test_chunked_figure_draws_the_longest_stall_its_verdict_reads():
    """chunked's verdict rests first on TBT max (each smaller chunk must not lengthen the longest
    stall), but its figure drew only TTFT p50 and TBT p99: at chunk 4096 the drawn p99 rose while
    the lesson said "holds", with nothing drawn to show why."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import servesim.plots.lessons as pl

    fig, ax = plt.subplots()
    pl.chunked_tradeoff({"labels": ["none", "4096", "256"], "ttft_p50_s": [0.09, 0.095, 0.13],
                         "tbt_p99_s": [0.08, 0.087, 0.01], "tbt_max_s": [0.22, 0.12, 0.011]}, ax)
    lines = {ln.get_label(): list(ln.get_ydata()) for ln in ax.lines}
    assert lines["TBT max (the longest stall)"] == pytest.approx([220, 120, 11])
    lo, hi = ax.get_ylim()
    assert lo <= 10 and hi >= 220  # (every point in view)
    plt.close(fig)
    x = run_lessons(["chunked"], quick=True)[0]
    data = dict(x.figures)["chunked_tradeoff"]
    assert len(data["tbt_max_s"]) == len(data["labels"]) == len(x.table[1])


def test_decode_flip_compares_with_the_crossover_of_the_gpu_it_ran(monkeypatch):
    """decode_flip's finding quoted the A100's cost-model crossover (129) whatever GPU its scenario
    ran: on an H100 the step records flip near 513, and the finding set them beside 129."""
    _with(monkeypatch, "decode-flip", {"hardware.gpu": "h100-sxm", "workload.num_requests": 1024})
    x = run_lessons(["decode_flip"], quick=True)[0]
    assert "(cost-model crossover at context 200: 513)" in x.findings[0], x.findings
    assert "on 1 x h100-sxm" in x.runs


def test_continuous_static_criterion_states_what_it_checks():
    """The criterion said "continuous completes every request" while the verdict also required
    static batching to complete every request (a throughput of part of the requests compares
    nothing)."""
    x = run_lessons(["continuous_static"], quick=True)[0]
    assert x.criterion.startswith("both policies complete every request")


def test_lesson_figure_titles_are_whole_and_clear_of_the_panels(tmp_path, monkeypatch):
    """small41: the titles were cut with "..." (the setup's first clause shortened to fit six lines)
    and the figures small (495 px wide), a long title squeezing the panels. The title is whole,
    wrapped; the figure grows to hold it, inside the image and above every panel."""
    import re

    import servesim.plots.figures as F
    from servesim.studies.lessons import draw_figures, figure_title

    figs = []
    subplots = F.subplots

    def recording(*a, **kw):
        fig, axes = subplots(*a, **kw)
        figs.append(fig)
        return fig, axes

    monkeypatch.setattr(F, "subplots", recording)
    lessons = run_lessons(["pd_split", "tpot", "apart"], quick=True)
    draw_figures(lessons, tmp_path)
    assert len(figs) == len(lessons)
    for x, fig in zip(lessons, figs):
        title = figure_title(x)
        assert "..." not in title
        first = re.split(r"(?<=[a-z0-9)])[.;] ", x.setup, maxsplit=1)[0]
        assert " ".join(first.split()) in " ".join(title.split())  # (whole, as wrapped)
        r = fig.canvas.get_renderer()
        box, whole = fig._suptitle.get_window_extent(r), fig.bbox
        assert fig._suptitle.get_text() == title
        assert whole.x0 <= box.x0 and box.x1 <= whole.x1 and whole.y0 <= box.y0 and box.y1 <= whole.y1
        for ax in fig.axes:
            assert ax.get_tightbbox(r).y1 <= box.y0 + 1  # (the panel, its own title, below it)
            assert ax.get_window_extent(r).height >= 0.55 * fig.bbox.height  # (not squeezed)
        png = (tmp_path / f"{x.name}.png").read_bytes()
        assert int.from_bytes(png[16:20], "big") >= 600 * len(fig.axes)  # (pixels wide a panel: 495 was small)
