"""The documentation: the site builds offline with warnings as errors, the generated reference
pages match the code, the hand-written tables name exactly what the code writes, and the pages
speak of the software only."""

import re
import subprocess
import sys

import pytest

from tests.docs_blocks import PAGES, ROOT, blocks

DOCS = ROOT / "docs"


def _table_names(page, heading: str) -> list[str]:
    """The first column (a `code` name) of the first table under ``heading`` of a docs page."""
    text = (DOCS / page).read_text()
    start = text.index("\n" + heading + "\n")
    names = []
    for line in text[start:].split("\n")[1:]:
        if names and not line.startswith("|"):
            break
        m = re.match(r"^\| `([^`]+)` \|", line)
        if m:
            names.append(m.group(1))
    return names


def _expand(name: str) -> list[str]:
    """``{a,b}_{x,y}_s`` -> every combination, as the results.csv table abbreviates them."""
    m = re.search(r"\{([^}]*)\}", name)
    if not m:
        return [name]
    return [y for x in m.group(1).split(",") for y in _expand(name[:m.start()] + x + name[m.end():])]


def test_generated_reference_pages_match_the_code():
    sys.path.insert(0, str(ROOT))
    try:
        from tools import gen_reference
    finally:
        sys.path.remove(str(ROOT))
    stale = gen_reference.stale()
    assert not stale, f"docs/reference/{stale} out of date: run python tools/gen_reference.py"
    # a command's help keeps its capitals (str.capitalize lower-cased "MAPE", "SLOs", "vLLM", "P/D")
    cli = (ROOT / "docs/reference/cli.md").read_text()
    for line in ("Predicted vs measured operator times: MAPE and worst case.",
                 "Highest arrival rate at which the SLOs hold (bisection on rate).",
                 "The cheapest deployment (GPU, TP/PP, replicas, policy or P/D split)"):
        assert f"\n{line}" in cli, line


def test_scenario_reference_names_every_field():
    import dataclasses

    from servesim.inputs.scenario import Policy, Scenario, Workload

    text = (DOCS / "reference" / "scenario.md").read_text()
    for cls in (Scenario, Workload, Policy):
        for f in dataclasses.fields(cls):
            assert f"| `{f.name}` |" in text


def test_scenario_reference_has_a_table_for_every_mapping_a_scenario_holds():
    """Every dataclass reachable from ``Scenario`` (sections, list entries, arrival processes and
    length distributions, and lists inside those: piecewise's segments were listed as 'list of
    Segment mappings' with no table of their fields) has its rows on the page, and the sweep
    block that servesim sweep reads is named."""
    import dataclasses
    import typing

    sys.path.insert(0, str(ROOT))
    try:
        from tools import gen_reference
    finally:
        sys.path.remove(str(ROOT))
    from servesim.inputs.scenario import Scenario

    text = (DOCS / "reference" / "scenario.md").read_text()
    seen, todo = set(), [Scenario]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        hints = typing.get_type_hints(cls)
        tags = {f.name for f in dataclasses.fields(cls) if typing.get_origin(hints[f.name]) is typing.Literal
                and len(typing.get_args(hints[f.name])) == 1}
        rows = [r for r, f in zip(gen_reference._table(cls, hints)[2:], dataclasses.fields(cls)) if f.name not in tags]
        assert "\n".join(rows) in text, cls.__name__
        for f in dataclasses.fields(cls):
            stack = [hints[f.name]]
            while stack:
                tp = stack.pop()
                if dataclasses.is_dataclass(tp):
                    todo.append(tp)
                stack += [a for a in typing.get_args(tp) if a is not type(None) and a is not Ellipsis]
    assert len(seen) >= 39 and "`sweep: {grid:" in text  # (39 dataclasses today: the walk reached them)


def test_the_catalogs_a_field_description_lists_are_the_real_ones():
    """hardware.gpu, cost.engine, cluster.router and the workload presets list their valid names
    in the reference (all but hardware.gpu named only a module): the lists are the catalogs'."""
    import dataclasses

    from servesim.core.router import ROUTERS
    from servesim.cost.engines import PROFILES
    from servesim.inputs.presets import PRESETS
    from servesim.inputs.scenario import Cluster, Cost, Hardware, RequestClass, Workload
    from servesim.inputs.specs import GPUS

    for cls, name, catalog in ((Hardware, "gpu", GPUS), (Cost, "engine", PROFILES), (Cluster, "router", ROUTERS),
                               (Workload, "preset", PRESETS), (RequestClass, "preset", PRESETS)):
        doc = next(f for f in dataclasses.fields(cls) if f.name == name).metadata["doc"]
        listed = re.search(r"\(([a-z0-9._ -]+?)(?:\)|:)", doc).group(1).split()
        assert sorted(listed) == sorted(catalog), (name, listed)


def test_cli_reference_names_every_subcommand_and_flag():
    import argparse

    from servesim.cli.parser import build_parser

    text = (DOCS / "reference" / "cli.md").read_text()
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        assert f"## servesim {name}\n" in text
        for a in p._actions:
            for opt in a.option_strings:
                assert opt in ("-h", "--help") or f"`{opt}`" in text, (name, opt)


def test_cli_reference_keeps_each_commands_help_as_written_and_every_exit_status():
    """A command's heading sentence is its help with the first letter capitalized: str.capitalize
    lowercased the rest ('the slos', 'gpu, tp/pp', 'vllm'); the exit statuses include the 3 that
    sweep and compare return when points failed (sim/cli/studies.py) and the interrupts'."""
    import argparse

    from servesim.cli.parser import build_parser
    from servesim.cli.studies import EXIT_POINTS_FAILED

    text = (DOCS / "reference" / "cli.md").read_text()
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for action in sub._choices_actions:
        assert f"\n{action.help[:1].upper()}{action.help[1:]}.\n" in text, action.dest
    intro = text.split("| command |")[0]
    for status in (0, 1, 2, EXIT_POINTS_FAILED, 130, 143):
        assert f" {status} " in intro, status


def test_every_repository_file_the_docs_and_packaged_scenarios_name_exists():
    """A source file named in the docs, the README or a packaged scenario's comments is one a reader
    opens: 'policies/chunked_prefill.py' and 'sim/presets.py' were named after they had moved."""
    named = re.compile(r"\b((?:sim|docs|bench|tools|policies|plots|scenarios|examples)/[\w/-]+\.(?:py|md|yaml))\b")
    texts = [ROOT / "README.md", *sorted(DOCS.rglob("*.md")), *sorted((ROOT / "scenarios").rglob("*.yaml"))]
    missing = sorted({(str(t.relative_to(ROOT)), m) for t in texts for m in named.findall(t.read_text())
                      if not (ROOT / m).exists()})
    assert not missing, missing


def test_site_builds_offline_with_warnings_as_errors(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs build needs the dev extras (pip install -e '.[dev]')")
    pytest.importorskip("mkdocstrings")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "WARNING" not in proc.stderr
    index = (tmp_path / "site" / "index.html").read_text()
    assert "five-minute tour" in index and 'href="comparing-policies/' in index  # README as the home page
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert "Run a scenario to the end" in api  # docstrings rendered


def test_output_column_tables_name_exactly_the_columns_written():
    from servesim.outputs.columns import DECISION_COLUMNS, REQUEST_COLUMNS, STEP_COLUMNS
    from servesim.studies.sweep import METRIC_COLUMNS

    assert _table_names("outputs.md", "### requests.csv") == list(REQUEST_COLUMNS)
    assert _table_names("outputs.md", "### steps.csv") == list(STEP_COLUMNS)
    assert _table_names("outputs.md", "### Decision trace CSV") == list(DECISION_COLUMNS)
    results = [c for n in _table_names("outputs.md", "### results.csv (sweeps, comparisons, capacity probes)")
               for c in _expand(n)]
    assert results == ["point", "status", "error", *METRIC_COLUMNS, "hash", "dir"]


def test_summary_table_names_exactly_the_keys_written():
    from servesim import load_scenario, simulate

    keys: set = set()
    for overrides, trace in ((["workload.num_requests=30"], True),
                             (["workload.num_requests=30", "policy.name=pd_split"], False),
                             (["workload.num_requests=30", "hardware.pp=2"], False)):
        keys |= set(simulate(load_scenario(None, overrides), decision_trace=trace).summary)
    assert set(_table_names("outputs.md", "### summary.json")) == keys


def test_readme_is_a_short_front_door_with_ci_s_commands():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.split()) <= 1500
    install = "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/servesim run"
    tests = ("python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/ruff check . && "
             ".venv/bin/python -m pytest")
    bash = [b.body.strip() for b in blocks(ROOT / "README.md") if b.lang == "bash"]
    assert install in bash and tests in bash
    ci = (ROOT / ".ci" / "run").read_text().strip().split("\n")[-1]
    assert ci == tests, ".ci/run must run exactly the README's test command"
    for target in re.findall(r"\]\(docs/([^)#]+)", readme):
        assert (DOCS / target).is_file(), target


def test_source_files_the_pages_name_exist():
    """A page that points the reader at a source file (`policies/chunked_prefill.py`) names one
    that is in the checkout (chunked prefill is policies/continuous.py with chunked=True)."""
    path = re.compile(r"\b(?:policies|sim|plots|scenarios|tools|examples|tests)/[\w/.-]*\.(?:py|yaml|md)\b")
    pages = [*PAGES, *sorted((DOCS / "reference").glob("*.md"))]
    missing = [(page.relative_to(ROOT).as_posix(), p) for page in pages
               for p in sorted(set(path.findall(page.read_text()))) if not (ROOT / p).exists()]
    assert not missing, missing


def test_pages_speak_of_the_software_only():
    for page in [*PAGES, *sorted((DOCS / "reference").glob("*.md"))]:
        text = page.read_text()
        for pattern in (r"\b[iI]ssues? #?\d", r"\b[0-9a-f]{40}\b", r"\bmain@", r"\bwip-[a-z]", r"/work/"):
            m = re.search(pattern, text)
            assert m is None, f"{page.relative_to(ROOT)}: {m.group(0)!r} is development history, not user docs"


def test_generated_tables_live_in_the_guides():
    from servesim.studies import reproduce

    fidelity = (DOCS / "fidelity.md").read_text()
    assert reproduce.BEGIN in fidelity and reproduce.END in fidelity
    perf = (DOCS / "performance.md").read_text()
    assert "<!-- speed-table:begin -->" in perf and "<!-- speed-table:end -->" in perf
    import argparse

    from servesim.cli.parser import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    write = next(a for a in sub.choices["reproduce"]._actions if "--write-docs" in a.option_strings)
    assert write.const == "docs/fidelity.md"


def test_summary_table_names_the_nested_keys_written():
    """The summary.json table's rows name the keys inside their objects too (a key added to `cost`
    or to the diagnosis went unmentioned: only the top level was checked)."""
    from servesim import load_scenario, simulate

    text = (DOCS / "outputs.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([a-z_]+)` \| (.*) \|$", text, re.M)}
    s = simulate(load_scenario(None, ["workload.num_requests=30"])).summary
    nested = {"cost": s["cost"]["colocated"], "kv_capacity": s["kv_capacity"]["colocated"], "kv": s["kv"],
              "head_of_line": s["head_of_line"], "workload": {**s["workload"], **s["workload"]["keep_up"]},
              "economics": {**s["economics"], **s["economics"]["pools"]["colocated"]}}
    for row, obj in nested.items():
        missing = [k for k in obj if f"`{k}`" not in rows[row]]
        assert not missing, f"docs/outputs.md, summary.json row `{row}`: {missing} not named"
    profile = text[text.index("### Per-phase profile and diagnosis"):text.index("**When requests missed")]
    for k in [*s["profile"], *s["profile"]["decode"], *s["profile"]["diagnosis"],
              *s["profile"]["diagnosis"]["slo_misses"]]:
        assert f"`{k}`" in profile, f"docs/outputs.md, the profile's keys: `{k}` not named"


def test_every_source_file_a_page_or_module_names_exists():
    """A file the docs, or the text a module writes (lessons.md's setups, docstrings), point a reader to
    exists in the checkout (lessons.md named sim/profile.py, moved to sim/outputs/profile.py)."""
    pattern = re.compile(r"\b(?:sim|policies|plots|tools|bench|scenarios|tests|examples)/[A-Za-z0-9_./-]+"
                         r"\.(?:py|yaml|csv|json|md)\b")
    sources = [*PAGES, *(p for d in ("sim", "policies", "plots") for p in sorted((ROOT / d).rglob("*.py")))]
    missing = sorted({(str(p.relative_to(ROOT)), m) for p in sources for m in pattern.findall(p.read_text())
                      if not (ROOT / m).exists()})
    assert not missing, missing


def test_every_bench_script_has_a_usage_line_with_its_flags():
    """docs/performance.md named bench/routers.py, routing_cost.py and traces.py without a usage line
    (and bench/plan.py not at all): each script with options has one, `python bench/<name>.py [...]`,
    naming every option the script takes and none it does not."""
    perf = (DOCS / "performance.md").read_text()
    for script in sorted((ROOT / "bench").glob("*.py")):
        flags = set(re.findall(r"add_argument\(\s*\"(--[a-z-]+)\"", script.read_text()))
        if not flags:
            continue  # (a helper the others import: bench/timed_cli.py)
        line = re.search(rf"python bench/{script.stem}\.py( \[[^\n`]*)`", perf)
        assert line, f"docs/performance.md: no usage line `python bench/{script.name} [...]`"
        shown = set(re.findall(r"\[(--[a-z-]+)", line.group(1)))
        assert shown == flags, f"bench/{script.name}: its usage line names {sorted(shown)}, it takes {sorted(flags)}"
