"""The code blocks of the user documentation (README.md and docs/*.md) and how the test suite runs
them, so that a change that breaks a documented example fails CI (tests/test_docs_examples.py).

Every fenced block declares its language:

- ``bash``: each line (``\\`` continues it, ``#`` starts a comment, ``cd DIR && ...`` changes the
  folder for the rest of the block) is a ``servesim`` command, run in-process with quick
  settings appended (``QUICK`` below, or the block's ``quick`` marker instead); it must exit 0;
- ``python``: executed, the blocks of one page in order in one namespace (as notebook cells);
- ``yaml``: a scenario fragment, its top-level keys laid over the packaged default scenario and
  validated; ``toml``: parsed;
- ``text``: an output sample, never run.

Markers, HTML comments on the lines right above a fence (invisible on the page):

- ``<!-- not-run: REASON -->``: not run (installs, the test suite itself, long studies);
- ``<!-- slow: REASON -->``: run only by ``pytest -m slow``;
- ``<!-- quick: ARGS -->``: append ARGS to the block's servesim commands instead of ``QUICK``
  (an option both give, but ``--set``, takes ARGS' value: the command's own is dropped);
- ``<!-- file: NAME -->``: write the block to NAME in the page's working folder instead of
  running it (a scenario, GPU file or module a later block uses);
- ``<!-- output-of: ARGS -->`` on a ``text`` block: the block is what ``servesim ARGS`` prints
  (stdout and stderr); tests/test_docs_outputs.py reruns it (the page's ``file`` blocks written
  first, no quick settings) and checks that every line of the block is a line of the output, in
  order (``...`` lines stand for lines left out, wall-clock times are not compared), so a quoted
  output that the code no longer prints fails. ARGS may add flags that change nothing printed
  (``--no-report``, ``--quiet``); with ``<!-- slow: REASON -->`` too, only ``pytest -m slow`` runs it;
  with ``<!-- output-file: PATH -->`` too, the block is the start of the file PATH the command wrote
  (a ``report.md``), not what it printed. A quoted line ending in `` ...`` stands for a printed line
  that begins with what comes before the dots.

Each page runs in a fresh folder holding links to the checkout's ``scenarios/``, ``sim/`` and
``tests/``, a copy of ``examples/``, and ``../shared`` when the checkout has one, so the paths a
reader types from a checkout work and the outputs land in the temporary folder.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # docs/reference/ is generated
LANGUAGES = ("bash", "python", "yaml", "toml", "text")
MARKER = re.compile(r"^<!-- (not-run|slow|quick|file|output-of|output-file): ?(.*?) -->$")
FENCE = re.compile(r"^```(\S*)\s*$")

# small sizes for each subcommand: a documented command runs in well under a second or two
_SMALL = ["--set", "workload.num_requests=40", "--set", "workload.duration_s=null"]
QUICK = {
    "run": [*_SMALL, "--quiet"],
    "compare": [*_SMALL, "--workers", "2", "--quiet", "--no-report"],
    "sweep": [*_SMALL, "--workers", "2", "--quiet"],
    "capacity": ["--probe-requests", "40", "--tol", "0.05", "--workers", "2", "--quiet"],
    "validate-run": ["--quiet"],
    "lessons": ["--quick", "--no-figures"],
    "reproduce": ["--quick"],
}


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    body: str
    markers: dict = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def kind(self) -> str:
        """``sample`` (text), ``not-run``, ``slow`` or ``run``."""
        if self.lang == "text":
            return "sample"
        if "not-run" in self.markers:
            return "not-run"
        return "slow" if "slow" in self.markers else "run"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a Markdown page with the markers right above each."""
    lines = page.read_text().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        markers, j = {}, i - 1
        while j >= 0 and MARKER.match(lines[j]):
            key, value = MARKER.match(lines[j]).groups()
            markers[key] = value
            j -= 1
        end = next(k for k in range(i + 1, len(lines)) if lines[k].startswith("```"))
        out.append(Block(page, i + 1, m.group(1), "\n".join(lines[i + 1:end]) + "\n", markers))
        i = end + 1
    return out


def workspace(tmp: Path) -> Path:
    """A fresh working folder for one page (see the module docstring)."""
    work = tmp / "work"
    work.mkdir(parents=True)
    for name in ("scenarios", "sim", "tests"):
        (work / name).symlink_to(ROOT / name)
    shutil.copytree(ROOT / "examples", work / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    if (ROOT.parent / "shared").is_dir():
        (tmp / "shared").symlink_to(ROOT.parent / "shared")
    return work


def commands(body: str) -> list[list[list[str]]]:
    """Each line of a bash block as its ``&&``-joined commands, each a list of words."""
    text = body.replace("\\\n", " ")
    lines = []
    for line in text.split("\n"):
        words = shlex.split(line, comments=True)
        if words:
            parts, cur = [], []
            for w in words:
                if w == "&&":
                    parts.append(cur)
                    cur = []
                else:
                    cur.append(w)
            parts.append(cur)
            lines.append(parts)
    return lines


def run_servesim(argv: list[str], where: str) -> None:
    from servesim.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    assert rc == 0, f"{where}: servesim {shlex.join(argv)} exited {rc}:\n{err.getvalue()[-2000:]}"


def _without(words: list[str], extra: list[str]) -> list[str]:
    """``words`` less the options ``extra`` gives again (each with its value): the quick setting
    replaces the page's (plan refuses a list flag given twice: --gpus a,b --gpus a)."""
    # (an option followed in ``extra`` by a value takes one; a switch such as --quiet none, so the
    # scenario after a page's own --quiet stays)
    takes = {w.split("=", 1)[0]: "=" in w or (k + 1 < len(extra) and not extra[k + 1].startswith("--"))
             for k, w in enumerate(extra) if w.startswith("--") and w.split("=", 1)[0] != "--set"}  # (--set adds)
    out, i = [], 0
    while i < len(words):
        name = words[i].split("=", 1)[0]
        if words[i].startswith("--") and name in takes:
            i += 2 if takes[name] and "=" not in words[i] else 1
            continue
        out.append(words[i])
        i += 1
    return out


def run_bash(block: Block, work: Path) -> int:
    """Run a bash block's servesim commands; returns how many ran."""
    quick = shlex.split(block.markers["quick"]) if "quick" in block.markers else None
    ran = 0
    for line in commands(block.body):
        cwd = os.getcwd()
        try:
            for words in line:
                if words[0] == "cd" and len(words) == 2:
                    os.chdir(words[1])
                    continue
                assert words[0] == "servesim", (f"{block.where}: only servesim commands (and cd) run in a bash "
                                                f"block; mark it <!-- not-run: why --> ({shlex.join(words)})")
                extra = quick if quick is not None else QUICK.get(words[1], [])
                run_servesim(_without(words[1:], extra) + extra, block.where)
                ran += 1
        finally:
            os.chdir(cwd)
    return ran


def check_yaml(block: Block) -> None:
    from servesim.inputs.scenario import default_scenario_path, read_yaml, scenario_from_dict
    from servesim.inputs.schema import load_yaml

    fragment = load_yaml(block.body)
    assert isinstance(fragment, dict), f"{block.where}: a yaml block must be a mapping"
    data = read_yaml(default_scenario_path())
    data.update(fragment)
    data.pop("sweep", None)  # servesim sweep's grid: not a scenario field
    try:
        scenario_from_dict(data)
    except Exception as e:
        raise AssertionError(f"{block.where}: the scenario fragment does not validate: {e}") from None


def run_page(page: Path, tmp: Path, kinds=("run",)) -> dict:
    """Run the blocks of ``page`` whose kind is in ``kinds`` (files are always written); returns
    counts per kind and the servesim commands run."""
    import matplotlib

    matplotlib.use("Agg")
    work = workspace(tmp)
    counts = {"run": 0, "slow": 0, "not-run": 0, "sample": 0, "skipped": 0, "commands": 0}
    namespace: dict = {"__name__": "__docs__"}
    old_cwd, old_path, old_modules = os.getcwd(), list(sys.path), set(sys.modules)
    os.chdir(work)
    try:
        for b in blocks(page):
            assert b.lang in LANGUAGES, (f"{b.where}: give the block a language ({', '.join(LANGUAGES)}; text for "
                                         f"output samples), not {b.lang!r}")
            if "file" in b.markers:
                (work / b.markers["file"]).write_text(b.body)
                counts["run"] += 1
                continue
            if b.kind not in kinds:
                counts[b.kind if b.kind in ("not-run", "sample") else "skipped"] += 1
                continue
            if b.lang == "bash":
                counts["commands"] += run_bash(b, work)
            elif b.lang == "python":
                exec(compile(b.body, b.where, "exec"), namespace)
            elif b.lang == "yaml":
                check_yaml(b)
            elif b.lang == "toml":
                tomllib.loads(b.body)
            counts[b.kind] += 1
    finally:
        os.chdir(old_cwd)
        sys.path[:] = old_path
        for name in set(sys.modules) - old_modules:  # a page's own modules (module:Class names)
            mod = sys.modules[name]
            if str(getattr(mod, "__file__", "") or "").startswith(str(tmp)):
                del sys.modules[name]
    return counts


WALL = re.compile(r"\b[0-9][0-9.]* s wall\b")  # a run's wall-clock time: the one printed figure that varies


def _masked(line: str) -> str:
    return WALL.sub("? s wall", line.rstrip())


def output_of(block: Block, tmp: Path) -> list[str]:
    """What ``servesim ARGS`` of the block's ``output-of`` marker prints (stdout, then stderr), run
    in a fresh page workspace holding the page's ``file`` blocks; returns its lines."""
    from servesim.cli.main import main

    work = workspace(tmp)
    for b in blocks(block.page):
        if "file" in b.markers:
            (work / b.markers["file"]).write_text(b.body)
    argv = shlex.split(block.markers["output-of"])
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(work)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    finally:
        os.chdir(cwd)
    assert rc == 0, f"{block.where}: servesim {shlex.join(argv)} exited {rc}:\n{err.getvalue()[-2000:]}"
    if "output-file" in block.markers:
        return (work / block.markers["output-file"]).read_text().split("\n")
    return (out.getvalue() + err.getvalue()).split("\n")


def stale_lines(block: Block, printed: list[str]) -> list[str]:
    """The lines of a quoted output (``text`` block) that ``printed`` lacks, in order: each line of
    the block must be a line of the output after the previous one's (blank and ``...`` lines are
    skipped; wall-clock times masked; a line ending in `` ...`` matches a printed line that begins
    with what comes before the dots). Each missing line is given with the printed line closest to it."""
    import difflib

    got = [_masked(x) for x in printed]
    missing, at = [], 0
    for line in block.body.split("\n"):
        want = _masked(line)
        if not want.strip() or want.strip() == "...":
            continue
        cut = want[:-4] if want.endswith(" ...") else None
        found = next((k for k in range(at, len(got)) if (got[k].startswith(cut) if cut else got[k] == want)), None)
        if found is not None:
            at = found + 1
        else:
            close = difflib.get_close_matches(want, got, n=1, cutoff=0.0)
            missing.append(f"docs:    {want}\nprinted: {close[0] if close else '(nothing)'}")
    return missing
