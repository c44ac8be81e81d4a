"""The package's layering, read from the source with ``ast`` (nothing is imported):

- plots (figures, reports) read runs through ``servesim.outputs`` only: no studies, CLI or engine;
- outputs (recorder, metrics, summary, writer, reader) depend on no cost model, engine, study,
  CLI or plot;
- the engine (``servesim.core``) imports no matplotlib, study, CLI or plot;
- no import cycle among servesim modules at module level (what runs on import).
Every import counts for the rules, those inside functions too (a lazy import is still a
dependency); cycles are checked on module-level imports, which are what can fail on import.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def source_modules() -> dict:
    """module name -> source file, from pyproject's package-dir (servesim = sim/, ...)."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    modules = {}
    for package, folder in cfg["package-dir"].items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join([package, *parts])] = path
    return modules


def imports_of(path: Path, name: str, known) -> list:
    """(imported module, module level?) for each import in the file, resolved to known modules
    where possible (``from servesim.plots import figures`` imports servesim.plots.figures)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []

    def visit(node, lazy: bool):
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((alias.name, not lazy) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative
                    up = package.split(".")[:len(package.split(".")) - child.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for alias in child.names:
                    sub = f"{base}.{alias.name}"
                    found.append((sub if sub in known else base, not lazy))
            visit(child, inner)

    visit(tree, False)
    return found


MODULES = source_modules()
GRAPH = {m: imports_of(p, m, MODULES) for m, p in MODULES.items()}


def under(module: str, *prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def violations(layer: str, forbidden=(), allowed=None) -> list:
    """(module, import) pairs of ``layer`` that break the rule: an import under ``forbidden``, or
    (``allowed`` given) a servesim import under none of ``allowed``."""
    bad = []
    for mod, imps in GRAPH.items():
        if not under(mod, layer):
            continue
        for imp, _ in imps:
            if under(imp, *forbidden):
                bad.append((mod, imp))
            elif allowed is not None and under(imp, "servesim") and not under(imp, *allowed):
                bad.append((mod, imp))
    return bad


def test_the_parser_sees_the_package():
    """The checks below would pass vacuously on an empty graph: the modules and some known edges."""
    assert {"servesim.simulation", "servesim.outputs.recorder", "servesim.plots.report", "servesim.core.cluster",
            "servesim.policies.continuous", "servesim.studies.sweep", "servesim.cli.main"} <= set(MODULES)
    edges = {(m, i) for m, imps in GRAPH.items() for i, _ in imps}
    assert ("servesim.simulation", "servesim.outputs.recorder") in edges
    assert ("servesim.plots.report", "servesim.plots.figures") in edges  # from servesim.plots import figures
    assert ("servesim.cli.studies", "servesim.plots.report") in edges  # a lazy import, inside a function
    lazy = {(m, i) for m, imps in GRAPH.items() for i, top in imps if not top}
    assert ("servesim.cli.studies", "servesim.plots.report") in lazy


def test_plots_read_runs_through_outputs_only():
    assert violations("servesim.plots", allowed=("servesim.outputs", "servesim.plots", "servesim.errors")) == []


def test_outputs_depend_on_no_engine_cost_model_study_cli_or_plot():
    assert violations("servesim.outputs", forbidden=("servesim.cost", "servesim.core", "servesim.policies",
                                                     "servesim.simulation", "servesim.studies", "servesim.cli",
                                                     "servesim.plots", "matplotlib")) == []


def test_the_engine_imports_no_plotting_study_or_cli():
    assert violations("servesim.core", forbidden=("matplotlib", "servesim.studies", "servesim.cli",
                                                  "servesim.plots")) == []


def find_cycle(edges: dict) -> list | None:
    """One cycle of the directed graph ``edges`` (node -> set of nodes), or None."""
    state, stack = {}, []

    def dfs(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                cycle = dfs(m)
                if cycle:
                    return cycle
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(edges):
        if n not in state:
            cycle = dfs(n)
            if cycle:
                return cycle
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_at_module_level():
    edges = {m: {i for i, top in imps if top and i in MODULES and i != m} for m, imps in GRAPH.items()}
    assert find_cycle(edges) is None


@pytest.mark.parametrize("layer", ["servesim.plots", "servesim.outputs"])
def test_no_cycle_through_lazy_imports_between_outputs_plots_and_studies(layer):
    """With lazy imports too, nothing the layer reaches leads back into it through a study: the
    report <-> sweep/capacity cycle is gone."""
    edges = {m: {i for i, _ in imps if i in MODULES and i != m} for m, imps in GRAPH.items()}
    reach, todo = set(), [m for m in MODULES if under(m, layer)]
    while todo:
        for nxt in edges[todo.pop()]:
            if nxt not in reach:
                reach.add(nxt)
                todo.append(nxt)
    assert not [m for m in reach if under(m, "servesim.studies", "servesim.cli")]
