"""Sweep points: a grid of scenario fields (or labelled variants) -> resolved scenarios.

A sweep is a list of *points*; each point is a fully resolved scenario (plain data) plus the
values that name it (the swept fields, or a comparison label). Workers receive the resolved
scenario, never the grid, so every executor (local processes, Ray) computes the same thing:
same scenario + seed => same results. ``scenario_hash`` keys a point's run folder, so a rerun
finds the points already finished. A point that fails validation keeps its error; the others go on.

Points of one sweep share the scenario's seed, so e.g. every policy sees the same requests
(common random numbers).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
from dataclasses import dataclass, field

from servesim.errors import InputError, shown
from servesim.inputs.overrides import apply_overrides, check_overrides, override_texts, parse_value, with_values
from servesim.outputs.metrics import RESULT_METRICS, summary_dist
from servesim.outputs.rundir import num_gpus  # noqa: F401 - the studies' name for it
from servesim.outputs.stats import DIST_STATS
from servesim.outputs.verdicts import CLASS_ATTAINMENTS, CLASS_MIN, class_attainments

MAX_POINTS = 100_000  # points of one sweep grid (each is a resolved scenario held in memory and a folder)

# the statistics of each distribution (``RESULT_METRICS``) a point's row flattens (results.csv columns)
STATS = DIST_STATS


@dataclass
class Point:
    """One run of a sweep: ``values`` name it (column -> value), ``data`` is the resolved scenario."""

    index: int
    values: dict
    data: dict | None  # the resolved scenario as plain data (None when it failed validation)
    error: str = ""
    hash: str = ""
    row: dict = field(default_factory=dict)
    # the study point this run repeats on another seed (``replicates.replicate``): the ``point`` its
    # seeds.csv row and messages name, since ``index`` numbers the runs (None: the run is the point)
    point: int | None = None

    @property
    def number(self) -> int:
        """The point's number as results.csv, seeds.csv and messages give it."""
        return self.index if self.point is None else self.point


def given_twice(values, key=None) -> tuple[int, int] | None:
    """(first index, second index) of the first value given twice in a list option, or None;
    ``key(value)``, when given, is what is compared (one GPU by two spellings, one policy by two
    names). A value twice makes two points of one run (the same seed: the same numbers); a
    boolean is not its number here (true is no 1)."""
    seen = []
    for j, v in enumerate(values):
        k = v if key is None else key(v)
        for i, w in seen:
            if isinstance(k, bool) == isinstance(w, bool) and k == w:
                return i, j
        seen.append((j, k))
    return None


def parse_grid(texts) -> dict:
    """``["key=v1,v2", ...]`` -> {key: [v1, v2]} (values parsed as YAML scalars)."""
    grid = {}
    for text in texts or []:
        if "=" not in text:
            raise InputError(f"--grid {text!r}: expected dotted.key=v1,v2,...")
        key, raw = text.split("=", 1)
        key = key.strip()
        if not key:
            raise InputError(f"--grid {text!r}: missing key before '='")
        if key in grid:  # (the last one silently replaced the values before it)
            raise InputError(f"--grid {key} is given twice; give its values once: --grid {key}=v1,v2,...")
        if raw.strip().startswith("[") and raw.strip().endswith("]"):  # (split at commas: "[8" and "16]")
            raise InputError(f"--grid {text!r}: give the values separated by commas, without brackets: "
                             f"--grid {key}={raw.strip()[1:-1].replace(' ', '')}")
        values = []
        for item in raw.split(","):
            item = item.strip()
            if not item:
                raise InputError(f"--grid {text!r}: empty value in the list")
            values.append(parse_value(item))
        twice = given_twice(values)
        if twice:
            raise InputError(f"--grid {key}: {shown(values[twice[1]])} is given twice (values {twice[0] + 1} "
                             f"and {twice[1] + 1}); give each value once (--seeds N repeats every point on "
                             "N seeds)")
        grid[key] = values
    return grid


def pop_sweep_block(data: dict) -> dict:
    """Remove and return the scenario's optional ``sweep: {grid: {key: [values]}}`` block."""
    block = data.pop("sweep", None)
    if block is None:
        return {}
    if not isinstance(block, dict) or set(block) - {"grid"}:
        raise InputError("sweep: expected a mapping with one key, grid: {dotted.key: [values, ...]}")
    grid = block.get("grid") or {}
    if not isinstance(grid, dict):
        raise InputError("sweep.grid: expected a mapping of dotted.key: [values, ...]")
    out = {}
    for k, v in grid.items():
        if not isinstance(v, list) or not v:
            raise InputError(f"sweep.grid.{k}: expected a non-empty list of values, got {v!r}")
        twice = given_twice(v)
        if twice:
            raise InputError(f"sweep.grid.{k}: {shown(v[twice[1]])} is given twice (items {twice[0] + 1} and "
                             f"{twice[1] + 1}); give each value once (--seeds N repeats every point on N seeds)")
        out[str(k)] = v
    return out


def require_rate(arrival, who: str) -> None:
    """``who`` (a study that sets ``workload.arrival.rate_rps``) cannot run on an arrival process
    without a rate (a closed loop, a trace, all at once): say so, naming the process, rather than
    let every run refuse the rate as an unknown field the user never wrote."""
    if arrival is None:  # (a trace replaying its own times, or classes with their own rates)
        raise InputError(f"{who} workload.arrival.rate_rps; the workload has no workload.arrival (a trace replays its "
                         "own arrival times; classes may have their own rates): give workload.arrival, e.g. {process: "
                         "poisson, rate_rps: 4}, to keep a trace's lengths with arrivals at a rate (or vary "
                         "workload.trace.speedup with servesim sweep)")
    if getattr(arrival, "rate_rps", None) is None:
        raise InputError(f"{who} workload.arrival.rate_rps; the {arrival.process!r} arrival process has none (use an "
                         "open-loop process with a rate, e.g. poisson, gamma or sinusoidal)")


def load_base(path, overrides, seed) -> tuple[dict, dict]:
    """(scenario data with --set/--seed applied and the sweep block removed, the sweep grid).
    ``path``: a scenario file (None: the packaged default), or scenario data already read (a
    mapping, left unchanged: a copy is taken, or a ``Scenario``)."""
    from servesim.inputs.scenario import Scenario, default_scenario_path, read_yaml, scenario_file

    overrides = override_texts(overrides, "overrides")
    check_overrides(overrides)
    if isinstance(path, Scenario):
        data = path.to_dict()
    elif isinstance(path, dict):
        data = copy.deepcopy(path)
    elif path is None or isinstance(path, (str, os.PathLike)):
        data = read_yaml(scenario_file(path) if path else default_scenario_path())
    else:
        raise TypeError(f"the scenario: a file path (str or pathlib.Path), scenario data (a mapping) or a "
                        f"servesim.Scenario, got {type(path).__name__}")
    try:
        grid = pop_sweep_block(data)
    except InputError as e:  # (named by its file, as every other error in a scenario file)
        raise InputError(f"{path}: {e}" if isinstance(path, (str, os.PathLike)) else str(e)) from None
    data = apply_overrides(data, overrides)
    if seed is not None:
        data["seed"] = seed
    return data, grid


def scenario_label(scenario, base: dict) -> str:
    """What a study's errors and its sweep.json / compare.json / capacity.json call the scenario:
    its file, or, given as data from Python (a mapping, a ``Scenario``), its name (the data's
    repr, thousands of characters, was written there and headed the report).
    ``base``: the data read (``load_base``)."""
    from servesim.inputs.scenario import default_scenario_path

    if scenario is None:
        return str(default_scenario_path())
    if isinstance(scenario, (str, os.PathLike)):
        return str(scenario)
    return str(base.get("name", "scenario"))


def scenario_hash(data: dict) -> str:
    """Digest of a resolved scenario (canonical JSON), the servesim version and the content of every
    file the scenario names (``input_digests``): a sweep point's resume key.

    Results of another servesim version are not reused, nor those run before a file the scenario
    reads (a trace, a lengths file, a GPU YAML, a model's config.json) changed; within one
    version, delete ``DIR/runs`` to rerun after changing the code.
    """
    from servesim import __version__

    doc = {"servesim": __version__, "scenario": data}
    inputs = input_digests(data)
    if inputs:  # (a scenario naming no file keeps the key it had before files were digested)
        doc["inputs"] = inputs
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


MAX_TREE_ENTRIES = 10_000  # a folder's digest lists at most this many files (then stops walking)
_DIGESTS: dict = {}  # (path, size, mtime_ns) -> SHA-256 of the file's content, for this process


def input_digests(data) -> dict:
    """{path as written: digest} for every string in ``data`` that names an existing file (the
    SHA-256 of its content) or folder (its files' names, sizes and modification times), as the
    scenario's readers resolve paths (``~``, ``$VARS``, relative to the current directory). Only
    strings that look like paths (holding ``/`` or a file extension) are tried: catalog names
    are not looked up in the current directory."""
    from servesim.inputs.files import resolve_path

    out: dict = {}

    def walk(v):
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif isinstance(v, str) and v not in out and _looks_like_path(v):
            try:
                p = resolve_path(v)
                if p.is_file():
                    out[v] = _file_digest(p)
                elif p.is_dir():
                    out[v] = _tree_digest(p)
            except (OSError, ValueError, InputError):  # (unreadable: the run itself says so)
                pass

    walk(data)
    return out


def _looks_like_path(text: str) -> bool:
    if not text or text in (".", "..") or "\n" in text or len(text) > 4096:
        return False
    name = text.rsplit("/", 1)[-1]
    return "/" in text or ("." in name.strip(".") and not name.replace(".", "").isdigit())


def _file_digest(p) -> str:
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    digest = _DIGESTS.get(key)
    if digest is None:
        from servesim.outputs.writer import file_digest

        digest = _DIGESTS[key] = file_digest(p)
    return digest


def _tree_digest(root) -> str:
    h = hashlib.sha256()
    n = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        if n > MAX_TREE_ENTRIES:  # (a path naming a huge tree, e.g. "/": not walked to its end)
            break
        for f in sorted(filenames):
            n += 1
            if n > MAX_TREE_ENTRIES:
                break
            try:
                st = os.stat(os.path.join(dirpath, f))
            except OSError:
                continue
            h.update(f"{os.path.relpath(os.path.join(dirpath, f), root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    h.update(f"files={min(n, MAX_TREE_ENTRIES + 1)}".encode())
    return h.hexdigest()


def resolve(data: dict) -> tuple[dict | None, str]:
    """Validate scenario data; return (fully resolved plain data, "") or (None, error message)."""
    from servesim.inputs.scenario import scenario_from_dict

    try:
        return scenario_from_dict(data).to_dict(), ""
    except InputError as e:
        return None, str(e)


def make_points(base: dict, variants: list[tuple[dict, dict]], flag: str = "--grid",
                what: str = "sweep point") -> list[Point]:
    """Points from (values naming it, {dotted.key: value} overrides) pairs on top of ``base``;
    ``flag``: what set the overrides, as an error names it; ``what``: what the study calls a point
    (the error when every one is invalid)."""
    points = []
    for i, (values, overrides) in enumerate(variants):
        resolved, err = resolve(with_values(base, overrides, flag))
        p = Point(i, dict(values), resolved, err)
        if resolved is not None:
            p.hash = scenario_hash(resolved)
        points.append(p)
    if points and all(p.data is None for p in points):
        named = ", ".join(f"{k}={v}" for k, v in points[0].values.items())
        raise InputError(f"every {what} is invalid; the first{f' ({named})' if named else ''}: {points[0].error}")
    return points


def grid_points(base: dict, grid: dict) -> list[Point]:
    """The points of the cross product of ``grid`` ({dotted.key: [values]}), in row-major order."""
    keys = list(grid)
    size = math.prod(len(grid[k]) for k in keys)
    if size > MAX_POINTS:
        raise InputError(f"the sweep grid has {size} points ({' x '.join(str(len(grid[k])) for k in keys)}); at most "
                         f"{MAX_POINTS}: sweep fewer values at a time")
    combos = itertools.product(*(grid[k] for k in keys)) if keys else [()]
    variants = [(dict(zip(keys, c)), dict(zip(keys, c))) for c in combos]
    return make_points(base, variants)


def flatten_summary(s: dict) -> dict:
    """A run's summary (summary.json) as one flat results.csv row: counts, rates, each latency
    distribution's statistics and the utilization figures (plus, not a column, ``CLASS_ATTAINMENTS``:
    {class: attainment}, from which ``replicates.aggregate_row`` takes the lowest class mean)."""
    row = {k: s.get(k) for k in ("num_requests", "completed", "rejected", "unfinished", "preemptions", "sim_time_s",
                                 "throughput_rps", "output_tokens_per_s", "total_tokens_per_s", "goodput_rps",
                                 "slo_attainment", "wall_time_s")}
    for d in RESULT_METRICS:
        for st in STATS:
            row[f"{d}_{st}_s"] = summary_dist(s, d)[st]
    # each request class's attainment (its own SLO) and the lowest: a configuration meets the SLO only
    # when every class does (verdicts.meets_slo); the overall share hid a small class with a tight SLO
    att = class_attainments(s)
    row[CLASS_MIN] = min(att.values()) if att else None
    row[CLASS_ATTAINMENTS] = att
    row["offered_rps"] = s.get("workload", {}).get("offered_rps")
    keep = s.get("workload", {}).get("keep_up")  # (None: closed-loop, too few arrivals, or an older run)
    row["keep_up"] = keep.get("ratio") if isinstance(keep, dict) else None
    row["keep_up_warmup"] = keep.get("warmup") if isinstance(keep, dict) else None
    row["window_output_tokens_per_s"] = keep.get("output_tokens_per_s") if isinstance(keep, dict) else None
    u = s.get("utilization", {})
    for k in ("busy_fraction", "mean_batch_size", "kv_usage_mean", "kv_usage_max", "mfu", "mbu"):
        row[k] = u.get(k)
    return row
