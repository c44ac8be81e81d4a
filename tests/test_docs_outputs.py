"""The command outputs the docs quote (``text`` blocks marked ``<!-- output-of: ARGS -->``, see
tests/docs_blocks.py) are what the commands print today: a change to the code that moves a quoted
number, or a line's wording, fails here until the block is regenerated from the command.

Runs are seeded and deterministic (the same scenario gives the same requests and the same steps on
every machine), so the comparison is exact, to the digits printed; only wall-clock times vary and
are not compared. Capacity searches depend on ``--workers`` (the probes run in parallel rounds), so
a block quoting one names the worker count its output was made with."""

import shlex

import pytest

from tests.docs_blocks import PAGES, ROOT, blocks, output_of, stale_lines

QUOTED = [b for p in PAGES for b in blocks(p) if "output-of" in b.markers]


def _check(block, tmp_path):
    assert block.lang == "text", f"{block.where}: output-of marks a text block (a quoted output)"
    missing = stale_lines(block, output_of(block, tmp_path))
    assert not missing, (f"{block.where}: the quoted output of servesim {block.markers['output-of']} is stale "
                         f"(rerun it and paste what it prints):\n" + "\n".join(missing))


def test_quoted_outputs_are_marked():
    """The quoted outputs this suite reruns (a page losing its markers would silently stop checking)."""
    pages = {b.page.relative_to(ROOT).as_posix() for b in QUOTED}
    assert {"README.md", "docs/comparing-policies.md", "docs/sizing.md", "docs/cost-model.md",
            "docs/workloads.md"} <= pages, pages
    for b in QUOTED:
        assert shlex.split(b.markers["output-of"])[0] != "servesim", f"{b.where}: give the arguments, not 'servesim'"


@pytest.mark.parametrize("block", [b for b in QUOTED if "slow" not in b.markers], ids=lambda b: b.where)
def test_quoted_output_is_what_the_command_prints(block, tmp_path):
    _check(block, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in QUOTED if "slow" in b.markers], ids=lambda b: b.where)
def test_quoted_slow_output_is_what_the_command_prints(block, tmp_path):
    _check(block, tmp_path)


def test_a_changed_figure_in_a_quoted_output_is_found(tmp_path):
    """The check itself: a quoted line with one digit changed is reported with the printed line."""
    from tests.docs_blocks import Block

    printed = ["scenario x: 10 requests", "simulated 1.0 s in 0.31 s wall", "TTFT  55.1 ms"]
    good = Block(ROOT / "README.md", 1, "text", "scenario x: 10 requests\nsimulated 1.0 s in 0.16 s wall\n...\n")
    bad = Block(ROOT / "README.md", 1, "text", "scenario x: 10 requests\nTTFT  55.2 ms\n")
    assert stale_lines(good, printed) == []
    assert stale_lines(bad, printed) == ["docs:    TTFT  55.2 ms\nprinted: TTFT  55.1 ms"]


def test_the_session_prefix_cache_figures_workloads_md_quotes(tmp_path):
    """docs/workloads.md: 400 session turns hit N% of their prompt tokens in the prefix cache and mean
    (p99) TTFT falls from A to B ms (C to D ms) against prefix_caching: false. The scenario is the
    page's sessions.yaml block; the runs are seeded, so the figures must be the quoted ones to the
    digits quoted (whole percent, whole ms)."""
    import re

    from servesim import load_scenario, simulate

    page = ROOT / "docs" / "workloads.md"
    text = re.sub(r"\s+", " ", page.read_text())
    m = re.search(r"hit (\d+)% of their prompt tokens in the cache, and mean TTFT falls from (\d+) to (\d+) ms "
                  r"\(p99 (\d+) to (\d+) ms\)", text)
    assert m, "docs/workloads.md no longer quotes the sessions' hit rate and TTFTs"
    hit, mean_off, mean_on, p99_off, p99_on = map(int, m.groups())
    body = next(b for b in blocks(page) if b.markers.get("file") == "sessions.yaml").body
    (tmp_path / "sessions.yaml").write_text(body)
    on = simulate(load_scenario(str(tmp_path / "sessions.yaml"))).summary
    off = simulate(load_scenario(str(tmp_path / "sessions.yaml"), ["policy.prefix_caching=false"])).summary
    got = (round(100 * on["kv"]["prefix_cache_hit_rate"]), round(1e3 * off["ttft_s"]["mean"]),
           round(1e3 * on["ttft_s"]["mean"]), round(1e3 * off["ttft_s"]["p99"]), round(1e3 * on["ttft_s"]["p99"]))
    assert got == (hit, mean_off, mean_on, p99_off, p99_on), f"docs/workloads.md quotes {m.group(0)!r}; runs give {got}"


def test_the_kv_handoff_overlap_figures_how_it_works_quotes():
    """docs/how-it-works.md: on scenarios/pd-split.yaml, policy.link.overlap cuts the mean hand-off
    from A to B ms (p99 C to D ms); seeded runs, so exact to the 0.1 ms quoted."""
    import re

    from servesim import load_scenario, simulate

    text = re.sub(r"\s+", " ", (ROOT / "docs" / "how-it-works.md").read_text())
    m = re.search(r"On `scenarios/pd-split.yaml` it cuts the mean hand-off from ([\d.]+) ms to ([\d.]+) ms \(p99 "
                  r"([\d.]+) to ([\d.]+) ms\)", text)
    assert m, "docs/how-it-works.md no longer quotes the hand-off overlap's effect"
    t = {o: simulate(load_scenario(str(ROOT / "scenarios" / "pd-split.yaml"), [f"policy.link.overlap={o}"]))
         .summary["kv_transfer"]["time_s"] for o in ("false", "true")}
    got = tuple(f"{1e3 * t[o][k]:.1f}" for k in ("mean", "p99") for o in ("false", "true"))
    assert got == (m.group(1), m.group(2), m.group(3), m.group(4)), (m.group(0), got)


@pytest.mark.slow
def test_the_pipeline_table_how_it_works_quotes():
    """docs/how-it-works.md's TP x PP table: each row rerun with the command the page gives (ten runs
    of 1,000 requests of Llama-2-70B, about 8 s); seeded, so each cell is the run's figure to the
    digits shown (SLO met to a whole percent, as the table rounds it)."""
    import re

    from servesim import load_scenario, simulate

    text = (ROOT / "docs" / "how-it-works.md").read_text()
    section = text[text.index("## Pipeline parallelism"):]
    rows = re.findall(r"^\| ([\d.]+) \| (\d) x (\d) \| (-|true|false) \| ([\d.]+) req/s \| (\d+) ms \| ([\d.]+) ms \| "
                      r"(\d+)% \| ([\d.]+)% \|$", section, re.M)
    assert len(rows) == 10, rows
    for rate, tp, pp, overlap, tput, ttft, tpot, met, mfu in rows:
        sets = [f"hardware.tp={tp}", f"hardware.pp={pp}", "workload.num_requests=1000",
                f"workload.arrival.rate_rps={rate}"] + ([f"hardware.pp_overlap={overlap}"] if overlap != "-" else [])
        s = simulate(load_scenario(str(ROOT / "scenarios" / "llama2-70b-tp4.yaml"), sets)).summary
        got = (f"{s['throughput_rps']:.{len(tput.split('.')[1])}f}", f"{1e3 * s['ttft_s']['p50']:.0f}",
               f"{1e3 * s['tpot_s']['mean']:.1f}", f"{100 * s['slo_attainment']:.0f}",
               f"{100 * s['utilization']['mfu']:.1f}")
        assert got == (tput, ttft, tpot, met, mfu), (rate, tp, pp, overlap, got)


@pytest.mark.slow
def test_the_lessons_table_fidelity_md_quotes(tmp_path):
    """docs/fidelity.md's table of the textbook lessons is the full `servesim lessons` run's table,
    row for row (cost-model calls and seeded simulations: exact; about 8 s of CPU)."""
    from servesim.cli.main import main

    assert main(["lessons", "--out", str(tmp_path), "--no-figures", "--quiet"]) == 0

    def rows(text):
        return [line for line in text.split("\n") if line.startswith("| `")]

    quoted = rows((ROOT / "docs" / "fidelity.md").read_text().split("## Textbook lessons")[1])
    made = rows((tmp_path / "lessons.md").read_text())
    assert len(quoted) == 13 and quoted == made[:len(quoted)], \
        [(q, m) for q, m in zip(quoted, made) if q != m] or (len(quoted), len(made))


@pytest.mark.slow
def test_the_preset_vs_trace_figures_workloads_md_quotes():
    """docs/workloads.md: the azure_conv preset against the replayed conversation trace on
    scenarios/chat.yaml (all 19,366 requests: TTFT p99 A vs B ms, mean E2E C vs D s) and azure_code
    against the code trace on scenarios/coding.yaml (8,819: TTFT p99 E s replayed, F s preset),
    rerun with the overrides the page gives; seeded, so exact to the digits quoted. Needs the traces
    in ../shared/data/traces."""
    import re

    from servesim import load_scenario, simulate

    traces = ROOT.parent / "shared" / "data" / "traces"
    if not (traces / "AzureLLMInferenceTrace_code.csv").is_file():
        pytest.skip("the Azure traces are not in ../shared/data/traces")
    text = re.sub(r"\s+", " ", (ROOT / "docs" / "workloads.md").read_text())
    m = re.search(r"TTFT p99 (\d+) vs (\d+) ms and mean E2E ([\d.]+) vs ([\d.]+) s", text)
    c = re.search(r"the replay's TTFT p99 is ([\d.]+) s, the preset's ([\d.]+) s", text)
    assert m and c
    chat = ["workload.arrival=null", "workload.prompt_tokens=null", "workload.output_tokens=null",
            "workload.num_requests=19366"]
    runs = {
        "conv-preset": ("chat.yaml", chat + ["workload.preset=azure_conv"]),
        "conv-trace": ("chat.yaml", chat + [f"workload.trace.path={traces / 'AzureLLMInferenceTrace_conv.csv'}"]),
        "code-trace": ("coding.yaml", ["workload.num_requests=8819", "workload.preset=null",
                                       f"workload.trace.path={traces / 'AzureLLMInferenceTrace_code.csv'}"]),
        "code-preset": ("coding.yaml", ["workload.num_requests=8819"]),
    }
    s = {k: simulate(load_scenario(str(ROOT / "scenarios" / f), sets)).summary for k, (f, sets) in runs.items()}
    got = (f"{1e3 * s['conv-preset']['ttft_s']['p99']:.0f}", f"{1e3 * s['conv-trace']['ttft_s']['p99']:.0f}",
           f"{s['conv-preset']['e2e_s']['mean']:.2f}", f"{s['conv-trace']['e2e_s']['mean']:.2f}",
           f"{s['code-trace']['ttft_s']['p99']:.1f}", f"{s['code-preset']['ttft_s']['p99']:.2f}")
    assert got == m.groups() + c.groups(), (m.group(0), c.group(0), got)


@pytest.mark.slow
def test_the_head_of_line_lines_scheduling_md_quotes(tmp_path, capsys):
    """docs/scheduling.md quotes two lines its decision-trace command prints (head-of-line waits and
    priority inversions on scenarios/interactive-batch.yaml without chunking): rerun, both are printed
    as quoted (seeded: exact)."""
    import re

    from servesim.cli.main import main

    text = re.sub(r"\s+", " ", (ROOT / "docs" / "scheduling.md").read_text())
    quoted = re.search(r"prints `(head-of-line: [^`]+)` \(and the priority inversions: `([^`]+)`", text)
    assert quoted, "docs/scheduling.md no longer quotes the head-of-line line"
    assert main(["run", str(ROOT / "scenarios" / "interactive-batch.yaml"), "--set", "policy.name=continuous",
                 "--set", "policy.max_num_batched_tokens=8192", "--set", "workload.arrival.rate_rps=8",
                 "--decision-trace", str(tmp_path / "d.csv"), "--out", str(tmp_path / "out")]) == 0
    printed = re.sub(r"\s+", " ", capsys.readouterr().out)
    for q in quoted.groups():
        assert q in printed, (q, [line for line in printed.split("; ") if "waited" in line])


@pytest.mark.slow
def test_the_capacity_figures_sizing_md_quotes(tmp_path):
    """docs/sizing.md's single-search answers on the default scenario (ttft_p99=1, tpot_p99=0.05,
    --seeds 1): the P/D split's 37.93 req/s (19.0 per GPU), 23.25 with --workers 1, 21.14 with
    5,000-request probes (the page's outputs ran with 2 workers), rerun; seeded searches, so exact to
    the digits quoted (about 14 s of CPU)."""
    import json
    import re

    from servesim.cli.main import main

    text = re.sub(r"\s+", " ", (ROOT / "docs" / "sizing.md").read_text())
    x = r"(\d+(?:\.\d+)?)"  # a number, not the full stop after it
    pd = re.search(rf"sustains {x} req/s, {x} req/s per GPU, against {x} for the one colocated", text)
    w1 = re.search(rf"`--seeds 1 --workers 1` answers {x} req/s where they show {x}", text)
    p5k = re.search(rf"and {x} with 5,000-request probes", text)
    assert pd and w1 and p5k

    def capacity(name, *extra):
        argv = ["capacity", str(ROOT / "scenarios" / "default.yaml"), "--slo", "ttft_p99=1,tpot_p99=0.05",
                "--per-gpu", "--seeds", "1", "--quiet", "--out", str(tmp_path / name), *extra]
        assert main(argv) == 0
        return json.loads((tmp_path / name / "capacity.json").read_text())

    split = capacity("pd", "--workers", "2", "--set", "policy.name=pd_split")
    one = capacity("one", "--workers", "2")
    assert (f"{split['capacity_rps']:.2f}", f"{split['capacity_rps_per_gpu']:.1f}", f"{one['capacity_rps']:.1f}",
            f"{one['capacity_rps']:.2f}") == pd.groups() + (w1.group(2),)
    assert f"{capacity('w1', '--workers', '1')['capacity_rps']:.2f}" == w1.group(1)
    probes = capacity("p5k", "--workers", "2", "--probe-requests", "5000")
    assert f"{probes['capacity_rps']:.2f}" == p5k.group(1)
